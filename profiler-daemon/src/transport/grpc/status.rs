//! The status reply: the daemon's own figures (sampling, losses, store,
//! unwinding, off-CPU time, push targets, peeks) as the proto has them.
//!
//! Owns that conversion; it must not gather the figures (see
//! `service::status`).

use profiler_common::Counter;

use super::convert::{loss_counts, targets};
use crate::{kernel::drain, profile::unix_nanos, proto::v1, service::DaemonStatus};

fn push_status(target: &crate::service::TargetStatus) -> v1::PushTargetStatus {
    let stats = &target.stats;
    v1::PushTargetStatus {
        name: target.name.clone(),
        kind: target.kind.to_owned(),
        url: target.url.clone(),
        sent: stats.sent,
        last_success_unix_ms: stats.last_success.map_or(0, |time| {
            time.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as i64)
        }),
        failures: stats
            .failures
            .iter()
            .map(|(cause, count)| v1::LossCount {
                cause: cause.clone(),
                count: *count,
            })
            .collect(),
        queued: stats.queued,
        queued_bytes: stats.queued_bytes,
        spooled: stats.spooled,
        spooled_bytes: stats.spooled_bytes,
        dropped: stats.dropped,
        last_error: stats.last_error.clone().unwrap_or_default(),
    }
}

fn offcpu_status(status: &DaemonStatus) -> v1::OffCpuStatus {
    let counters = &status.pipeline.counters;
    let waits = status.pipeline.waits.unwrap_or_default();
    v1::OffCpuStatus {
        unavailable: status.offcpu.unavailable.clone().unwrap_or_default(),
        limitation: status.offcpu.limitation.clone().unwrap_or_default(),
        recordings: status.offcpu.recordings as u32,
        sample_probability: status.offcpu.sample_probability,
        switches: counters[Counter::Switches as usize],
        recorded: counters[Counter::OffCpuRecorded as usize],
        charged: waits.charged,
        unmatched: waits.unmatched,
        abandoned: waits.abandoned,
        under_way: waits.under_way,
        stack_lost: waits.stack_lost,
        already_waiting: waits.already_waiting,
        dropped: status.offcpu.dropped,
        lost_whole: counters[Counter::OffCpuLostWhole as usize],
    }
}

fn allocation_status(status: &DaemonStatus) -> v1::AllocationStatus {
    let counters = &status.pipeline.counters;
    let allocations = &status.allocations;
    let counts = &allocations.counts;
    let count = |cause: &str, count: u64| v1::LossCount {
        cause: cause.to_owned(),
        count,
    };
    v1::AllocationStatus {
        unavailable: status.allocations_unavailable.clone().unwrap_or_default(),
        profiles_running: allocations.running.len() as u32,
        sampled: counters[Counter::AllocSampled as usize],
        stacks_lost: counters[Counter::AllocStackCopyRingFull as usize],
        calls_not_followed: counters[Counter::AllocCallsFull as usize],
        profiles_limit: allocations.limit,
        profiles_reserved: allocations.reserved,
        profiles_running_privileged: allocations
            .running
            .iter()
            .filter(|profile| profile.privileged)
            .count() as u32,
        refused: vec![
            count("busy", counts.refused_busy),
            count("full", counts.refused_full),
            count("reserved", counts.refused_reserved),
        ],
        dropped: drain::losses(counters)
            .filter(|(cause, _)| cause.is_allocation())
            .map(|(cause, dropped)| count(cause.name(), dropped))
            .collect(),
        ring_records: allocations.ring_records,
        ring_share: allocations.ring_share,
        abandoned: counts.abandoned,
        process_exited: counts.process_exited,
    }
}

fn memory_status(memory: &crate::memory::MemoryUsage) -> v1::MemoryStatus {
    let process = &memory.process;
    v1::MemoryStatus {
        budget_bytes: memory.budget,
        program_bytes: memory.program,
        kernel_buffer_bytes: memory.kernel_buffers,
        parts: memory
            .parts
            .iter()
            .map(|part| v1::MemoryPart {
                name: part.part.name().to_owned(),
                held_bytes: part.held,
                share_bytes: part.share,
                evicted: part.evicted,
                evicted_unit: part.evicted_unit.to_owned(),
            })
            .collect(),
        heap_bytes: memory.heap,
        resident_bytes: process.resident_bytes,
        resident_anonymous_bytes: process.resident_anonymous_bytes,
        resident_file_bytes: process.resident_file_bytes,
        resident_peak_bytes: process.resident_peak_bytes,
    }
}

fn jit_status(jit: &crate::symbols::jit_names::JitStats) -> v1::JitStatus {
    v1::JitStatus {
        processes: jit.processes,
        names: jit.names,
        bytes_read: jit.bytes_read,
        refused: jit
            .refused
            .iter()
            .map(|(reason, count)| v1::LossCount {
                cause: (*reason).to_owned(),
                count: *count,
            })
            .collect(),
        lines_too_long: jit.lines_too_long,
        files_cut: jit.files_cut,
    }
}

pub fn status(status: DaemonStatus) -> v1::StatusReply {
    let (pipeline, store, peek) = (&status.pipeline, &status.store, &status.peek);
    let python_targets = pipeline.python_targets.unwrap_or_default();
    let stats = &peek.stats;
    v1::StatusReply {
        version: status.version.to_owned(),
        uptime_ms: status.uptime.as_millis() as u64,
        cpus: status.cpus.clone(),
        frequency_hz: status.frequency_hz,
        samples_taken: pipeline.samples_taken(),
        samples_lost: loss_counts(drain::losses(&pipeline.counters)),
        processes_seen: pipeline.processes.processes_seen,
        symbolizer: Some(v1::SymbolizerStatus {
            binaries: pipeline.symbolizer.binaries,
            user_addresses_cached: pipeline.symbolizer.user_addresses_cached,
            kernel_addresses_cached: pipeline.symbolizer.kernel_addresses_cached,
            processes_tracked: pipeline.processes.processes_tracked,
            binaries_released: pipeline.symbolizer.binaries_released,
            processes_adopted: pipeline.processes.adopted.children,
            processes_adopted_as_announced: pipeline.processes.adopted.as_announced,
            stacks_unwound_before_exec: pipeline.processes.adopted.before_exec,
            binaries_symbols_only: pipeline.symbolizer.binaries_symbols_only,
            binaries_evicted: pipeline.symbolizer.binaries_evicted,
            cache_clears: pipeline.symbolizer.cache_clears,
            memory_map_records: pipeline.processes.journal.map(|journal| {
                v1::MemoryMapRecordsStatus {
                    processes: journal.processes,
                    mappings: journal.mappings,
                    mapping_limit: journal.limit,
                    processes_evicted: journal.evicted,
                    processes_recalled: journal.recalled,
                    records_lost: journal.lost,
                }
            }),
            fork_lineages: pipeline.lineages.map(|lineages| v1::ForkLineagesStatus {
                forked: lineages.forked,
                forked_limit: lineages.forked_limit,
                forked_evicted: lineages.forked_evicted,
                exec_left: lineages.exec_left,
                exec_left_limit: lineages.exec_left_limit,
                exec_left_evicted: lineages.exec_left_evicted,
                bytes: lineages.bytes,
            }),
            python: Some(v1::PythonStatus {
                // (Zeros without stack copies: no Python frames are read.)
                processes: pipeline
                    .processes
                    .python
                    .processes
                    .clone()
                    .into_iter()
                    .collect(),
                refused: pipeline
                    .processes
                    .python
                    .refused
                    .iter()
                    .map(|(reason, count)| ((*reason).to_owned(), *count))
                    .collect(),
                binaries: pipeline.processes.python.binaries,
                processes_named: python_targets.named,
                processes_limit: python_targets.limit,
                processes_refused_by_kernel: python_targets.failed,
                code_objects_held: pipeline.python_names.held,
                code_objects_limit: pipeline.python_names.limit,
                code_objects_read: pipeline.python_names.read,
                code_objects_failed: pipeline.python_names.failed,
                code_objects_evicted: pipeline.python_names.evicted,
                frames_unnamed: pipeline.python_names.unnamed,
                code_objects_bytes: pipeline.python_names.bytes,
                code_objects_bytes_limit: pipeline.python_names.bytes_limit,
                code_object_readers_stuck: pipeline.python_names.readers_stuck,
            }),
        }),
        store: Some(v1::StoreStatus {
            memory_bytes: store.memory_bytes,
            memory_limit_bytes: store.memory_limit_bytes,
            retention_ms: store.retention.as_millis() as u64,
            buckets: store.buckets,
            oldest_unix_nanos: store.oldest.map_or(0, unix_nanos),
            distinct_stacks: store.distinct_stacks,
            buckets_evicted_for_memory: store.buckets_evicted_for_memory,
            resolution_ms: store.resolution.as_millis() as u64,
            coarsest_bucket_ms: store.coarsest_bucket.as_millis() as u64,
            buckets_coarsened_for_memory: store.buckets_coarsened_for_memory,
        }),
        max_profile_duration_ms: status.max_profile_duration.as_millis() as u64,
        open_sessions: status.open_sessions as u32,
        drains: pipeline.drains,
        targets: status.targets.as_ref().map(targets),
        targets_hidden: status.targets.is_none(),
        samples_outside_targets: pipeline.counters[Counter::OutsideTargets as usize],
        unwinding: Some(v1::UnwindStatus {
            stack_copy_bytes: status.stack_copy_bytes,
            stack_copies: pipeline.counters[Counter::StackCopies as usize],
            complete: pipeline.unwinding.complete,
            stopped: pipeline
                .unwinding
                .stopped
                .iter()
                .map(|(reason, count)| v1::UnwindStopCount {
                    reason: (*reason).to_owned(),
                    count: *count,
                })
                .collect(),
            binaries: pipeline.unwinding.binaries,
            bytes: pipeline.unwinding.bytes,
            stack_bytes: pipeline.unwinding.stack_bytes,
            unwind_ms: pipeline.unwinding.busy.as_millis() as u64,
            limit: pipeline.unwinding.limit,
            binaries_evicted: pipeline.unwinding.binaries_evicted,
            without_unwind_info: pipeline.unwinding.without_unwind_info,
            rule_caches: pipeline.unwinding.rule_caches,
            rule_caches_limit: crate::unwind::RULE_CACHES as u64,
            rule_caches_emptied: pipeline.unwinding.rule_caches_emptied,
            deep_threads: pipeline.deep_threads.map_or(0, |deep| deep.named),
            deep_threads_limit: pipeline.deep_threads.map_or(0, |deep| deep.limit),
            deep_copy_bytes: pipeline.deep_threads.map_or(0, |deep| deep.copy_bytes),
            deep_threads_refused: pipeline.deep_threads.map_or(0, |deep| deep.failed),
        }),
        offcpu: Some(offcpu_status(&status)),
        push: status.push.iter().map(push_status).collect(),
        allocations: Some(allocation_status(&status)),
        memory: Some(memory_status(&status.memory)),
        longest_drain_gap_ms: pipeline.longest_drain_gap.as_millis() as u64,
        http: status.http.as_ref().map(|http| v1::HttpStatus {
            listen: http.address.to_string(),
            tls: http.tls,
            source_dirs: (http.source_dirs.iter())
                .map(|dir| dir.display().to_string())
                .collect(),
            max_source_bytes: http.max_source_bytes,
            max_source_reads: http.max_source_reads as u32,
            source_read_timeout_ms: http.source_read_timeout.as_millis() as u64,
        }),
        jit: Some(jit_status(&status.pipeline.jit)),
        peek: Some(v1::PeekStatus {
            signal: peek.signal,
            signal_name: crate::peek::signal_name(peek.signal),
            signal_off_reason: peek.signal_off_reason.clone().unwrap_or_default(),
            protection_active: peek.protection.active,
            protection_reason: peek.protection.reason.clone(),
            signals: stats.signals,
            requests: stats.requests,
            completed: stats.completed,
            failed: stats.failed,
            folded: stats.folded,
            dropped_limit: stats.dropped_limit,
            dropped_user_limit: stats.dropped_user_limit,
            logged_briefly: stats.logged_briefly,
            dropped_in_kernel: peek.dropped_in_kernel,
            refused: stats.refused,
            gone: stats.gone,
            killed: stats.killed,
            self_sent: stats.self_sent,
            running: peek.running as u32,
            rated_running: peek.rated_running as u32,
            max_concurrent: peek.max_concurrent as u32,
            not_written: stats.not_written,
        }),
        metrics: String::new(),
    }
}
