//! The peek handlers' conversions: peek reports, summaries, status and
//! errors to and from their protobuf messages.

use profiler_common::Counter;

use super::{ApiError, convert::unix_nanos};
use crate::{
    peek::{PeekError, PeekReport, PeekSummary, Peeker, TriggerSource},
    pipeline::PipelineStats,
    profile::Owner,
    proto::v1,
    quote,
    service::access::Caller,
};

impl From<PeekError> for ApiError {
    fn from(err: PeekError) -> Self {
        let message = err.to_string();
        match err {
            PeekError::NoProcess(_) => Self::NotFound(message),
            PeekError::NotAllowed { .. } => Self::InvalidArgument(message),
            PeekError::TooMany { .. }
            | PeekError::TooManyOfUser { .. }
            | PeekError::TooOften { .. } => Self::ResourceExhausted(message),
            PeekError::Sampling { .. } | PeekError::Report(_) | PeekError::Stopped => {
                Self::Internal(message)
            }
        }
    }
}

pub(super) fn report(report: &PeekReport) -> v1::PeekReport {
    let trigger = match &report.source {
        TriggerSource::Signal {
            signal,
            sender_pid,
            sender_command,
            intercepted,
        } => v1::PeekTrigger {
            source: v1::peek_trigger::Source::Signal as i32,
            signal: *signal,
            sender_pid: *sender_pid,
            sender_command: sender_command.clone(),
            intercepted: *intercepted,
        },
        TriggerSource::Request => v1::PeekTrigger {
            source: v1::peek_trigger::Source::Request as i32,
            ..v1::PeekTrigger::default()
        },
        TriggerSource::Unknown => v1::PeekTrigger::default(),
    };
    v1::PeekReport {
        id: report.id.clone(),
        pid: report.pid,
        command: report.command.clone(),
        command_line: report.command_line.clone(),
        triggered_unix_nanos: unix_nanos(report.triggered),
        trigger: Some(trigger),
        duration_ms: report.duration.as_millis() as u64,
        frequency_hz: report.frequency_hz,
        folded_triggers: report.folded_triggers,
        threads: report
            .threads
            .iter()
            .map(|thread| v1::PeekThread {
                tid: thread.tid,
                name: thread.name.clone(),
                state: thread.state.clone(),
                at_trigger: thread.at_trigger.clone(),
                wait_channel: thread.wait_channel.clone().unwrap_or_default(),
                snapshots: thread.snapshots,
                utilization_percent: thread.utilization_percent,
            })
            .collect(),
        warnings: report.warnings.clone(),
        text: report.text.clone(),
    }
}

pub(super) fn summary(summary: PeekSummary) -> v1::PeekSummary {
    v1::PeekSummary {
        id: summary.id,
        pid: summary.pid,
        title: summary.title,
        triggered_unix_nanos: unix_nanos(summary.triggered),
        bytes: summary.bytes,
    }
}

pub(super) fn status(
    peeker: &Peeker,
    signal_off_reason: Option<&str>,
    pipeline: &PipelineStats,
) -> v1::PeekStatus {
    let stats = peeker.stats();
    let protection = peeker.protection();
    let signal = peeker.settings().signal;
    v1::PeekStatus {
        signal,
        signal_name: crate::peek::signal_name(signal),
        signal_off_reason: signal_off_reason.unwrap_or_default().to_owned(),
        protection_active: protection.active,
        protection_reason: protection.reason.clone(),
        signals: stats.signals,
        requests: stats.requests,
        completed: stats.completed,
        failed: stats.failed,
        folded: stats.folded,
        dropped_limit: stats.dropped_limit,
        dropped_user_limit: stats.dropped_user_limit,
        logged_briefly: stats.logged_briefly,
        dropped_in_kernel: pipeline.counters[Counter::LostPeekSignal as usize],
        refused: stats.refused,
        gone: stats.gone,
        killed: stats.killed,
        self_sent: stats.self_sent,
        running: peeker.running() as u32,
        not_written: stats.not_written,
    }
}

/// Whether `caller` may see a report of a process of `owner` (unknown for
/// reports that do not say: only root and the admin group).
pub(super) fn may_see(caller: Caller, owner: Option<Owner>) -> bool {
    match owner {
        Some(owner) => caller.may_see(owner),
        None => caller.sees_everything(),
    }
}

pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no peek report {} is kept (it may have been dropped to stay within peeks_kept, \
         peeks_kept_per_user and peeks_max_bytes); `profilerctl peeks` lists those kept",
        quote(id)
    ))
}

/// Sends each peek report `caller` may see to `reports` as it is published,
/// until the client leaves or the daemon stops (which ends the stream with
/// UNAVAILABLE); `slot` (the caller's stream slot) is freed at the end.
pub(super) async fn forward(
    mut published: tokio::sync::broadcast::Receiver<std::sync::Arc<PeekReport>>,
    caller: Caller,
    reports: tokio::sync::mpsc::Sender<Result<v1::PeekReport, tonic::Status>>,
    stopping: crate::service::stopping::Stopping,
    slot: super::limits::StreamSlot,
) {
    use tokio::sync::broadcast::error::RecvError;
    let _slot = slot;
    loop {
        let next = tokio::select! {
            () = reports.closed() => return,
            () = stopping.wait() => Err(ApiError::Stopping.into()),
            report = published.recv() => match report {
                Ok(report) if may_see(caller, report.owner) => Ok(self::report(&report)),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => Err(tonic::Status::data_loss(format!(
                    "this subscriber fell {missed} reports behind and missed them; \
                     `profilerctl peeks` lists every kept report"
                ))),
                Err(RecvError::Closed) => Err(ApiError::Stopping.into()),
            },
        };
        let end = next.is_err();
        if reports.send(next).await.is_err() || end {
            return;
        }
    }
}
