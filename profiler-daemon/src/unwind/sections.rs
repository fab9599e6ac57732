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
    /// Its entry point (as linked; none if 0).
    entry: Option<u64>,
    /// Its signal return trampolines, found the first time a stack asks.
    signal_trampolines: OnceLock<Vec<Range<u64>>>,
    /// [`UnwindSections::ends_stack`]'s answers: every whole stack asks
    /// it at its last frame, one of a few addresses per binary.
    stack_ends: std::sync::Mutex<std::collections::HashMap<u64, bool>>,
}

/// `.eh_frame` as gimli reads it from held bytes, and one of its entries.
type EhFrame<'a> = gimli::EhFrame<gimli::EndianSlice<'a, gimli::LittleEndian>>;
type Fde<'a> = gimli::FrameDescriptionEntry<gimli::EndianSlice<'a, gimli::LittleEndian>>;

/// Largest unwind section read; a larger one is not believed.
const MAX_SECTION_BYTES: u64 = 256 << 20;

/// Largest `.eh_frame` walked for signal return trampolines.
const MAX_TRAMPOLINE_SCAN_BYTES: u64 = 8 << 20;

/// How far past its entry point a binary's first function is believed to
/// reach where no unwind entry covers it: ld.so's `_start` and
/// `_dl_start_user` (61 bytes, no FDE), musl's `_start`.
const ENTRY_FUNCTION_BYTES: u64 = 64;

/// Largest a compressed unwind section may inflate to: Go's `.debug_frame`
/// of a 100 MB binary is a few MiB.
const MAX_INFLATED_BYTES: u64 = 64 << 20;

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
        VDSO.get_or_init(|| Self::parse(own_vdso_image()?).map(Arc::new))
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
            // Compressed sections (Go's `.debug_frame`, of some C builds
            // too) are inflated, unless they say they inflate past
            // MAX_INFLATED_BYTES (a few KiB of a hostile file must not
            // take the daemon's memory); the rest are copied as they are.
            let compressed = section.compressed_data().ok()?;
            if compressed.format != object::CompressionFormat::None
                && compressed.uncompressed_size > MAX_INFLATED_BYTES
            {
                tracing::warn!(
                    section = section.name().unwrap_or("?"),
                    bytes = compressed.uncompressed_size,
                    most = MAX_INFLATED_BYTES,
                    "a binary's compressed unwind section says it inflates past the most \
                     believed; left unread (its stacks stop there, saying so)"
                );
                return None;
            }
            let data = compressed.decompress().ok()?;
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
            entry: Some(file.entry()).filter(|&entry| entry != 0),
            signal_trampolines: OnceLock::new(),
            stack_ends: Default::default(),
        })
    }

    /// Whether there is anything to unwind with.
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// Whether `address` (as linked) is in one of the binary's signal
    /// return trampolines: the code a signal handler returns to (glibc's
    /// `__restore_rt`, which calls `rt_sigreturn`), known by its FDE's CIE
    /// (augmentation `S`). framehop cannot step out of one (its CFA is an
    /// expression that reads memory); the unwinder reads the interrupted
    /// registers from the signal frame itself.
    pub fn in_signal_trampoline(&self, address: u64) -> bool {
        self.signal_trampolines()
            .iter()
            .any(|range| range.contains(&address))
    }

    /// The ranges (as linked) of the binary's signal return trampolines
    /// (see [`UnwindSections::in_signal_trampoline`]): none for all but
    /// libc, so that a walk asks no more of other binaries' frames.
    pub fn signal_trampolines(&self) -> &[Range<u64>] {
        self.signal_trampolines
            .get_or_init(|| self.read_signal_trampolines())
    }

    /// The file offset where the function holding file offset `offset`
    /// starts, as its unwind entry (FDE, found through `.eh_frame_hdr`'s
    /// table) says: what names a function the binary has no symbol for,
    /// so that its samples stay together rather than split by address.
    pub fn function_start(&self, offset: u64) -> Option<u64> {
        let address = self.linked_address(offset)?;
        let (_, _, fde) = self.fde_at(address)?;
        let start = fde.initial_address();
        // The function's start, in the segment of the address.
        offset.checked_sub(address.checked_sub(start)?)
    }

    /// Whether a stack whose walk ended at `address` (as linked, looked up
    /// as the walk did) ends there by its unwind entry's word: the entry's
    /// return address is undefined (`_start`, a thread's first function).
    /// A walk that ended because a return address read as 0 elsewhere
    /// read a frame that was not one (a frame the C++ unwinder was
    /// rewriting, say). True where no `.eh_frame_hdr` entry covers it: a
    /// frame-pointer walk ends at a frame pointer of 0 by convention.
    pub fn ends_stack(&self, address: u64) -> bool {
        /// Addresses answered at most; then the answers start again.
        const KEPT: usize = 64;
        let mut ends = self
            .stack_ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&ends_here) = ends.get(&address) {
            return ends_here;
        }
        if ends.len() >= KEPT {
            ends.clear();
        }
        let ends_here = self.read_ends_stack(address);
        ends.insert(address, ends_here);
        ends_here
    }

    /// Whether `address` (as linked, looked up as the walk did) is in the
    /// function at the binary's entry point, where no unwind entry covers
    /// it: the first function the kernel ran, so the stack's outermost,
    /// though it says nothing of its caller (ld.so's `_start`, which calls
    /// `_dl_start` and then `_dl_init`, has no FDE; musl's has none either).
    pub fn in_entry_function_without_unwind_entry(&self, address: u64) -> bool {
        self.entry.is_some_and(|entry| {
            (entry..entry + ENTRY_FUNCTION_BYTES).contains(&address)
                && self.fde_at(address).is_none()
        })
    }

    /// Whether an unwind entry (FDE) covers `address` (as linked, looked up
    /// as the walk did): a binary's functions built without unwind tables
    /// (musl's libc in a static binary) have none, though the binary has
    /// others.
    pub fn has_unwind_entry(&self, address: u64) -> bool {
        self.fde_at(address).is_some()
    }

    /// [`UnwindSections::ends_stack`], read from the unwind entry.
    fn read_ends_stack(&self, address: u64) -> bool {
        let Some((eh_frame, bases, fde)) = self.fde_at(address) else {
            return true;
        };
        let mut context = gimli::UnwindContext::new();
        match fde.unwind_info_for_address(&eh_frame, &bases, &mut context, address) {
            // No rule for it is undefined too (as framehop reads it).
            Ok(row) => matches!(
                row.register(gimli::X86_64::RA),
                None | Some(gimli::RegisterRule::Undefined)
            ),
            Err(_) => true,
        }
    }

    /// The unwind entry (FDE) covering linked address `address`, found
    /// through `.eh_frame_hdr`'s table, with the section and the bases it
    /// is read by.
    fn fde_at(&self, address: u64) -> Option<(EhFrame<'_>, gimli::BaseAddresses, Fde<'_>)> {
        use gimli::UnwindSection as _;
        let (eh_frame_range, eh_frame) = self.eh_frame.as_ref()?;
        let (hdr_range, hdr) = self.eh_frame_hdr.as_ref()?;
        let eh_frame = gimli::EhFrame::new(&eh_frame[..], gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default()
            .set_eh_frame_hdr(hdr_range.start)
            .set_eh_frame(eh_frame_range.start);
        if let Some(text) = &self.text {
            bases = bases.set_text(text.start);
        }
        if let Some(got) = &self.got {
            bases = bases.set_got(got.start);
        }
        let hdr = gimli::EhFrameHdr::new(&hdr[..], gimli::LittleEndian)
            .parse(&bases, 8)
            .ok()?;
        let fde = hdr
            .table()?
            .fde_for_address(&eh_frame, &bases, address, gimli::EhFrame::cie_from_offset)
            .ok()?;
        Some((eh_frame, bases, fde))
    }

    /// The address (as linked) of file offset `offset` of a loadable
    /// segment.
    fn linked_address(&self, offset: u64) -> Option<u64> {
        let segment = self.segments.iter().find(|segment| {
            segment.file_offset <= offset && offset - segment.file_offset < segment.file_size
        })?;
        Some(segment.address + (offset - segment.file_offset))
    }

    /// The ranges of the FDEs of `.eh_frame` whose CIE says they are signal
    /// trampolines: a walk over its CIEs, and over its FDEs only when one
    /// of them does (libc's; most binaries have none).
    fn read_signal_trampolines(&self) -> Vec<Range<u64>> {
        let Some((range, bytes)) = &self.eh_frame else {
            return Vec::new();
        };
        // The walk runs on the drain thread: a binary's file is its user's,
        // so its length bounds the walk (libc's `.eh_frame` is a few
        // hundred KiB; the binaries with large ones have no trampoline).
        if bytes.len() as u64 > MAX_TRAMPOLINE_SCAN_BYTES {
            return Vec::new();
        }
        use gimli::UnwindSection as _;
        let eh_frame = gimli::EhFrame::new(&bytes[..], gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(range.start);
        if let Some(text) = &self.text {
            bases = bases.set_text(text.start);
        }
        if let Some(got) = &self.got {
            bases = bases.set_got(got.start);
        }
        let mut entries = eh_frame.entries(&bases);
        let mut any = false;
        while let Ok(Some(entry)) = entries.next() {
            if let gimli::CieOrFde::Cie(cie) = entry
                && cie.is_signal_trampoline()
            {
                any = true;
                break;
            }
        }
        let mut trampolines = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        while any && let Ok(Some(entry)) = entries.next() {
            if let gimli::CieOrFde::Fde(partial) = entry
                && let Ok(fde) = partial.parse(gimli::UnwindSection::cie_from_offset)
                && fde.cie().is_signal_trampoline()
            {
                trampolines.push(fde.initial_address()..fde.end_address());
            }
        }
        trampolines
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

/// The daemon's own vDSO image (a few KiB, read once): every 64-bit
/// process of this kernel maps the same.
pub fn own_vdso_image() -> Option<&'static [u8]> {
    static IMAGE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    IMAGE.get_or_init(read_own_vdso).as_deref()
}

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

    /// A small C binary whose `.debug_frame` is zlib-compressed, as Go
    /// writes its own, and where that section's header is in the file.
    fn binary_with_compressed_debug_frame(dir: &std::path::Path) -> (std::path::PathBuf, u64) {
        let source = dir.join("leaf.c");
        std::fs::write(
            &source,
            "int leaf(int x) { return x * 3; }\nint main(void) { return leaf(1); }\n",
        )
        .unwrap();
        let binary = dir.join("leaf");
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let output = std::process::Command::new(program)
                .args(args)
                .output()
                .unwrap_or_else(|err| panic!("{program} runs: {err}"));
            assert!(output.status.success(), "{program}: {output:?}");
        };
        run(
            "gcc",
            &[
                "-g".as_ref(),
                "-fno-asynchronous-unwind-tables".as_ref(),
                "-o".as_ref(),
                binary.as_os_str(),
                source.as_os_str(),
            ],
        );
        run(
            "objcopy",
            &[
                "--compress-debug-sections=zlib".as_ref(),
                binary.as_os_str(),
            ],
        );
        let bytes = std::fs::read(&binary).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let section = file
            .section_by_name(".debug_frame")
            .expect("a .debug_frame");
        let compressed = section.compressed_data().unwrap();
        assert_eq!(compressed.format, object::CompressionFormat::Zlib);
        // The compressed bytes follow their Elf64_Chdr (24 bytes).
        let data = section.compressed_file_range().unwrap().offset;
        (binary, data - 24)
    }

    #[test]
    fn a_compressed_debug_frame_is_inflated_unless_it_claims_too_much() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, header) = binary_with_compressed_debug_frame(dir.path());
        let sections = UnwindSections::read(File::open(&binary).unwrap());
        let debug_frame = sections.debug_frame.expect("the .debug_frame is read");
        // A CIE's length, then its id (0xffffffff in .debug_frame).
        assert_eq!(debug_frame[4..8], [0xff; 4]);
        // Elf64_Chdr: type, reserved, then the inflated size.
        let mut bytes = std::fs::read(&binary).unwrap();
        let size = header as usize + 8;
        bytes[size..size + 8].copy_from_slice(&(1_u64 << 40).to_le_bytes());
        std::fs::write(&binary, bytes).unwrap();
        let bomb = UnwindSections::read(File::open(&binary).unwrap());
        assert!(bomb.debug_frame.is_none());
    }

    #[test]
    fn libc_s_signal_trampoline_is_found_by_its_fde() {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find_map(|path| File::open(path).ok())
        .expect("the machine's libc");
        let sections = UnwindSections::read(libc);
        let trampolines = sections
            .signal_trampolines
            .get_or_init(|| sections.read_signal_trampolines())
            .clone();
        assert_eq!(trampolines.len(), 1, "{trampolines:x?}");
        // The FDE starts a byte before __restore_rt, on a nop.
        assert!(sections.in_signal_trampoline(trampolines[0].start + 1));
        assert!(!sections.in_signal_trampoline(trampolines[0].end));
        let own = UnwindSections::read(File::open("/proc/self/exe").unwrap());
        assert!(!own.in_signal_trampoline(own.text.clone().unwrap().start));
    }

    #[test]
    fn a_function_without_a_symbol_is_found_by_its_unwind_entry() {
        // This very test's function: its start, by the symbol table, is
        // what the FDE gives for any address inside it.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let symbol = object::Object::symbols(&file)
            .find(|symbol| {
                object::ObjectSymbol::name(symbol).is_ok_and(|name| {
                    name.contains("a_function_without_a_symbol_is_found_by_its_unwind_entry")
                }) && object::ObjectSymbol::size(symbol) > 8
            })
            .expect("the test's own symbol");
        let sections = UnwindSections::read(File::open("/proc/self/exe").unwrap());
        let start = object::ObjectSymbol::address(&symbol);
        let size = object::ObjectSymbol::size(&symbol);
        // Addresses to file offsets, through their segment.
        let offset = |address: u64| {
            let segment = sections
                .segments
                .iter()
                .find(|s| s.address <= address && address - s.address < s.file_size)
                .unwrap();
            segment.file_offset + (address - segment.address)
        };
        for inside in [start, start + 1, start + size / 2, start + size - 1] {
            assert_eq!(sections.function_start(offset(inside)), Some(offset(start)));
        }
        assert_eq!(
            sections.function_start(0),
            None,
            "the ELF header is no function"
        );
    }

    /// ld.so's first function has no unwind entry: a stack that reaches
    /// it (its start-up, constructors run by `_dl_init`) ends there whole.
    #[test]
    fn ld_so_s_entry_function_is_known_without_an_unwind_entry() {
        let ld_so = File::open("/lib64/ld-linux-x86-64.so.2").expect("the machine's ld.so");
        let sections = UnwindSections::read(ld_so);
        let entry = sections.entry.expect("ld.so has an entry point");
        // The returns from `call _dl_start` and `call _dl_init`, looked up
        // by the call before them.
        for after_call in [8, 48] {
            assert!(
                sections.in_entry_function_without_unwind_entry(entry + after_call - 1),
                "{entry:#x} + {after_call}"
            );
        }
        assert!(!sections.in_entry_function_without_unwind_entry(entry + ENTRY_FUNCTION_BYTES));
        // The daemon's own `_start` has an unwind entry (its return address
        // undefined): not this case.
        let own = UnwindSections::read(File::open("/proc/self/exe").unwrap());
        let own_entry = own.entry.expect("an entry point");
        assert!(!own.in_entry_function_without_unwind_entry(own_entry + 4));
    }

    #[test]
    fn the_vdso_has_unwind_info() {
        let vdso = UnwindSections::vdso().expect("the vDSO is readable");
        assert!(vdso.has_unwind_info());
    }
}
