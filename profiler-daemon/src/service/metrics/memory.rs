//! The memory budget in metrics: each part's bytes, share and what it let
//! go of; the heap as counted; JIT names; and the standard `process_*`
//! metrics every Prometheus client library exports (resident memory, CPU
//! time, open files, threads, start time).
//!
//! Owns those metric names; it must not gather the figures.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

use super::{counter, gauge, labelled_counters};
use crate::{
    memory::{MemoryUsage, ProcessFigures},
    symbols::jit_names::JitStats,
};

/// The memory budget's metrics, under the daemon's prefix.
pub(super) fn encode(
    memory: &MemoryUsage,
    jit: &JitStats,
    out: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    gauge(
        out,
        "memory_budget_bytes",
        "The memory budget (memory_budget) the daemon divides among its parts",
        memory.budget,
    )?;
    gauge(
        out,
        "memory_heap_bytes",
        "Bytes allocated on the heap and not freed, as the daemon's allocator counts them",
        memory.heap,
    )?;
    gauge(
        out,
        "memory_kernel_buffer_bytes",
        "Bytes of the kernel's ring buffers the daemon maps (taken off the budget first)",
        memory.kernel_buffers,
    )?;
    type Value = fn(&crate::memory::PartUsage) -> u64;
    let families: [(&str, &str, MetricType, Value); 3] = [
        (
            "memory_part_bytes",
            "Bytes a part of the daemon holds",
            MetricType::Gauge,
            |part| part.held,
        ),
        (
            "memory_part_share_bytes",
            "A part's share of the memory budget",
            MetricType::Gauge,
            |part| part.share,
        ),
        (
            "memory_part_evicted",
            "What a part let go of (evicted, dropped, or for reports: made to wait) to stay \
             within its share",
            MetricType::Counter,
            |part| part.evicted,
        ),
    ];
    for (name, help, kind, value) in families {
        let mut family = out.encode_descriptor(name, help, None, kind)?;
        for part in &memory.parts {
            let labels = [("part", part.part.name())];
            let encoder = family.encode_family(&labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(value(part)).encode(encoder)?,
                _ => ConstGauge::new(value(part) as i64).encode(encoder)?,
            }
        }
    }
    gauge(
        out,
        "jit_names",
        "Names of JIT-compiled code held (those samples fell in)",
        jit.names,
    )?;
    counter(
        out,
        "jit_perf_map_bytes_read",
        "Bytes of perf maps and jitdump files read",
        jit.bytes_read,
    )?;
    labelled_counters(
        out,
        "jit_perf_maps_refused",
        "Perf maps and jitdump files not read, by reason",
        "reason",
        jit.refused.iter().map(|(reason, count)| (*reason, *count)),
    )
}

/// The standard process metrics, without the daemon's prefix.
#[derive(Debug)]
pub(super) struct ProcessMetrics(pub ProcessFigures);

impl Collector for ProcessMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let out = &mut encoder;
        let process = &self.0;
        counter(
            out,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            process.cpu_seconds,
        )?;
        gauge(
            out,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            process.resident_bytes as i64,
        )?;
        gauge(
            out,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            process.virtual_bytes as i64,
        )?;
        gauge(
            out,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            process.start_time_seconds,
        )?;
        gauge(
            out,
            "process_open_fds",
            "Number of open file descriptors",
            process.open_fds as i64,
        )?;
        gauge(
            out,
            "process_max_fds",
            "Maximum number of open file descriptors",
            process.max_fds.min(i64::MAX as u64) as i64,
        )?;
        gauge(
            out,
            "process_threads",
            "Number of OS threads in the process",
            process.threads as i64,
        )?;
        gauge(
            out,
            "process_resident_memory_anonymous_bytes",
            "Resident anonymous memory (heap, stacks, the kernel's ring buffers mapped)",
            process.resident_anonymous_bytes as i64,
        )?;
        gauge(
            out,
            "process_resident_memory_file_bytes",
            "Resident file-backed memory (the program, binaries being parsed)",
            process.resident_file_bytes as i64,
        )
    }
}
