//! The GetStatus handler: what the daemon samples, what it lost and what
//! it holds, with the targets (which may name other users' processes) for
//! root and the admin group only.

use profiler_common::Counter;

use super::{ProfilerService, convert, peeks};
use crate::{kernel::drain, proto::v1, service::access::Caller};

impl ProfilerService {
    pub(super) fn status(&self, caller: Caller) -> v1::StatusReply {
        let pipeline = self.collector.stats();
        let store = self.store_stats();
        let targets_hidden = !caller.sees_everything();
        v1::StatusReply {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_ms: self.info.started.elapsed().as_millis() as u64,
            cpus: self.info.cpus.clone(),
            frequency_hz: self.frequency_hz(),
            samples_taken: pipeline.samples_taken(),
            samples_lost: convert::loss_counts(drain::losses(&pipeline.counters)),
            processes_seen: pipeline.processes.processes_seen,
            symbolizer: Some(v1::SymbolizerStatus {
                binaries: pipeline.symbolizer.binaries,
                user_addresses_cached: pipeline.symbolizer.user_addresses_cached,
                kernel_addresses_cached: pipeline.symbolizer.kernel_addresses_cached,
                processes_tracked: pipeline.processes.processes_tracked,
            }),
            store: Some(v1::StoreStatus {
                memory_bytes: store.memory_bytes,
                memory_limit_bytes: store.memory_limit_bytes,
                retention_ms: store.retention.as_millis() as u64,
                buckets: store.buckets,
                oldest_unix_nanos: store.oldest.map_or(0, convert::unix_nanos),
                distinct_stacks: store.distinct_stacks,
                buckets_evicted_for_memory: store.buckets_evicted_for_memory,
                resolution_ms: store.resolution.as_millis() as u64,
                coarsest_bucket_ms: store.coarsest_bucket.as_millis() as u64,
                buckets_coarsened_for_memory: store.buckets_coarsened_for_memory,
            }),
            max_profile_duration_ms: self.max_profile_duration().as_millis() as u64,
            open_sessions: self.sessions().len() as u32,
            drains: pipeline.drains,
            targets: (!targets_hidden)
                .then(|| convert::targets(crate::lock(&self.targets).current())),
            targets_hidden,
            samples_outside_targets: pipeline.counters[Counter::OutsideTargets as usize],
            peek: Some(peeks::status(
                &self.peeker,
                self.info.peek_signal_off.as_deref(),
                &pipeline,
            )),
            metrics: String::new(),
        }
    }
}
