//! The Top stream: every interval, cut a window, read it from the store as
//! its asker may see it, and send its functions with the most self
//! samples, until the asker leaves.
//!
//! Owns the stream's loop and its bounds; the ranking is `report::top`'s.
//! It must not keep samples of its own.

use std::{
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use crate::{kernel::offcpu::RecordingGuard, profile::ProfileMode};
use tokio::sync::mpsc;

use super::{
    Service, ServiceError,
    access::{Asker, Window},
    answers::{self, Sight, Summary},
    limits::StreamSlot,
    selection::SelectorSpec,
    stopping::Stopping,
};
use crate::{
    pipeline::PipelineHandle,
    report::{self, TopFunction},
    store::{Query, Selector, Store, SumBy, WindowHolds},
};

const INTERVAL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
const MAX_LIMIT: usize = 1000;
const DEFAULT_LIMIT: usize = 20;

/// What a Top stream shows.
#[derive(Clone, Debug)]
pub struct TopSpec {
    pub selector: SelectorSpec,
    /// `None`: the default, a second.
    pub interval: Option<Duration>,
    /// Most functions per update; `None`: the default, 20.
    pub limit: Option<usize>,
    /// Count kernel frames as functions of their own.
    pub kernel: bool,
    pub mode: ProfileMode,
}

/// One interval of a Top stream.
#[derive(Clone, Debug)]
pub struct TopUpdate {
    pub summary: Summary,
    /// The most self samples first.
    pub functions: Vec<TopFunction>,
}

/// A checked Top request.
struct TopRequest {
    selector: Selector,
    interval: Duration,
    limit: usize,
    kernel: bool,
    mode: ProfileMode,
}

/// What the stream reads from.
struct TopSources {
    pipeline: PipelineHandle,
    store: Arc<RwLock<Store>>,
    report_gate: Arc<super::report_memory::ReportGate>,
    holds: WindowHolds,
    frequency_hz: u32,
    stopping: Stopping,
    sight: Sight,
    /// Keeps the kernel recording off-CPU time while the stream is open.
    _recording: Option<RecordingGuard>,
}

impl Service {
    /// Starts a Top stream; its updates (or the error that ends it) arrive
    /// on the returned channel until the receiver is dropped.
    pub fn top(
        &self,
        asker: Asker,
        spec: TopSpec,
    ) -> Result<mpsc::Receiver<Result<TopUpdate, ServiceError>>, ServiceError> {
        self.check_selector(asker, &spec.selector, Window::Live)?;
        let interval = spec.interval.unwrap_or(DEFAULT_INTERVAL);
        if !INTERVAL_RANGE.contains(&interval) {
            return Err(ServiceError::invalid(format!(
                "an interval of {} is out of range; accepted: 100ms to 1m (default 1s)",
                humantime::format_duration(interval)
            )));
        }
        let limit = spec.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "a limit of {limit} functions is out of range; accepted: 1 to {MAX_LIMIT} \
                 (default {DEFAULT_LIMIT})"
            )));
        }
        let request = TopRequest {
            selector: spec.selector.live()?,
            interval,
            limit,
            kernel: spec.kernel,
            mode: spec.mode,
        };
        let recording = self.record_off_cpu(spec.mode, &request.selector, false)?;
        let slot = self
            .streams
            .acquire(asker.key, self.limits.max_streams_per_caller)?;
        let sources = TopSources {
            pipeline: self.pipeline.clone(),
            store: self.store.clone(),
            report_gate: self.report_gate.clone(),
            holds: self.holds.clone(),
            frequency_hz: self.frequency_hz(),
            stopping: self.stopping.clone(),
            sight: Sight::of(asker.caller),
            _recording: recording,
        };
        // One update may wait while the next is made.
        let (updates, stream) = mpsc::channel(1);
        tokio::spawn(run(sources, request, updates, slot));
        Ok(stream)
    }
}

/// Sends an update every interval to `updates` until it closes or the
/// pipeline stops; `slot` (the caller's stream slot) is freed at the end.
async fn run(
    sources: TopSources,
    request: TopRequest,
    updates: mpsc::Sender<Result<TopUpdate, ServiceError>>,
    slot: StreamSlot,
) {
    let _slot = slot;
    // Each window stays as drained in the store while it is open (the hold
    // is released when replaced).
    let mut _hold = sources.holds.hold(SystemTime::now());
    let mut start = match sources.pipeline.open_window().await {
        Ok(start) => start,
        Err(err) => {
            let _ = updates.send(Err(err.into())).await;
            return;
        }
    };
    let mut next = tokio::time::Instant::now() + request.interval;
    loop {
        tokio::select! {
            () = updates.closed() => return,
            () = sources.stopping.wait() => {
                let _ = updates.send(Err(ServiceError::Stopping)).await;
                return;
            }
            () = tokio::time::sleep_until(next) => {}
        }
        // A slow update does not make the next ones come in bursts.
        next = (next + request.interval).max(tokio::time::Instant::now());
        let next_hold = sources.holds.hold(SystemTime::now());
        let update = match sources.pipeline.close_window().await {
            Ok(end) => update(&sources, &request, start, end)
                .await
                .map(|update| (update, end)),
            Err(err) => Err(err.into()),
        };
        match update {
            Ok((update, end)) => {
                if updates.send(Ok(update)).await.is_err() {
                    return;
                }
                (_hold, start) = (next_hold, end);
            }
            Err(err) => {
                let _ = updates.send(Err(err)).await;
                return;
            }
        }
    }
}

/// The update of the window from `start` to `end`.
async fn update(
    sources: &TopSources,
    request: &TopRequest,
    start: SystemTime,
    end: SystemTime,
) -> Result<TopUpdate, ServiceError> {
    let query = Query {
        start,
        end,
        selector: request.selector.clone(),
        access: sources.sight.access,
        mode: request.mode,
        frequency_hz: sources.frequency_hz,
    };
    let (limit, kernel) = (request.limit, request.kernel);
    answers::read_profile(
        &sources.report_gate,
        sources.store.clone(),
        query,
        SumBy::ThreadAndStack,
        sources.sight.kernel_addresses,
        move |profile| {
            let (functions, _) = report::top(profile, limit, kernel);
            Ok(TopUpdate {
                summary: Summary::of(profile),
                functions,
            })
        },
    )
    .await
}
