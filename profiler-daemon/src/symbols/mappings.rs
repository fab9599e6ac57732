//! What a process maps: the binaries (kept open, identified by device and
//! inode, with their unwind sections read once), the mappings of a process
//! and what a user address in them is.
//!
//! This module owns those types and the lookups on them; the process table
//! (`processes`) decides when a process's mappings are read and kept.

use std::{
    fs::File,
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use procfs::process::MMapPath;
use tracing::debug;

use crate::unwind::{CodeMapping, LazySections, SectionsSource, UnwindSections};

/// The identity of a binary file: device and inode as the kernel maps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BinaryKey {
    pub device: u64,
    pub inode: u64,
}

/// A mapped executable or library, kept open.
#[derive(Debug)]
pub struct Binary {
    pub key: BinaryKey,
    /// The path the process mapped it under (for display).
    pub path: Arc<str>,
    /// Held open so `readable_path` stays valid for as long as this lives.
    file: File,
    /// Its unwind sections, read when a stack first needs them (and
    /// dropped again when the table must make room).
    unwind: Mutex<Option<Arc<UnwindSections>>>,
}

impl Binary {
    /// A binary the process table opened (through the process that maps it).
    pub(super) fn from_file(key: BinaryKey, path: Arc<str>, file: File) -> Self {
        Self {
            key,
            path,
            file,
            unwind: Mutex::new(None),
        }
    }

    /// Its unwind sections, if they are held.
    pub fn unwind_sections_held(&self) -> Option<Arc<UnwindSections>> {
        self.held_sections().clone()
    }

    /// Lets go of its unwind sections (they are read again when needed);
    /// the bytes no longer held.
    pub fn drop_unwind_sections(&self) -> u64 {
        self.held_sections()
            .take()
            .map_or(0, |sections| sections.bytes())
    }

    fn held_sections(&self) -> std::sync::MutexGuard<'_, Option<Arc<UnwindSections>>> {
        // A panic while reading sections leaves nothing half-written.
        self.unwind
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a binary by path, outside any process (for benchmarks and
    /// tools that symbolize files).
    pub fn open(path: &std::path::Path) -> std::io::Result<Arc<Self>> {
        use std::os::unix::fs::MetadataExt as _;
        let file = File::open(path)?;
        let metadata = file.metadata()?;
        Ok(Arc::new(Self {
            key: BinaryKey {
                device: metadata.dev(),
                inode: metadata.ino(),
            },
            path: display_path(path).into(),
            file,
            unwind: Mutex::new(None),
        }))
    }

    /// A path the daemon can open whatever happened to the original file.
    pub fn readable_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

impl LazySections for Binary {
    fn unwind_sections(&self) -> Arc<UnwindSections> {
        let mut held = self.held_sections();
        held.get_or_insert_with(|| {
            // A second open: reading must not move the held file's offset.
            match File::open(self.readable_path()) {
                Ok(file) => Arc::new(UnwindSections::read(file)),
                Err(err) => {
                    debug!(path = %self.path, "cannot reopen a binary: {err}");
                    Arc::default()
                }
            }
        })
        .clone()
    }
}

/// A user address, normalized.
#[derive(Clone, Debug)]
pub enum UserAddress {
    /// Code of a file-backed mapping.
    File { binary: Arc<Binary>, offset: u64 },
    /// Code of a special mapping such as `[vdso]`, as an offset from the
    /// mapping's start.
    Special { name: Arc<str>, offset: u64 },
    /// Code in anonymous memory (JIT-compiled, most often), not named
    /// yet: `name` is the mapping's (`[anon]`, `[anon:NAME]`), `offset`
    /// from its start.
    Anonymous {
        name: Arc<str>,
        offset: u64,
        address: u64,
    },
    /// JIT-compiled code named by the process's perf map.
    Jit { function: Arc<str>, address: u64 },
    /// No mapping of the process covers it (or the process was never seen
    /// alive).
    Unmapped { address: u64 },
    /// A signal handler's frame: the code below it (toward the root) was
    /// interrupted by a signal, and the frame above it is the handler.
    Signal,
    /// A Python function's frame (in place of the evaluation loop's).
    Python(PythonCode),
    /// The Python frames toward the leaf stop short of the outermost, for
    /// this reason.
    PythonMarker(crate::symbols::python::frames::PythonMarker),
}

/// A Python frame of a process: its code object, the instruction it is at,
/// and (once read) what the code object says.
#[derive(Clone, Debug)]
pub struct PythonCode {
    pub pid: u32,
    pub process: Arc<crate::symbols::python::PythonProcess>,
    pub code: u64,
    pub unit: Option<u32>,
    /// Tells this code object from another one later at its address.
    pub check: u64,
    pub name: Option<Arc<crate::symbols::python::code_objects::CodeObject>>,
}

impl UserAddress {
    /// Whether the frame at `depth` of `user` (leaf first) is a return
    /// address, looked up by the call before it: all but the sampled
    /// instruction and the instruction a signal interrupted. The sampled
    /// instruction is looked up as itself even when the sample was taken in
    /// the kernel: an interrupt or a fault (a page fault in the middle of a
    /// loop) left it to be run next, and the one before it may be another
    /// function's; after a system call it is the instruction following
    /// `syscall`, in the same function.
    pub fn returns(user: &[UserAddress], depth: usize) -> bool {
        match depth.checked_sub(1) {
            None => false,
            Some(above) => !matches!(user.get(above), Some(UserAddress::Signal)),
        }
    }
}

#[derive(Clone, Debug)]
pub(super) enum MappingTarget {
    File(Arc<Binary>),
    Special(Arc<str>),
}

#[derive(Clone, Debug)]
pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) file_offset: u64,
    pub(super) target: MappingTarget,
    /// Whether it holds code (is executable).
    pub(super) code: bool,
}

/// Whether two memory maps lay out the same code the same way (a process
/// read again with nothing new mapped): same code mappings, same targets.
pub(super) fn same_code_layout(a: &[Mapping], b: &[Mapping]) -> bool {
    let code = |mappings: &[Mapping]| -> Vec<(u64, u64, u64, Option<BinaryKey>)> {
        mappings
            .iter()
            .filter(|mapping| mapping.code)
            .map(|mapping| {
                let key = match &mapping.target {
                    MappingTarget::File(binary) => Some(binary.key),
                    MappingTarget::Special(_) => None,
                };
                (mapping.start, mapping.end, mapping.file_offset, key)
            })
            .collect()
    };
    code(a) == code(b)
}

/// The code mappings of a process as its unwinder sees them: binaries
/// with their unwind sections, the vDSO with the daemon's own, anonymous
/// code (JIT) without any (unwound by frame pointers).
pub(super) fn code_mappings(mappings: &[Mapping]) -> Vec<CodeMapping> {
    mappings
        .iter()
        .filter(|mapping| mapping.code)
        .map(|mapping| {
            let (name, sections) = match &mapping.target {
                MappingTarget::File(binary) => {
                    (binary.path.clone(), SectionsSource::Binary(binary.clone()))
                }
                MappingTarget::Special(name) if &**name == "[vdso]" => (
                    name.clone(),
                    UnwindSections::vdso()
                        .map_or(SectionsSource::FramePointers, SectionsSource::Held),
                ),
                // Anonymous code, or a special mapping.
                MappingTarget::Special(name) if name.starts_with('[') => {
                    (name.clone(), SectionsSource::FramePointers)
                }
                // A file that could not be opened: nothing to unwind with.
                MappingTarget::Special(name) => {
                    (name.clone(), SectionsSource::Held(Arc::default()))
                }
            };
            CodeMapping {
                start: mapping.start,
                end: mapping.end,
                file_offset: mapping.file_offset,
                name,
                sections,
            }
        })
        .collect()
}

/// The mapping that holds `address`.
pub(super) fn mapping_of(mappings: &[Mapping], address: u64) -> Option<&Mapping> {
    let index = mappings.partition_point(|mapping| mapping.start <= address);
    index
        .checked_sub(1)
        .map(|i| &mappings[i])
        .filter(|mapping| address < mapping.end)
}

pub(super) fn lookup(mappings: &[Mapping], address: u64) -> UserAddress {
    if address == crate::unwind::SIGNAL_FRAME {
        return UserAddress::Signal;
    }
    let Some(mapping) = mapping_of(mappings, address) else {
        return UserAddress::Unmapped { address };
    };
    let offset = address - mapping.start;
    match &mapping.target {
        MappingTarget::File(binary) => UserAddress::File {
            binary: binary.clone(),
            offset: offset + mapping.file_offset,
        },
        MappingTarget::Special(name) if mapping.code && name.starts_with("[anon") => {
            UserAddress::Anonymous {
                name: name.clone(),
                offset,
                address,
            }
        }
        MappingTarget::Special(name) => UserAddress::Special {
            name: name.clone(),
            offset,
        },
    }
}

/// The kernel's `dev_t` encoding of a major:minor pair, as `stat` reports it.
pub(crate) fn device_number((major, minor): (i32, i32)) -> u64 {
    rustix::fs::makedev(major as u32, minor as u32)
}

/// What a mapping that holds no code is called in frames: a file's name,
/// or the kind of memory.
pub(super) fn data_name(path: &MMapPath) -> String {
    match path {
        MMapPath::Path(path) => {
            let path = display_path(path);
            path.rsplit('/').next().unwrap_or(&path).to_owned()
        }
        MMapPath::Heap => "[heap]".to_owned(),
        MMapPath::Stack | MMapPath::TStack(_) => "[stack]".to_owned(),
        MMapPath::Other(name) => format!("[{name}]"),
        _ => "[anon]".to_owned(),
    }
}

/// The mapped path without the " (deleted)" the kernel appends.
pub(super) fn display_path(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    text.strip_suffix(" (deleted)").unwrap_or(&text).to_owned()
}
