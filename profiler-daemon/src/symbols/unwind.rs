//! Unwinding user stacks in the daemon: from a sample's registers and a
//! copy of the top of its user stack, with each binary's own unwind
//! information (`.eh_frame` through `.eh_frame_hdr`, or `.debug_frame`),
//! by the `framehop` crate. Frame pointers are only followed through code
//! that no binary covers (JIT-compiled code keeps them); a stack that runs
//! into a binary without unwind information stops there and says so.
//!
//! This module owns the unwind sections read from each binary (copied, so
//! that a binary rewritten on disk cannot hurt the daemon) and each
//! process's unwinder built from its mappings; it must not symbolize, and
//! it does not decide which mappings a process has (the process table
//! does).

use std::{
    collections::BTreeMap,
    fs::File,
    ops::{Deref, Range},
    sync::{Arc, OnceLock},
};

use framehop::{
    Error as UnwindError, ExplicitModuleSectionInfo, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use object::{Object as _, ObjectSection as _, ObjectSegment as _, SectionKind};
use profiler_common::MAX_STACK_DEPTH;
use tracing::debug;

pub use crate::profile::UnwindStop;

use super::mappings::Binary;

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

/// Bytes of one unwind section, shared by every process mapping its binary.
#[derive(Clone, Debug, Default)]
pub struct SectionBytes(Arc<[u8]>);

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// One loadable segment: where its bytes are in the file and where it
/// asks to be in memory.
#[derive(Clone, Copy, Debug)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    address: u64,
}

/// The unwind information of one binary, read once.
#[derive(Debug, Default)]
pub struct UnwindSections {
    eh_frame: Option<(Range<u64>, SectionBytes)>,
    eh_frame_hdr: Option<(Range<u64>, SectionBytes)>,
    debug_frame: Option<SectionBytes>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    segments: Vec<Segment>,
}

/// Largest unwind section read; a larger one is not believed.
const MAX_SECTION_BYTES: u64 = 256 << 20;

impl UnwindSections {
    /// Reads the unwind sections of an ELF file: its headers and those
    /// sections only, however large the file. A file that is not ELF (or
    /// is damaged) has none.
    pub fn read(file: File) -> Self {
        let cache = object::ReadCache::new(file);
        Self::parse(&cache).unwrap_or_default()
    }

    /// The vDSO's unwind sections, read from the daemon's own memory: every
    /// process of this kernel maps the same image.
    pub fn vdso() -> Option<Arc<Self>> {
        static VDSO: OnceLock<Option<Arc<UnwindSections>>> = OnceLock::new();
        VDSO.get_or_init(|| {
            let image = read_own_vdso()?;
            Self::parse(&image[..]).map(Arc::new)
        })
        .clone()
    }

    fn parse<'data, R: object::ReadRef<'data>>(bytes: R) -> Option<Self> {
        let file = object::File::parse(bytes).ok()?;
        let section = |name: &str| {
            let section = file.section_by_name(name)?;
            let range = section.address()..section.address() + section.size();
            Some((section, range))
        };
        let data = |section: &object::Section<'data, '_, R>| -> Option<SectionBytes> {
            if section.kind() == SectionKind::UninitializedData
                || section.size() > MAX_SECTION_BYTES
            {
                return None;
            }
            // Compressed sections (`.debug_frame` of some builds) are
            // inflated; the rest are copied as they are.
            let data = section.uncompressed_data().ok()?;
            (!data.is_empty()).then(|| SectionBytes(Arc::from(&*data)))
        };
        let eh_frame = section(".eh_frame").and_then(|(s, r)| Some((r, data(&s)?)));
        let eh_frame_hdr = section(".eh_frame_hdr").and_then(|(s, r)| Some((r, data(&s)?)));
        let debug_frame = section(".debug_frame").and_then(|(s, _)| data(&s));
        let segments = file
            .segments()
            .map(|segment| {
                let (file_offset, file_size) = segment.file_range();
                Segment {
                    file_offset,
                    file_size,
                    address: segment.address(),
                }
            })
            .collect();
        Some(Self {
            eh_frame,
            eh_frame_hdr,
            debug_frame,
            text: section(".text").map(|(_, r)| r),
            got: section(".got").map(|(_, r)| r),
            segments,
        })
    }

    /// Whether there is anything to unwind with.
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// `.eh_frame`'s address in the file and its bytes.
    pub(crate) fn eh_frame(&self) -> Option<(u64, &[u8])> {
        self.eh_frame
            .as_ref()
            .map(|(range, data)| (range.start, &**data))
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        let len = |data: &SectionBytes| data.len() as u64;
        self.eh_frame.as_ref().map_or(0, |(_, d)| len(d))
            + self.eh_frame_hdr.as_ref().map_or(0, |(_, d)| len(d))
            + self.debug_frame.as_ref().map_or(0, len)
    }

    /// The address the binary's address 0 lands at when the file bytes
    /// from `file_offset` on are mapped at `start`; `None` when no segment
    /// holds that offset.
    pub(crate) fn load_bias(&self, start: u64, file_offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        // The loader maps each segment from its offset rounded down to a
        // page, so the mapping of a segment starts exactly there; a page
        // shared by two segments belongs to the later one's mapping.
        let segment = self
            .segments
            .iter()
            .rev()
            .find(|segment| segment.file_offset & !(PAGE - 1) == file_offset)
            .or_else(|| {
                self.segments.iter().find(|segment| {
                    segment.file_offset <= file_offset
                        && file_offset < segment.file_offset + segment.file_size
                })
            })?;
        // The mapping's start holds file byte `file_offset`, which the
        // segment wants at this address:
        let wanted = segment
            .address
            .wrapping_sub(segment.file_offset)
            .wrapping_add(file_offset);
        Some(start.wrapping_sub(wanted))
    }

    /// A framehop module for a mapping of this binary.
    fn module(
        &self,
        name: &str,
        avma: Range<u64>,
        file_offset: u64,
    ) -> Option<Module<SectionBytes>> {
        let bias = self.load_bias(avma.start, file_offset)?;
        Some(Module::new(
            name.to_owned(),
            avma,
            bias,
            ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: self.text.clone(),
                got_svma: self.got.clone(),
                eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
                eh_frame: self.eh_frame.as_ref().map(|(_, d)| d.clone()),
                eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
                eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
                debug_frame: self.debug_frame.clone(),
                ..Default::default()
            },
        ))
    }
}

/// The daemon's own vDSO image.
fn read_own_vdso() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|line| line.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let mut image = vec![0; usize::try_from(end.checked_sub(start)?).ok()?];
    let mem = File::open("/proc/self/mem").ok()?;
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut image, start).ok()?;
    Some(image)
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

/// Where a code mapping's unwind sections come from.
#[derive(Clone, Debug)]
pub enum SectionsSource {
    /// A binary's, read the first time a stack passes through it.
    Binary(Arc<Binary>),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unwind_sections_of_a_real_binary() {
        let exe = File::open("/proc/self/exe").unwrap();
        let sections = UnwindSections::read(exe);
        assert!(sections.has_unwind_info());
        assert!(sections.bytes() > 1000);
        assert!(sections.eh_frame_hdr.is_some());
    }

    #[test]
    fn load_bias_of_a_pie_and_of_a_fixed_address_binary() {
        let sections = UnwindSections {
            segments: vec![
                Segment {
                    file_offset: 0,
                    file_size: 0x1000,
                    address: 0,
                },
                Segment {
                    file_offset: 0x1000,
                    file_size: 0x5000,
                    address: 0x1000,
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            sections.load_bias(0x5555_0000_1000, 0x1000),
            Some(0x5555_0000_0000)
        );
        let fixed = UnwindSections {
            segments: vec![Segment {
                file_offset: 0x1000,
                file_size: 0x5000,
                address: 0x401000,
            }],
            ..Default::default()
        };
        assert_eq!(fixed.load_bias(0x401000, 0x1000), Some(0));
        assert_eq!(fixed.load_bias(0x401000, 0x9000), None);
        // lld's layout: the code segment starts inside the last page of
        // the read-only one, one page further in memory than in the file.
        let shared_page = UnwindSections {
            segments: vec![
                Segment {
                    file_offset: 0,
                    file_size: 0x16a30,
                    address: 0,
                },
                Segment {
                    file_offset: 0x16a30,
                    file_size: 0x3f0f0,
                    address: 0x17a30,
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            shared_page.load_bias(0x5568_d235_2000, 0x16000),
            Some(0x5568_d233_b000)
        );
    }

    #[test]
    fn the_vdso_has_unwind_info() {
        let vdso = UnwindSections::vdso().expect("the vDSO is readable");
        assert!(vdso.has_unwind_info());
    }
}
