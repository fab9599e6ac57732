//! objdump, as perf annotate runs it: the disassembly of an address range
//! of a binary (AT&T syntax, perf's default; names demangled; no raw
//! bytes), read into its labels and instructions. objdump runs as the user
//! who runs profilerctl, for at most [`TIMEOUT`], and at most
//! [`MAX_OUTPUT_BYTES`] of what it prints are read.
//!
//! Owns running objdump and reading its output; it must not decide which
//! range to show (see `elf`) nor how samples are shown.

use std::{
    io::Read as _,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// The program run (GNU binutils').
const OBJDUMP: &str = "objdump";

/// How long objdump may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The most of objdump's output read; the rest of the listing is left
/// out, and said to be.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// The most of objdump's errors kept, to say why it failed.
const MAX_ERROR_BYTES: u64 = 4096;

/// A line of the disassembly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A symbol starts here, `<hot>` (or the range starts inside one,
    /// `<hot+0x10>`).
    Label { address: u64, name: String },
    /// An instruction, as objdump writes it: `imul   %rax,%rdx`.
    Instruction { address: u64, text: String },
}

/// A disassembly: its lines, and whether objdump printed more than was
/// read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub lines: Vec<Line>,
    pub truncated: bool,
}

/// Why there is no disassembly.
#[derive(Debug, PartialEq, Eq)]
pub enum ObjdumpError {
    /// objdump is not installed.
    Missing,
    /// It ran out of time.
    TimedOut,
    /// It failed (or could not be run), saying this.
    Failed(String),
}

impl std::fmt::Display for ObjdumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(
                f,
                "objdump is not installed (Debian and Ubuntu: apt install binutils; Fedora: dnf \
                 install binutils)"
            ),
            Self::TimedOut => write!(f, "objdump took more than {}s", TIMEOUT.as_secs()),
            Self::Failed(why) => write!(f, "objdump failed: {why}"),
        }
    }
}

/// objdump's disassembly of the virtual addresses `start..stop` of the
/// binary at `path`.
pub fn disassemble(path: &Path, start: u64, stop: u64) -> Result<Listing, ObjdumpError> {
    let mut child = Command::new(OBJDUMP)
        .args([
            "--disassemble",
            "--wide",
            "--demangle",
            "--no-show-raw-insn",
        ])
        .arg(format!("--start-address={start:#x}"))
        .arg(format!("--stop-address={stop:#x}"))
        .arg("--")
        .arg(path)
        // Its messages unlocalized.
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => ObjdumpError::Missing,
            _ => ObjdumpError::Failed(format!("cannot run {OBJDUMP}: {err}")),
        })?;
    // Read on threads of their own, so that the deadline holds whatever
    // objdump does; past the bound, the pipe is closed and objdump ends
    // (SIGPIPE).
    let stdout = child.stdout.take().map(|out| {
        std::thread::spawn(move || {
            let mut read = Vec::new();
            let _ = out.take(MAX_OUTPUT_BYTES as u64 + 1).read_to_end(&mut read);
            read
        })
    });
    let stderr = child.stderr.take().map(|err| {
        std::thread::spawn(move || {
            let mut read = Vec::new();
            let _ = err.take(MAX_ERROR_BYTES).read_to_end(&mut read);
            read
        })
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            // Out of time, or it cannot be waited for.
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let joined = |reader: Option<std::thread::JoinHandle<Vec<u8>>>| {
        reader
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default()
    };
    let (mut out, err) = (joined(stdout), joined(stderr));
    let truncated = out.len() > MAX_OUTPUT_BYTES;
    match status {
        None => return Err(ObjdumpError::TimedOut),
        Some(status) if !status.success() && !truncated => {
            let err = String::from_utf8_lossy(&err);
            let why = err.lines().find(|line| !line.trim().is_empty());
            return Err(ObjdumpError::Failed(match why {
                Some(why) => why.trim().to_owned(),
                None => format!("it exited with {status}"),
            }));
        }
        Some(_) => {}
    }
    if truncated {
        // Up to the last whole line.
        out.truncate(MAX_OUTPUT_BYTES);
        let end = out.iter().rposition(|&byte| byte == b'\n').unwrap_or(0);
        out.truncate(end);
    }
    Ok(Listing {
        lines: parse(&String::from_utf8_lossy(&out)),
        truncated,
    })
}

/// The labels and instructions of objdump's output (`-d
/// --no-show-raw-insn`); its headers and `...` lines (zeros skipped) are
/// left out.
pub fn parse(output: &str) -> Vec<Line> {
    let hex = |text: &str| u64::from_str_radix(text, 16).ok();
    output
        .lines()
        .filter_map(|line| {
            // `0000000000001181 <hot>:`
            if let Some((address, name)) = line.split_once(' ')
                && let Some(name) = name.strip_prefix('<').and_then(|n| n.strip_suffix(">:"))
                && let Some(address) = hex(address)
            {
                return Some(Line::Label {
                    address,
                    name: name.to_owned(),
                });
            }
            // `    1181:\tpush   %rbp`
            let (address, text) = line.trim_start().split_once(":\t")?;
            Some(Line::Instruction {
                address: hex(address)?,
                text: text.replace('\t', " ").trim_end().to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// objdump 2.40's output for split.c's `hot` (gcc -O1, no -g).
    const HOT: &str = "
/tmp/split-nodebug:     file format elf64-x86-64


Disassembly of section .text:

0000000000001181 <hot>:
    1181:\tpush   %rbp
    1182:\tmov    %rsp,%rbp
    1185:\tmovq   $0x0,-0x8(%rbp)
    1192:\tmov    -0x8(%rbp),%rcx
    1199:\timul   %rax,%rdx
    11a8:\tcmp    $0x1c9c380,%rax
    11ae:\tjne    1192 <hot+0x11>
    11b0:\tpop    %rbp
    11b1:\tret
\t...

00000000000011c0 <std::vector<int, std::allocator<int> >::size() const>:
    11c0:\tlea    0xe8c(%rip),%rdi        # 2053 <_IO_stdin_used+0x53>
";

    #[test]
    fn labels_and_instructions_are_read() {
        let lines = parse(HOT);
        assert_eq!(
            lines[0],
            Line::Label {
                address: 0x1181,
                name: "hot".into()
            }
        );
        assert_eq!(
            lines[5],
            Line::Instruction {
                address: 0x1199,
                text: "imul   %rax,%rdx".into()
            }
        );
        assert_eq!(
            lines[7],
            Line::Instruction {
                address: 0x11ae,
                text: "jne    1192 <hot+0x11>".into()
            }
        );
        assert_eq!(
            lines[10],
            Line::Label {
                address: 0x11c0,
                name: "std::vector<int, std::allocator<int> >::size() const".into()
            }
        );
        assert_eq!(lines.len(), 12, "{lines:#?}");
        assert!(matches!(&lines[11], Line::Instruction { text, .. } if text.ends_with("+0x53>")));
        assert!(parse("garbage\n\n  zz:\tnot hex\n").is_empty());
    }

    /// objdump itself, on this test's own binary: its first function
    /// symbol's instructions are read whole. (binutils is a test
    /// dependency: `cargo xtask test` installs it.)
    #[test]
    fn objdump_disassembles_a_range_of_a_real_binary() {
        // This binary's own function, placed as the daemon's file offset
        // of it would be.
        let (exe, offset) = super::super::elf::mapped_offset(sampled_here as *const () as u64);
        let placed =
            super::super::elf::place(&exe, &std::collections::BTreeMap::from([(offset, 1)]))
                .expect("the test binary is read");
        let symbol = placed.symbol.expect("sampled_here's symbol");
        let listing = disassemble(&exe, symbol.start, symbol.end).unwrap_or_else(|err| {
            panic!("{err} (cargo xtask test installs binutils, which has objdump)")
        });
        assert!(!listing.truncated);
        let first = listing.lines.iter().find_map(|line| match line {
            Line::Instruction { address, .. } => Some(*address),
            Line::Label { .. } => None,
        });
        assert_eq!(first, Some(symbol.start), "{listing:#?}");
        assert!(
            listing.lines.iter().all(|line| match line {
                Line::Instruction { address, .. } => *address < symbol.end,
                Line::Label { .. } => true,
            }),
            "{listing:#?}"
        );
        assert_eq!(
            disassemble(Path::new("/nonexistent/binary"), 0, 1).map(|_| ()),
            Err(ObjdumpError::Failed(
                "objdump: '/nonexistent/binary': No such file".into()
            ))
        );
    }

    /// A function of this binary, to find in it.
    #[inline(never)]
    fn sampled_here() -> u64 {
        std::hint::black_box(7)
    }
}
