//! Self-metrics in the Prometheus text formats (OpenMetrics, written by
//! prometheus-client, or Prometheus' 0.0.4 text rewritten from it, as the
//! scraper asks: `exposition`): the build (`profilerd_build_info`), samples, losses by cause, drains and their time, the
//! symbolizer's cache and time, the store, peeks, sessions, allocation
//! profiles (`allocations`), RPCs by method and code, and push targets
//! (`push`). Served by `GetStatus` (on request) and, when configured,
//! on an HTTP listener for Prometheus to scrape (`metrics_listen`).
//!
//! Owns the exposition; everything (the counts of RPCs in `rpc_counts`
//! among it) is read, at each scrape, from the statistics the other modules
//! own. It must not keep those itself.
//! Metrics carry no profile data (no function, process or file names).
//! The memory budget's parts and the standard `process_*` metrics (without
//! the `profilerd_` prefix, as Prometheus' client libraries name them) are
//! in `memory`.

mod exposition;
mod memory;

pub use exposition::Exposition;
use std::{collections::BTreeMap, time::Duration};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge, info::Info},
    registry::Registry,
};

use crate::{kernel::drain, peek::PeekStats, pipeline::PipelineStats, store::StoreStats};

mod allocations;
mod push;

/// What the metrics are made of, read at one scrape.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub uptime: Duration,
    pub frequency_hz: u32,
    pub pipeline: PipelineStats,
    pub store: StoreStats,
    /// Bytes of the reports' stack indexes.
    pub report_index_bytes: u64,
    pub peeks: PeekStats,
    pub peeks_running: usize,
    pub sessions_open: usize,
    /// Allocation profiling's figures (`None`: not offered).
    pub allocations: Option<crate::allocs::AllocationStats>,
    pub rpcs: BTreeMap<(String, &'static str), u64>,
    /// The push targets (their configured names only).
    pub push: Vec<crate::service::TargetStatus>,
    /// The memory budget, its parts, and the process's own figures.
    pub memory: crate::memory::MemoryUsage,
}

/// The snapshot in the OpenMetrics text format.
pub fn render(snapshot: Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(memory::ProcessMetrics(snapshot.memory.process)));
    registry
        .sub_registry_with_prefix("profilerd")
        .register_collector(Box::new(snapshot));
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let out = &mut encoder;
        let pipeline = &self.pipeline;
        build_info(out)?;
        gauge(
            out,
            "uptime_seconds",
            "Seconds since the daemon started",
            self.uptime.as_secs_f64(),
        )?;
        gauge(
            out,
            "sampling_frequency_hertz",
            "Samples per second on each CPU",
            self.frequency_hz,
        )?;
        counter(
            out,
            "samples",
            "Samples taken by the kernel",
            pipeline.samples_taken(),
        )?;
        labelled_counters(
            out,
            "samples_lost",
            "Samples or stacks lost, by cause",
            "cause",
            drain::losses(&pipeline.counters).map(|(cause, count)| (cause.name(), count)),
        )?;
        counter(out, "drains", "Drains of the kernel maps", pipeline.drains)?;
        gauge(
            out,
            "drain_gap_max_seconds",
            "The longest time between two drains of the kernel maps since start",
            pipeline.longest_drain_gap.as_secs_f64(),
        )?;
        counter(
            out,
            "drain_seconds",
            "Time spent draining the kernel maps",
            pipeline.drain_time.as_secs_f64(),
        )?;
        counter(
            out,
            "processes_seen",
            "Processes the kernel announced",
            pipeline.processes.processes_seen,
        )?;
        gauge(
            out,
            "processes_tracked",
            "Processes whose memory maps are held",
            pipeline.processes.processes_tracked,
        )?;
        counter(
            out,
            "processes_adopted",
            "New processes that took the memory map of the process that forked them",
            pipeline.processes.adopted.children,
        )?;
        counter(
            out,
            "stacks_unwound_before_exec",
            "Stacks sampled between a fork and an exec, unwound with the forking process's memory map",
            pipeline.processes.adopted.before_exec,
        )?;
        if let Some(journal) = pipeline.processes.journal {
            gauge(
                out,
                "memory_map_records_mappings",
                "Code mappings held from the kernel's records of memory maps",
                journal.mappings,
            )?;
            gauge(
                out,
                "memory_map_records_mappings_limit",
                "The most code mappings held from the kernel's records of memory maps",
                journal.limit,
            )?;
            counter(
                out,
                "memory_map_records_processes_evicted",
                "Processes whose recorded memory maps were let go of to stay within the limit",
                journal.evicted,
            )?;
            counter(
                out,
                "memory_map_records_processes_recalled",
                "Processes recorded from the kernel's records of memory maps (gone before procfs was read)",
                journal.recalled,
            )?;
            counter(
                out,
                "memory_map_records_lost",
                "Records of memory maps the kernel dropped, a ring full",
                journal.lost,
            )?;
        }
        let python = &pipeline.processes.python;
        labelled_counters(
            out,
            "python_processes",
            "Processes found running a CPython interpreter whose frames can be read, by version",
            "version",
            python
                .processes
                .iter()
                .map(|(version, count)| (version.as_str(), *count)),
        )?;
        labelled_counters(
            out,
            "python_processes_refused",
            "Processes running a CPython interpreter whose frames will not be read, by reason",
            "reason",
            python
                .refused
                .iter()
                .map(|(reason, count)| (*reason, *count)),
        )?;
        let names = &pipeline.python_names;
        let targets = pipeline.python_targets.unwrap_or_default();
        for (name, help, value) in [
            (
                "python_processes_named",
                "Times a process was named to the sampling programs to read its Python frames",
                targets.named,
            ),
            (
                "python_processes_refused_by_kernel",
                "Processes the sampling programs' map of Python processes refused (full)",
                targets.failed,
            ),
            (
                "python_code_objects_read",
                "Python code objects read to name frames",
                names.read,
            ),
            (
                "python_code_objects_failed",
                "Python code objects whose read failed (freed since, or memory unreadable)",
                names.failed,
            ),
            (
                "python_code_objects_evicted",
                "Python code objects let go of at their limit",
                names.evicted,
            ),
            (
                "python_frames_unnamed",
                "Python frames shown by their code object's address, not read in time",
                names.unnamed,
            ),
        ] {
            counter(out, name, help, value)?;
        }
        for (name, help, value) in [
            (
                "python_processes_limit",
                "Processes whose Python frames the sampling programs can read at once",
                targets.limit,
            ),
            (
                "python_code_objects",
                "Python code objects held to name frames",
                names.held,
            ),
            (
                "python_code_objects_limit",
                "The most Python code objects held",
                names.limit,
            ),
            (
                "python_code_objects_bytes",
                "Bytes of the Python code objects held, roughly",
                names.bytes,
            ),
            (
                "python_code_objects_bytes_limit",
                "The most bytes of Python code objects held (0: no bound but their number)",
                names.bytes_limit,
            ),
            (
                "python_code_object_readers_stuck",
                "Readers of Python code objects stuck in a read of a process's memory",
                names.readers_stuck,
            ),
        ] {
            gauge(out, name, help, value)?;
        }
        if let Some(book) = pipeline.lineages {
            let forked = "Processes forked without exec whose parent and program layout are held";
            let exec_left = "Processes that exec'd after a fork whose lineage is held for their earlier samples";
            for (name, help, held, limit, evicted) in [
                (
                    "fork_lineages_forked",
                    forked,
                    book.forked,
                    book.forked_limit,
                    book.forked_evicted,
                ),
                (
                    "fork_lineages_exec_left",
                    exec_left,
                    book.exec_left,
                    book.exec_left_limit,
                    book.exec_left_evicted,
                ),
            ] {
                gauge(out, name, help, held)?;
                gauge(
                    out,
                    &format!("{name}_limit"),
                    &format!("{help}: the most held"),
                    limit,
                )?;
                counter(
                    out,
                    &format!("{name}_evicted"),
                    &format!("{help}: let go of to stay within the limit"),
                    evicted,
                )?;
            }
        }
        let unwinding = &pipeline.unwinding;
        counter(
            out,
            "stacks_unwound_complete",
            "User stacks unwound from copies to their first function",
            unwinding.complete,
        )?;
        counter(
            out,
            "stacks_unwound_without_unwind_info",
            "User stacks with a frame walked without unwind information (frame pointers, call stubs)",
            unwinding.without_unwind_info,
        )?;
        if let Some(deep) = pipeline.deep_threads {
            counter(
                out,
                "deep_threads_named",
                "Threads found deeper than a stack copy, given larger copies",
                deep.named,
            )?;
            gauge(
                out,
                "deep_threads_limit",
                "Most deep threads the kernel knows at once (least recently named forgotten first)",
                deep.limit,
            )?;
        }
        labelled_counters(
            out,
            "stacks_unwound_stopped",
            "User stacks whose unwinding stopped short, by reason",
            "reason",
            unwinding
                .stopped
                .iter()
                .map(|(reason, count)| (*reason, *count)),
        )?;
        counter(
            out,
            "unwound_stack_bytes",
            "Bytes of user stack copied by the kernel and unwound",
            unwinding.stack_bytes,
        )?;
        counter(
            out,
            "unwind_seconds",
            "Time spent unwinding user stacks",
            unwinding.busy.as_secs_f64(),
        )?;
        gauge(
            out,
            "unwind_info_bytes",
            "Bytes of unwind information (.eh_frame, .debug_frame) held",
            unwinding.bytes,
        )?;
        gauge(
            out,
            "unwind_info_binaries",
            "Binaries whose unwind information is held",
            unwinding.binaries,
        )?;
        gauge(
            out,
            "unwind_info_limit_bytes",
            "Most bytes of unwind information held (unwind_info_limit; 0: none)",
            unwinding.limit,
        )?;
        counter(
            out,
            "unwind_info_evictions",
            "Binaries whose unwind information was let go of to stay under unwind_info_limit",
            unwinding.binaries_evicted,
        )?;
        gauge(
            out,
            "unwind_rule_caches",
            "Caches of unwind rules held, each serving one process's unwinder at a time",
            unwinding.rule_caches,
        )?;
        gauge(
            out,
            "unwind_rule_caches_limit",
            "Most caches of unwind rules held",
            crate::unwind::RULE_CACHES as u64,
        )?;
        counter(
            out,
            "unwind_rule_caches_emptied",
            "Times a cache of unwind rules was emptied to serve another process",
            unwinding.rule_caches_emptied,
        )?;
        counter(
            out,
            "offcpu_switches",
            "Context switches the off-CPU program saw",
            pipeline.counters[profiler_common::Counter::Switches as usize],
        )?;
        counter(
            out,
            "offcpu_waits_recorded",
            "Waits off CPU recorded (switches out of a recorded thread)",
            pipeline.counters[profiler_common::Counter::OffCpuRecorded as usize],
        )?;
        let waits = pipeline.waits.unwrap_or_default();
        counter(
            out,
            "offcpu_waits_charged",
            "Waits off CPU charged to their stack",
            waits.charged,
        )?;
        counter(
            out,
            "offcpu_waits_unmatched",
            "Waits whose start was not seen (begun before recording)",
            waits.unmatched,
        )?;
        counter(
            out,
            "offcpu_waits_stack_lost",
            "Waits ended whose stack copy was lost",
            waits.stack_lost,
        )?;
        counter(
            out,
            "offcpu_waits_lost_whole",
            "Waits whose stack copy and end were both lost (ring buffers full)",
            pipeline.counters[profiler_common::Counter::OffCpuLostWhole as usize],
        )?;
        counter(
            out,
            "offcpu_waits_already_waiting",
            "Threads found waiting when recording began",
            waits.already_waiting,
        )?;
        counter(
            out,
            "offcpu_waits_abandoned",
            "Waits whose end was lost",
            waits.abandoned,
        )?;
        gauge(
            out,
            "offcpu_waits_under_way",
            "Waits off CPU under way",
            waits.under_way,
        )?;
        let symbolizer = &pipeline.symbolizer;
        counter(
            out,
            "symbolizer_cache_hits",
            "Addresses found in the symbolizer's cache",
            symbolizer.cache_hits,
        )?;
        counter(
            out,
            "symbolizer_cache_misses",
            "Addresses the symbolizer had to look up",
            symbolizer.cache_misses,
        )?;
        counter(
            out,
            "symbolizer_seconds",
            "Time spent symbolizing",
            symbolizer.busy.as_secs_f64(),
        )?;
        gauge(
            out,
            "symbolizer_cached_addresses",
            "Addresses in the symbolizer's cache",
            symbolizer.user_addresses_cached + symbolizer.kernel_addresses_cached,
        )?;
        let store = &self.store;
        gauge(
            out,
            "store_bytes",
            "Bytes the profile store holds",
            store.memory_bytes,
        )?;
        gauge(
            out,
            "store_limit_bytes",
            "The profile store's memory ceiling",
            store.memory_limit_bytes,
        )?;
        gauge(
            out,
            "store_buckets",
            "Time buckets the store holds",
            store.buckets,
        )?;
        gauge(
            out,
            "store_stacks",
            "Distinct stacks the store holds",
            store.distinct_stacks,
        )?;
        gauge(
            out,
            "report_index_bytes",
            "Memory of the stack indexes reports start from (the report_indexes part of the \
             memory budget)",
            self.report_index_bytes,
        )?;
        let history = store
            .oldest
            .and_then(|oldest| oldest.elapsed().ok())
            .map_or(0.0, |age| age.as_secs_f64());
        gauge(
            out,
            "store_history_seconds",
            "How far back the store's samples reach",
            history,
        )?;
        counter(
            out,
            "store_buckets_evicted",
            "Buckets dropped before their retention ended, for memory",
            store.buckets_evicted_for_memory,
        )?;
        counter(
            out,
            "store_buckets_coarsened",
            "Bucket merges to stay under the memory ceiling",
            store.buckets_coarsened_for_memory,
        )?;
        let peeks = &self.peeks;
        counter(out, "peek_signals", "Peek signals received", peeks.signals)?;
        counter(
            out,
            "peek_requests",
            "Peek requests of the API",
            peeks.requests,
        )?;
        counter(out, "peeks_completed", "Peeks completed", peeks.completed)?;
        counter(out, "peeks_failed", "Peeks failed", peeks.failed)?;
        counter(
            out,
            "peeks_dropped",
            "Peek triggers dropped: too many peeks running",
            peeks.dropped_limit,
        )?;
        gauge(
            out,
            "peeks_running",
            "Peeks running now",
            self.peeks_running as u64,
        )?;
        gauge(
            out,
            "sessions_open",
            "Profiling sessions open now",
            self.sessions_open as u64,
        )?;
        if let Some(allocations) = &self.allocations {
            allocations::encode(out, allocations, &pipeline.counters)?;
        }
        let mut rpcs = out.encode_descriptor(
            "rpcs",
            "gRPC requests answered, by method and status code",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for ((method, code), count) in &self.rpcs {
            let labels = [("method", method.as_str()), ("code", *code)];
            ConstCounter::new(*count).encode(rpcs.encode_family(&labels)?)?;
        }
        push::encode(out, &self.push)?;
        memory::encode(&self.memory, &self.pipeline.jit, out)
    }
}

/// `profilerd_build_info{version, arch} 1`: which build runs.
fn build_info(encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let labels = vec![
        ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
        ("arch".to_owned(), std::env::consts::ARCH.to_owned()),
    ];
    one(
        encoder,
        "build",
        "The daemon's version and the architecture it was built for (the value is always 1)",
        Info::new(labels),
    )
}

pub(super) fn counter<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstCounter<N>: EncodeMetric,
{
    one(encoder, name, help, ConstCounter::new(value))
}

/// A counter family with one label, a counter per value of it.
pub(super) fn labelled_counters<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl Iterator<Item = (&'a str, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (value, count) in values {
        let labels = [(label, value)];
        ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

pub(super) fn gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    one(encoder, name, help, ConstGauge::new(value))
}

/// One metric without labels.
fn one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_names_every_figure_with_its_labels() {
        let mut pipeline = PipelineStats::default();
        pipeline.counters[profiler_common::Counter::Samples as usize] = 1234;
        pipeline.drains = 7;
        pipeline.drain_time = Duration::from_millis(1500);
        let mut rpcs = BTreeMap::new();
        rpcs.insert(("Profile".to_owned(), "OK"), 3);
        rpcs.insert(("Query".to_owned(), "NOT_FOUND"), 1);
        let text = render(Snapshot {
            uptime: Duration::from_secs(60),
            frequency_hz: 49,
            pipeline,
            store: StoreStats {
                memory_bytes: 1000,
                memory_limit_bytes: 2000,
                retention: Duration::from_secs(3600),
                resolution: Duration::from_secs(10),
                buckets: 3,
                oldest: None,
                coarsest_bucket: Duration::ZERO,
                distinct_stacks: 5,
                buckets_evicted_for_memory: 0,
                buckets_coarsened_for_memory: 0,
            },
            report_index_bytes: 4096,
            peeks: PeekStats::default(),
            peeks_running: 0,
            sessions_open: 2,
            allocations: Some(crate::allocs::AllocationStats {
                limit: 16,
                reserved: 4,
                ring_records: 478,
                ring_share: 478,
                counts: crate::allocs::ProfileCounts {
                    refused_full: 3,
                    abandoned: 2,
                    ..Default::default()
                },
                ..Default::default()
            }),
            rpcs,
            push: Vec::new(),
            memory: crate::memory::MemoryUsage {
                budget: 256 << 20,
                program: 24 << 20,
                kernel_buffers: 16 << 20,
                parts: vec![crate::memory::PartUsage {
                    part: crate::memory::Part::Symbolizer,
                    held: 1 << 20,
                    share: 32 << 20,
                    evicted: 3,
                    evicted_unit: "binaries and caches",
                }],
                heap: 5 << 20,
                process: crate::memory::ProcessFigures {
                    resident_bytes: 90 << 20,
                    ..Default::default()
                },
            },
        });
        let build = format!(
            "profilerd_build_info{{version=\"{}\",arch=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        );
        for line in [
            "profilerd_samples_total 1234",
            "profilerd_drains_total 7",
            "profilerd_drain_seconds_total 1.5",
            "profilerd_samples_lost_total{cause=\"counts_map_full\"} 0",
            "profilerd_rpcs_total{method=\"Profile\",code=\"OK\"} 3",
            "profilerd_rpcs_total{method=\"Query\",code=\"NOT_FOUND\"} 1",
            "profilerd_store_bytes 1000",
            "profilerd_report_index_bytes 4096",
            "profilerd_sessions_open 2",
            "profilerd_allocation_profiles_running 0",
            "profilerd_allocation_profiles_limit 16",
            "profilerd_allocation_profiles_refused_total{cause=\"full\"} 3",
            "profilerd_allocation_profiles_abandoned_total 2",
            "profilerd_allocations_dropped_total{cause=\"alloc_share_full\"} 0",
            "profilerd_allocation_ring_share_records 478",
            "# TYPE profilerd_samples counter",
            "profilerd_memory_budget_bytes 268435456",
            "profilerd_memory_part_bytes{part=\"symbolizer\"} 1048576",
            "profilerd_memory_part_share_bytes{part=\"symbolizer\"} 33554432",
            "profilerd_memory_part_evicted_total{part=\"symbolizer\"} 3",
            "process_resident_memory_bytes 94371840",
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total 0",
            "process_open_fds 0",
            "process_max_fds 0",
            "process_start_time_seconds 0",
            "process_virtual_memory_bytes 0",
            "# TYPE profilerd_build info",
            build.as_str(),
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        // The same in Prometheus' text format 0.0.4.
        let plain = Exposition::Text004.write(text);
        for line in [
            "# HELP profilerd_samples_total Samples taken by the kernel",
            "# TYPE profilerd_samples_total counter",
            "profilerd_samples_total 1234",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE profilerd_build_info gauge",
            build.as_str(),
            "# TYPE profilerd_store_bytes gauge",
        ] {
            assert!(plain.contains(line), "{line} in:\n{plain}");
        }
        assert!(
            !plain.contains("# EOF") && !plain.contains("# UNIT"),
            "{plain}"
        );
    }
}
