//! Windows cut for the fleet export: consecutive windows of the whole
//! machine's CPU samples, each cut where the last ended, so that every
//! sample is pushed once.
//!
//! Owns the export's cursor into the store; it must not encode or send.

use std::time::SystemTime;

use super::{Service, ServiceError};
use crate::{
    export::PushBoard,
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
                super::reports::window_profile(&store, &query, false, SumBy::ThreadAndStack)
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
