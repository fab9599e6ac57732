//! A function's instructions with their samples, where it has no line
//! information (built without -g), as perf annotate shows them: objdump's
//! disassembly of the function (the symbol holding its hottest sampled
//! address, see `elf`), each instruction with the samples taken at it
//! (Self) and their share, the hottest marked. Without objdump, or when it
//! fails, the samples per file offset as before, saying why.
//!
//! Owns that view; it must not ask the daemon anything (the samples are
//! the caller's) nor read source files.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use super::{
    elf,
    objdump::{self, Line, Listing},
};

/// The largest function disassembled whole; past it, only the range of
/// its sampled addresses is.
const MAX_FUNCTION_BYTES: u64 = 256 << 10;

/// The longest x86-64 instruction: the range of sampled addresses is
/// disassembled this far past its last, so that its instruction is whole.
const MAX_INSTRUCTION_BYTES: u64 = 15;

/// The addresses (of samples objdump listed no instruction at) named at
/// most.
const MAX_STRAY_ADDRESSES: usize = 8;

/// A function's disassembly in one binary, with its samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disassembled {
    /// The symbol disassembled, or `None` when the range is that of the
    /// sampled addresses (no symbol holds them, or it is too large).
    pub symbol: Option<String>,
    /// The virtual addresses disassembled, `start..end`.
    pub start: u64,
    pub end: u64,
    pub listing: Listing,
    /// Virtual address -> samples.
    pub samples: BTreeMap<u64, u64>,
    /// Samples at offsets outside the file's loadable segments.
    pub unplaced: u64,
}

/// The disassembly of the function sampled at `offsets` (file offset ->
/// samples) of the binary `module`; why there is none.
pub fn disassemble(module: &str, offsets: &BTreeMap<u64, u64>) -> Result<Disassembled, String> {
    if !module.starts_with('/') {
        return Err(format!(
            "its code is not in a file profilerctl can read ({module})"
        ));
    }
    let path = Path::new(module);
    let placed = elf::place(path, offsets)?;
    let (Some(&first), Some(&last)) = (
        placed.addresses.keys().next(),
        placed.addresses.keys().last(),
    ) else {
        return Err(format!(
            "no sampled offset is in a loadable segment of {module} (was it rebuilt since it \
             was sampled?)"
        ));
    };
    let (symbol, start, end) = match placed.symbol {
        Some(symbol) if symbol.end - symbol.start <= MAX_FUNCTION_BYTES => {
            (Some(symbol.name), symbol.start, symbol.end)
        }
        _ => (None, first, last.saturating_add(MAX_INSTRUCTION_BYTES)),
    };
    let mut listing = objdump::disassemble(path, start, end).map_err(|err| err.to_string())?;
    if symbol.is_none() {
        // Past the last sampled instruction, what objdump decoded of the
        // bytes after it is not the function's.
        listing.lines.retain(|line| match line {
            Line::Instruction { address, .. } => *address <= last,
            Line::Label { address, .. } => *address <= last,
        });
    }
    Ok(Disassembled {
        symbol,
        start,
        end,
        listing,
        samples: placed.addresses,
        unplaced: placed.unplaced,
    })
}

/// Writes the disassembly of the function `asked` in `module` with each
/// instruction's samples.
pub fn write_disassembly(out: &mut String, asked: &str, module: &str, shown: &Disassembled) {
    let total: u64 = shown.samples.values().sum();
    let what = match &shown.symbol {
        Some(symbol) => format!("the symbol {symbol}"),
        None => "its sampled addresses (no symbol holds them whole)".to_owned(),
    };
    let _ = writeln!(
        out,
        "\n  Self      %   Address  Instruction  ({asked} in {module}, without line information: \
         objdump's disassembly of {what}, {:#x} to {:#x}; build with -g for its source lines)",
        shown.start, shown.end
    );
    let hottest = (shown.samples.iter())
        .max_by_key(|&(&address, &count)| (count, std::cmp::Reverse(address)))
        .map(|(&address, _)| address);
    let mut listed = 0;
    for line in &shown.listing.lines {
        match line {
            Line::Label { name, .. } => {
                let _ = writeln!(out, "{:>24}<{name}>:", "");
            }
            Line::Instruction { address, text } => {
                let count = shown.samples.get(address).copied().unwrap_or(0);
                listed += count;
                let (own, share) = match count {
                    0 => (String::new(), String::new()),
                    count => (
                        count.to_string(),
                        format!("{:.1}", 100.0 * count as f64 / total.max(1) as f64),
                    ),
                };
                let mark = match Some(*address) == hottest {
                    true => "  ← hottest",
                    false => "",
                };
                let _ = writeln!(out, "{own:>6} {share:>6} {address:>9x}  {text}{mark}");
            }
        }
    }
    if shown.listing.truncated {
        let _ = writeln!(
            out,
            "  (objdump's listing is cut after {} MiB)",
            objdump::MAX_OUTPUT_BYTES >> 20
        );
    }
    let instructions: Vec<u64> = (shown.listing.lines.iter())
        .filter_map(|line| match line {
            Line::Instruction { address, .. } => Some(*address),
            Line::Label { .. } => None,
        })
        .collect();
    let stray: Vec<String> = (shown.samples.iter())
        .filter(|(address, _)| instructions.binary_search(address).is_err())
        .map(|(address, count)| format!("{address:#x} ({count})"))
        .collect();
    if !stray.is_empty() {
        let more = match stray.len() > MAX_STRAY_ADDRESSES {
            true => format!(" and {} more", stray.len() - MAX_STRAY_ADDRESSES),
            false => String::new(),
        };
        let _ = writeln!(
            out,
            "  {} samples at addresses objdump listed no instruction at: {}{more}",
            total - listed,
            stray[..stray.len().min(MAX_STRAY_ADDRESSES)].join(", ")
        );
    }
    if shown.unplaced > 0 {
        let _ = writeln!(
            out,
            "  {} samples at offsets outside the file's loadable segments (was it rebuilt since \
             it was sampled?)",
            shown.unplaced
        );
    }
    let _ = writeln!(
        out,
        "Self: samples taken at the instruction; %: of the {total} samples taken in {asked} itself \
         in this binary"
    );
}

/// Writes the samples per file offset of the function in `module`, when
/// there is no disassembly (`why`).
pub fn write_offsets(out: &mut String, module: &str, offsets: &BTreeMap<u64, u64>, why: &str) {
    let _ = writeln!(
        out,
        "\n  Self  Offset  (in {module}, without line information, and no disassembly: {why}; \
         build with -g for source lines)"
    );
    for (offset, count) in offsets {
        let _ = writeln!(out, "{count:>6}  {offset:#x}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instruction(address: u64, text: &str) -> Line {
        Line::Instruction {
            address,
            text: text.into(),
        }
    }

    #[test]
    fn each_instruction_has_its_samples_and_the_hottest_is_marked() {
        let shown = Disassembled {
            symbol: Some("hot".into()),
            start: 0x1181,
            end: 0x11b2,
            listing: Listing {
                lines: vec![
                    Line::Label {
                        address: 0x1181,
                        name: "hot".into(),
                    },
                    instruction(0x1181, "push   %rbp"),
                    instruction(0x1199, "imul   %rax,%rdx"),
                    instruction(0x11ae, "jne    1192 <hot+0x11>"),
                ],
                truncated: false,
            },
            samples: BTreeMap::from([(0x1181, 1), (0x1199, 6), (0x11ae, 2), (0x119a, 1)]),
            unplaced: 3,
        };
        let mut out = String::new();
        write_disassembly(&mut out, "hot", "/bin/split", &shown);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[1].starts_with("  Self      %   Address  Instruction  (hot in /bin/split")
                && lines[1].contains("the symbol hot, 0x1181 to 0x11b2"),
            "{out}"
        );
        assert_eq!(lines[2], format!("{:>24}<hot>:", ""));
        assert_eq!(lines[3], "     1   10.0      1181  push   %rbp");
        assert_eq!(
            lines[4],
            "     6   60.0      1199  imul   %rax,%rdx  ← hottest"
        );
        assert_eq!(lines[5], "     2   20.0      11ae  jne    1192 <hot+0x11>");
        assert!(
            out.contains("1 samples at addresses objdump listed no instruction at: 0x119a (1)"),
            "{out}"
        );
        assert!(out.contains("3 samples at offsets outside"), "{out}");
        assert!(
            out.contains("of the 10 samples taken in hot itself"),
            "{out}"
        );
        assert_eq!(out.matches("hottest").count(), 1, "{out}");
    }

    #[test]
    fn without_a_disassembly_the_offsets_are_listed_with_the_reason() {
        let mut out = String::new();
        let why = objdump::ObjdumpError::Missing.to_string();
        write_offsets(&mut out, "/bin/split", &BTreeMap::from([(0x1199, 5)]), &why);
        assert!(out.contains("apt install binutils"), "{out}");
        assert!(out.contains("     5  0x1199"), "{out}");
        assert_eq!(
            disassemble("[kernel]", &BTreeMap::from([(1, 1)])),
            Err("its code is not in a file profilerctl can read ([kernel])".into())
        );
    }
}
