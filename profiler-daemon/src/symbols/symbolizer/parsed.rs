//! The binaries blazesym holds parsed: what each costs — the heap its
//! parsing took (measured on the symbolizer's thread as it parses) and the
//! debug sections it maps from the file (their sizes, at most what is
//! resident) — and letting go of them: those unused for a while, and the
//! least recently used whenever the symbolizer holds more than its share
//! of the memory budget.
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

struct ParsedBinary {
    binary: Arc<Binary>,
    last_used: Instant,
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
}

impl ParsedBinaries {
    pub fn len(&self) -> usize {
        self.binaries.len()
    }

    /// Bytes held parsed: heap and mapped sections.
    pub fn bytes(&self) -> u64 {
        self.binaries.values().map(ParsedBinary::bytes).sum()
    }

    /// Notes that blazesym was asked about `binary` now, its parsing having
    /// taken `heap` more bytes (net) of the heap.
    pub fn used(&mut self, binary: &Arc<Binary>, heap: i64, now: Instant) {
        let parsed = self
            .binaries
            .entry(binary.key)
            .or_insert_with(|| ParsedBinary {
                binary: binary.clone(),
                last_used: now,
                heap: 0,
                mapped: debug_section_bytes(binary),
            });
        parsed.last_used = now;
        parsed.heap = parsed.heap.saturating_add_signed(heap);
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

/// Bytes of the sections of `binary` that blazesym maps and reads: its
/// debug information and symbol tables (at most what becomes resident).
fn debug_section_bytes(binary: &Binary) -> u64 {
    let Ok(file) = std::fs::File::open(binary.readable_path()) else {
        return 0;
    };
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return 0;
    };
    elf.sections()
        .filter(|section| {
            section.name().is_ok_and(|name| {
                name.starts_with(".debug_")
                    || name.starts_with(".zdebug_")
                    || matches!(
                        name,
                        ".symtab" | ".strtab" | ".dynsym" | ".dynstr" | ".gnu_debugdata"
                    )
            })
        })
        .map(|section| section.size())
        .sum()
}
