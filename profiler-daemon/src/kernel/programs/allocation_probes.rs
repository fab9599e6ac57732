//! The allocator uprobes of allocation profiling: attached to the
//! allocator functions of one process for its profile, detached at its
//! end (or with the daemon: the table owns the links), and the allocation
//! maps that go with them.
//!
//! Holds the loaded programs and reaches into them and their maps; owns the
//! table of the profiles running (their slots, links and processes),
//! which is all that says what is attached: what the status counts and
//! the limits use.

use std::{
    num::NonZeroU32,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeScope},
    },
};
use profiler_common::{
    allocs::{Address, Call, ProfileCounts, Target},
    names,
};
use tracing::{debug, warn};

use super::{LoadedPrograms, groups};
use crate::{
    kernel::{
        allocation_copies::slot_of,
        allocs::{
            KernelAllocations, MAX_PROFILED_PROCESSES, ProbeError, ProbeSite, RESERVED_FOR_ADMINS,
            Sampling, interval_table, ring_share,
        },
    },
    lock,
};

/// A profile's hold on its probes: detaching by it takes off that
/// profile's probes only, never those of a later profile of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub pid: u32,
    slot: usize,
    serial: u64,
}

/// A profile whose probes are attached, as the status lists it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunningProfile {
    pub pid: u32,
    pub started: SystemTime,
    pub sampling: Sampling,
    /// Asked for by root or the admin group (not counted against the
    /// profiles kept for them).
    pub privileged: bool,
}

/// A profile's probes, by the order they come off in: the allocators'
/// entries (no call is sampled from then on), `free`'s, then the returns.
#[derive(Default)]
struct Links {
    allocators: Vec<UProbeLink>,
    frees: Vec<UProbeLink>,
    returns: Vec<UProbeLink>,
}

impl Links {
    fn len(&self) -> usize {
        self.allocators.len() + self.frees.len() + self.returns.len()
    }

    /// Takes every probe off, in that order. The kernel waits for a grace
    /// period as it releases each uprobe (and for its programs under way):
    /// about a tenth of a second each, one after the other.
    fn release(all: Vec<Links>) {
        for links in all {
            drop(links.allocators);
            drop(links.frees);
            drop(links.returns);
        }
    }
}

struct Attached {
    serial: u64,
    profile: RunningProfile,
    links: Links,
    /// Its probes are being taken off.
    detaching: bool,
}

/// The profiles running, one per slot.
#[derive(Default)]
struct Slots {
    slots: [Option<Attached>; MAX_PROFILED_PROCESSES as usize],
    /// Serials handed out so far, per slot.
    round: u64,
}

impl Slots {
    fn running(&self) -> impl Iterator<Item = &Attached> {
        self.slots.iter().flatten()
    }
}

/// How long the daemon's stop waits for the probes its runs are taking off.
const DETACH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a process's allocations are profiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profiled {
    No,
    /// Its probes are on.
    Yes,
    /// Its probes are coming off.
    Ending,
}

/// The allocator uprobes and the processes they are attached for.
pub struct KernelAllocationProbes {
    programs: Arc<Mutex<LoadedPrograms>>,
    /// Why allocations cannot be profiled, when they cannot.
    unavailable: Option<String>,
    /// Records the allocation ring buffer holds.
    ring_records: u64,
    slots: Mutex<Slots>,
}

impl KernelAllocationProbes {
    /// Writes the interval table the byte sampling draws from.
    pub fn new(programs: Arc<Mutex<LoadedPrograms>>) -> Self {
        let (unavailable, ring_records) = {
            let mut guard = lock(&programs);
            let ring_records = guard.allocation_ring_records();
            let unavailable = match guard.allocation_probes() {
                Err(err) => Some(err.to_string()),
                Ok(()) => write_intervals(&mut guard.ebpf)
                    .and_then(|()| write_share(&mut guard.ebpf, ring_records))
                    .err(),
            };
            (unavailable, ring_records)
        };
        Self {
            programs,
            unavailable,
            ring_records,
            slots: Mutex::new(Slots::default()),
        }
    }

    /// Why allocations cannot be profiled, when they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// The profiles whose probes are attached now (those coming off
    /// included), by process id.
    pub fn running(&self) -> Vec<RunningProfile> {
        let mut running: Vec<RunningProfile> = lock(&self.slots)
            .running()
            .map(|attached| attached.profile)
            .collect();
        running.sort_by_key(|profile| profile.pid);
        running
    }

    /// Whether the allocations of `pid` are profiled.
    pub fn profiled(&self, pid: u32) -> Profiled {
        match lock(&self.slots)
            .running()
            .find(|attached| attached.profile.pid == pid)
        {
            None => Profiled::No,
            Some(attached) if attached.detaching => Profiled::Ending,
            Some(_) => Profiled::Yes,
        }
    }

    /// The records of the allocation ring buffer, and those each profile
    /// may hold unread now.
    pub fn ring(&self) -> (u64, u64) {
        let running = lock(&self.slots).running().count();
        (self.ring_records, ring_share(self.ring_records, running))
    }

    /// Starts sampling the allocations of process `pid` at `sites` (its
    /// allocator functions) as `sampling` says; `privileged` when root or
    /// the admin group asks (other users together may not take the
    /// profiles kept for them).
    pub fn attach(
        &self,
        pid: u32,
        sites: &[ProbeSite],
        sampling: Sampling,
        privileged: bool,
    ) -> Result<Attachment, ProbeError> {
        if let Some(reason) = &self.unavailable {
            return Err(ProbeError::Unavailable(reason.clone()));
        }
        let mut slots = lock(&self.slots);
        if slots.running().any(|attached| attached.profile.pid == pid) {
            return Err(ProbeError::Busy(pid));
        }
        let Some(slot) = slots.slots.iter().position(Option::is_none) else {
            return Err(ProbeError::TooMany);
        };
        let of_users = slots
            .running()
            .filter(|attached| !attached.profile.privileged)
            .count();
        if !privileged && of_users >= (MAX_PROFILED_PROCESSES - RESERVED_FOR_ADMINS) as usize {
            return Err(ProbeError::Reserved { running: of_users });
        }
        let running = slots.running().count();
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or(ProbeError::Target {
            pid,
            reason: "pid 0 has no allocator".to_owned(),
        })?);
        slots.round += 1;
        // Serials follow their slot (the ring's reader finds it by them).
        let serial = slots.round * u64::from(MAX_PROFILED_PROCESSES) + slot as u64;
        debug_assert_eq!(slot_of(serial) as usize, slot);
        let mut programs = lock(&self.programs);
        let ebpf = &mut programs.ebpf;
        // The share shrinks before the new profile samples anything, which
        // starts from no count (nothing of the slot's last profile runs).
        write_share(ebpf, ring_share(self.ring_records, running + 1))
            .and_then(|()| write_counts(ebpf, slot, ProfileCounts::default()))
            .and_then(|()| targets(ebpf))
            .and_then(|mut targets| {
                let target = Target {
                    slot: slot as u32,
                    serial,
                    ..sampling.target()
                };
                targets
                    .insert(pid, target, 0)
                    .map_err(|err| err.to_string())
            })
            .map_err(|reason| ProbeError::Target { pid, reason })?;
        // The return probes first: every entry the entry program sees then
        // has its return seen too. Then `free`, so that no sampled
        // allocation's free goes unseen, then the functions that allocate.
        let (frees, allocators): (Vec<_>, Vec<_>) =
            sites.iter().partition(|site| !site.function.allocates());
        let mut links = Links::default();
        let groups = [
            (&allocators, names::PROGRAM_ALLOCATOR_RETURN, true),
            (&frees, names::PROGRAM_ALLOCATOR_ENTRY, false),
            (&allocators, names::PROGRAM_ALLOCATOR_ENTRY, false),
        ];
        for (group, (sites, name, returns)) in groups.into_iter().enumerate() {
            for site in sites {
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(site.offset),
                    cookie: (!returns).then_some(site.function as u64),
                };
                let link = groups::program::<UProbe>(ebpf, name)
                    .map_err(|err| err.to_string())
                    .and_then(|probe| {
                        let id = probe
                            .attach(point, &site.file, scope)
                            .map_err(|err| groups::error_chain(&err))?;
                        probe.take_link(id).map_err(|err| err.to_string())
                    });
                match link {
                    Ok(link) => match group {
                        0 => links.returns.push(link),
                        1 => links.frees.push(link),
                        _ => links.allocators.push(link),
                    },
                    Err(reason) => {
                        forget_target(ebpf, pid);
                        drop(programs);
                        Links::release(vec![links]);
                        let _ = write_share(
                            &mut lock(&self.programs).ebpf,
                            ring_share(self.ring_records, running),
                        );
                        return Err(ProbeError::Attach {
                            path: site.path.clone(),
                            symbol: site.symbol,
                            reason,
                        });
                    }
                }
            }
        }
        debug!(
            pid,
            slot,
            probes = links.len(),
            "allocation probes attached"
        );
        slots.slots[slot] = Some(Attached {
            serial,
            profile: RunningProfile {
                pid,
                started: SystemTime::now(),
                sampling,
                privileged,
            },
            links,
            detaching: false,
        });
        Ok(Attachment { pid, slot, serial })
    }

    /// Stops sampling the allocations of the profile `attachment` holds,
    /// and hands over what the kernel held for it: which sampled
    /// allocations are still live, and what was dropped. Nothing of it is
    /// left in the kernel. `None` when its probes were already coming off
    /// (by [`KernelAllocationProbes::detach_all`]). It blocks while the
    /// kernel takes the probes off (a tenth of a second or so), holding no
    /// lock: call it where blocking is allowed.
    pub fn detach(&self, attachment: &Attachment) -> Option<KernelAllocations> {
        let started = std::time::Instant::now();
        let links = {
            let mut slots = lock(&self.slots);
            let attached = slots.slots[attachment.slot].as_mut()?;
            if attached.serial != attachment.serial || attached.detaching {
                return None;
            }
            attached.detaching = true;
            std::mem::take(&mut attached.links)
        };
        let probes = links.len();
        // Sampling stops at once (the programs do nothing for a process not
        // in the targets, but see its frees); the probes come off after.
        // The window ends here: what is live now is what the profile holds
        // (the process's frees while the probes come off, a tenth of a
        // second or more, would otherwise take out what it held at the end).
        let live = {
            let mut programs = lock(&self.programs);
            forget_target(&mut programs.ebpf, attachment.pid);
            live_allocations(&mut programs.ebpf, attachment.pid)
        };
        Links::release(vec![links]);
        let mut held = self.forget(attachment);
        held.live = live;
        debug!(
            pid = attachment.pid,
            probes,
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "allocation probes detached"
        );
        Some(held)
    }

    /// Takes off the probes of every profile (the daemon is stopping),
    /// and waits for those already coming off (at most `DETACH_WAIT`);
    /// returns how many profiles ran. Blocks as [`Self::detach`] does.
    pub fn detach_all(&self) -> usize {
        let (running, attachments, links) = {
            let mut slots = lock(&self.slots);
            let running = slots.running().count();
            let (attachments, links): (Vec<Attachment>, Vec<Links>) = slots
                .slots
                .iter_mut()
                .enumerate()
                .filter_map(|(slot, attached)| {
                    let attached = attached.as_mut().filter(|attached| !attached.detaching)?;
                    attached.detaching = true;
                    let attachment = Attachment {
                        pid: attached.profile.pid,
                        slot,
                        serial: attached.serial,
                    };
                    Some((attachment, std::mem::take(&mut attached.links)))
                })
                .unzip();
            (running, attachments, links)
        };
        {
            let mut programs = lock(&self.programs);
            for attachment in &attachments {
                forget_target(&mut programs.ebpf, attachment.pid);
            }
        }
        Links::release(links);
        for attachment in &attachments {
            self.forget(attachment);
        }
        let deadline = std::time::Instant::now() + DETACH_WAIT;
        while lock(&self.slots).running().next().is_some() {
            if std::time::Instant::now() >= deadline {
                warn!("allocation probes were still coming off when the daemon stopped");
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        running
    }

    /// Once its probes are off: what the kernel held for the profile, its
    /// maps' entries taken out, its slot freed.
    fn forget(&self, attachment: &Attachment) -> KernelAllocations {
        let held = collect(&mut lock(&self.programs).ebpf, attachment);
        let running = {
            let mut slots = lock(&self.slots);
            slots.slots[attachment.slot] = None;
            slots.running().count()
        };
        if let Err(reason) = write_share(
            &mut lock(&self.programs).ebpf,
            ring_share(self.ring_records, running),
        ) {
            warn!("cannot widen the allocation profiles' share of their ring buffer: {reason}");
        }
        held
    }
}

/// The ids of `pid`'s sampled allocations the kernel holds as live now.
fn live_allocations(ebpf: &mut aya::Ebpf, pid: u32) -> std::collections::HashSet<u64> {
    let Some(Ok(live)) = ebpf
        .map_mut(names::ALLOC_LIVE)
        .map(BpfHashMap::<&mut MapData, Address, u64>::try_from)
    else {
        return Default::default();
    };
    let mine: Vec<Address> = live
        .keys()
        .filter_map(Result::ok)
        .filter(|key| key.pid == pid)
        .collect();
    mine.iter()
        .filter_map(|key| live.get(key, 0).ok())
        .collect()
}

/// What the kernel held for the profile `attachment` holds, its target
/// deleted and its probes off, leaving nothing of it there. Taking a
/// uprobe off waits for its programs under way, so that nothing adds to
/// the slot's counts any more: read now, they are the profile's exactly.
fn collect(ebpf: &mut aya::Ebpf, attachment: &Attachment) -> KernelAllocations {
    let pid = attachment.pid;
    let counts = ebpf
        .map(names::ALLOC_COUNTS)
        .map(Array::<&MapData, ProfileCounts>::try_from);
    let mut held = match counts {
        Some(Ok(counts)) => counts
            .get(&(attachment.slot as u32), 0)
            .map(|counts| KernelAllocations::counted(&counts))
            .unwrap_or_default(),
        _ => {
            warn!("the eBPF object has no allocation counts map");
            KernelAllocations::default()
        }
    };
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

/// Sets the counts of the profile in `slot`.
fn write_counts(ebpf: &mut aya::Ebpf, slot: usize, counts: ProfileCounts) -> Result<(), String> {
    let mut array: Array<&mut MapData, ProfileCounts> = ebpf
        .map_mut(names::ALLOC_COUNTS)
        .ok_or("the eBPF object has no allocation counts map")?
        .try_into()
        .map_err(|err: aya::maps::MapError| err.to_string())?;
    array
        .set(slot as u32, counts, 0)
        .map_err(|err| format!("cannot clear an allocation profile's counts: {err}"))
}

/// Tells the programs how many records of the allocation ring buffer each
/// profile may hold unread.
fn write_share(ebpf: &mut aya::Ebpf, share: u64) -> Result<(), String> {
    let mut array: Array<&mut MapData, u64> = ebpf
        .map_mut(names::ALLOC_SHARE)
        .ok_or("the eBPF object has no allocation share map")?
        .try_into()
        .map_err(|err: aya::maps::MapError| err.to_string())?;
    array
        .set(0, share, 0)
        .map_err(|err| format!("cannot write the allocation profiles' share: {err}"))
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
