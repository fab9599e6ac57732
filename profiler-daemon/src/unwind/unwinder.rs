//! A process's unwinder: its code mappings, each binary's unwind sections
//! given to framehop the first time a stack passes through it, and the
//! walk of one stack copy from its registers.
//!
//! Owns each process's framehop unwinder and the cache of unwind rules
//! they share; it must not decide which mappings a process has (the
//! process table does) nor symbolize.

use std::{collections::BTreeMap, sync::Arc};

use framehop::{
    Error as UnwindError, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use profiler_common::MAX_STACK_DEPTH;
use tracing::debug;

use super::{SectionBytes, UnwindSections, UnwindStop};

/// The registers a user stack is unwound from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegisters {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// A user stack unwound from a copy: addresses leaf first (the first is
/// the instruction pointer, the others return addresses), and why it
/// stops short, if it does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwoundStack {
    pub frames: Vec<u64>,
    pub stop: Option<UnwindStop>,
}

/// Unwind outcomes since the daemon started, and the unwind information
/// it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Stacks unwound to their first function.
    pub complete: u64,
    /// Stacks that stopped short, by [`UnwindStop::counter_name`].
    pub stopped: BTreeMap<&'static str, u64>,
    /// Binaries whose unwind sections are held, and their bytes.
    pub binaries: u64,
    pub bytes: u64,
    /// The most bytes held (0: no limit), and how many times a binary's
    /// sections were let go of to stay under it.
    pub limit: u64,
    pub binaries_evicted: u64,
    /// Bytes of stack copies unwound, and the time spent unwinding them.
    pub stack_bytes: u64,
    pub busy: std::time::Duration,
}

/// One code mapping of a process, as the unwinder sees it.
#[derive(Clone, Debug)]
pub struct CodeMapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    /// The binary's name (for stop reasons).
    pub name: Arc<str>,
    pub sections: SectionsSource,
}

/// A binary whose unwind sections are read the first time a stack passes
/// through it, and held for as long as its owner (the process table)
/// wants.
pub trait LazySections: Send + Sync + std::fmt::Debug {
    /// Its unwind sections (none if it cannot be read or is not ELF).
    fn unwind_sections(&self) -> Arc<UnwindSections>;
}

/// Where a code mapping's unwind sections come from.
#[derive(Clone, Debug)]
pub enum SectionsSource {
    /// A binary's, read the first time a stack passes through it.
    Binary(Arc<dyn LazySections>),
    /// Already at hand (the vDSO's; empty for a file that could not be
    /// opened, which has nothing to unwind with).
    Held(Arc<UnwindSections>),
    /// None: anonymous code (JIT), unwound by frame pointers.
    FramePointers,
}

impl SectionsSource {
    fn sections(&self) -> Option<Arc<UnwindSections>> {
        match self {
            SectionsSource::Binary(binary) => Some(binary.unwind_sections()),
            SectionsSource::Held(sections) => Some(sections.clone()),
            SectionsSource::FramePointers => None,
        }
    }
}

/// A process's unwinder: a framehop module per code mapping that a stack
/// has passed through, added the first time one does (so only binaries
/// that appear in stacks have their unwind information read and held).
pub struct ProcessUnwinder {
    unwinder: UnwinderX86_64<SectionBytes>,
    /// Sorted by start.
    mappings: Vec<CodeMapping>,
    /// Per mapping, once added: its sections (`None`: frame pointers).
    added: Vec<Option<Option<Arc<UnwindSections>>>>,
}

/// One attempt at a stack: done, or stopped at a mapping to add first.
enum Attempt {
    Done(UnwoundStack),
    Add(usize),
}

impl std::fmt::Debug for ProcessUnwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessUnwinder")
            .field("mappings", &self.mappings.len())
            .finish()
    }
}

/// The unwinder's cache of unwind rules, shared by every process.
pub struct UnwindCache(Box<CacheX86_64>);

impl Default for UnwindCache {
    fn default() -> Self {
        Self(Box::new(CacheX86_64::new()))
    }
}

impl std::fmt::Debug for UnwindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnwindCache")
    }
}

impl ProcessUnwinder {
    pub fn new(mut mappings: Vec<CodeMapping>) -> Self {
        mappings.sort_by_key(|mapping| mapping.start);
        let added = vec![None; mappings.len()];
        Self {
            unwinder: UnwinderX86_64::new(),
            mappings,
            added,
        }
    }

    /// The index of the mapping holding `address`.
    fn mapping(&self, address: u64) -> Option<usize> {
        let index = self.mappings.partition_point(|m| m.start <= address);
        index
            .checked_sub(1)
            .filter(|&i| address < self.mappings[i].end)
    }

    /// Reads mapping `index`'s unwind sections and gives them to framehop.
    fn add(&mut self, index: usize) {
        let mapping = &self.mappings[index];
        let sections = mapping.sections.sections();
        if let Some(sections) = &sections
            && sections.has_unwind_info()
            && let Some(module) = sections.module(
                &mapping.name,
                mapping.start..mapping.end,
                mapping.file_offset,
            )
        {
            self.unwinder.add_module(module);
        }
        self.added[index] = Some(sections);
    }

    /// Unwinds one stack: `stack` holds the user memory from `stack_base`
    /// on. A stack that reaches a mapping not yet added is walked again
    /// once it is (at most once per mapping of the process).
    pub fn unwind(
        &mut self,
        cache: &mut UnwindCache,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> UnwoundStack {
        loop {
            match self.attempt(cache, registers, stack_base, stack) {
                Attempt::Done(unwound) => return unwound,
                Attempt::Add(index) => self.add(index),
            }
        }
    }

    fn attempt(
        &self,
        cache: &mut UnwindCache,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> Attempt {
        let mut frames = Vec::with_capacity(32);
        if registers.ip == 0 {
            return Attempt::Done(UnwoundStack {
                frames,
                stop: Some(UnwindStop::BadFrame),
            });
        }
        let stack_end = stack_base + stack.len() as u64;
        let mut read_stack = |address: u64| -> Result<u64, ()> {
            let offset =
                usize::try_from(address.checked_sub(stack_base).ok_or(())?).map_err(|_| ())?;
            let bytes = stack
                .get(offset..offset.checked_add(8).ok_or(())?)
                .ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut iter = self.unwinder.iter_frames(
            registers.ip,
            UnwindRegsX86_64::new(registers.ip, registers.sp, registers.bp),
            &mut cache.0,
            &mut read_stack,
        );
        let stop = loop {
            match iter.next() {
                Ok(Some(frame)) => {
                    let address = frame.address();
                    match self.mapping(address) {
                        // A return address outside every code mapping is
                        // not one: left out. The sampled instruction is
                        // kept (code mapped after the process was recorded).
                        None if !frames.is_empty() => break Some(UnwindStop::Unmapped),
                        None => {
                            frames.push(address);
                            break Some(UnwindStop::Unmapped);
                        }
                        Some(index) => {
                            let Some(sections) = &self.added[index] else {
                                return Attempt::Add(index);
                            };
                            frames.push(address);
                            if let Some(sections) = sections
                                && !sections.has_unwind_info()
                            {
                                break Some(UnwindStop::NoUnwindInfo(
                                    self.mappings[index].name.clone(),
                                ));
                            }
                        }
                    }
                    if frames.len() >= MAX_STACK_DEPTH {
                        break Some(UnwindStop::TooDeep);
                    }
                }
                Ok(None) => break None,
                Err(UnwindError::CouldNotReadStack(address)) => {
                    break Some(if stack.is_empty() {
                        UnwindStop::NoStackCopy
                    } else if address >= stack_end {
                        UnwindStop::StackCopyTooShort
                    } else {
                        debug!(address, stack_base, "unwinding read below the stack copy");
                        UnwindStop::BadFrame
                    });
                }
                Err(err) => {
                    debug!(%err, frames = frames.len(), "unwinding stopped at a bad frame");
                    break Some(UnwindStop::BadFrame);
                }
            }
        };
        Attempt::Done(UnwoundStack { frames, stop })
    }
}
