//! Python code objects read from a process's memory: a function's
//! qualified name, its file, its first line and its table of locations,
//! from which the line of any of its instructions is decoded. Every object
//! read is checked to be of the type it should be (a code object, a `str`,
//! a `bytes`: its type pointer is the interpreter's own type object), so
//! that a wrong layout or an address reused by another object gives an
//! error, never a wrong name.
//!
//! Owns the layouts of those objects per version and the decoding; it must
//! not decide which process memory is read when (a hostile process can make
//! a read of its memory wait: the caller reads off the paths that must not).

use std::{fs::File, os::unix::fs::FileExt as _};

use super::PythonVersion;

/// Where the fields of a code object, a `str` and a `bytes` are, for one
/// version (from the DWARF of CPython 3.11.7, 3.12.1 and 3.13.0: `ptype /o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    /// `PyCodeObject`: `co_firstlineno` (an int), `co_filename`,
    /// `co_qualname`, `co_linetable` (object pointers), and where its
    /// instructions start (`co_code_adaptive`, `PyCode_Type.tp_basicsize`).
    first_line: u64,
    filename: u64,
    name: u64,
    qualname: u64,
    linetable: u64,
    instructions: u64,
    /// `PyASCIIObject`'s size (an ASCII string's characters follow it) and
    /// `PyCompactUnicodeObject`'s (other compact strings' follow it).
    ascii_size: u64,
    compact_size: u64,
}

/// Every object's type pointer (`ob_type`); a `str`'s length and its state
/// bits (`kind`, 3 bits from bit 2; `compact`, bit 5; `ascii`, bit 6); a
/// `bytes`'s size and data.
const OB_TYPE: u64 = 8;
const STR_LENGTH: u64 = 16;
pub const STR_HASH: u64 = 24;
const STR_STATE: u64 = 32;
const BYTES_SIZE: u64 = 16;
const BYTES_DATA: u64 = 32;

/// The longest name or file read (in characters), and the largest table of
/// locations (CPython's own are far smaller; a larger one is not a
/// function's).
const MAX_STRING: u64 = 4096;
const MAX_LINETABLE: u64 = 1 << 16;

impl CodeLayout {
    /// The layout of `version`; none for a version whose layout is not
    /// known.
    pub fn of(version: PythonVersion) -> Option<Self> {
        let layout = |first_line, instructions, ascii_size, compact_size| Self {
            first_line,
            filename: 112,
            name: 120,
            qualname: 128,
            linetable: 136,
            instructions,
            ascii_size,
            compact_size,
        };
        match (version.major, version.minor) {
            (3, 11) => Some(layout(72, 184, 48, 72)),
            (3, 12) => Some(layout(68, 192, 40, 56)),
            (3, 13) => Some(layout(68, 200, 40, 56)),
            _ => None,
        }
    }

    /// Where the instructions of the code object at `code` start: an
    /// instruction pointer's offset from there, in 2-byte code units, is
    /// what [`CodeObject::line_at`] takes.
    pub fn instructions_of(&self, code: u64) -> u64 {
        code + self.instructions
    }

    /// Where a code object's file name, name and qualified name
    /// (pointers) are.
    pub fn name_offsets(&self) -> (u64, u64, u64) {
        (self.filename, self.name, self.qualname)
    }
}

/// Where the interpreter's type objects are in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeObjects {
    pub code: u64,
    pub str: u64,
    pub bytes: u64,
}

/// A process's memory, read at an address.
pub trait ProcessMemory {
    /// Fills `buf` from `address`; an error when any of it cannot be read.
    fn read(&self, address: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

/// A process's memory through `/proc/PID/mem`.
pub struct ProcMem(File);

impl ProcMem {
    pub fn open(pid: u32) -> std::io::Result<Self> {
        File::open(format!("/proc/{pid}/mem")).map(Self)
    }
}

impl ProcessMemory for ProcMem {
    fn read(&self, address: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_exact_at(buf, address)
    }
}

/// Why a code object was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    #[error("its memory cannot be read at {0:#x}")]
    Unreadable(u64),
    #[error("the object at {0:#x} is not of the type it should be")]
    WrongType(u64),
    #[error("the object at {0:#x} is too large to be a name or a table of locations")]
    TooLarge(u64),
}

/// What a code object says of its function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    pub qualname: String,
    pub filename: String,
    pub first_line: u32,
    /// Its check as the sampling programs make it
    /// ([`profiler_common::python::code_check`]), from what was read.
    pub check: u64,
    linetable: Vec<u8>,
}

/// Reads the code object at `address` of `memory`.
pub fn read_code(
    memory: &impl ProcessMemory,
    address: u64,
    layout: &CodeLayout,
    types: &TypeObjects,
) -> Result<CodeObject, CodeError> {
    check_type(memory, address, types.code)?;
    let first_line = read_u32(memory, address + layout.first_line)?;
    let filename = read_u64(memory, address + layout.filename)?;
    let name = read_u64(memory, address + layout.name)?;
    let qualname = read_u64(memory, address + layout.qualname)?;
    let linetable = read_u64(memory, address + layout.linetable)?;
    let name_hash = read_u64(memory, name + STR_HASH)?;
    Ok(CodeObject {
        check: profiler_common::python::code_check(filename, qualname, name_hash),
        qualname: read_str(memory, qualname, layout, types)?,
        filename: read_str(memory, filename, layout, types)?,
        first_line,
        linetable: read_bytes(memory, linetable, types)?,
    })
}

fn read_into(memory: &impl ProcessMemory, address: u64, buf: &mut [u8]) -> Result<(), CodeError> {
    memory
        .read(address, buf)
        .map_err(|_| CodeError::Unreadable(address))
}

fn read_u64(memory: &impl ProcessMemory, address: u64) -> Result<u64, CodeError> {
    let mut word = [0; 8];
    read_into(memory, address, &mut word)?;
    Ok(u64::from_le_bytes(word))
}

fn read_u32(memory: &impl ProcessMemory, address: u64) -> Result<u32, CodeError> {
    let mut word = [0; 4];
    read_into(memory, address, &mut word)?;
    Ok(u32::from_le_bytes(word))
}

fn check_type(memory: &impl ProcessMemory, object: u64, wanted: u64) -> Result<(), CodeError> {
    match read_u64(memory, object + OB_TYPE)? == wanted {
        true => Ok(()),
        false => Err(CodeError::WrongType(object)),
    }
}

/// A compact `str` (every name and file name of code is one).
fn read_str(
    memory: &impl ProcessMemory,
    object: u64,
    layout: &CodeLayout,
    types: &TypeObjects,
) -> Result<String, CodeError> {
    check_type(memory, object, types.str)?;
    let length = read_u64(memory, object + STR_LENGTH)?;
    let state = read_u32(memory, object + STR_STATE)?;
    let (kind, compact, ascii) = (
        (state >> 2) & 7,
        state & (1 << 5) != 0,
        state & (1 << 6) != 0,
    );
    if length > MAX_STRING || !compact || !matches!(kind, 1 | 2 | 4) {
        return Err(CodeError::TooLarge(object));
    }
    let data = object
        + match ascii {
            true => layout.ascii_size,
            false => layout.compact_size,
        };
    let mut bytes = vec![0; (length * u64::from(kind)) as usize];
    read_into(memory, data, &mut bytes)?;
    Ok(match kind {
        1 => bytes.iter().map(|&byte| char::from(byte)).collect(),
        2 => bytes
            .chunks_exact(2)
            .map(|unit| u32::from(u16::from_le_bytes([unit[0], unit[1]])))
            .map(|point| char::from_u32(point).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|unit| u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]))
            .map(|point| char::from_u32(point).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
    })
}

fn read_bytes(
    memory: &impl ProcessMemory,
    object: u64,
    types: &TypeObjects,
) -> Result<Vec<u8>, CodeError> {
    check_type(memory, object, types.bytes)?;
    let size = read_u64(memory, object + BYTES_SIZE)?;
    if size > MAX_LINETABLE {
        return Err(CodeError::TooLarge(object));
    }
    let mut bytes = vec![0; size as usize];
    read_into(memory, object + BYTES_DATA, &mut bytes)?;
    Ok(bytes)
}

impl CodeObject {
    /// What it holds, roughly: its names, its table of lines and their
    /// allocations.
    pub fn bytes(&self) -> u64 {
        (self.qualname.len() + self.filename.len() + self.linetable.len()) as u64 + 128
    }

    /// The line of the instruction `unit` code units (2 bytes each) from
    /// the code's first; none where the table says it has no line (or it
    /// ends before it).
    pub fn line_at(&self, unit: u32) -> Option<u32> {
        line_at(&self.linetable, self.first_line, unit)
    }
}

/// Decodes a table of locations (CPython 3.11's format,
/// `Objects/locations.md`): entries of a first byte (bit 7 set; bits 3–6
/// the entry's kind; bits 0–2 the code units it covers, less one) and the
/// varints its kind has; the kinds with a line move the line by a delta
/// (a signed varint for 13 and 14, 0 to 2 for 10 to 12, none for 0 to 9),
/// and 15 has no line.
fn line_at(table: &[u8], first_line: u32, unit: u32) -> Option<u32> {
    let mut at = 0;
    let mut line = i64::from(first_line);
    let mut covered = 0_u32;
    while at < table.len() {
        let head = table[at];
        at += 1;
        let kind = (head >> 3) & 15;
        let units = u32::from(head & 7) + 1;
        let mut has_line = true;
        match kind {
            15 => has_line = false,
            14 => {
                line += signed_varint(table, &mut at)?;
                // The end line's delta, the column and the end column.
                for _ in 0..3 {
                    varint(table, &mut at)?;
                }
            }
            13 => line += signed_varint(table, &mut at)?,
            10..=12 => {
                line += i64::from(kind - 10);
                at += 2;
            }
            _ => at += 1,
        }
        if unit < covered + units {
            return (has_line && line >= 0).then_some(line as u32);
        }
        covered += units;
    }
    None
}

/// An unsigned varint of 6-bit chunks, the lowest first, bit 6 set on
/// every chunk but the last.
fn varint(table: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0_u64;
    let mut shift = 0;
    loop {
        let byte = *table.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 63).checked_shl(shift)?;
        if byte & 64 == 0 {
            return Some(value);
        }
        shift += 6;
    }
}

/// A signed varint: the unsigned one's lowest bit is the sign.
fn signed_varint(table: &[u8], at: &mut usize) -> Option<i64> {
    let value = varint(table, at)?;
    let magnitude = (value >> 1) as i64;
    Some(if value & 1 != 0 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests;
