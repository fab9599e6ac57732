//! Design 2 of user-stack unwinding, kept as a prototype that the benchmark
//! measures against the daemon's stack copies (design 1) on the same
//! workload: `sample_unwind_tables` walks the user stacks of registered
//! processes in the kernel, with rows compiled from their binaries'
//! `.eh_frame` (by `unwind::table_rows`, which registers processes here)
//! held in BPF maps, and aggregates the stacks there. Only with the
//! `unwind-tables-prototype` feature.
//!
//! It owns its own eBPF object (`unwind_tables_prototype`, built only with
//! the feature), its maps and its CPU clocks; the daemon never starts it,
//! and it must not touch the daemon's maps.

use std::collections::HashMap as StdHashMap;

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use profiler_common::{
    StackTrace,
    unwind_table::{Key, MAX_MAPPINGS, Mapping, Process, Row, names},
};

const PROGRAM: &str = names::PROGRAM_SAMPLE_UNWIND_TABLES;

/// The prototype's eBPF object, built by build.rs with the feature.
static PROTOTYPE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/unwind_tables_prototype"));

/// One aggregated sample of the prototype.
#[derive(Clone, Debug)]
pub struct PrototypeSample {
    pub pid: u32,
    pub tid: u32,
    /// Leaf first.
    pub user: Vec<u64>,
    pub kernel: Vec<u64>,
    /// How the walk ended (`unwind_table::cfa`: END is a whole stack).
    pub ended: u8,
    pub count: u64,
}

/// What the prototype holds in the kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableSize {
    pub binaries: usize,
    pub rows: u32,
}

impl TableSize {
    pub fn bytes(&self) -> u64 {
        u64::from(self.rows) * size_of::<Row>() as u64
    }
}

/// The loaded, attached prototype.
pub struct UnwindTablePrototype {
    ebpf: Ebpf,
    max_rows: u32,
    size: TableSize,
    /// Rows already written, by (device, inode): first row and count.
    binaries: StdHashMap<(u64, u64), (u32, u32)>,
}

impl UnwindTablePrototype {
    /// Loads the program with room for `max_rows` rows and starts it on
    /// every online CPU at `frequency_hz`.
    pub fn start(frequency_hz: u32, max_rows: u32) -> Result<Self> {
        let mut loader = EbpfLoader::new();
        loader.map_max_entries(names::UNWIND_ROWS, max_rows);
        loader.map_max_entries(names::UNWIND_STACKS, 1 << 16);
        loader.map_max_entries(names::UNWIND_COUNTS, 1 << 16);
        let mut ebpf = loader
            .load(PROTOTYPE_OBJECT)
            .context("loading the unwind-table prototype's eBPF object")?;
        let program: &mut PerfEvent = ebpf
            .program_mut(PROGRAM)
            .context("the eBPF object has no sample_unwind_tables")?
            .try_into()?;
        program.load().with_context(|| {
            format!("the kernel's verifier refused {PROGRAM} (see the log above)")
        })?;
        let cpus = aya::util::online_cpus()
            .map_err(|(path, err)| anyhow::anyhow!("reading the online CPUs from {path}: {err}"))?;
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(u64::from(frequency_hz)),
                    false,
                )
                .with_context(|| format!("attaching {PROGRAM} to CPU {cpu}"))?;
        }
        Ok(Self {
            ebpf,
            max_rows,
            size: TableSize::default(),
            binaries: StdHashMap::new(),
        })
    }

    /// Where the rows of the binary `key` (device, inode) are: written
    /// the first time it is asked for, compiled by `compile`; the first
    /// row and the count.
    pub fn binary_rows(
        &mut self,
        key: (u64, u64),
        compile: impl FnOnce() -> Vec<Row>,
    ) -> Result<(u32, u32)> {
        if let Some(&placed) = self.binaries.get(&key) {
            return Ok(placed);
        }
        let placed = self.write_rows(&compile())?;
        self.binaries.insert(key, placed);
        Ok(placed)
    }

    /// Lets the program walk the stacks of `pid`, through its code
    /// `mappings` (their rows written by [`Self::binary_rows`]).
    pub fn set_process(&mut self, pid: u32, mappings: &[Mapping]) -> Result<()> {
        if mappings.len() > MAX_MAPPINGS {
            bail!("process {pid} maps more than {MAX_MAPPINGS} code mappings");
        }
        let mut process = Process {
            mappings: [Mapping::default(); MAX_MAPPINGS],
            count: mappings.len() as u32,
            _pad: 0,
        };
        process.mappings[..mappings.len()].copy_from_slice(mappings);
        let mut processes: HashMap<&mut MapData, u32, Process> =
            HashMap::try_from(self.map_mut(names::UNWIND_PROCESSES)?)?;
        processes
            .insert(pid, process, 0)
            .with_context(|| format!("registering process {pid}"))?;
        Ok(())
    }

    fn write_rows(&mut self, rows: &[Row]) -> Result<(u32, u32)> {
        let first = self.size.rows;
        let count = u32::try_from(rows.len())?;
        if first + count > self.max_rows {
            bail!(
                "the unwind-table prototype holds at most {} rows; {} more do not fit",
                self.max_rows,
                count
            );
        }
        let mut array: Array<&mut MapData, Row> =
            Array::try_from(self.map_mut(names::UNWIND_ROWS)?)?;
        for (index, row) in (first..).zip(rows) {
            array.set(index, row, 0).context("writing an unwind row")?;
        }
        self.size.rows += count;
        self.size.binaries += 1;
        Ok((first, count))
    }

    fn map_mut(&mut self, name: &str) -> Result<&mut aya::maps::Map> {
        self.ebpf
            .map_mut(name)
            .with_context(|| format!("the eBPF object has no map {name}"))
    }

    pub fn size(&self) -> TableSize {
        self.size
    }

    /// Every sample aggregated so far, with its stacks.
    pub fn samples(&mut self) -> Result<Vec<PrototypeSample>> {
        let stacks: HashMap<&MapData, u64, StackTrace> = HashMap::try_from(
            self.ebpf
                .map(names::UNWIND_STACKS)
                .context("the eBPF object has no map UNWIND_STACKS")?,
        )?;
        let frames = |key: u64| -> Vec<u64> {
            if key == 0 {
                return Vec::new();
            }
            stacks
                .get(&key, 0)
                .map(|stack| stack.ips[..(stack.len as usize).min(stack.ips.len())].to_vec())
                .unwrap_or_default()
        };
        let counts: HashMap<&MapData, Key, u64> = HashMap::try_from(
            self.ebpf
                .map(names::UNWIND_COUNTS)
                .context("the eBPF object has no map UNWIND_COUNTS")?,
        )?;
        counts
            .iter()
            .map(|entry| {
                let (key, count) = entry.context("reading the prototype's counts")?;
                Ok(PrototypeSample {
                    pid: key.pid,
                    tid: key.tid,
                    user: frames(key.user_stack),
                    kernel: frames(key.kernel_stack),
                    ended: key.ended as u8,
                    count,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_prototypes_object_has_every_name_the_daemon_looks_up() {
        let names = super::names::ALL;
        let missing = super::super::missing_names(super::PROTOTYPE_OBJECT, names);
        assert!(
            missing.is_empty(),
            "the prototype's object has no {missing:?}"
        );
    }
}
