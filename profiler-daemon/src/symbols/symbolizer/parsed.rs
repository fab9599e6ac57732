//! The binaries blazesym holds parsed: how each is read — with its debug
//! information, or from its symbol tables only when that alone would take
//! more than a quarter of the symbolizer's share of the memory budget (a
//! debug build of a large program carries hundreds of MiB of DWARF) —,
//! what each costs — the heap its parsing took (measured on the
//! symbolizer's thread as it parses) and the sections it maps from the
//! file (their sizes, at most what is resident) —, and letting go of them:
//! those unused for a while, and the least recently used whenever the
//! symbolizer holds more than its share.
//!
//! Owns the parsed binaries' bookkeeping; it must not symbolize.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use blazesym::symbolize::Symbolizer as Blazesym;
use object::{Object as _, ObjectSection as _};
use rustc_hash::FxHashMap as HashMap;
use tracing::debug;

use crate::symbols::processes::{Binary, BinaryKey};

/// A binary blazesym has not been asked about for this long has its parsed
/// data (and its mapping of the file, often hundreds of MiB of debug
/// information) let go of; its cached locations stay, and a new address in
/// it parses it again.
pub const BINARY_IDLE_LIMIT: Duration = Duration::from_secs(120);

/// A binary's debug information may take at most this share (1 in this
/// many) of the symbolizer's bytes to be read.
const DEBUG_INFO_SHARE: u64 = 4;

struct ParsedBinary {
    binary: Arc<Binary>,
    last_used: Instant,
    /// Read with its debug information (else its symbol tables only).
    debug_info: bool,
    /// Heap its parsing took, net, as measured.
    heap: u64,
    /// Bytes of the sections blazesym maps and reads from its file.
    mapped: u64,
}

impl ParsedBinary {
    fn bytes(&self) -> u64 {
        self.heap + self.mapped
    }
}

/// The binaries blazesym holds parsed.
#[derive(Default)]
pub(super) struct ParsedBinaries {
    binaries: HashMap<BinaryKey, ParsedBinary>,
    /// Let go of when idle, and to stay within the share.
    pub released_idle: u64,
    pub evicted: u64,
    /// Binaries read from their symbol tables only, their debug
    /// information being too large for the share.
    pub symbols_only: u64,
}

impl ParsedBinaries {
    pub fn len(&self) -> usize {
        self.binaries.len()
    }

    /// Bytes held parsed: heap and mapped sections.
    pub fn bytes(&self) -> u64 {
        self.binaries.values().map(ParsedBinary::bytes).sum()
    }

    /// Whether blazesym is to read `binary`'s debug information (else its
    /// symbol tables only), the symbolizer holding at most `limit` bytes
    /// (0: no limit).
    pub fn reads_debug_info(&mut self, binary: &Arc<Binary>, limit: u64, now: Instant) -> bool {
        if let Some(parsed) = self.binaries.get(&binary.key) {
            return parsed.debug_info;
        }
        let sections = section_bytes(binary);
        let debug_info =
            limit == 0 || sections.debug + sections.symbols <= limit / DEBUG_INFO_SHARE;
        if !debug_info {
            self.symbols_only += 1;
            debug!(
                binary = %binary.path,
                debug_info_bytes = sections.debug,
                "naming a binary from its symbol tables only: its debug information is larger \
                 than the symbolizer's share of memory_budget allows"
            );
        }
        self.binaries.insert(
            binary.key,
            ParsedBinary {
                binary: binary.clone(),
                last_used: now,
                debug_info,
                heap: 0,
                mapped: sections.symbols + if debug_info { sections.debug } else { 0 },
            },
        );
        debug_info
    }

    /// Notes that blazesym was asked about `binary` now, its parsing having
    /// taken `heap` more bytes (net) of the heap.
    pub fn used(&mut self, binary: &Arc<Binary>, heap: i64, now: Instant) {
        if let Some(parsed) = self.binaries.get_mut(&binary.key) {
            parsed.last_used = now;
            parsed.heap = parsed.heap.saturating_add_signed(heap);
        }
    }

    /// Lets go of the binaries not asked about for [`BINARY_IDLE_LIMIT`].
    pub fn release_idle(&mut self, blazesym: &mut Blazesym, now: Instant) {
        self.binaries.retain(|_, parsed| {
            let idle = now.duration_since(parsed.last_used) >= BINARY_IDLE_LIMIT;
            if idle {
                release(blazesym, &parsed.binary);
                self.released_idle += 1;
            }
            !idle
        });
    }

    /// Lets go of the least recently used binaries until what is held,
    /// with `other` bytes of the symbolizer's own, is within `limit` (0: no
    /// limit).
    pub fn keep_within(&mut self, blazesym: &mut Blazesym, other: u64, limit: u64) {
        if limit == 0 {
            return;
        }
        let mut held = self.bytes() + other;
        if held <= limit {
            return;
        }
        let mut by_use: Vec<(Instant, BinaryKey)> = self
            .binaries
            .iter()
            .map(|(key, parsed)| (parsed.last_used, *key))
            .collect();
        by_use.sort_unstable();
        for (_, key) in by_use {
            if held <= limit {
                break;
            }
            if let Some(parsed) = self.binaries.remove(&key) {
                held -= parsed.bytes();
                release(blazesym, &parsed.binary);
                self.evicted += 1;
                debug!(binary = %parsed.binary.path, bytes = parsed.bytes(), "let go of a parsed binary for memory");
            }
        }
    }

    /// Lets go of every binary.
    pub fn clear(&mut self, blazesym: &mut Blazesym) {
        for parsed in self.binaries.values() {
            release(blazesym, &parsed.binary);
        }
        self.binaries.clear();
    }
}

/// Has blazesym drop what it parsed of `binary` and unmap its file.
fn release(blazesym: &mut Blazesym, binary: &Binary) {
    let evict = blazesym::symbolize::evict::Elf::new(binary.readable_path());
    if let Err(err) = blazesym.evict(&evict.into()) {
        debug!(binary = %binary.path, "cannot evict symbolizer data: {err}");
    }
}

/// Bytes of the sections of a binary that blazesym maps and reads.
#[derive(Clone, Copy, Debug, Default)]
struct SectionBytes {
    /// Its debug information (in the file, or in the separate debug file
    /// of its build id under /usr/lib/debug).
    debug: u64,
    /// Its symbol tables.
    symbols: u64,
}

/// The sizes of what blazesym reads of `binary` (at most what becomes
/// resident).
fn section_bytes(binary: &Binary) -> SectionBytes {
    let Ok(file) = std::fs::File::open(binary.readable_path()) else {
        return SectionBytes::default();
    };
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return SectionBytes::default();
    };
    let mut bytes = sizes_of(&elf);
    if bytes.debug == 0
        && let Ok(Some(id)) = elf.build_id()
        && let Some((first, rest)) = id.split_first()
    {
        let hex: String = rest.iter().map(|byte| format!("{byte:02x}")).collect();
        let path = format!("/usr/lib/debug/.build-id/{first:02x}/{hex}.debug");
        if let Ok(file) = std::fs::File::open(path) {
            let cache = object::ReadCache::new(file);
            if let Ok(debug) = object::File::parse(&cache) {
                bytes.debug = sizes_of(&debug).debug;
            }
        }
    }
    bytes
}

fn sizes_of<'data, R: object::ReadRef<'data>>(elf: &object::File<'data, R>) -> SectionBytes {
    let mut bytes = SectionBytes::default();
    for section in elf.sections() {
        let Ok(name) = section.name() else {
            continue;
        };
        if name.starts_with(".debug_") || name.starts_with(".zdebug_") {
            bytes.debug += section.size();
        } else if matches!(
            name,
            ".symtab" | ".strtab" | ".dynsym" | ".dynstr" | ".gnu_debugdata"
        ) {
            bytes.symbols += section.size();
        }
    }
    bytes
}
