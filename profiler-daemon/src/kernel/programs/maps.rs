//! Handing the loaded programs' maps to the modules that own them: the
//! drain's, the stack copies', the allocation copies', the families',
//! off-CPU recording's, the peek signals', the targets'. Each map is taken
//! once.
//!
//! Owns nothing after the hand-over; it must not read or write the maps.

use aya::{Ebpf, maps::MapData};
use profiler_common::names;

use std::sync::Arc;

use crate::kernel::announcements::{ForkLineages, ProcessAnnouncements};

use super::*;

impl LoadedPrograms {
    /// Takes the map of followed processes and the ring buffer of those
    /// that join a family; why they cannot be had when forks are not
    /// followed.
    pub fn take_families(&mut self) -> Result<FamilyMaps, OptionalProgramError> {
        self.off_reason(ProgramGroup::ForkFollower)?;
        let missing = |_| OptionalProgramError::Missing("map of followed processes");
        Ok(FamilyMaps {
            followed: take_map(&mut self.ebpf, names::FOLLOWED).map_err(missing)?,
            joins: take_map(&mut self.ebpf, names::FAMILY_JOINS).map_err(missing)?,
        })
    }

    /// Takes the maps of off-CPU recording: the recorder's, and the
    /// pipeline's intervals; the reason when the programs are off.
    pub fn take_offcpu(
        &mut self,
    ) -> Result<
        (
            crate::kernel::offcpu::BpfRecordingMaps,
            crate::kernel::offcpu::OffCpuIntervals,
        ),
        String,
    > {
        if let Some(reason) = self.off.get(&ProgramGroup::OffCpu) {
            return Err(reason.to_string());
        }
        let missing = |err: SamplingError| err.to_string();
        let (pending, recorder_pending) =
            take_hash_map_twice(&mut self.ebpf, names::OFFCPU_PENDING).map_err(missing)?;
        let recording = crate::kernel::offcpu::BpfRecordingMaps {
            control: take_map(&mut self.ebpf, names::OFFCPU_CONTROL).map_err(missing)?,
            pids: take_map(&mut self.ebpf, names::OFFCPU_PIDS).map_err(missing)?,
            pid_slots: take_map(&mut self.ebpf, names::OFFCPU_PID_SLOTS).map_err(missing)?,
            pending: recorder_pending,
            pending_slots: take_map(&mut self.ebpf, names::OFFCPU_PENDING_SLOTS)
                .map_err(missing)?,
            held: Vec::new(),
        };
        let intervals = crate::kernel::offcpu::OffCpuIntervals::new(
            take_map(&mut self.ebpf, names::OFFCPU_INTERVALS).map_err(missing)?,
            pending,
            take_map(&mut self.ebpf, names::OFFCPU_PENDING_MARKS).map_err(missing)?,
        );
        Ok((recording, intervals))
    }

    /// Takes the ring buffer of peek signals.
    pub fn take_peek_signals(
        &mut self,
    ) -> Result<crate::kernel::peek_signals::PeekSignals, SamplingError> {
        take_map(&mut self.ebpf, names::PEEK_SIGNALS)
            .map(crate::kernel::peek_signals::PeekSignals::new)
    }

    /// Takes the maps of the sampling targets.
    pub fn take_targets(&mut self) -> Result<crate::kernel::targets::Targets, SamplingError> {
        let maps = crate::kernel::targets::BpfTargetMaps {
            mode: take_map(&mut self.ebpf, names::TARGETS_MODE)?,
            pids: take_map(&mut self.ebpf, names::TARGET_PIDS)?,
            cgroups: take_map(&mut self.ebpf, names::TARGET_CGROUPS)?,
        };
        Ok(crate::kernel::targets::Targets::new(Box::new(maps)))
    }

    /// Takes the sample source the programs write to, for the pipeline:
    /// the aggregated maps, drained.
    pub fn take_source(&mut self) -> Result<Box<dyn SampleSource>, SamplingError> {
        let maps = self.take_drain_maps()?;
        let drainer = Drainer::new(maps).map_err(SamplingError::SourceMaps)?;
        Ok(Box::new(drainer))
    }

    /// Takes the maps the drainer reads out of the object.
    fn take_drain_maps(&mut self) -> Result<DrainMaps, SamplingError> {
        Ok(DrainMaps {
            control: take_map(&mut self.ebpf, names::CONTROL)?,
            recording: take_map(&mut self.ebpf, names::RECORDING)?,
            counters: take_map(&mut self.ebpf, names::COUNTERS)?,
            counts: [
                take_map(&mut self.ebpf, names::COUNTS[0])?,
                take_map(&mut self.ebpf, names::COUNTS[1])?,
            ],
            stacks: [
                take_map(&mut self.ebpf, names::STACKS[0])?,
                take_map(&mut self.ebpf, names::STACKS[1])?,
            ],
        })
    }

    /// Takes the ring buffer of stack copies, when the programs copy
    /// stacks.
    pub fn take_stack_copies(&mut self) -> Result<Option<StackCopies>, SamplingError> {
        let Some(bytes) = self.stack_copies else {
            return Ok(None);
        };
        Ok(Some(StackCopies::new(
            take_map(&mut self.ebpf, names::STACK_COPIES)?,
            u64::from(bytes),
        )))
    }

    /// Takes the map of deep threads, when the programs copy stacks into
    /// a ring that holds at least 16 of a deep thread's larger copies
    /// (in a smaller one they would crowd out every other sample).
    pub fn take_deep_threads(
        &mut self,
    ) -> Result<Option<crate::kernel::stack_copies::DeepThreads>, SamplingError> {
        const DEEP_COPIES_PER_RING: u64 = 16;
        let Some(ring_bytes) = self.stack_copies else {
            return Ok(None);
        };
        let deep_copy = super::settings::stack_copy_record_bytes(
            profiler_common::deep_thread_pages(self.stack_copy_pages),
        );
        if u64::from(ring_bytes) < DEEP_COPIES_PER_RING * deep_copy {
            tracing::info!(
                ring_bytes,
                deep_copy,
                "threads deeper than a stack copy keep copies of stack_copy's size: the \
                 stack-copy ring buffer is too small for larger ones"
            );
            return Ok(None);
        }
        Ok(Some(crate::kernel::stack_copies::DeepThreads::new(
            take_map(&mut self.ebpf, names::DEEP_THREADS)?,
            self.stack_copy_pages,
        )))
    }

    /// Takes the map of processes whose Python frames the programs read,
    /// when the programs copy stacks (the frames go with the copies).
    pub fn take_python_targets(
        &mut self,
    ) -> Result<Option<crate::kernel::python_targets::PythonTargets>, SamplingError> {
        if self.stack_copies.is_none() {
            return Ok(None);
        }
        Ok(Some(crate::kernel::python_targets::PythonTargets::new(
            take_map(&mut self.ebpf, names::PYTHON_PROCESSES)?,
        )))
    }

    /// Takes the allocation ring buffer and the map of how many of each
    /// profile's records were read, when allocations can be profiled.
    pub fn take_allocation_copies(
        &mut self,
    ) -> Result<Option<crate::kernel::allocation_copies::AllocationCopies>, SamplingError> {
        if self.off_reason(ProgramGroup::Allocations).is_err() {
            return Ok(None);
        }
        let (bytes, _) = self.alloc_stack_copies;
        Ok(Some(
            crate::kernel::allocation_copies::AllocationCopies::new(
                StackCopies::new(
                    take_map(&mut self.ebpf, names::ALLOC_STACK_COPIES)?,
                    u64::from(bytes),
                ),
                take_map(&mut self.ebpf, names::ALLOC_READ)?,
            ),
        ))
    }

    /// Takes the ring buffer of new-process announcements, with the fork
    /// tracepoint's lineages when it is attached (shared with the
    /// stack-copy unwinder).
    pub fn take_process_announcements(
        &mut self,
    ) -> Result<(ProcessAnnouncements, Option<Arc<ForkLineages>>), SamplingError> {
        let lineages = match self.off_reason(ProgramGroup::ForkLineage) {
            Ok(()) => Some(Arc::new(ForkLineages::new(take_map(
                &mut self.ebpf,
                names::FORK_LINEAGES,
            )?))),
            Err(_) => None,
        };
        let ring = take_map(&mut self.ebpf, names::NEW_PROCESSES)?;
        Ok((ProcessAnnouncements::new(ring, lineages.clone()), lineages))
    }
}

pub(super) fn take_map<M>(ebpf: &mut Ebpf, name: &'static str) -> Result<M, SamplingError>
where
    M: TryFrom<aya::maps::Map>,
{
    ebpf.take_map(name)
        .and_then(|map| M::try_from(map).ok())
        .ok_or(SamplingError::Missing(name))
}

/// Two handles on one hash map in the kernel.
type TwoHandles<K, V> = (
    aya::maps::HashMap<MapData, K, V>,
    aya::maps::HashMap<MapData, K, V>,
);

/// Takes a hash map with a second handle on it, for two owners.
fn take_hash_map_twice<K: aya::Pod, V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<TwoHandles<K, V>, SamplingError> {
    let Some(aya::maps::Map::HashMap(data)) = ebpf.take_map(name) else {
        return Err(SamplingError::Missing(name));
    };
    let second = data
        .info()
        .and_then(|info| MapData::from_id(info.id()))
        .map_err(|_| SamplingError::Missing(name))?;
    let open = |data| {
        aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data))
            .map_err(|_| SamplingError::Missing(name))
    };
    Ok((open(data)?, open(second)?))
}
