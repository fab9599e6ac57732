//! The Top stream: every interval, cut a window, read it from the store and
//! send its functions with the most self samples, until the client leaves.
//!
//! Owns the stream's loop and its request's bounds; the ranking is
//! `report::top`'s. It must not keep samples of its own.

use std::{
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use profiler_common::SampleKind;
use tokio::sync::mpsc;
use tonic::Status;

use super::{ApiError, Sight, convert, limits::StreamSlot};
use crate::{
    pipeline::CollectorHandle,
    proto::v1,
    report,
    store::{Query, Selector, Store, WindowHolds},
};

const INTERVAL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
const MAX_LIMIT: u32 = 1000;
const DEFAULT_LIMIT: u32 = 20;

/// A checked Top request.
pub(super) struct TopRequest {
    selector: Selector,
    interval: Duration,
    limit: usize,
    kernel: bool,
}

impl TryFrom<v1::TopRequest> for TopRequest {
    type Error = ApiError;

    fn try_from(request: v1::TopRequest) -> Result<Self, ApiError> {
        let interval = match request.interval_ms {
            0 => DEFAULT_INTERVAL,
            ms => Duration::from_millis(ms),
        };
        if !INTERVAL_RANGE.contains(&interval) {
            return Err(ApiError::invalid(format!(
                "an interval of {} is out of range; accepted: 100ms to 1m (default 1s)",
                humantime::format_duration(interval)
            )));
        }
        let limit = match request.limit {
            0 => DEFAULT_LIMIT,
            limit if limit <= MAX_LIMIT => limit,
            limit => {
                return Err(ApiError::invalid(format!(
                    "limit {limit} is out of range; accepted: 1 to {MAX_LIMIT} (default \
                     {DEFAULT_LIMIT})"
                )));
            }
        };
        Ok(Self {
            selector: convert::selector(request.selector)?,
            interval,
            limit: limit as usize,
            kernel: !request.user_only,
        })
    }
}

/// What the stream reads from.
pub(super) struct TopSources {
    pub collector: CollectorHandle,
    pub store: Arc<RwLock<Store>>,
    pub holds: WindowHolds,
    pub frequency_hz: u32,
    pub stopping: crate::service::stopping::Stopping,
    /// What the stream's caller may see.
    pub sight: Sight,
}

/// Sends an update every interval to `updates` until it closes or the
/// pipeline stops; `slot` (the caller's stream slot) is freed at the end.
pub(super) async fn run(
    sources: TopSources,
    request: TopRequest,
    updates: mpsc::Sender<Result<v1::TopUpdate, Status>>,
    slot: StreamSlot,
) {
    let _slot = slot;
    // Each window stays as drained in the store while it is open (the hold
    // is released when replaced).
    let mut _hold = sources.holds.hold(SystemTime::now());
    let mut start = match sources.collector.open_window().await {
        Ok(start) => start,
        Err(err) => {
            let _ = updates.send(Err(ApiError::from(err).into())).await;
            return;
        }
    };
    let mut next = tokio::time::Instant::now() + request.interval;
    loop {
        tokio::select! {
            () = updates.closed() => return,
            () = sources.stopping.wait() => {
                let _ = updates.send(Err(ApiError::Stopping.into())).await;
                return;
            }
            () = tokio::time::sleep_until(next) => {}
        }
        // A slow update does not make the next ones come in bursts.
        next = (next + request.interval).max(tokio::time::Instant::now());
        let next_hold = sources.holds.hold(SystemTime::now());
        let update = match sources.collector.close_window().await {
            Ok(end) => update(&sources, &request, start, end)
                .await
                .map(|update| (update, end)),
            Err(err) => Err(ApiError::from(err)),
        };
        match update {
            Ok((update, end)) => {
                if updates.send(Ok(update)).await.is_err() {
                    return;
                }
                (_hold, start) = (next_hold, end);
            }
            Err(err) => {
                let _ = updates.send(Err(err.into())).await;
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
) -> Result<v1::TopUpdate, ApiError> {
    let query = Query {
        start,
        end,
        selector: request.selector.clone(),
        access: sources.sight.access,
        kind: SampleKind::CpuClock,
        frequency_hz: sources.frequency_hz,
    };
    let (limit, kernel) = (request.limit, request.kernel);
    let kernel_addresses = sources.sight.kernel_addresses;
    super::read_profile(
        sources.store.clone(),
        query,
        kernel_addresses,
        move |profile| {
            let (functions, _) = report::top(profile, limit, kernel);
            Ok(v1::TopUpdate {
                summary: Some(convert::summary(profile)),
                functions: functions
                    .into_iter()
                    .map(|function| v1::TopFunction {
                        function: function.function.to_string(),
                        module: function.module.to_string(),
                        self_samples: function.self_samples,
                        total_samples: function.total_samples,
                        self_percent: function.self_percent,
                        total_percent: function.total_percent,
                    })
                    .collect(),
            })
        },
    )
    .await
}
