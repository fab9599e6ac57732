//! The jitdump format (`jit-PID.dump`, written by node `--perf-prof`,
//! Julia with `ENABLE_JITPROFILING=1`, LLVM's perf listener, the JVM's
//! and .NET's agents; specified in the Linux tree's
//! `tools/perf/Documentation/jitdump-specification.txt`): a header, then
//! records, each `id, total size, timestamp` and a body. A code-load
//! record names the code at `code_addr..code_addr + code_size` (and
//! carries that code, which is skipped); a later record for the same code
//! wins, as a later line of a perf map does. The runtime maps the file
//! executable so that profilers find it in its memory map.
//!
//! Owns reading a stretch of such a file in bounded pieces, in the shape
//! of a perf map's lines; it must not decide which files are read or hold
//! what was found.

use std::{fs::File, io};

use super::{
    MAX_FILE_BYTES,
    perf_map::{CHUNK_BYTES, Line, Piece, read_chunk},
};

/// `JiTD` as the writer's machine stores a `u32`: read as little-endian
/// on a little-endian writer; the other byte order reads it reversed.
const MAGIC: u32 = 0x4A69_5444;
const VERSION: u32 = 1;
/// The header's fixed fields: magic, version, total size, ELF machine,
/// padding, pid (`u32` each), timestamp, flags (`u64` each).
const HEADER_BYTES: usize = 40;
/// A record's fixed head: id, total size (`u32` each), timestamp.
const RECORD_HEAD_BYTES: usize = 16;
/// A code-load record's fixed body: pid, tid (`u32`), vma, code address,
/// code size, code index (`u64`); its NUL-ended name follows.
const CODE_LOAD_BYTES: usize = 40;
const CODE_LOAD: u32 = 0;

/// Reads the whole records of `file` from `offset` up to `until` (at most
/// [`CHUNK_BYTES`] of them read), calling `each` with every function a
/// code-load record names and the record's offset. The header (at offset
/// 0) is checked and passed over. A record not wholly written yet is left
/// for the next read; one whose name does not end within a chunk is
/// skipped as too long. Fails on a file that is not a jitdump of this
/// machine's byte order, or whose records make no sense.
pub fn read_piece(
    file: &File,
    offset: u64,
    until: u64,
    buffer: &mut Vec<u8>,
    mut each: impl FnMut(u64, Line<'_>),
) -> io::Result<Piece> {
    let filled = read_chunk(file, offset, until, buffer)?;
    let bytes = &buffer[..filled];
    let mut at = 0usize;
    if offset == 0 {
        match header_size(bytes)? {
            Some(size) if size <= until => at = size as usize,
            // Not wholly written yet (or all of the file allowed).
            _ => return Ok(Piece::default()),
        }
    }
    let mut piece = Piece::default();
    while let Some(head) = bytes.get(at..at + RECORD_HEAD_BYTES) {
        let id = u32_at(head, 0);
        let size = u32_at(head, 4) as usize;
        if size < RECORD_HEAD_BYTES {
            return Err(malformed(format!(
                "a record at byte {} says it is {size} bytes long",
                offset + at as u64
            )));
        }
        let start = offset + at as u64;
        if start + size as u64 > MAX_FILE_BYTES {
            // It ends past what is read of a file: nothing after it will
            // be, as past the end of a long perf map.
            at = (MAX_FILE_BYTES - offset) as usize;
            piece.too_long += 1;
            break;
        }
        if start + size as u64 > until {
            break;
        }
        if id == CODE_LOAD {
            let body = &bytes[at + RECORD_HEAD_BYTES..bytes.len().min(at + size)];
            match code_load(body) {
                Some(Some(line)) => each(start, line),
                // A name that is not text names nothing.
                Some(None) => {}
                // The name runs past the chunk: read from this record
                // next time, unless the record began the chunk.
                None if at > 0 && at + size > bytes.len() => break,
                None if at + size > bytes.len() => piece.too_long += 1,
                // The record ends before its name does.
                None => {}
            }
        }
        // Past its end: the rest of a record read in part (its code) is
        // passed over, and the loop ends there.
        at += size;
    }
    piece.consumed = at as u64;
    Ok(piece)
}

/// The header's size, where records begin; `None` while it is not wholly
/// written.
fn header_size(bytes: &[u8]) -> io::Result<Option<u64>> {
    let Some(header) = bytes.get(..HEADER_BYTES) else {
        return Ok(None);
    };
    match u32_at(header, 0) {
        MAGIC => {}
        magic if magic == MAGIC.swap_bytes() => {
            return Err(malformed(
                "it was written on a machine of the other byte order".to_owned(),
            ));
        }
        magic => {
            return Err(malformed(format!(
                "it does not begin with jitdump's magic number (0x{magic:08x})"
            )));
        }
    }
    let version = u32_at(header, 4);
    if version != VERSION {
        return Err(malformed(format!(
            "it is of jitdump version {version}; version {VERSION} is read"
        )));
    }
    let size = u64::from(u32_at(header, 8));
    if !(HEADER_BYTES as u64..=CHUNK_BYTES as u64).contains(&size) {
        return Err(malformed(format!(
            "its header says it is {size} bytes long"
        )));
    }
    Ok(Some(size))
}

/// The function a code-load record's body names (`Some(None)`: its name
/// is not UTF-8 text); `None` when its name does not end within `body`.
fn code_load(body: &[u8]) -> Option<Option<Line<'_>>> {
    let fixed = body.get(..CODE_LOAD_BYTES)?;
    let address = u64_at(fixed, 16);
    let size = u64_at(fixed, 24);
    let rest = &body[CODE_LOAD_BYTES..];
    let name = &rest[..rest.iter().position(|&byte| byte == 0)?];
    Some(std::str::from_utf8(name).ok().map(|name| Line {
        start: address,
        end: address.saturating_add(size),
        name,
    }))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

fn malformed(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a jitdump file that can be read: {why}"),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::Write as _;

    use super::*;

    pub(in super::super) fn header() -> Vec<u8> {
        let mut bytes = Vec::new();
        for field in [MAGIC, VERSION, HEADER_BYTES as u32, 62, 0, 4321] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
        bytes.extend_from_slice(&[0; 16]);
        bytes
    }

    /// A code-load record of `name` for `size` bytes of code at `address`.
    pub(in super::super) fn code_load(address: u64, size: u64, name: &[u8]) -> Vec<u8> {
        let total = RECORD_HEAD_BYTES + CODE_LOAD_BYTES + name.len() + 1 + size as usize;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&CODE_LOAD.to_le_bytes());
        bytes.extend_from_slice(&(total as u32).to_le_bytes());
        bytes.extend_from_slice(&7u64.to_le_bytes());
        bytes.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0]);
        for field in [address, address, size, 3] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.resize(total, 0xcc);
        bytes
    }

    /// A record of another kind (debug or unwinding information).
    fn other(id: u32, total: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&total.to_le_bytes());
        bytes.resize(total as usize, 0xee);
        bytes
    }

    fn file_of(bytes: &[u8]) -> File {
        let mut file = tempfile::tempfile().expect("a temporary file");
        file.write_all(bytes).expect("written");
        file
    }

    /// A function read: its record's offset, start, end and name.
    type Record = (u64, u64, u64, String);

    fn records_of(bytes: &[u8], from: u64, until: u64) -> io::Result<(Vec<Record>, Piece)> {
        let file = file_of(bytes);
        let mut records = Vec::new();
        let piece = read_piece(&file, from, until, &mut Vec::new(), |offset, line| {
            records.push((offset, line.start, line.end, line.name.to_owned()));
        })?;
        Ok((records, piece))
    }

    #[test]
    fn reads_the_functions_of_whole_records_and_passes_over_the_rest() {
        let mut bytes = header();
        bytes.extend(code_load(0x7f00_1000, 0x40, b"JS:*hot /a.js:1:1"));
        let second = bytes.len() as u64;
        bytes.extend(other(4, 64));
        bytes.extend(code_load(0x7f00_2000, 0x10, b"LazyCompile:cold"));
        bytes.extend(code_load(0x7f00_3000, 0x10, &[0xff, 0xfe]));
        let whole = bytes.len() as u64;
        // A record still being written.
        bytes.extend(&code_load(0x7f00_4000, 0x100, b"later")[..70]);
        let (records, piece) = records_of(&bytes, 0, bytes.len() as u64).expect("read");
        assert_eq!(
            records,
            [
                (40, 0x7f00_1000, 0x7f00_1040, "JS:*hot /a.js:1:1".into()),
                (
                    second + 64,
                    0x7f00_2000,
                    0x7f00_2010,
                    "LazyCompile:cold".into()
                ),
            ]
        );
        assert_eq!(piece.consumed, whole);
        assert_eq!(piece.too_long, 0);
        // Read on from there: nothing whole yet.
        let (rest, piece) = records_of(&bytes, whole, bytes.len() as u64).expect("read");
        assert!(rest.is_empty());
        assert_eq!(piece, Piece::default());
    }

    #[test]
    fn a_record_past_the_chunk_is_read_whole_or_skipped_as_too_long() {
        let mut bytes = header();
        // Its code runs past the chunk: its name is read, its code not.
        bytes.extend(code_load(0x1000, CHUNK_BYTES as u64, b"big"));
        let after_big = bytes.len() as u64;
        bytes.extend(code_load(0x9000, 0x10, b"next"));
        let (records, piece) = records_of(&bytes, 0, bytes.len() as u64).expect("read");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].3, "big");
        assert_eq!(piece.consumed, after_big);
        let (records, _) = records_of(&bytes, after_big, bytes.len() as u64).expect("read");
        assert_eq!(records[0].3, "next");

        // A name longer than a chunk: the record is skipped, counted.
        let mut bytes = header();
        let long_at = bytes.len() as u64;
        bytes.extend(code_load(0x1000, 0x10, &vec![b'x'; CHUNK_BYTES]));
        bytes.extend(code_load(0x9000, 0x10, b"next"));
        let (records, piece) = records_of(&bytes, long_at, bytes.len() as u64).expect("read");
        assert!(records.is_empty());
        assert_eq!(piece.too_long, 1);
        let (records, _) =
            records_of(&bytes, long_at + piece.consumed, bytes.len() as u64).expect("read");
        assert_eq!(records[0].3, "next");

        // A record that says it ends past the most of a file read: what
        // follows is never read (as past a long perf map's end), rather
        // than waited for.
        let mut bytes = header();
        bytes.extend(4u32.to_le_bytes());
        bytes.extend(u32::MAX.to_le_bytes());
        bytes.resize(4096, 0);
        let (records, piece) = records_of(&bytes, 0, bytes.len() as u64).expect("read");
        assert!(records.is_empty());
        assert_eq!(piece.consumed, MAX_FILE_BYTES);
        assert_eq!(piece.too_long, 1);
    }

    #[test]
    fn a_file_that_is_no_jitdump_is_refused_and_a_short_header_awaited() {
        let refused = |bytes: &[u8]| {
            let err = records_of(bytes, 0, bytes.len() as u64).expect_err("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            err.to_string()
        };
        assert!(refused(&[0; 4096]).contains("magic"));
        let mut swapped = header();
        swapped[..4].copy_from_slice(&MAGIC.to_be_bytes());
        assert!(refused(&swapped).contains("byte order"));
        let mut later = header();
        later[4] = 2;
        assert!(refused(&later).contains("version 2"));
        // A record that says it is shorter than its own head.
        let mut bytes = header();
        bytes.extend(other(0, 8));
        bytes.extend([0; 8]);
        assert!(refused(&bytes).contains("8 bytes long"));

        let (records, piece) = records_of(&header()[..20], 0, 20).expect("awaited");
        assert!(records.is_empty());
        assert_eq!(piece, Piece::default());
    }
}
