//! `annotate FUNCTION`: a function's source with the samples of each line
//! beside it (pprof's `list`, perf annotate's source view, Python's
//! profiling.sampling heatmap), from a past window's pprof profile.
//!
//! The source is read here, as the user who asks (never by the daemon, which
//! could read what that user may not). Where there is no line information
//! (built without -g), the function's disassembly is shown instead with
//! each instruction's samples, as perf annotate does: objdump's, of the
//! binary read here too (`instructions`, `elf`, `objdump`). The function is
//! matched as everywhere a function is named (`profilerd_words`).

mod elf;
mod instructions;
mod objdump;

use std::{collections::BTreeMap, fmt::Write as _, io::Read as _};

use anyhow::{Context as _, Result, bail};
use profilerd_client::{pprof, v1};
use profilerd_words::FunctionName;
use prost::Message as _;

use instructions::Disassembled;

use crate::{
    Client,
    args::{SelectorArgs, WindowArgs},
    output,
};

/// Lines shown around the lines with samples.
const CONTEXT_LINES: u32 = 2;

/// The largest source file read (the rest is not shown).
const MAX_SOURCE_BYTES: u64 = 8 << 20;

pub async fn annotate(
    daemon: &mut Client,
    function: &str,
    selector: &SelectorArgs,
    window: &WindowArgs,
) -> Result<()> {
    let (start_unix_nanos, end_unix_nanos) = window.to_unix_nanos();
    let reply = daemon
        .query(v1::QueryRequest {
            start_unix_nanos,
            end_unix_nanos,
            selector: Some(selector.to_proto()),
            options: Some(v1::ReportOptions {
                format: v1::Format::Pprof as i32,
                groupby: v1::GroupBy::None as i32,
                ..Default::default()
            }),
            mode: selector.mode(),
        })
        .await?
        .into_inner();
    let profile = decode(&reply.report)?;
    let counts = LineCounts::of(&profile, function);
    if counts.samples == 0 {
        bail!(
            "no sample of that window is in a function named {function:?} (nor one whose name \
             ends in ::{function}, nor a C library alias of it); `profilerctl query --format \
             flat --functions` with the same window lists the functions it has"
        );
    }
    output::print_text(&counts.text(function, read_source, instructions::disassemble))
}

/// The gzipped pprof profile the daemon sent, decoded.
fn decode(gzipped: &[u8]) -> Result<pprof::Profile> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gzipped)
        .read_to_end(&mut bytes)
        .context("the daemon's pprof profile is not gzipped")?;
    pprof::Profile::decode(bytes.as_slice()).context("the daemon's pprof profile does not decode")
}

/// A source file's lines, or why it cannot be read.
fn read_source(path: &str) -> Result<Vec<String>, String> {
    let file = std::fs::File::open(path).map_err(|err| err.to_string())?;
    let mut text = String::new();
    file.take(MAX_SOURCE_BYTES)
        .read_to_string(&mut text)
        .map_err(|err| err.to_string())?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// Samples per source line (and per address without one) of the function.
#[derive(Debug, Default)]
struct LineCounts {
    /// (file, line) -> (self, total): self when the line is where the
    /// sample was (the function or code inlined into it at the leaf),
    /// total when the function is anywhere in the stack, at that line.
    lines: BTreeMap<(String, i64), (u64, u64)>,
    /// Leaf addresses (file offsets) of the function's samples without
    /// line information, per module.
    addresses: BTreeMap<String, BTreeMap<u64, u64>>,
    /// Samples with the function in their stack.
    samples: u64,
    /// The module the function is in, when known.
    module: Option<String>,
}

impl LineCounts {
    fn of(profile: &pprof::Profile, asked: &str) -> Self {
        let asked = FunctionName::new(asked);
        let text = |index: i64| {
            profile
                .string_table
                .get(usize::try_from(index).unwrap_or(usize::MAX))
                .map_or("", String::as_str)
        };
        let functions: std::collections::HashMap<u64, (&str, &str)> = profile
            .function
            .iter()
            .map(|function| (function.id, (text(function.name), text(function.filename))))
            .collect();
        let locations: std::collections::HashMap<u64, &pprof::Location> = profile
            .location
            .iter()
            .map(|location| (location.id, location))
            .collect();
        let modules: std::collections::HashMap<u64, &str> = profile
            .mapping
            .iter()
            .map(|mapping| (mapping.id, text(mapping.filename)))
            .collect();
        let mut counts = Self::default();
        for sample in &profile.sample {
            let count = sample.value.first().copied().unwrap_or(0).max(0) as u64;
            let mut seen = false;
            let mut counted = std::collections::HashSet::new();
            // Leaf first.
            for (depth, location) in sample
                .location_id
                .iter()
                .filter_map(|id| locations.get(id))
                .enumerate()
            {
                // Innermost inlined frame first.
                let frames: Vec<(&str, &str, i64)> = location
                    .line
                    .iter()
                    .filter_map(|line| {
                        let (name, file) = functions.get(&line.function_id)?;
                        Some((*name, *file, line.line))
                    })
                    .collect();
                let Some(at) = frames.iter().position(|(name, _, _)| asked.matches(name)) else {
                    continue;
                };
                if !seen {
                    seen = true;
                    counts.samples += count;
                    if counts.module.is_none() {
                        counts.module = modules.get(&location.mapping_id).map(|m| m.to_string());
                    }
                }
                let (_, file, line) = frames[at];
                if depth == 0 {
                    // Where the sample was: the innermost line within the
                    // function (code inlined into it included).
                    let (_, inner_file, inner_line) = frames[0];
                    match inner_line > 0 {
                        true => {
                            counts
                                .lines
                                .entry((inner_file.to_owned(), inner_line))
                                .or_default()
                                .0 += count;
                        }
                        false => {
                            let module = modules.get(&location.mapping_id).copied();
                            *(counts
                                .addresses
                                .entry(module.unwrap_or_default().to_owned()))
                            .or_default()
                            .entry(location.address)
                            .or_default() += count;
                        }
                    }
                }
                if line > 0 && counted.insert((file, line)) {
                    counts.lines.entry((file.to_owned(), line)).or_default().1 += count;
                }
            }
        }
        counts
    }

    /// The annotated source: of the file with most of the function's
    /// samples, each line with samples and a few around them; then, for
    /// the samples without line information, the function's instructions
    /// (`disassemble`d) with theirs, or their addresses.
    fn text(
        &self,
        asked: &str,
        read: impl Fn(&str) -> Result<Vec<String>, String>,
        disassemble: impl Fn(&str, &BTreeMap<u64, u64>) -> Result<Disassembled, String>,
    ) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{asked}{}: {} samples with it in their stack",
            self.module
                .as_deref()
                .map(|module| format!(" in {module}"))
                .unwrap_or_default(),
            self.samples
        );
        let mut by_file: BTreeMap<&str, u64> = BTreeMap::new();
        for ((file, _), (own, total)) in &self.lines {
            *by_file.entry(file).or_default() += own + total;
        }
        let mut files: Vec<(&str, u64)> = by_file.into_iter().collect();
        files.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (file, _) in files {
            let lines: Vec<(i64, (u64, u64))> = self
                .lines
                .iter()
                .filter(|((of, _), _)| of == file)
                .map(|((_, line), counts)| (*line, *counts))
                .collect();
            let _ = writeln!(out, "\n  Self  Total  Line  {file}");
            match read(file) {
                Ok(source) => source_lines(&mut out, &source, &lines),
                Err(err) => {
                    let _ = writeln!(
                        out,
                        "  (cannot read {file}: {err}; the lines with samples only)"
                    );
                    for (line, (own, total)) in &lines {
                        let _ = writeln!(out, "{own:>6} {total:>6} {line:>5}");
                    }
                }
            }
        }
        for (module, offsets) in &self.addresses {
            match disassemble(module, offsets) {
                Ok(shown) => instructions::write_disassembly(&mut out, asked, module, &shown),
                Err(why) => instructions::write_offsets(&mut out, module, offsets, &why),
            }
        }
        if !self.lines.is_empty() {
            let _ = writeln!(
                out,
                "\nSelf: samples at the line itself (code inlined into it included); Total: \
                 samples with the function at that line anywhere in their stack (once each)"
            );
        }
        out
    }
}

/// The source lines with samples, `CONTEXT_LINES` around them, a `⋮` where
/// lines are skipped.
fn source_lines(out: &mut String, source: &[String], lines: &[(i64, (u64, u64))]) {
    let counted: BTreeMap<i64, (u64, u64)> = lines.iter().copied().collect();
    let context = i64::from(CONTEXT_LINES);
    let shown = |number: i64| {
        counted
            .range(number - context..=number + context)
            .next()
            .is_some()
    };
    let (mut skipped, mut printed) = (false, false);
    for (index, text) in source.iter().enumerate() {
        let number = index as i64 + 1;
        if !shown(number) {
            skipped = printed;
            continue;
        }
        if skipped {
            out.push_str("     ⋮\n");
            skipped = false;
        }
        printed = true;
        let (own, total) = counted.get(&number).copied().unwrap_or_default();
        let figure = |count: u64| match count {
            0 => String::new(),
            count => count.to_string(),
        };
        let _ = writeln!(
            out,
            "{:>6} {:>6} {number:>5}  {text}",
            figure(own),
            figure(total)
        );
    }
    let beyond: Vec<_> = counted
        .keys()
        .filter(|&&line| line > source.len() as i64)
        .collect();
    if !beyond.is_empty() {
        let _ = writeln!(
            out,
            "  (lines {beyond:?} have samples but are past the file's end: it changed since the \
             program was built)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of two samples: `main → __GI___libc_malloc` (5) and
    /// `main` (3), without line information.
    fn malloc_profile() -> pprof::Profile {
        let location = |id: u64, mapping_id: u64, address: u64, function_id: u64| pprof::Location {
            id,
            mapping_id,
            address,
            line: vec![pprof::Line {
                function_id,
                ..Default::default()
            }],
            ..Default::default()
        };
        let function = |id: u64, name: i64| pprof::Function {
            id,
            name,
            ..Default::default()
        };
        let mapping = |id: u64, filename: i64| pprof::Mapping {
            id,
            filename,
            ..Default::default()
        };
        let sample = |location_id: Vec<u64>, count: i64| pprof::Sample {
            location_id,
            value: vec![count],
            ..Default::default()
        };
        pprof::Profile {
            string_table: [
                "",
                "__GI___libc_malloc",
                "/lib/libc.so.6",
                "main",
                "/bin/app",
            ]
            .map(String::from)
            .to_vec(),
            function: vec![function(1, 1), function(2, 3)],
            mapping: vec![mapping(1, 2), mapping(2, 4)],
            location: vec![location(1, 1, 0x9a000, 1), location(2, 2, 0x1000, 2)],
            sample: vec![sample(vec![1, 2], 5), sample(vec![2], 3)],
            ..Default::default()
        }
    }

    /// `malloc` is glibc's `__GI___libc_malloc`; without line
    /// information its instructions are shown, or its offsets with why
    /// not.
    #[test]
    fn a_function_without_lines_is_disassembled_by_any_of_its_names() {
        let counts = LineCounts::of(&malloc_profile(), "malloc");
        assert_eq!(counts.samples, 5);
        assert_eq!(
            counts.addresses,
            BTreeMap::from([("/lib/libc.so.6".to_owned(), BTreeMap::from([(0x9a000, 5)]))])
        );
        let unread = |_: &str| Err("unread".to_owned());
        let text = counts.text("malloc", unread, |module, offsets| {
            assert_eq!((module, offsets.len()), ("/lib/libc.so.6", 1));
            Err("objdump is not installed".to_owned())
        });
        assert!(
            text.starts_with("malloc in /lib/libc.so.6: 5 samples with it in their stack\n"),
            "{text}"
        );
        assert!(
            text.contains("no disassembly: objdump is not installed")
                && text.contains("     5  0x9a000"),
            "{text}"
        );
        assert!(!text.contains("Total:"), "no source lines: {text}");
        let text = counts.text("malloc", unread, |_, _| {
            Ok(Disassembled {
                symbol: Some("malloc".into()),
                start: 0x9a000,
                end: 0x9a010,
                listing: objdump::Listing {
                    lines: vec![objdump::Line::Instruction {
                        address: 0x9a000,
                        text: "endbr64".into(),
                    }],
                    truncated: false,
                },
                samples: BTreeMap::from([(0x9a000, 5)]),
                unplaced: 0,
            })
        });
        assert!(text.contains("9a000  endbr64  ← hottest"), "{text}");
        assert_eq!(LineCounts::of(&malloc_profile(), "xmalloc").samples, 0);
        assert_eq!(
            LineCounts::of(&malloc_profile(), "__libc_malloc").samples,
            5
        );
    }

    #[test]
    fn source_lines_show_counts_and_skip_far_lines() {
        let source: Vec<String> = (1..=20).map(|n| format!("line {n}")).collect();
        let mut out = String::new();
        source_lines(&mut out, &source, &[(5, (3, 4)), (18, (0, 1))]);
        let lines: Vec<&str> = out.lines().collect();
        let row = |own: &str, total: &str, number: u32| {
            format!("{own:>6} {total:>6} {number:>5}  line {number}")
        };
        assert_eq!(lines[0], row("", "", 3));
        assert!(lines.contains(&row("3", "4", 5).as_str()), "{out}");
        assert!(lines.contains(&"     ⋮"), "{out}");
        assert!(lines.contains(&row("", "1", 18).as_str()), "{out}");
        assert!(!out.contains("line 10"), "{out}");
        let mut out = String::new();
        source_lines(&mut out, &source[..3], &[(40, (1, 1))]);
        assert!(out.contains("past the file's end"), "{out}");
    }
}
