//! Design 2 of user-stack unwinding, kept as a prototype that the benchmark
//! measures against the daemon's stack copies (design 1) on the same
//! workload: `sample_unwind_tables` walks the user stacks of registered
//! processes in the kernel, with rows compiled from their binaries'
//! `.eh_frame` (`symbols::unwind_rows`) held in BPF maps, and aggregates
//! the stacks there.
//!
//! It owns its own load of the eBPF object, its maps and its CPU clocks;
//! the daemon never starts it, and it must not touch the daemon's maps.

use std::{collections::HashMap as StdHashMap, fs::File, time::Duration, time::Instant};

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use procfs::process::{MMPermissions, MMapPath, Process as ProcfsProcess};
use profiler_common::{
    StackTrace,
    unwind_table::{Key, MAX_MAPPINGS, Mapping, Process, Row},
};

use crate::unwind::{UnwindSections, table_rows as unwind_rows};

const PROGRAM: &str = "sample_unwind_tables";

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
    /// Time spent compiling `.eh_frame` into rows and writing them.
    pub compile: Duration,
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
        loader.map_max_entries("UNWIND_ROWS", max_rows);
        loader.map_max_entries("UNWIND_STACKS", 1 << 16);
        loader.map_max_entries("UNWIND_COUNTS", 1 << 16);
        let mut ebpf = loader
            .load(super::sampler::EBPF_OBJECT)
            .context("loading the eBPF object for the unwind-table prototype")?;
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

    /// Compiles the unwind rows of every binary `pid` maps (once per
    /// binary) and lets the program walk its stacks.
    pub fn add_process(&mut self, pid: u32) -> Result<()> {
        let started = Instant::now();
        let maps = ProcfsProcess::new(pid as i32)
            .and_then(|process| process.maps())
            .with_context(|| format!("reading the mappings of process {pid}"))?;
        let mut process = Process {
            mappings: [Mapping::default(); MAX_MAPPINGS],
            count: 0,
            _pad: 0,
        };
        for map in maps {
            if !map.perms.contains(MMPermissions::EXECUTE) {
                continue;
            }
            let (start, end) = map.address;
            let sections = match &map.pathname {
                MMapPath::Path(_) => {
                    let path = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
                    let file = File::open(&path).with_context(|| format!("opening {path}"))?;
                    std::sync::Arc::new(UnwindSections::read(file))
                }
                MMapPath::Vdso => match UnwindSections::vdso() {
                    Some(vdso) => vdso,
                    None => continue,
                },
                _ => continue,
            };
            let Some(bias) = sections.load_bias(start, map.offset) else {
                continue;
            };
            let key = (
                (u64::from(map.dev.0 as u32) << 32) | u64::from(map.dev.1 as u32),
                map.inode,
            );
            let (first_row, rows) = match self.binaries.get(&key) {
                Some(&placed) => placed,
                None => {
                    let placed = self.write_rows(&unwind_rows::compile(&sections))?;
                    self.binaries.insert(key, placed);
                    placed
                }
            };
            let slot = process.count as usize;
            if slot == MAX_MAPPINGS {
                bail!("process {pid} maps more than {MAX_MAPPINGS} code mappings");
            }
            process.mappings[slot] = Mapping {
                start,
                end,
                bias,
                first_row,
                rows,
            };
            process.count += 1;
        }
        let mut processes: HashMap<&mut MapData, u32, Process> =
            HashMap::try_from(self.map_mut("UNWIND_PROCESSES")?)?;
        processes
            .insert(pid, process, 0)
            .with_context(|| format!("registering process {pid}"))?;
        self.size.compile += started.elapsed();
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
        let mut array: Array<&mut MapData, Row> = Array::try_from(self.map_mut("UNWIND_ROWS")?)?;
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
                .map("UNWIND_STACKS")
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
                .map("UNWIND_COUNTS")
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
