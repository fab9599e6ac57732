//! The unwind information of one binary: its `.eh_frame` (with
//! `.eh_frame_hdr`) or `.debug_frame`, and where its segments load, read
//! once (copied, so that a binary rewritten on disk cannot hurt the
//! daemon) and shared by every process that maps it; the vDSO's, from
//! the daemon's own memory.
//!
//! Owns reading those sections out of an ELF file; it must not open a
//! process's files itself (it is handed the file) nor unwind.

use std::{
    fs::File,
    ops::{Deref, Range},
    sync::{Arc, OnceLock},
};

use framehop::{ExplicitModuleSectionInfo, Module};
use object::{Object as _, ObjectSection as _, ObjectSegment as _, SectionKind};

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
    #[cfg(feature = "unwind-tables-prototype")]
    pub(super) fn eh_frame(&self) -> Option<(u64, &[u8])> {
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
    pub fn load_bias(&self, start: u64, file_offset: u64) -> Option<u64> {
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
    pub(super) fn module(
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
