//! The reader's steps: what it does with one process's perf map in one
//! turn (open it, read the lines added since the last read, or read a
//! piece of the whole file again for new addresses), carried out without
//! the lock on what is known.
//!
//! Owns opening and reading the files; it must not decide which step
//! comes next (see `process`).

use std::{collections::BTreeMap, fs::File, path::PathBuf, sync::Arc};

use super::{
    MAX_FILE_BYTES,
    perf_map::{Found, match_line, read_piece},
};
use crate::symbols::process_files::{self, Refused};

/// One step for one process.
pub(super) enum Step {
    Open,
    /// Read the lines from `from` on, matching them against `addresses`.
    Tail {
        file: Arc<File>,
        from: u64,
        addresses: BTreeMap<u64, ()>,
    },
    /// Read a piece of a scan of the file up to `until` for `addresses`.
    Scan {
        file: Arc<File>,
        from: u64,
        until: u64,
        addresses: BTreeMap<u64, ()>,
    },
}

/// What a step came to.
pub(super) enum Outcome {
    Opened(Result<(Arc<File>, u64), Refused>),
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

/// Opens the perf map of `pid` and says its size.
fn open(pid: u32) -> Result<(Arc<File>, u64), Refused> {
    let namespace_pid = crate::tasks::namespace_pid(pid).ok_or(Refused::Missing)?;
    let path = PathBuf::from(format!("/tmp/perf-{namespace_pid}.map"));
    let file = process_files::open_written_by(pid, &path)?;
    let size = file
        .metadata()
        .map_err(|err| Refused::Io(err.to_string()))?
        .len();
    Ok((Arc::new(file), size))
}

/// Reads a piece from `from` (up to `until`), keeping the lines that
/// cover `addresses`.
fn read_matching(
    file: &File,
    from: u64,
    until: u64,
    addresses: &BTreeMap<u64, ()>,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Read> {
    let size = file.metadata()?.len();
    let mut found = BTreeMap::new();
    let mut lines = 0;
    let piece = read_piece(file, from, until.min(size), buffer, |offset, line| {
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
