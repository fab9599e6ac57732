//! A process's unwinder: its code mappings, each binary's unwind sections
//! given to framehop the first time a stack passes through it, and the
//! walk of one stack copy from its registers.
//!
//! Owns each process's framehop unwinder (the caches of unwind rules are
//! lent by `rule_caches`); it must not decide which mappings a process has (the
//! process table does) nor symbolize.

use std::{collections::BTreeMap, sync::Arc};

use framehop::{
    Error as UnwindError, FrameAddress, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use profiler_common::MAX_USER_FRAMES;
use tracing::debug;

use super::{SectionBytes, UnwindCache, UnwindSections, UnwindStop, rule_caches};

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
    /// Whether a frame was walked without unwind information (by its
    /// frame pointer, or as a call stub without a frame).
    pub without_unwind_info: bool,
    /// Whether the walk stopped at code without unwind information whose
    /// frame pointer led to an address no mapping holds: a library mapped
    /// since the process was recorded (its loader at work), or no frame.
    pub unmapped_return: bool,
}

/// Unwind outcomes since the daemon started, and the unwind information
/// it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Stacks unwound to their first function.
    pub complete: u64,
    /// Stacks with a frame walked without unwind information (by frame
    /// pointers, or as a call stub), whole or not.
    pub without_unwind_info: u64,
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
    /// framehop's caches of unwind rules held (at most
    /// [`super::RULE_CACHES`]), and how many times one was emptied to serve
    /// another process's unwinder (see `rule_caches`).
    pub rule_caches: u64,
    pub rule_caches_emptied: u64,
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
    /// Its number, for the cache of unwind rules it is lent.
    id: u64,
    /// Sorted by start.
    mappings: Vec<CodeMapping>,
    /// Per mapping, once added: its sections (`None`: frame pointers).
    added: Vec<Option<Option<Arc<UnwindSections>>>>,
}

/// One frame walked without unwind information.
enum FallbackStep {
    /// On to the caller at this return address.
    Next(FrameAddress),
    /// The outermost frame.
    End,
    /// Nothing to believe; `unmapped_return` when the frame pointer led to
    /// an address no mapping holds.
    Stop { unmapped_return: bool },
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

impl ProcessUnwinder {
    pub fn new(mut mappings: Vec<CodeMapping>) -> Self {
        mappings.sort_by_key(|mapping| mapping.start);
        let added = vec![None; mappings.len()];
        rule_caches::moved_generation();
        Self {
            unwinder: UnwinderX86_64::new(),
            id: rule_caches::next_unwinder(),
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
            rule_caches::moved_generation();
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
            match self.attempt(cache.of(self.id), registers, stack_base, stack) {
                Attempt::Done(unwound) => return unwound,
                Attempt::Add(index) => self.add(index),
            }
        }
    }

    fn attempt(
        &self,
        cache: &mut CacheX86_64,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> Attempt {
        let mut frames = Vec::with_capacity(32);
        if registers.ip == 0 {
            return Attempt::Done(UnwoundStack {
                frames,
                stop: Some(UnwindStop::BadFrame),
                without_unwind_info: false,
                unmapped_return: false,
            });
        }
        let mut read_stack = |address: u64| -> Result<u64, ()> {
            let offset =
                usize::try_from(address.checked_sub(stack_base).ok_or(())?).map_err(|_| ())?;
            let bytes = stack
                .get(offset..offset.checked_add(8).ok_or(())?)
                .ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut regs = UnwindRegsX86_64::new(registers.ip, registers.sp, registers.bp);
        let mut address = FrameAddress::from_instruction_pointer(registers.ip);
        let mut without_unwind_info = false;
        let mut unmapped_return = false;
        let stop = loop {
            let pc = address.address();
            let index = match self.mapping(pc) {
                // A return address outside every code mapping is not one:
                // left out. The sampled instruction is kept (code mapped
                // after the process was recorded).
                None if !frames.is_empty() => break Some(UnwindStop::Unmapped),
                None => {
                    frames.push(pc);
                    break Some(UnwindStop::Unmapped);
                }
                Some(index) => index,
            };
            let Some(sections) = &self.added[index] else {
                return Attempt::Add(index);
            };
            if let Some(sections) = sections
                && self.in_signal_trampoline(index, sections, address)
            {
                // A signal handler returned here: the interrupted code goes
                // on from the registers the kernel saved in the signal
                // frame, an instruction pointer (not a return address).
                frames.push(SIGNAL_FRAME);
                match interrupted_registers(regs.sp(), &mut read_stack) {
                    Ok(interrupted) if interrupted.ip != 0 && interrupted.sp > regs.sp() => {
                        regs =
                            UnwindRegsX86_64::new(interrupted.ip, interrupted.sp, interrupted.bp);
                        address = FrameAddress::from_instruction_pointer(interrupted.ip);
                    }
                    Ok(_) => break Some(UnwindStop::BadFrame),
                    Err(at) => break Some(stop_reading(at, stack_base, stack)),
                }
            } else if let Some(sections) = sections
                && sections.has_unwind_info()
            {
                frames.push(pc);
                match self
                    .unwinder
                    .unwind_frame(address, &mut regs, cache, &mut read_stack)
                {
                    Ok(Some(return_address)) => {
                        match FrameAddress::from_return_address(return_address) {
                            Some(next) => address = next,
                            None => break Some(UnwindStop::BadFrame),
                        }
                    }
                    // The walk ends: where the unwind entry says so, or at
                    // a return address of 0 read from a frame that was
                    // not one.
                    Ok(None) if self.ends_stack(index, sections, address) => break None,
                    // A function without an unwind entry in a binary with
                    // others (musl's libc in a static binary): no rule to
                    // go on with, not a frame that was not one.
                    Ok(None) if !self.has_unwind_entry(index, sections, address) => {
                        break Some(self.no_unwind_info(index));
                    }
                    Ok(None) => break Some(UnwindStop::BadFrame),
                    // The first function the kernel ran (ld.so's `_start`):
                    // outermost, though no unwind entry says so.
                    Err(_) if self.at_entry_function(index, sections, address) => break None,
                    Err(UnwindError::CouldNotReadStack(at)) => {
                        break Some(stop_reading(at, stack_base, stack));
                    }
                    Err(_) if !self.has_unwind_entry(index, sections, address) => {
                        break Some(self.no_unwind_info(index));
                    }
                    Err(err) => {
                        debug!(%err, frames = frames.len(), "unwinding stopped at a bad frame");
                        break Some(UnwindStop::BadFrame);
                    }
                }
            } else {
                // Code without unwind information: a binary without any,
                // or anonymous code (JIT).
                let first = frames.is_empty();
                frames.push(pc);
                let stop_here = || match sections {
                    Some(_) => self.no_unwind_info(index),
                    None => UnwindStop::BadFrame,
                };
                match self.step_without_unwind_info(
                    index,
                    address,
                    first,
                    &mut regs,
                    cache,
                    &mut read_stack,
                ) {
                    FallbackStep::Next(next) => {
                        without_unwind_info = true;
                        address = next;
                    }
                    FallbackStep::End => break None,
                    FallbackStep::Stop {
                        unmapped_return: unmapped,
                    } => {
                        unmapped_return = unmapped;
                        break Some(stop_here());
                    }
                }
            }
            if frames.len() >= MAX_USER_FRAMES {
                break Some(UnwindStop::TooDeep);
            }
        };
        Attempt::Done(UnwoundStack {
            frames,
            stop,
            without_unwind_info,
            unmapped_return,
        })
    }

    /// One frame of code without unwind information, walked by its frame
    /// pointer when it looks like one (it moves up the stack, into code).
    /// Failing that, a call stub without a frame
    /// of its own (CPython's perf trampolines, `sub $8,%rsp; call *%rcx`)
    /// keeps its caller's return address one word above the stack
    /// pointer, believed only in anonymous code, never for the sampled
    /// instruction, and only when it returns into a binary (whose unwind
    /// information then checks the next frame).
    fn step_without_unwind_info(
        &self,
        index: usize,
        address: FrameAddress,
        first: bool,
        regs: &mut UnwindRegsX86_64,
        cache: &mut CacheX86_64,
        read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> FallbackStep {
        let before = *regs;
        let anonymous = matches!(self.mappings[index].sections, SectionsSource::FramePointers);
        // No framehop module covers this mapping: its rule is the frame
        // pointer.
        let mut unmapped_return = false;
        match self.unwinder.unwind_frame(address, regs, cache, read_stack) {
            // Believed when it returns into code; from anonymous code also
            // when it does not, stopping the walk as unmapped: JIT code may
            // have been mapped since the process was recorded.
            Ok(Some(return_address)) if anonymous || self.mapping(return_address).is_some() => {
                if let Some(next) = FrameAddress::from_return_address(return_address) {
                    return FallbackStep::Next(next);
                }
            }
            Ok(Some(_)) => unmapped_return = true,
            // The outermost frame's frame pointer is 0; the sampled
            // instruction's frame pointer may be anything.
            Ok(None) if !first => return FallbackStep::End,
            _ => {}
        }
        *regs = before;
        let stop = FallbackStep::Stop { unmapped_return };
        if !anonymous || first {
            return stop;
        }
        let sp = regs.sp();
        let Some(return_address) = sp.checked_add(8).and_then(|at| read_stack(at).ok()) else {
            return stop;
        };
        let into_binary = self.mapping(return_address).is_some_and(|caller| {
            matches!(self.mappings[caller].sections, SectionsSource::Binary(_))
        });
        match FrameAddress::from_return_address(return_address) {
            Some(next) if into_binary => {
                *regs = UnwindRegsX86_64::new(return_address, sp + 16, regs.bp());
                FallbackStep::Next(next)
            }
            _ => stop,
        }
    }

    /// Whether a walk that ended at `address` of mapping `index` ends
    /// there by its binary's unwind entry (see
    /// [`UnwindSections::ends_stack`]).
    fn ends_stack(&self, index: usize, sections: &UnwindSections, address: FrameAddress) -> bool {
        self.linked(index, sections, address)
            .is_none_or(|linked| sections.ends_stack(linked))
    }

    /// Whether `address` of mapping `index` is in its binary's first
    /// function, without an unwind entry (see
    /// [`UnwindSections::in_entry_function_without_unwind_entry`]).
    fn at_entry_function(
        &self,
        index: usize,
        sections: &UnwindSections,
        address: FrameAddress,
    ) -> bool {
        self.linked(index, sections, address)
            .is_some_and(|linked| sections.in_entry_function_without_unwind_entry(linked))
    }

    /// Whether an unwind entry covers `address` of mapping `index` (taken
    /// as covered where its linked address is unknown).
    fn has_unwind_entry(
        &self,
        index: usize,
        sections: &UnwindSections,
        address: FrameAddress,
    ) -> bool {
        self.linked(index, sections, address)
            .is_none_or(|linked| sections.has_unwind_entry(linked))
    }

    /// The stop of a walk at code of mapping `index` without unwind
    /// information.
    fn no_unwind_info(&self, index: usize) -> UnwindStop {
        UnwindStop::NoUnwindInfo(self.mappings[index].name.clone())
    }

    /// `address` of mapping `index` as its binary links it (looked up as
    /// framehop would: a return address by the call before it).
    fn linked(
        &self,
        index: usize,
        sections: &UnwindSections,
        address: FrameAddress,
    ) -> Option<u64> {
        let mapping = &self.mappings[index];
        sections
            .load_bias(mapping.start, mapping.file_offset)
            .and_then(|bias| address.address_for_lookup().checked_sub(bias))
    }

    /// Whether `address` of mapping `index` is in a signal return
    /// trampoline of its binary (looked up as framehop would: a return
    /// address by the call before it).
    fn in_signal_trampoline(
        &self,
        index: usize,
        sections: &UnwindSections,
        address: FrameAddress,
    ) -> bool {
        if sections.signal_trampolines().is_empty() {
            return false;
        }
        self.linked(index, sections, address)
            .is_some_and(|linked| sections.in_signal_trampoline(linked))
    }
}

/// The frame address standing for a signal handler's frame, between the
/// handler's caller (the trampoline it returns to, left out) and the
/// interrupted code: no user address is this high.
pub const SIGNAL_FRAME: u64 = u64::MAX;

/// Where the kernel's signal frame keeps the interrupted registers, from
/// the stack pointer at the signal return trampoline: the handler's
/// return popped `rt_sigframe.pretcode`, leaving `rt_sigframe.uc`, whose
/// `uc_mcontext` (a `struct sigcontext`) starts 40 bytes in (after
/// `uc_flags`, `uc_link` and `uc_stack`); rbp, rsp and rip are its 11th,
/// 16th and 17th words (glibc's oRBP, oRSP and oRIP).
const SIGCONTEXT_RBP: u64 = 40 + 10 * 8;
const SIGCONTEXT_RSP: u64 = 40 + 15 * 8;
const SIGCONTEXT_RIP: u64 = 40 + 16 * 8;

/// The registers of the code a signal interrupted, from the signal frame
/// at `sp`; or the address that could not be read.
fn interrupted_registers(
    sp: u64,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<UserRegisters, u64> {
    let mut read = |offset: u64| {
        let at = sp.checked_add(offset).ok_or(u64::MAX)?;
        read_stack(at).map_err(|()| at)
    };
    Ok(UserRegisters {
        bp: read(SIGCONTEXT_RBP)?,
        sp: read(SIGCONTEXT_RSP)?,
        ip: read(SIGCONTEXT_RIP)?,
    })
}

/// Why a walk that could not read `address` of the stack stops.
fn stop_reading(address: u64, stack_base: u64, stack: &[u8]) -> UnwindStop {
    let stack_end = stack_base + stack.len() as u64;
    if stack.is_empty() {
        UnwindStop::NoStackCopy
    } else if address >= stack_end {
        UnwindStop::StackCopyTooShort
    } else {
        debug!(address, stack_base, "unwinding read below the stack copy");
        UnwindStop::BadFrame
    }
}
