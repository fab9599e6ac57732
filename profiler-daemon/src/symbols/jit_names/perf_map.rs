//! The perf map format (`/tmp/perf-PID.map`, written by `node
//! --perf-basic-prof`, the JVM's perf agents, .NET with
//! `DOTNET_PerfMapEnabled=1`, Julia and Python 3.12's `-X perf`): one line
//! per function, `START SIZE name`, start and size in hex; a later line
//! for the same code wins (code compiled again at the same address).
//!
//! Owns reading a stretch of such a file in bounded pieces and matching
//! its lines against the addresses asked for; it must not decide which
//! files are read or hold what was found.

use std::{collections::BTreeMap, fs::File, os::unix::fs::FileExt as _};

/// The most of one file read at a time.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The longest name kept (longer ones are cut at a character's end).
pub const MAX_NAME_BYTES: usize = 1024;

/// One function of a perf map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub start: u64,
    pub end: u64,
    pub name: &'a str,
}

/// What reading a piece of a file gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Piece {
    /// Bytes consumed: whole lines, or a stretch without a line end
    /// skipped as a line too long.
    pub consumed: u64,
    /// Lines skipped as too long (no line end within a chunk).
    pub too_long: u64,
}

/// Reads the whole lines of `file` from `offset` up to `until` (at most
/// [`CHUNK_BYTES`]), calling `each` with every line and its offset. A
/// line that has not ended yet is left for the next read, unless a whole
/// chunk holds no line end: that is skipped as a line too long.
pub fn read_piece(
    file: &File,
    offset: u64,
    until: u64,
    buffer: &mut Vec<u8>,
    mut each: impl FnMut(u64, Line<'_>),
) -> std::io::Result<Piece> {
    let filled = read_chunk(file, offset, until, buffer)?;
    let text = &buffer[..filled];
    let Some(last_end) = text.iter().rposition(|&byte| byte == b'\n') else {
        // No line end at all: a line being written, or one too long.
        if filled == CHUNK_BYTES {
            return Ok(Piece {
                consumed: filled as u64,
                too_long: 1,
            });
        }
        return Ok(Piece::default());
    };
    let mut at = 0;
    for line in text[..last_end].split(|&byte| byte == b'\n') {
        if let Some(parsed) = parse_line(line) {
            each(offset + at as u64, parsed);
        }
        at += line.len() + 1;
    }
    Ok(Piece {
        consumed: last_end as u64 + 1,
        too_long: 0,
    })
}

/// Reads into `buffer` what there is from `offset` up to `until`, at most
/// [`CHUNK_BYTES`]; the bytes read.
pub(super) fn read_chunk(
    file: &File,
    offset: u64,
    until: u64,
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let wanted = until.saturating_sub(offset).min(CHUNK_BYTES as u64) as usize;
    buffer.resize(wanted, 0);
    let mut filled = 0;
    while filled < wanted {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// A line `START SIZE name`; `None` for anything else.
fn parse_line(line: &[u8]) -> Option<Line<'_>> {
    let line = std::str::from_utf8(line).ok()?;
    let mut fields = line.splitn(3, ' ');
    let (start, size, name) = (fields.next()?, fields.next()?, fields.next()?);
    let hex = |text: &str| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok();
    let (start, size) = (hex(start)?, hex(size)?);
    Some(Line {
        start,
        end: start.saturating_add(size),
        name: name.trim_end(),
    })
}

/// A function found for an address: the latest line (by offset) that
/// covers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub start: u64,
    pub end: u64,
    pub name: Box<str>,
    pub offset: u64,
}

/// Matches `line` (at `offset`) against `addresses` (sorted), recording
/// it in `found` for each address it covers, unless a later line did.
pub fn match_line<V>(
    addresses: &BTreeMap<u64, V>,
    offset: u64,
    line: &Line<'_>,
    found: &mut BTreeMap<u64, Found>,
) {
    for (&address, _) in addresses.range(line.start..line.end) {
        let later = found
            .get(&address)
            .is_none_or(|earlier| earlier.offset <= offset);
        if later {
            found.insert(
                address,
                Found {
                    start: line.start,
                    end: line.end,
                    name: shortened(line.name).into(),
                    offset,
                },
            );
        }
    }
}

/// `name`, cut to at most [`MAX_NAME_BYTES`].
fn shortened(name: &str) -> &str {
    if name.len() <= MAX_NAME_BYTES {
        return name;
    }
    let mut end = MAX_NAME_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn file_of(text: &[u8]) -> File {
        let mut file = tempfile::tempfile().expect("a temporary file");
        file.write_all(text).expect("written");
        file
    }

    fn lines_of(file: &File, from: u64, until: u64) -> (Vec<(u64, u64, u64, String)>, Piece) {
        let mut lines = Vec::new();
        let piece = read_piece(file, from, until, &mut Vec::new(), |offset, line| {
            lines.push((offset, line.start, line.end, line.name.to_owned()));
        })
        .expect("read");
        (lines, piece)
    }

    #[test]
    fn reads_whole_lines_and_skips_bad_ones() {
        let text = b"7f0000001000 40 JS:*hot /a.js:1:1\nnonsense\n1000 zz bad\n2000 10 new\n3000 1";
        let file = file_of(text);
        let (lines, piece) = lines_of(&file, 0, text.len() as u64);
        assert_eq!(
            lines,
            [
                (
                    0,
                    0x7f00_0000_1000,
                    0x7f00_0000_1040,
                    "JS:*hot /a.js:1:1".into()
                ),
                (55, 0x2000, 0x2010, "new".into()),
            ]
        );
        // The last line has not ended: it is read next time.
        assert_eq!(piece.consumed, 67);
        assert_eq!(piece.too_long, 0);
        let (rest, piece) = lines_of(&file, 67, text.len() as u64);
        assert!(rest.is_empty());
        assert_eq!(piece, Piece::default());
    }

    #[test]
    fn a_chunk_without_a_line_end_is_skipped() {
        let mut text = vec![0u8; CHUNK_BYTES + 10];
        text.extend_from_slice(b"\n1000 10 after\n");
        let file = file_of(&text);
        let (lines, piece) = lines_of(&file, 0, text.len() as u64);
        assert!(lines.is_empty());
        assert_eq!(piece.consumed, CHUNK_BYTES as u64);
        assert_eq!(piece.too_long, 1);
        let (lines, _) = lines_of(&file, piece.consumed, text.len() as u64);
        assert_eq!(lines.last().map(|line| line.3.as_str()), Some("after"));
    }

    #[test]
    fn the_latest_line_covering_an_address_wins() {
        let addresses: BTreeMap<u64, ()> = [(0x1004, ()), (0x1018, ()), (0x5000, ())].into();
        let mut found = BTreeMap::new();
        let line = |start, end, name| Line { start, end, name };
        match_line(&addresses, 0, &line(0x1000, 0x1010, "old"), &mut found);
        match_line(&addresses, 20, &line(0x1000, 0x1020, "new"), &mut found);
        // An earlier line read after (a scan behind the tail) loses.
        match_line(&addresses, 10, &line(0x1000, 0x1040, "older"), &mut found);
        assert_eq!(&*found[&0x1004].name, "new");
        assert_eq!(&*found[&0x1018].name, "new");
        assert!(!found.contains_key(&0x5000));
        let long = "é".repeat(MAX_NAME_BYTES);
        match_line(&addresses, 30, &line(0x1000, 0x1020, &long), &mut found);
        assert_eq!(found[&0x1004].name.len(), MAX_NAME_BYTES);
    }
}
