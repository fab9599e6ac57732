//! Windows cut for the fleet export: consecutive windows of the whole
//! machine's CPU samples, each cut where the last ended, so that every
//! sample is pushed once.
//!
//! The push targets running, as status and the metrics show them
//! (`PushBoard`): the exporter puts them there, the service reads them.
//!
//! Owns the export's cursor into the store and the board; it must not
//! encode or send.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use super::{Service, ServiceError};
use crate::{
    lock,
    profile::{Profile, ProfileMode},
    store::{Query, SampleAccess, Selector, SumBy, WindowHold},
};

/// Where the next export window starts, with the store's buckets held from
/// there on so that they are not merged across it.
pub struct ExportCursor {
    start: SystemTime,
    _hold: WindowHold,
}

impl Service {
    /// Starts exporting from now.
    pub async fn export_cursor(&self) -> Result<ExportCursor, ServiceError> {
        let hold = self.holds.hold(SystemTime::now());
        let start = self.pipeline.open_window().await?;
        Ok(ExportCursor { start, _hold: hold })
    }

    /// The window from the cursor to now (every process, CPU time, kernel
    /// addresses hidden), and the cursor moved to its end.
    pub async fn export_window(&self, cursor: &mut ExportCursor) -> Result<Profile, ServiceError> {
        let hold = self.holds.hold(SystemTime::now());
        let end = self.pipeline.close_window().await?;
        let query = Query {
            start: cursor.start,
            end,
            selector: Selector::default(),
            access: SampleAccess::All,
            mode: ProfileMode::Cpu,
            frequency_hz: self.frequency_hz(),
        };
        // The earlier hold goes once its window is read.
        let earlier = std::mem::replace(
            cursor,
            ExportCursor {
                start: end,
                _hold: hold,
            },
        );
        let store = self.store.clone();
        let profile = self
            .report_gate
            .run(move || {
                super::answers::window_profile(&store, &query, false, SumBy::ThreadAndStack)
            })
            .await;
        drop(earlier);
        profile
    }

    /// The push targets running now, for status and the exporter.
    pub fn push_board(&self) -> PushBoard {
        self.push.clone()
    }
}

/// What became of a push target's payloads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    pub sent: u64,
    pub last_success: Option<SystemTime>,
    /// Failed attempts, by cause (e.g. `http_503`, `timeout`, `connect`).
    pub failures: BTreeMap<String, u64>,
    pub queued: u64,
    pub queued_bytes: u64,
    pub spooled: u64,
    pub spooled_bytes: u64,
    /// Payloads dropped: refused by the backend, too old, or with no room.
    pub dropped: u64,
    pub last_error: Option<String>,
}

/// What status reports of a push target.
#[derive(Clone, Debug)]
pub struct TargetStatus {
    pub name: String,
    /// Its protocol: `pyroscope` or `otlp`.
    pub kind: &'static str,
    pub url: String,
    pub stats: DeliveryStats,
}

/// A push target running, as the exporter runs it.
pub trait PushTarget: Send + Sync {
    /// Its figures now.
    fn status(&self) -> TargetStatus;
}

/// The push targets running now, shared by the exporter and status.
#[derive(Clone, Default)]
pub struct PushBoard(Arc<Mutex<Vec<Arc<dyn PushTarget>>>>);

impl PushBoard {
    /// Every target's figures now.
    pub fn status(&self) -> Vec<TargetStatus> {
        lock(&self.0).iter().map(|target| target.status()).collect()
    }

    /// Puts `targets` in place of the ones running before.
    pub fn replace(&self, targets: Vec<Arc<dyn PushTarget>>) {
        *lock(&self.0) = targets;
    }
}
