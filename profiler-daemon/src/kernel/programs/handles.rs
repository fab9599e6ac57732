//! Handles into the loaded programs that outlive their start: the
//! per-thread clocks of peeks, the off-CPU switch programs attached while
//! something is recorded, and the task iterator that reads the threads
//! already waiting when off-CPU recording begins. Each holds the loaded
//! programs and reaches into them; they own nothing else.

use aya::{
    maps::{HashMap, MapData},
    programs::{BtfTracePoint, tp_btf::BtfTracePointLinkId},
};
use profiler_common::names;
use tracing::debug;

use super::{LoadedPrograms, PeekClocks, SamplingError, groups, maps::take_map};
use crate::kernel::offcpu;

/// The task iterator that reads the threads of a process whose off-CPU
/// recording begins.
pub struct KernelWaitingThreads {
    programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>,
}

impl KernelWaitingThreads {
    pub fn new(programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>) -> Self {
        Self { programs }
    }
}

impl offcpu::WaitingThreadSource for KernelWaitingThreads {
    fn read(&self, pid: u32) -> Result<Vec<profiler_common::offcpu::WaitingThread>, String> {
        use std::io::Read as _;
        let mut programs = crate::lock(&self.programs);
        let ebpf = &mut programs.ebpf;
        let mut target: aya::maps::Array<&mut MapData, u32> = ebpf
            .map_mut(names::WAITING_PID)
            .ok_or("the eBPF object has no map of the waiting process")?
            .try_into()
            .map_err(|err: aya::maps::MapError| err.to_string())?;
        target.set(0, pid, 0).map_err(|err| err.to_string())?;
        let iterator: &mut aya::programs::Iter =
            groups::program(ebpf, names::PROGRAM_READ_WAITING_THREADS)
                .map_err(|err| err.to_string())?;
        let link = iterator.attach().map_err(|err| err.to_string())?;
        let link = iterator.take_link(link).map_err(|err| err.to_string())?;
        let mut bytes = Vec::new();
        link.into_file()
            .map_err(|err| err.to_string())?
            .read_to_end(&mut bytes)
            .map_err(|err| err.to_string())?;
        const SIZE: usize = std::mem::size_of::<profiler_common::offcpu::WaitingThread>();
        Ok(bytes
            .chunks_exact(SIZE)
            .filter_map(crate::kernel::plain_record)
            .collect())
    }
}

/// The off-CPU switch and wake-up programs, attached only while something
/// is recorded.
pub struct KernelSwitchPrograms {
    programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>,
    links: std::sync::Mutex<Vec<(&'static str, BtfTracePointLinkId)>>,
}

impl KernelSwitchPrograms {
    pub fn new(programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>) -> Self {
        Self {
            programs,
            links: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl offcpu::SwitchPrograms for KernelSwitchPrograms {
    fn set_attached(&self, attached: bool) -> Result<(), String> {
        let mut links = crate::lock(&self.links);
        if attached != links.is_empty() {
            return Ok(());
        }
        let mut programs = crate::lock(&self.programs);
        let switch = programs.switch_program().name;
        let ebpf = &mut programs.ebpf;
        if !attached {
            return detach_all(ebpf, &mut links);
        }
        for name in [switch, names::PROGRAM_RECORD_WAKEUP] {
            let attach = groups::program::<BtfTracePoint>(ebpf, name)
                .map_err(|err| err.to_string())
                .and_then(|program| program.attach().map_err(|err| err.to_string()));
            match attach {
                Ok(link) => links.push((name, link)),
                Err(err) => {
                    // Both or neither.
                    let _ = detach_all(ebpf, &mut links);
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

/// Detaches the switch programs' `links`.
fn detach_all(
    ebpf: &mut aya::Ebpf,
    links: &mut Vec<(&'static str, BtfTracePointLinkId)>,
) -> Result<(), String> {
    for (name, link) in links.drain(..) {
        let program: &mut BtfTracePoint =
            groups::program(ebpf, name).map_err(|err| err.to_string())?;
        program.detach(link).map_err(|err| err.to_string())?;
    }
    Ok(())
}

/// The peek clocks of the loaded programs.
pub struct KernelPeekClocks {
    programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>,
    threads: std::sync::Mutex<HashMap<MapData, u32, u32>>,
}

impl KernelPeekClocks {
    /// Takes the map of peeked threads out of `programs`.
    pub fn new(
        programs: std::sync::Arc<std::sync::Mutex<LoadedPrograms>>,
    ) -> Result<Self, SamplingError> {
        let threads = take_map(&mut crate::lock(&programs).ebpf, names::PEEK_THREADS)?;
        Ok(Self {
            programs,
            threads: std::sync::Mutex::new(threads),
        })
    }
}

impl PeekClocks for KernelPeekClocks {
    fn mark(&self, tids: &[u32]) {
        let mut threads = crate::lock(&self.threads);
        for &tid in tids {
            if threads.insert(tid, 0, 0).is_err() {
                // Only the "where it was" of a running thread is lost.
                debug!(tid, "peeked-thread map full");
            }
        }
    }

    fn forget(&self, tids: &[u32]) {
        let mut threads = crate::lock(&self.threads);
        for tid in tids {
            let _ = threads.remove(tid);
        }
    }

    fn sample(&self, tid: u32, frequency_hz: u32) -> Result<Box<dyn Send>, SamplingError> {
        let link = crate::lock(&self.programs).sample_thread(tid, frequency_hz)?;
        Ok(Box::new(link))
    }
}
