//! The Python stacks of a live interpreter's threads, read from its memory
//! at one instant (as `py-spy dump` does): from the runtime state to the
//! first interpreter, along its threads, and down each thread's frames,
//! every code object named with its line. Bounded: at most
//! [`MAX_THREADS`] threads and [`MAX_FRAMES`] frames a thread.
//!
//! Owns the layouts of the runtime state, the thread states and the
//! frames per version; it must not decide when a process is read (a
//! hostile process can make a read of its memory wait).

use std::collections::HashMap;

use super::{
    PythonProcess, PythonVersion,
    code_objects::{CodeLayout, CodeObject, ProcessMemory, read_code},
};

/// The most threads read, and frames of each.
pub const MAX_THREADS: usize = 256;
pub const MAX_FRAMES: usize = 1024;

/// Where the runtime state's first interpreter, an interpreter's first
/// thread, a thread's next, native id and current frame, and a frame's
/// code, caller, instruction and owner are, for one version (from the
/// DWARF of CPython 3.11.7, 3.12.1 and 3.13.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ThreadLayout {
    interpreters_head: u64,
    threads_head: u64,
    thread_next: u64,
    native_thread_id: u64,
    /// The current frame: `tstate->cframe->current_frame` before 3.13
    /// (`cframe`, then the offset in it), `tstate->current_frame` from on.
    cframe: Option<u64>,
    current_frame: u64,
    frame_code: u64,
    frame_previous: u64,
    frame_instruction: u64,
    frame_owner: u64,
    /// An interpreter's `gc.collecting`; the GIL's `last_holder`: at this
    /// offset from the runtime state (3.11), or through the interpreter's
    /// GIL pointer at `gil_pointer` (3.12 on).
    gc_collecting: u64,
    gil_pointer: Option<u64>,
    gil_last_holder: u64,
}

/// A frame owned by the C stack (3.12 on): a shim between two evaluation
/// loops, not a Python function's.
const OWNED_BY_CSTACK: u8 = 3;

impl ThreadLayout {
    fn of(version: PythonVersion) -> Option<Self> {
        let base = Self {
            interpreters_head: 0x28,
            threads_head: 0x10,
            thread_next: 8,
            native_thread_id: 160,
            cframe: Some(56),
            current_frame: 8,
            frame_code: 32,
            frame_previous: 48,
            frame_instruction: 56,
            frame_owner: 69,
            gc_collecting: 648 + 200,
            gil_pointer: None,
            gil_last_holder: 352 + 8 + 8,
        };
        match (version.major, version.minor) {
            (3, 11) => Some(base),
            (3, 12) => Some(Self {
                threads_head: 0x48,
                native_thread_id: 144,
                current_frame: 0,
                frame_code: 0,
                frame_previous: 8,
                frame_owner: 70,
                gc_collecting: 112 + 200,
                gil_pointer: Some(368 + 16),
                gil_last_holder: 8,
                ..base
            }),
            (3, 13) => Some(Self {
                interpreters_head: 0x278,
                threads_head: 0x1cb0,
                cframe: None,
                current_frame: 72,
                frame_code: 0,
                frame_previous: 8,
                frame_owner: 70,
                gc_collecting: 7400 + 200,
                gil_pointer: Some(16),
                gil_last_holder: 8,
                ..base
            }),
            _ => None,
        }
    }
}

/// Where `process`'s interpreter keeps its threads and frames, for the
/// sampling programs (none for a version whose layout is not known).
pub fn kernel_layout(process: &PythonProcess) -> Option<profiler_common::python::PythonLayout> {
    use profiler_common::python::PythonLayout;
    let layout = ThreadLayout::of(process.interpreter.version)?;
    let (code_filename, code_name, code_qualname) =
        CodeLayout::of(process.interpreter.version)?.name_offsets();
    // The 8 bytes holding the owner (and 3.11's `is_entry`, just before it).
    let flags = layout.frame_owner & !7;
    let entry = if process.interpreter.version.minor == 11 {
        (layout.frame_owner - 1 - flags) * 8
    } else {
        64
    };
    Some(PythonLayout {
        interpreters_head: process.runtime + layout.interpreters_head,
        threads_head: layout.threads_head,
        thread_next: layout.thread_next,
        native_thread_id: layout.native_thread_id,
        cframe: layout.cframe.unwrap_or(PythonLayout::NONE),
        current_frame: layout.current_frame,
        frame_code: layout.frame_code,
        frame_previous: layout.frame_previous,
        frame_instruction: layout.frame_instruction,
        frame_flags: flags,
        owner_shift: (layout.frame_owner - flags) * 8,
        entry_shift: entry,
        cstack_owner: if process.interpreter.version.minor >= 12 {
            u64::from(OWNED_BY_CSTACK)
        } else {
            PythonLayout::NONE
        },
        code_filename,
        code_name,
        code_qualname,
        str_hash: super::code_objects::STR_HASH,
        gc_collecting: layout.gc_collecting,
        gil_pointer: layout.gil_pointer.unwrap_or(PythonLayout::NONE),
        gil_last_holder: match layout.gil_pointer {
            None => process.runtime + layout.gil_last_holder,
            Some(_) => layout.gil_last_holder,
        },
        // The process's own, when it has one: the kernel layer's to say.
        pid_namespace_device: 0,
        pid_namespace_inode: 0,
    })
}

/// A Python function running on a thread, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFrame {
    pub qualname: String,
    pub filename: String,
    /// None where its code has no line for the instruction.
    pub line: Option<u32>,
}

impl std::fmt::Display for PythonFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} ({}:{line})", self.qualname, self.filename),
            None => write!(f, "{} ({})", self.qualname, self.filename),
        }
    }
}

/// A thread of the interpreter: its kernel thread id and its Python
/// stack, innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonThread {
    pub native_id: u32,
    pub frames: Vec<PythonFrame>,
    /// Its stack was longer than [`MAX_FRAMES`], or a frame could not be
    /// read: the frames shown are the innermost ones read.
    pub cut: bool,
}

/// Why a process's Python stacks were not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StacksError {
    #[error("CPython {0}'s thread layout is not known")]
    UnknownLayout(PythonVersion),
    #[error("its memory cannot be read at {0:#x} (the interpreter may not be started yet)")]
    Unreadable(u64),
}

/// The Python stacks of every thread of the interpreter `process` runs,
/// read from `memory`.
pub fn python_stacks(
    memory: &impl ProcessMemory,
    process: &PythonProcess,
) -> Result<Vec<PythonThread>, StacksError> {
    let version = process.interpreter.version;
    let (Some(layout), Some(code_layout)) = (ThreadLayout::of(version), CodeLayout::of(version))
    else {
        return Err(StacksError::UnknownLayout(version));
    };
    let read = |address: u64| {
        let mut word = [0; 8];
        memory
            .read(address, &mut word)
            .map(|()| u64::from_le_bytes(word))
            .map_err(|_| StacksError::Unreadable(address))
    };
    let interpreter = read(process.runtime + layout.interpreters_head)?;
    if interpreter == 0 {
        return Ok(Vec::new());
    }
    let mut codes: HashMap<u64, Option<CodeObject>> = HashMap::new();
    let mut threads = Vec::new();
    let mut thread = read(interpreter + layout.threads_head)?;
    while thread != 0 && threads.len() < MAX_THREADS {
        let native_id = read(thread + layout.native_thread_id)? as u32;
        let mut frame = match layout.cframe {
            Some(cframe) => match read(thread + cframe)? {
                0 => 0,
                cframe => read(cframe + layout.current_frame)?,
            },
            None => read(thread + layout.current_frame)?,
        };
        let mut frames = Vec::new();
        let mut cut = false;
        while frame != 0 {
            if frames.len() == MAX_FRAMES {
                cut = true;
                break;
            }
            let (Ok(code), Ok(previous), Ok(instruction), Ok(owner)) = (
                read(frame + layout.frame_code),
                read(frame + layout.frame_previous),
                read(frame + layout.frame_instruction),
                read(frame + layout.frame_owner),
            ) else {
                cut = true;
                break;
            };
            if version.minor < 12 || owner as u8 != OWNED_BY_CSTACK {
                let named = codes
                    .entry(code)
                    .or_insert_with(|| read_code(memory, code, &code_layout, &process.types).ok());
                // A 3.13 frame whose executable is no code object (None at
                // an entry from C) names nothing.
                if let Some(named) = named {
                    let start = code_layout.instructions_of(code);
                    let unit = instruction.checked_sub(start).map(|bytes| bytes / 2);
                    frames.push(PythonFrame {
                        qualname: named.qualname.clone(),
                        filename: named.filename.clone(),
                        line: unit.and_then(|unit| named.line_at(unit as u32)),
                    });
                }
            }
            frame = previous;
        }
        threads.push(PythonThread {
            native_id,
            frames,
            cut,
        });
        thread = read(thread + layout.thread_next)?;
    }
    Ok(threads)
}

#[cfg(test)]
pub(super) mod tests;
