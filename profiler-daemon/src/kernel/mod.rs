//! The kernel side, as the daemon sees it: checking that the kernel can
//! run the eBPF programs (`requirements`), loading and attaching every
//! group of them (`programs`: [`programs::LoadedPrograms`], with the
//! kernel's layout they read, found in its BTF by `btf`), the sample
//! source the pipeline drains (`sources`: the aggregated maps, drained
//! without losing or double-counting a sample by `drain` and `batch`),
//! the stack copies the daemon unwinds (`stack_copies`, and sampled
//! allocations' in a ring of their own, `allocation_copies`), the new
//! processes it announces (`announcements`), off-CPU recording
//! (`offcpu`), and the maps the daemon writes (`targets`, `families`);
//! `cgroups` reads the cgroup hierarchy the programs name cgroups by;
//! `allocs` holds what allocation profiling tells the allocator uprobes
//! and reads back. With the `unwind-tables-prototype`
//! feature, `unwind_tables` loads design 2's prototype (its own object),
//! for the benchmark.
//!
//! This layer owns every BPF object; nothing above it touches one. It must
//! not symbolize, store or report.

pub mod allocation_copies;
pub mod allocs;
pub mod announcements;
mod batch;
pub mod btf;
pub mod cgroups;
pub mod drain;
pub mod families;
pub mod mapping_records;
pub mod offcpu;
pub mod peek_signals;
pub mod programs;
pub mod python_targets;
mod requirements;
pub mod sources;
pub mod stack_copies;
pub mod targets;
#[cfg(feature = "unwind-tables-prototype")]
pub mod unwind_tables;

/// The `T` at the start of `bytes` (a ring buffer record, a chunk of a
/// map's contents), whatever their alignment; `None` when too short.
pub(crate) fn plain_record<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    let bytes = bytes.get(..std::mem::size_of::<T>())?;
    // SAFETY: `bytes` holds exactly a T's bytes, and T is plain old data
    // (aya::Pod: every bit pattern is valid); read_unaligned copes with any
    // alignment.
    Some(unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

/// Those of `names` that the eBPF object `object` has as neither a map, a
/// program nor a global: none, for the names the daemon looks up in an
/// object it embeds (each object's tests check theirs).
#[cfg(test)]
pub(crate) fn missing_names<'a>(object: &[u8], names: &[&'a str]) -> Vec<&'a str> {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};
    let elf = object::File::parse(object).expect("an eBPF object");
    let found: std::collections::HashSet<&str> = elf
        .symbols()
        .filter(|symbol| symbol.is_global() && symbol.is_definition())
        .filter(|symbol| {
            let section = symbol
                .section_index()
                .map(|index| elf.section_by_index(index));
            let Some(Ok(section)) = section else {
                return false;
            };
            match (symbol.kind(), section.name().unwrap_or_default()) {
                // Programs: functions in a section of their own
                // (`perf_event`, `tracepoint`, …); `.text` holds helpers.
                (SymbolKind::Text, section) => section != ".text",
                // Maps, then globals.
                (SymbolKind::Data, section) => {
                    matches!(section, "maps" | ".maps" | ".data" | ".bss")
                        || section.starts_with(".rodata")
                }
                _ => false,
            }
        })
        .filter_map(|symbol| symbol.name().ok())
        .collect();
    names
        .iter()
        .copied()
        .filter(|name| !found.contains(name))
        .collect()
}
