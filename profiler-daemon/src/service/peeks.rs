//! Peeks as the service offers them: a peek now (by request), and the kept
//! reports listed, read and followed, each only by who may see its
//! process.

use std::sync::Arc;

use tokio::sync::{broadcast::error::RecvError, mpsc};

use super::{
    Service, ServiceError,
    access::{Asker, Caller, Window},
    limits::StreamSlot,
    selection,
    stopping::Stopping,
};
use crate::{
    peek::{PeekReport, PeekSummary},
    profile::Owner,
    quote,
};

impl Service {
    /// Peeks at the process of `pid` (or joins the peek of it under way).
    pub async fn peek(&self, asker: Asker, pid: u32) -> Result<Arc<PeekReport>, ServiceError> {
        if pid == 0 {
            return Err(ServiceError::invalid("pid must be a process id (not 0)"));
        }
        self.access
            .check_tasks(asker.caller, &[pid], Window::Live)?;
        Ok(self.peeker.request(pid, asker.privileged()).await?)
    }

    /// The kept reports `asker` may see, oldest first.
    pub fn list_peeks(&self, asker: Asker) -> Vec<PeekSummary> {
        self.peeker
            .list()
            .into_iter()
            .filter(|peek| may_see(asker.caller, peek.owner))
            .collect()
    }

    /// One kept report, if `asker` may see it.
    pub fn get_peek(&self, asker: Asker, id: &str) -> Result<Arc<PeekReport>, ServiceError> {
        selection::check_id(id, "the peek report id")?;
        match self.peeker.get(id) {
            Some(Ok(report)) if may_see(asker.caller, report.owner) => Ok(report),
            Some(Ok(_)) | None => Err(not_found(id)),
            Some(Err(err)) => Err(ServiceError::Internal(err.to_string())),
        }
    }

    /// Every report `asker` may see from now on, as it is made, until the
    /// receiver is dropped or the daemon stops (the last item is then the
    /// error that says so).
    pub fn watch_peeks(
        &self,
        asker: Asker,
    ) -> Result<mpsc::Receiver<Result<Arc<PeekReport>, ServiceError>>, ServiceError> {
        let slot = self
            .streams
            .acquire(asker.key, self.limits.max_streams_per_caller)?;
        let (reports, stream) = mpsc::channel(4);
        tokio::spawn(forward(
            self.peeker.subscribe(),
            asker.caller,
            reports,
            self.stopping.clone(),
            slot,
        ));
        Ok(stream)
    }
}

/// Whether `caller` may see a report of a process of `owner` (unknown for
/// reports that do not say: only root and the admin group).
fn may_see(caller: Caller, owner: Option<Owner>) -> bool {
    match owner {
        Some(owner) => caller.may_see(owner),
        None => caller.sees_everything(),
    }
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound(format!(
        "no peek report {} is kept (it may have been dropped to stay within peeks_kept, \
         peeks_kept_per_user and peeks_max_bytes); `profilerctl peeks` lists those kept",
        quote(id)
    ))
}

/// Sends each report `caller` may see to `reports` as it is published,
/// until the receiver leaves or the daemon stops; `slot` (the caller's
/// stream slot) is freed at the end.
async fn forward(
    mut published: tokio::sync::broadcast::Receiver<Arc<PeekReport>>,
    caller: Caller,
    reports: mpsc::Sender<Result<Arc<PeekReport>, ServiceError>>,
    stopping: Stopping,
    slot: StreamSlot,
) {
    let _slot = slot;
    loop {
        let next = tokio::select! {
            () = reports.closed() => return,
            () = stopping.wait() => Err(ServiceError::Stopping),
            report = published.recv() => match report {
                Ok(report) if may_see(caller, report.owner) => Ok(report),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => Err(ServiceError::ResourceExhausted(format!(
                    "this subscriber fell {missed} reports behind and missed them; \
                     `profilerctl peeks` lists every kept report"
                ))),
                Err(RecvError::Closed) => Err(ServiceError::Stopping),
            },
        };
        let end = next.is_err();
        if reports.send(next).await.is_err() || end {
            return;
        }
    }
}
