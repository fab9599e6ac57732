//! The push targets' metrics: per target, what went through, what waits
//! and what failed.
//!
//! Owns their exposition only; the exporter owns the figures.

use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
};

/// Per push target: payloads sent, failures by cause, queued, spooled,
/// dropped, and the last success.
pub(super) fn encode(
    out: &mut DescriptorEncoder,
    targets: &[crate::service::TargetStatus],
) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::MetricType;
    type Value = fn(&crate::service::DeliveryStats) -> u64;
    let families: [(&str, &str, MetricType, Value); 6] = [
        (
            "push_sent",
            "Payloads (one window each) a push target took",
            MetricType::Counter,
            |s| s.sent,
        ),
        (
            "push_dropped",
            "Payloads dropped: refused, too old, or with no room",
            MetricType::Counter,
            |s| s.dropped,
        ),
        (
            "push_queued_bytes",
            "Bytes of payloads queued in memory for a push target",
            MetricType::Gauge,
            |s| s.queued_bytes,
        ),
        (
            "push_spooled_bytes",
            "Bytes of payloads spooled on disk for a push target",
            MetricType::Gauge,
            |s| s.spooled_bytes,
        ),
        (
            "push_queued",
            "Payloads queued in memory for a push target",
            MetricType::Gauge,
            |s| s.queued,
        ),
        (
            "push_last_success_timestamp_seconds",
            "When a push target last took a payload (0: never)",
            MetricType::Gauge,
            |s| {
                s.last_success.map_or(0, |time| {
                    time.duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |since| since.as_secs())
                })
            },
        ),
    ];
    for (name, help, kind, value) in families {
        let mut family = out.encode_descriptor(name, help, None, kind)?;
        for target in targets {
            let labels = [("target", target.name.as_str())];
            let encoder = family.encode_family(&labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(value(&target.stats)).encode(encoder)?,
                _ => ConstGauge::new(value(&target.stats) as i64).encode(encoder)?,
            }
        }
    }
    let mut failures = out.encode_descriptor(
        "push_failures",
        "Failed push attempts, by target and cause",
        None,
        MetricType::Counter,
    )?;
    for target in targets {
        for (cause, count) in &target.stats.failures {
            let labels = [("target", target.name.as_str()), ("cause", cause.as_str())];
            ConstCounter::new(*count).encode(failures.encode_family(&labels)?)?;
        }
    }
    Ok(())
}
