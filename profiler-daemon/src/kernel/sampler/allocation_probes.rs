//! The allocator uprobes of allocation profiling: attached to the
//! allocator functions of one process for its profile, detached at its
//! end (or with the daemon: the links go with the loaded programs), and
//! the allocation maps that go with them.
//!
//! Holds the sampler and reaches into its programs and maps; owns only
//! the links of the processes being profiled.

use std::{
    collections::HashMap,
    num::NonZeroU32,
    sync::{Arc, Mutex},
};

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use profiler_common::{
    allocs::{Address, Call, Target},
    names,
};
use tracing::{debug, warn};

use super::Sampler;
use crate::{
    kernel::{
        allocs::{KernelAllocations, MAX_PROFILED_PROCESSES, ProbeError, Sampling, interval_table},
        programs,
    },
    lock,
    symbols::allocators::AllocatorSite,
};

/// The allocator uprobes and the processes they are attached for.
pub struct KernelAllocationProbes {
    sampler: Arc<Mutex<Sampler>>,
    /// Why allocations cannot be profiled, when they cannot.
    unavailable: Option<String>,
    attached: Mutex<HashMap<u32, Vec<(&'static str, UProbeLinkId)>>>,
}

impl KernelAllocationProbes {
    /// Writes the interval table the byte sampling draws from.
    pub fn new(sampler: Arc<Mutex<Sampler>>) -> Self {
        let unavailable = {
            let mut guard = lock(&sampler);
            match guard.allocation_probes() {
                Err(err) => Some(err.to_string()),
                Ok(()) => write_intervals(&mut guard.ebpf).err(),
            }
        };
        Self {
            sampler,
            unavailable,
            attached: Mutex::new(HashMap::new()),
        }
    }

    /// Why allocations cannot be profiled, when they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Starts sampling the allocations of process `pid` at `sites` (its
    /// allocator functions) as `sampling` says.
    pub fn attach(
        &self,
        pid: u32,
        sites: &[AllocatorSite],
        sampling: Sampling,
    ) -> Result<(), ProbeError> {
        if let Some(reason) = &self.unavailable {
            return Err(ProbeError::Unavailable(reason.clone()));
        }
        let mut attached = lock(&self.attached);
        if attached.contains_key(&pid) {
            return Err(ProbeError::Busy(pid));
        }
        if attached.len() >= MAX_PROFILED_PROCESSES {
            return Err(ProbeError::TooMany);
        }
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or(ProbeError::Target {
            pid,
            reason: "pid 0 has no allocator".to_owned(),
        })?);
        let mut sampler = lock(&self.sampler);
        let ebpf = &mut sampler.ebpf;
        targets(ebpf)
            .and_then(|mut targets| {
                targets
                    .insert(pid, sampling.target(), 0)
                    .map_err(|err| err.to_string())
            })
            .map_err(|reason| ProbeError::Target { pid, reason })?;
        // The return probes first: every entry the entry program sees then
        // has its return seen too (all detached in the reverse order).
        let returns = sites
            .iter()
            .filter(|site| site.function.allocates())
            .map(|site| (site, names::PROGRAM_ALLOCATOR_RETURN, None));
        // Then `free`, so that no sampled allocation's free goes unseen,
        // then the functions that allocate.
        let (frees, allocators): (Vec<_>, Vec<_>) =
            sites.iter().partition(|site| !site.function.allocates());
        let entries = frees.into_iter().chain(allocators).map(|site| {
            let cookie = Some(site.function as u64);
            (site, names::PROGRAM_ALLOCATOR_ENTRY, cookie)
        });
        let mut links = Vec::new();
        for (site, name, cookie) in returns.chain(entries) {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(site.offset),
                cookie,
            };
            let link = programs::program::<UProbe>(ebpf, name)
                .map_err(|err| err.to_string())
                .and_then(|probe| {
                    probe
                        .attach(point, &site.file, scope)
                        .map_err(|err| programs::error_chain(&err))
                });
            match link {
                Ok(link) => links.push((name, link)),
                Err(reason) => {
                    detach_links(ebpf, links);
                    forget_target(ebpf, pid);
                    return Err(ProbeError::Attach {
                        path: site.path.clone(),
                        symbol: site.symbol,
                        reason,
                    });
                }
            }
        }
        debug!(pid, probes = links.len(), "allocation probes attached");
        attached.insert(pid, links);
        Ok(())
    }

    /// Stops sampling the allocations of `pid`, and hands over what the
    /// kernel held for it: which sampled allocations are still live, and
    /// what was lost. Nothing of it is left in the kernel.
    pub fn detach(&self, pid: u32) -> KernelAllocations {
        let links = lock(&self.attached).remove(&pid).unwrap_or_default();
        let mut sampler = lock(&self.sampler);
        let ebpf = &mut sampler.ebpf;
        // Sampling stops first (the programs do nothing for a process not
        // in the targets, but see its frees), so that nothing is sampled
        // while the probes come off one by one after its `free`'s.
        let mut held = KernelAllocations::default();
        if let Ok(targets) = targets(ebpf)
            && let Ok(target) = targets.get(&pid, 0)
        {
            held.lost = target.lost;
            held.lost_bytes = target.lost_bytes;
            held.untracked = target.untracked;
        }
        forget_target(ebpf, pid);
        detach_links(ebpf, links);
        match ebpf
            .map_mut(names::ALLOC_LIVE)
            .map(BpfHashMap::<&mut MapData, Address, u64>::try_from)
        {
            Some(Ok(mut live)) => {
                let mine: Vec<Address> = live
                    .keys()
                    .filter_map(Result::ok)
                    .filter(|key| key.pid == pid)
                    .collect();
                for key in mine {
                    if let Ok(id) = live.get(&key, 0) {
                        held.live.insert(id);
                    }
                    let _ = live.remove(&key);
                }
            }
            _ => warn!("the eBPF object has no live allocations map"),
        }
        // Calls under way when the probes came off never return to them.
        if let Some(Ok(mut calls)) = ebpf
            .map_mut(names::ALLOC_CALLS)
            .map(BpfHashMap::<&mut MapData, u64, Call>::try_from)
        {
            let mine: Vec<u64> = calls
                .keys()
                .filter_map(Result::ok)
                .filter(|pid_tgid| (pid_tgid >> 32) as u32 == pid)
                .collect();
            for key in mine {
                let _ = calls.remove(&key);
            }
        }
        held
    }
}

fn targets(ebpf: &mut aya::Ebpf) -> Result<BpfHashMap<&mut MapData, u32, Target>, String> {
    ebpf.map_mut(names::ALLOC_TARGETS)
        .ok_or_else(|| "the eBPF object has no allocation targets map".to_owned())?
        .try_into()
        .map_err(|err: aya::maps::MapError| err.to_string())
}

fn forget_target(ebpf: &mut aya::Ebpf, pid: u32) {
    if let Ok(mut targets) = targets(ebpf) {
        let _ = targets.remove(&pid);
    }
}

/// Detaches `links` in the reverse order of their attaching (the entry
/// probes before the return probes).
fn detach_links(ebpf: &mut aya::Ebpf, links: Vec<(&'static str, UProbeLinkId)>) {
    for (name, link) in links.into_iter().rev() {
        let detached = programs::program::<UProbe>(ebpf, name)
            .map_err(|err| err.to_string())
            .and_then(|probe| probe.detach(link).map_err(|err| err.to_string()));
        if let Err(err) = detached {
            warn!("cannot detach an allocation probe: {err}");
        }
    }
}

fn write_intervals(ebpf: &mut aya::Ebpf) -> Result<(), String> {
    let mut table: Array<&mut MapData, u32> = ebpf
        .map_mut(names::ALLOC_INTERVALS)
        .ok_or("the eBPF object has no allocation intervals map")?
        .try_into()
        .map_err(|err: aya::maps::MapError| err.to_string())?;
    for (index, interval) in (0..).zip(interval_table()) {
        table
            .set(index, interval, 0)
            .map_err(|err| format!("cannot write the allocation intervals: {err}"))?;
    }
    Ok(())
}
