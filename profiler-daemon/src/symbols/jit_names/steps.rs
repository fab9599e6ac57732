//! The reader's steps: what it does with one process's file of JIT names
//! in one turn (find and open it, read the records added since the last
//! read, or read a piece of the whole file again for new addresses),
//! carried out without the lock on what is known.
//!
//! Owns finding, opening and reading the files; it must not decide which
//! step comes next (see `process`).

use std::{
    collections::BTreeMap,
    fs::File,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use procfs::process::{MMapPath, Process};

use super::{
    MAX_FILE_BYTES, jitdump,
    perf_map::{self, Found, Line, Piece, match_line},
};
use crate::symbols::{
    mappings::device_number,
    process_files::{self, Refused},
};

/// How a file of JIT names is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `/tmp/perf-PID.map`: a line per function.
    PerfMap,
    /// `jit-PID.dump`, mapped by its process: a record per function.
    JitDump,
}

impl Format {
    fn read_piece(
        self,
        file: &File,
        offset: u64,
        until: u64,
        buffer: &mut Vec<u8>,
        each: impl FnMut(u64, Line<'_>),
    ) -> std::io::Result<Piece> {
        match self {
            Self::PerfMap => perf_map::read_piece(file, offset, until, buffer, each),
            Self::JitDump => jitdump::read_piece(file, offset, until, buffer, each),
        }
    }
}

/// A process's open file of JIT names.
#[derive(Clone, Debug)]
pub struct NamesFile {
    pub file: Arc<File>,
    pub format: Format,
}

/// One step for one process.
pub(super) enum Step {
    Open,
    /// Read the lines from `from` on, matching them against `addresses`.
    Tail {
        file: NamesFile,
        from: u64,
        addresses: BTreeMap<u64, ()>,
    },
    /// Read a piece of a scan of the file up to `until` for `addresses`.
    Scan {
        file: NamesFile,
        from: u64,
        until: u64,
        addresses: BTreeMap<u64, ()>,
    },
}

/// What a step came to.
pub(super) enum Outcome {
    Opened(Result<(NamesFile, u64), Refused>),
    Tail(std::io::Result<Read>),
    Scanned(std::io::Result<Read>),
}

/// What a read found.
pub(super) struct Read {
    /// Bytes consumed (whole lines).
    pub consumed: u64,
    pub too_long: u64,
    /// Lines that name code.
    pub lines: u64,
    /// The file's size when read.
    pub size: u64,
    /// The latest line read covering each address asked for.
    pub found: BTreeMap<u64, Found>,
}

impl Outcome {
    pub fn bytes_read(&self) -> u64 {
        match self {
            Outcome::Tail(Ok(read)) | Outcome::Scanned(Ok(read)) => read.consumed,
            _ => 0,
        }
    }
}

/// Carries out `step` for process `pid`.
pub(super) fn perform(pid: u32, step: Step, buffer: &mut Vec<u8>) -> Outcome {
    match step {
        Step::Open => Outcome::Opened(open(pid)),
        Step::Tail {
            file,
            from,
            addresses,
        } => Outcome::Tail(read_matching(
            &file,
            from,
            MAX_FILE_BYTES,
            &addresses,
            buffer,
        )),
        Step::Scan {
            file,
            from,
            until,
            addresses,
        } => Outcome::Scanned(read_matching(&file, from, until, &addresses, buffer).map(
            |mut read| {
                // A file that shrank (written anew) ends the scan where it
                // ends.
                if read.consumed == 0 {
                    read.consumed = until.saturating_sub(from);
                }
                read
            },
        )),
    }
}

/// Opens the file of JIT names of `pid` and says its size: the jitdump
/// file it maps, else its perf map.
fn open(pid: u32) -> Result<(NamesFile, u64), Refused> {
    let (file, format) = match open_jitdump(pid)? {
        Some(file) => (file, Format::JitDump),
        None => {
            let namespace_pid = crate::tasks::namespace_pid(pid).ok_or(Refused::Missing)?;
            let path = PathBuf::from(format!("/tmp/perf-{namespace_pid}.map"));
            (process_files::open_written_by(pid, &path)?, Format::PerfMap)
        }
    };
    let size = file
        .metadata()
        .map_err(|err| Refused::Io(err.to_string()))?
        .len();
    Ok((
        NamesFile {
            file: Arc::new(file),
            format,
        },
        size,
    ))
}

/// The jitdump file `pid` maps (by its name, `jit-N.dump`), opened as a
/// file its process's user wrote, and only if it is the very file mapped.
fn open_jitdump(pid: u32) -> Result<Option<File>, Refused> {
    let maps = Process::new(pid as i32)
        .and_then(|process| process.maps())
        .map_err(|_| Refused::Missing)?;
    let Some((path, identity)) = maps.into_iter().find_map(|map| match map.pathname {
        MMapPath::Path(path) if is_jitdump_name(&path) => {
            Some((path, (device_number(map.dev), map.inode)))
        }
        _ => None,
    }) else {
        return Ok(None);
    };
    let file = process_files::open_written_by(pid, &path)?;
    let stat = file
        .metadata()
        .map_err(|err| Refused::Io(err.to_string()))?;
    if (stat.dev(), stat.ino()) != identity {
        return Err(Refused::Replaced);
    }
    Ok(Some(file))
}

/// Whether `path` is named as jitdump files are: `jit-N.dump`.
fn is_jitdump_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_prefix("jit-")?.strip_suffix(".dump"))
        .is_some_and(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads a piece from `from` (up to `until`), keeping the functions that
/// cover `addresses`.
fn read_matching(
    file: &NamesFile,
    from: u64,
    until: u64,
    addresses: &BTreeMap<u64, ()>,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Read> {
    let size = file.file.metadata()?.len();
    let mut found = BTreeMap::new();
    let mut lines = 0;
    let piece =
        file.format
            .read_piece(&file.file, from, until.min(size), buffer, |offset, line| {
                lines += 1;
                match_line(addresses, offset, &line, &mut found);
            })?;
    Ok(Read {
        consumed: piece.consumed,
        too_long: piece.too_long,
        lines,
        size,
        found,
    })
}
