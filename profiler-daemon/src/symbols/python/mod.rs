//! CPython interpreters in the processes sampled: which binary of a process
//! is its interpreter (`python3.N`, or the `libpython3.N` it links), which
//! version it is, and where the interpreter's runtime state
//! (`_PyRuntime`) and its evaluation loop (`_PyEval_EvalFrameDefault`)
//! lie in the process, all read from the binary's own symbols and data
//! (never from the process's memory, which a hostile process could make
//! any read of wait on). The first step of Python's own frames (issue 43):
//! the frame walk and the naming of code objects build on it.
//!
//! Owns the reading of those binaries and what is known of each
//! interpreter; it must not read process memory, walk frames or name them.

use std::{collections::BTreeMap, fs::File, ops::Range, sync::Arc};

use object::{
    Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _,
    read::{ReadCache, ReadRef},
};
use rustc_hash::FxHashMap as HashMap;

use super::mappings::{Binary, BinaryKey, Mapping, MappingTarget};

pub mod code_objects;
pub mod frames;
pub mod gil;
pub mod names;
pub mod threads;

#[cfg(test)]
mod tests;

/// The oldest CPython whose frames the daemon is to read: its frames are
/// `_PyInterpreterFrame`s (3.11 on), the layout every later version keeps.
pub const OLDEST: (u8, u8) = (3, 11);

/// A CPython version, as its `Py_Version` says (`PY_VERSION_HEX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PythonVersion {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
}

impl PythonVersion {
    /// From `PY_VERSION_HEX` (0xMMmmppLS: major, minor, micro, release
    /// level and serial); none when it is no CPython 3 version.
    pub fn from_hex(hex: u64) -> Option<Self> {
        let version = Self {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
            micro: (hex >> 8) as u8,
        };
        (hex >> 32 == 0 && version.major == 3 && version.minor < 100).then_some(version)
    }
}

impl std::fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// Why an interpreter's frames will not be read: each is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// Before 3.11 (frames of another layout).
    TooOld,
    /// A free-threaded build (`python3.13t`): its objects' layout differs.
    FreeThreaded,
    /// Its symbols do not say where the runtime state or the evaluation
    /// loop are (a stripped binary without them in `.dynsym`).
    NoSymbols,
    /// 3.13 on: its runtime state does not start with the debug offsets
    /// the version promises (`_Py_DebugOffsets`, cookie `xdebugpy`), or
    /// their version is not the binary's.
    NoDebugOffsets,
}

impl Refusal {
    /// The name counters and the status give it.
    pub fn counter_name(self) -> &'static str {
        match self {
            Self::TooOld => "before_3_11",
            Self::FreeThreaded => "free_threaded",
            Self::NoSymbols => "no_symbols",
            Self::NoDebugOffsets => "no_debug_offsets",
        }
    }
}

/// A CPython interpreter binary: addresses as the binary's own (ELF
/// virtual addresses), its segments to place them in a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interpreter {
    pub version: PythonVersion,
    /// `_PyRuntime`: where the runtime state is (3.13 on, starting with
    /// `_Py_DebugOffsets`).
    pub runtime: u64,
    /// `_PyEval_EvalFrameDefault` (and its `.cold` part when the symbol
    /// table has it): where a native stack runs Python frames.
    pub eval_loop: Vec<Range<u64>>,
    /// `PyCode_Type`, `PyUnicode_Type` and `PyBytes_Type`: what a code
    /// object, a `str` and a `bytes` read from the process must point to.
    pub types: code_objects::TypeObjects,
    /// The loadable segments: (virtual address, file offset, file size).
    segments: Vec<(u64, u64, u64)>,
}

impl Interpreter {
    /// Where virtual address `address` of the binary is in a process that
    /// maps its file from offset `file_offset` at `start`; none when that
    /// mapping's segment is not one of the binary's.
    fn bias(&self, start: u64, file_offset: u64) -> Option<u64> {
        let &(vaddr, offset, _) = self
            .segments
            .iter()
            .find(|&&(_, offset, size)| (offset..offset + size.max(1)).contains(&file_offset))?;
        Some(start.wrapping_sub(vaddr.wrapping_add(file_offset - offset)))
    }
}

/// What a binary is, Python-wise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// No CPython interpreter (or a `python3.N` that links its
    /// interpreter from a `libpython3.N`, which is found in its place).
    NotPython,
    /// An interpreter whose frames will not be read, and its version
    /// when it is known.
    Refused(Refusal, Option<PythonVersion>),
    Interpreter(Arc<Interpreter>),
}

/// Whether a file named `name` may be a CPython interpreter:
/// `python3.N` (and `python3.Nd`, `python3.Nt`) or `libpython3.N….so…`.
pub fn named_like_python(name: &str) -> bool {
    crate::profile::is_python_interpreter(name)
}

/// A free-threaded build's name: `python3.13t`, `libpython3.13t.so`.
fn named_free_threaded(name: &str) -> bool {
    let stem = name.split(".so").next().unwrap_or(name);
    stem.ends_with('t')
}

/// What the binary in `file` (mapped as `path`) is.
pub fn inspect(path: &str, file: &File) -> Found {
    let name = path.rsplit('/').next().unwrap_or(path);
    if !named_like_python(name) {
        return Found::NotPython;
    }
    let cache = ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Found::NotPython;
    };
    inspect_elf(&elf, &cache, name)
}

fn inspect_elf<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    data: R,
    name: &str,
) -> Found {
    // The interpreter is in the library a `python3.N` links, when it does.
    let links_libpython = needed_libraries(elf)
        .iter()
        .any(|needed| needed.starts_with("libpython3"));
    if links_libpython && !name.starts_with("lib") {
        return Found::NotPython;
    }
    let symbol = |wanted: &str| {
        elf.dynamic_symbols()
            .chain(elf.symbols())
            .find(|symbol| symbol.is_definition() && symbol.name() == Ok(wanted))
            .map(|symbol| (symbol.address(), symbol.size()))
    };
    let Some(version) = symbol("Py_Version")
        .and_then(|(address, _)| read_u64(elf, data, address))
        .and_then(PythonVersion::from_hex)
    else {
        // A CPython before 3.11 has no `Py_Version`.
        return Found::Refused(Refusal::TooOld, None);
    };
    if (version.major, version.minor) < OLDEST {
        return Found::Refused(Refusal::TooOld, Some(version));
    }
    if named_free_threaded(name) {
        return Found::Refused(Refusal::FreeThreaded, Some(version));
    }
    let (Some((runtime, _)), Some((eval, eval_size))) =
        (symbol("_PyRuntime"), symbol("_PyEval_EvalFrameDefault"))
    else {
        return Found::Refused(Refusal::NoSymbols, Some(version));
    };
    let (Some((code, _)), Some((str, _)), Some((bytes, _))) = (
        symbol("PyCode_Type"),
        symbol("PyUnicode_Type"),
        symbol("PyBytes_Type"),
    ) else {
        return Found::Refused(Refusal::NoSymbols, Some(version));
    };
    let mut eval_loop = Vec::with_capacity(2);
    eval_loop.push(eval..eval + eval_size.max(1));
    if let Some((cold, size)) = symbol("_PyEval_EvalFrameDefault.cold") {
        eval_loop.push(cold..cold + size.max(1));
    }
    if version.minor >= 13 && !debug_offsets_hold(elf, data, runtime, version) {
        return Found::Refused(Refusal::NoDebugOffsets, Some(version));
    }
    let segments = elf
        .segments()
        .map(|segment| {
            let (offset, size) = segment.file_range();
            (segment.address(), offset, size)
        })
        .collect();
    Found::Interpreter(Arc::new(Interpreter {
        version,
        runtime,
        eval_loop,
        types: code_objects::TypeObjects { code, str, bytes },
        segments,
    }))
}

/// The libraries an ELF file names as needed (`DT_NEEDED`).
fn needed_libraries<'data, R: ReadRef<'data>>(elf: &object::File<'data, R>) -> Vec<String> {
    let object::File::Elf64(elf) = elf else {
        return Vec::new();
    };
    use object::read::elf::Dyn as _;
    let endian = elf.endian();
    let Ok(Some((entries, link))) = elf.elf_section_table().dynamic(endian, elf.data()) else {
        return Vec::new();
    };
    let Ok(strings) = elf.elf_section_table().strings(endian, elf.data(), link) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|entry| entry.d_tag(endian) == object::elf::DT_NEEDED)
        .filter_map(|entry| entry.string(endian, strings).ok())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
}

/// The 8 bytes at virtual address `address` of the file's data (a
/// constant or a variable's initial value).
fn read_u64<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    data: R,
    address: u64,
) -> Option<u64> {
    let bytes = read_at(elf, data, address, 8)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

fn read_at<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    data: R,
    address: u64,
    len: u64,
) -> Option<&'data [u8]> {
    let section = elf.sections().find(|section| {
        (section.address()..section.address() + section.size()).contains(&address)
            && section.kind() != object::SectionKind::UninitializedData
    })?;
    let (offset, size) = section.file_range()?;
    let within = address - section.address();
    if within + len > size {
        return None;
    }
    data.read_bytes_at(offset + within, len).ok()
}

/// Whether the initial value of `_PyRuntime` (at `runtime`) starts with
/// the debug offsets of `version`: the cookie `xdebugpy`, then the
/// version as `PY_VERSION_HEX` (the release level and serial aside).
fn debug_offsets_hold<'data, R: ReadRef<'data>>(
    elf: &object::File<'data, R>,
    data: R,
    runtime: u64,
    version: PythonVersion,
) -> bool {
    let Some(head) = read_at(elf, data, runtime, 16) else {
        return false;
    };
    let hex = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
    &head[..8] == b"xdebugpy" && PythonVersion::from_hex(hex) == Some(version)
}

/// A process running a CPython interpreter whose frames can be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonProcess {
    pub interpreter: Arc<Interpreter>,
    /// Where `_PyRuntime` is in the process.
    pub runtime: u64,
    /// Where the evaluation loop's code is in the process.
    pub eval_loop: Vec<Range<u64>>,
    /// Where the interpreter's type objects are in the process.
    pub types: code_objects::TypeObjects,
}

impl PythonProcess {
    /// The interpreter of a process that maps its binary's file from
    /// `file_offset` at `start`; none when that is none of its segments.
    pub fn placed(interpreter: Arc<Interpreter>, start: u64, file_offset: u64) -> Option<Self> {
        let bias = interpreter.bias(start, file_offset)?;
        let types = interpreter.types;
        Some(Self {
            runtime: interpreter.runtime.wrapping_add(bias),
            types: code_objects::TypeObjects {
                code: types.code.wrapping_add(bias),
                str: types.str.wrapping_add(bias),
                bytes: types.bytes.wrapping_add(bias),
            },
            eval_loop: interpreter
                .eval_loop
                .iter()
                .map(|range| range.start.wrapping_add(bias)..range.end.wrapping_add(bias))
                .collect(),
            interpreter,
        })
    }
}

/// What a process runs, Python-wise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PythonVerdict {
    /// No CPython interpreter (or none mapped yet).
    #[default]
    None,
    /// An interpreter whose frames will not be read.
    Refused(Refusal),
    /// An interpreter whose frames can be read.
    Runs(Arc<PythonProcess>),
}

/// What the interpreters found since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonStats {
    /// Processes found running an interpreter whose frames can be read,
    /// by version (`3.11.2`).
    pub processes: BTreeMap<String, u64>,
    /// Processes running an interpreter whose frames will not be read,
    /// by reason ([`Refusal::counter_name`]).
    pub refused: BTreeMap<&'static str, u64>,
    /// Interpreter binaries inspected (held once each).
    pub binaries: u64,
}

/// The interpreters of the binaries met so far (each inspected once), and
/// what was found of the processes' interpreters.
#[derive(Debug, Default)]
pub struct PythonInterpreters {
    by_binary: HashMap<BinaryKey, Found>,
    stats: PythonStats,
}

/// Interpreter binaries whose findings are kept at most: beyond, they are
/// all let go of (each inspected again when met).
const BINARIES_KEPT: usize = 256;

impl PythonInterpreters {
    /// What a process with `mappings` runs, Python-wise.
    pub(in crate::symbols) fn of_process(&mut self, mappings: &[Mapping]) -> PythonVerdict {
        let mut verdict = PythonVerdict::None;
        for mapping in mappings.iter().filter(|mapping| mapping.code) {
            let MappingTarget::File(binary) = &mapping.target else {
                continue;
            };
            match self.found(binary) {
                Found::NotPython => {}
                Found::Refused(reason, _) => verdict = PythonVerdict::Refused(reason),
                Found::Interpreter(interpreter) => {
                    if let Some(process) =
                        PythonProcess::placed(interpreter, mapping.start, mapping.file_offset)
                    {
                        return PythonVerdict::Runs(Arc::new(process));
                    }
                }
            }
        }
        verdict
    }

    /// Counts a process's verdict (once per process and program: the
    /// caller says when).
    pub(in crate::symbols) fn count(&mut self, verdict: &PythonVerdict) {
        match verdict {
            PythonVerdict::None => {}
            PythonVerdict::Refused(reason) => {
                *self.stats.refused.entry(reason.counter_name()).or_default() += 1;
            }
            PythonVerdict::Runs(process) => {
                *self
                    .stats
                    .processes
                    .entry(process.interpreter.version.to_string())
                    .or_default() += 1;
            }
        }
    }

    fn found(&mut self, binary: &Binary) -> Found {
        let name = binary.path.rsplit('/').next().unwrap_or(&binary.path);
        if !named_like_python(name) {
            return Found::NotPython;
        }
        if let Some(found) = self.by_binary.get(&binary.key) {
            return found.clone();
        }
        let found = match File::open(binary.readable_path()) {
            Ok(file) => inspect(&binary.path, &file),
            Err(_) => Found::NotPython,
        };
        if found != Found::NotPython {
            self.stats.binaries += 1;
        }
        if self.by_binary.len() >= BINARIES_KEPT {
            self.by_binary.clear();
        }
        self.by_binary.insert(binary.key, found.clone());
        found
    }

    pub fn stats(&self) -> PythonStats {
        self.stats.clone()
    }
}
