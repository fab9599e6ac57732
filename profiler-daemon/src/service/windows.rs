//! Windows of samples made into reports: a Profile of the time to come
//! (which its asker may cut short), open-ended sessions, and past windows
//! (Query, Callers). Every window is read with its asker's sight.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use crate::profile::{Format, ProfileMode};
use tokio::sync::Notify;

use super::{
    CutTokens, Service, ServiceError,
    access::{Asker, CallerKey, Window},
    answers::{self, Report, Sight, Summary},
    rated,
    selection::{self, SelectorSpec},
    sessions::Session,
    stack_indexes,
};
use crate::{
    kernel::offcpu::{Recorded, RecordingGuard},
    profile::ReportOptions,
    quote, report,
    store::{Query, Selector, SumBy},
};

/// A Profile's window opening later than this after it was asked for is
/// said in its summary (a drain pass under way takes up to a few hundred
/// milliseconds on a loaded machine).
const LATE_OPEN: Duration = Duration::from_millis(500);

/// A Profile: the next `duration`, selected and laid out as asked.
#[derive(Clone, Debug)]
pub struct ProfileSpec {
    pub duration: Duration,
    pub selector: SelectorSpec,
    pub mode: ProfileMode,
    pub options: ReportOptions,
    /// A token of the asker's choosing that [`Service::cut_profile`] can
    /// end the profile early by.
    pub cut_token: Option<String>,
    /// Sample the selected processes at this rate of their own (the
    /// daemon's rate otherwise); see `rated`.
    pub frequency_hz: Option<u32>,
}

/// How much later than asked a past window's held samples may begin
/// without a word (the store's buckets begin on their own bounds).
const SHORTFALL_SAID: Duration = Duration::from_secs(2);

/// How a profile's window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WindowEnd {
    Full,
    Cut,
    Stopping,
}

/// Waits for a profile's window to end: at `until`, when its cut token is
/// used, or when the daemon stops.
async fn window_end(
    until: Instant,
    cut: &Option<(Arc<Notify>, CutToken<'_>)>,
    stopping: &super::stopping::Stopping,
) -> WindowEnd {
    tokio::select! {
        () = tokio::time::sleep_until(until.into()) => WindowEnd::Full,
        () = async {
            match cut {
                Some((notify, _)) => notify.notified().await,
                None => std::future::pending().await,
            }
        } => WindowEnd::Cut,
        () = stopping.wait() => WindowEnd::Stopping,
    }
}

/// What a report of a past window asked from `asked` says when what the
/// daemon holds begins later (`covered`: the window its buckets really
/// cover): the daemon is younger than the window, or the rest passed its
/// `retention`.
pub(super) fn shortfall(
    which: &str,
    asked: SystemTime,
    covered: Option<SystemTime>,
    retention: Duration,
) -> Option<String> {
    let covered = covered?;
    let missing = covered.duration_since(asked).ok()?;
    if missing < SHORTFALL_SAID {
        return None;
    }
    Some(format!(
        "{which} was asked from {} but the daemon holds samples only from {} on ({} later: it \
         started then, or older samples passed its retention of {}); it covers what is held",
        selection::date(asked),
        selection::date(covered),
        humantime::format_duration(Duration::from_secs(missing.as_secs())),
        humantime::format_duration(retention)
    ))
}

/// A past window; no end is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PastWindow {
    pub start: SystemTime,
    pub end: Option<SystemTime>,
}

/// A session just opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedSession {
    pub id: String,
    pub start: SystemTime,
}

/// Who called a function, and how often.
#[derive(Clone, Debug)]
pub struct CallersResult {
    /// Most samples first.
    pub callers: Vec<report::CallerCount>,
    /// Samples in which the function appears at all.
    pub total: u64,
    pub text: String,
    pub summary: Summary,
}

/// Removes a running profile's cut token when the profile ends.
pub(super) struct CutToken<'a> {
    cuts: &'a CutTokens,
    key: (CallerKey, String),
}

impl Drop for CutToken<'_> {
    fn drop(&mut self) {
        crate::lock(self.cuts).remove(&self.key);
    }
}

impl Service {
    /// Turns on the kernel's recording of off-CPU time for a window of
    /// `mode` over `selector`, until the guard is dropped: the selected
    /// processes when the selector names them (and no family grows), else
    /// every process (the store's selector then picks the window's).
    pub(super) fn record_off_cpu(
        &self,
        mode: ProfileMode,
        selector: &Selector,
        family: bool,
    ) -> Result<Option<RecordingGuard>, ServiceError> {
        if !mode.records_off_cpu() {
            return Ok(None);
        }
        let recorded = if selector.pids.is_empty() || family {
            Recorded::Everything
        } else {
            Recorded::Pids(selector.pids.clone())
        };
        // Threads already waiting went off CPU unseen: their stacks are read
        // now, and their waits charged from here.
        let pages = (self.info.stack_copy_bytes / profiler_common::STACK_COPY_PAGE as u64) as u32;
        let guard = self
            .pipeline
            .record_waits(&self.offcpu, recorded, &selector.pids, pages)
            .map_err(|reason| {
                ServiceError::FailedPrecondition(format!(
                    "off-CPU and wall-clock time cannot be recorded on this machine: {reason}; \
                     use --mode cpu"
                ))
            })?;
        Ok(Some(guard))
    }

    /// Profiles the time to come: the next `spec.duration`, or less when
    /// cut short (the summary says so).
    pub async fn profile(&self, asker: Asker, spec: ProfileSpec) -> Result<Report, ServiceError> {
        self.check_selector(asker, &spec.selector, Window::Live)?;
        let duration = selection::profile_duration(spec.duration, self.max_profile_duration())?;
        selection::check_report_options(&spec.options)?;
        let selector = spec.selector.live()?;
        let cut = match &spec.cut_token {
            None => None,
            Some(token) => Some(self.register_cut(asker.key, token)?),
        };

        // A timeline needs each sample's time, which only samples taken the
        // way a peek takes them keep: a profile of chosen processes in the
        // Firefox Profiler's format is one at the daemon's rate.
        let timeline = spec.options.format == Format::Gecko;
        if timeline {
            rated::check_timeline(spec.mode, &selector)?;
        }
        let frequency_hz = spec
            .frequency_hz
            .or_else(|| timeline.then(|| self.frequency_hz()));
        if let Some(frequency_hz) = frequency_hz {
            rated::check(frequency_hz, spec.mode, &selector)?;
            let ended = std::sync::Mutex::new(WindowEnd::Full);
            let window = async {
                let end = window_end(Instant::now() + duration, &cut, &self.stopping).await;
                *crate::lock(&ended) = end;
            };
            let kernel_addresses = asker.caller.reads_kernel_addresses();
            let mut report = self
                .profile_at_rate(
                    selector,
                    frequency_hz,
                    spec.options,
                    kernel_addresses,
                    // An unprivileged asker holds at most half the slots.
                    (!asker.privileged()).then(|| asker.caller.uid()).flatten(),
                    window,
                )
                .await?;
            drop(cut);
            match *crate::lock(&ended) {
                WindowEnd::Stopping => return Err(ServiceError::Stopping),
                end => report.summary.cut_short = end == WindowEnd::Cut,
            }
            return Ok(report);
        }
        let _recording = self.record_off_cpu(spec.mode, &selector, false)?;
        let asked = Instant::now();
        let _hold = self.holds.hold(SystemTime::now());
        let start = self.pipeline.open_window().await?;
        // The window is as long as asked from its open cut, however late
        // that came (a drain under way, a backlog): it is said, not hidden.
        let opened = Instant::now();
        let cut_short = match window_end(opened + duration, &cut, &self.stopping).await {
            WindowEnd::Stopping => return Err(ServiceError::Stopping),
            end => end == WindowEnd::Cut,
        };
        drop(cut);
        let end = self.pipeline.close_window().await?;
        let sight = Sight::of(asker.caller);
        let mut report = self
            .report(start, end, selector, spec.mode, spec.options, sight)
            .await?;
        report.summary.cut_short = cut_short;
        let late = opened.duration_since(asked);
        if late > LATE_OPEN {
            report.summary.warnings.push(format!(
                "the window began {} after it was asked for: the daemon was behind in reading \
                 the kernel's samples (see `profilerctl status`); it covers the {} asked from \
                 then",
                humantime::format_duration(Duration::from_millis(late.as_millis() as u64)),
                humantime::format_duration(duration),
            ));
        }
        Ok(report)
    }

    /// Ends `asker`'s running profile of `token` now; false when it has
    /// none.
    pub fn cut_profile(&self, asker: Asker, token: &str) -> Result<bool, ServiceError> {
        selection::check_id(token, "the cut token")?;
        let notify = crate::lock(&self.cuts)
            .get(&(asker.key, token.to_owned()))
            .cloned();
        if let Some(notify) = &notify {
            notify.notify_one();
        }
        Ok(notify.is_some())
    }

    /// Registers a running profile's (or allocation profile's) cut token.
    pub(super) fn register_cut(
        &self,
        key: CallerKey,
        token: &str,
    ) -> Result<(Arc<Notify>, CutToken<'_>), ServiceError> {
        selection::check_id(token, "the cut token")?;
        let mut cuts = crate::lock(&self.cuts);
        let entry = (key, token.to_owned());
        if cuts.contains_key(&entry) {
            return Err(ServiceError::invalid(format!(
                "a running profile of this caller already has the cut token {}; choose a \
                 unique one",
                quote(token)
            )));
        }
        let notify = Arc::new(Notify::new());
        cuts.insert(entry.clone(), notify.clone());
        Ok((
            notify,
            CutToken {
                cuts: &self.cuts,
                key: entry,
            },
        ))
    }

    /// Opens a session over `selector`; with `children`, the one process it
    /// names is followed with every process it forks from now on.
    pub async fn start_session(
        &self,
        asker: Asker,
        selector: SelectorSpec,
        mode: ProfileMode,
        children: bool,
    ) -> Result<StartedSession, ServiceError> {
        self.check_selector(asker, &selector, Window::Live)?;
        let selector = selector.live()?;
        let family = match children {
            false => None,
            true => Some(Arc::new(
                self.families.follow(selection::family_root(&selector)?)?,
            )),
        };
        let recording = self.record_off_cpu(mode, &selector, family.is_some())?;
        let hold = self.holds.hold(SystemTime::now());
        let start = self.pipeline.open_window().await?;
        let session = Session {
            owner: asker.key,
            access: asker.caller.sample_access(),
            privileged: asker.privileged(),
            start,
            hold,
            selector,
            mode,
            family,
        };
        let id = self.sessions().open(session, asker)?;
        if let Some(recording) = recording {
            crate::lock(&self.session_recordings).insert(id.clone(), recording);
        }
        Ok(StartedSession { id, start })
    }

    /// Closes a session (its owner's, or any with `force` for root and the
    /// admin group) and reports it.
    pub async fn stop_session(
        &self,
        asker: Asker,
        id: &str,
        force: bool,
        options: ReportOptions,
    ) -> Result<Report, ServiceError> {
        selection::check_id(id, "the session id")?;
        selection::check_report_options(&options)?;
        let mut session = self.sessions().close(id, asker, force)?;
        let end = self.pipeline.close_window().await?;
        crate::lock(&self.session_recordings).remove(id);
        if let Some(family) = session.family.take() {
            session.selector.pids = family.pids();
        }
        // The report holds what the session's owner may see, shown as its
        // stopper may see it.
        let sight = Sight {
            access: session.access,
            kernel_addresses: asker.caller.reads_kernel_addresses(),
        };
        self.report(
            session.start,
            end,
            session.selector,
            session.mode,
            options,
            sight,
        )
        .await
    }

    /// The open sessions `asker` may see (every one for root and the admin
    /// group), oldest first, with their ids.
    pub fn list_sessions(&self, asker: Asker) -> Vec<(String, Session)> {
        self.sessions().list(asker)
    }

    /// A report of a past window the store still holds.
    pub async fn query(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        mode: ProfileMode,
        options: ReportOptions,
    ) -> Result<Report, ServiceError> {
        self.check_selector(asker, &selector, Window::Past)?;
        selection::check_report_options(&options)?;
        let selector = selector.past()?;
        let (start, end) = self.past_window(window).await?;
        let mut report = self
            .report(start, end, selector, mode, options, Sight::of(asker.caller))
            .await?;
        report.summary.warnings.extend(shortfall(
            "the window",
            start,
            report.summary.start,
            self.store_stats().retention,
        ));
        Ok(report)
    }

    /// Who called `function`, with counts, over a past window.
    pub async fn callers(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        function: String,
    ) -> Result<CallersResult, ServiceError> {
        self.check_selector(asker, &selector, Window::Past)?;
        let function = selection::function_name(function)?;
        let selector = selector.past()?;
        let (start, end) = self.past_window(window).await?;
        let sight = Sight::of(asker.caller);
        let query = self.query_of(start, end, selector, ProfileMode::Cpu, sight);
        // Callers are counted per stack, whatever its threads.
        answers::read_profile(
            &self.report_gate,
            self.store.clone(),
            query,
            SumBy::Stack,
            sight.kernel_addresses,
            move |profile| {
                let (callers, total) = report::callers(profile, &function);
                Ok(CallersResult {
                    text: report::callers_text(&function, &callers, total),
                    total,
                    callers,
                    summary: Summary::of(profile),
                })
            },
        )
        .await
    }

    /// Checks that `asker` may see what `selector` selects in a window.
    pub(super) fn check_selector(
        &self,
        asker: Asker,
        selector: &SelectorSpec,
        window: Window,
    ) -> Result<(), ServiceError> {
        selector.check_bounds()?;
        Ok(self
            .access
            .check_selection(asker.caller, &selector.tasks(), &selector.uids, window)?)
    }

    /// A past window's bounds, checked against what the store holds (its
    /// end, when it reaches past the last drain, drained first).
    pub(super) async fn past_window(
        &self,
        window: PastWindow,
    ) -> Result<(SystemTime, SystemTime), ServiceError> {
        let now = SystemTime::now();
        let PastWindow { start, end } = window;
        if end.is_some_and(|end| end <= start) || start >= now {
            return Err(ServiceError::invalid(format!(
                "the window must start before it ends and before now (start {}, end {}, now {})",
                selection::date(start),
                end.map_or_else(|| "now".to_owned(), selection::date),
                selection::date(now)
            )));
        }
        let end = match end {
            Some(end) if end < now => {
                // Samples up to `end` may still be in the kernel's maps.
                let newest = crate::read_lock(&self.store).newest();
                if newest.is_none_or(|newest| newest < end) {
                    self.pipeline.close_window_for_report().await?;
                }
                end
            }
            _ => self.pipeline.close_window_for_report().await?,
        };
        let oldest = crate::read_lock(&self.store).oldest();
        if oldest.is_none_or(|oldest| end <= oldest) {
            return Err(ServiceError::NotFound(format!(
                "nothing is held for that window (it ends {}): the daemon holds samples from {} \
                 on (its retention is {})",
                selection::date(end),
                oldest.map_or_else(|| "no time yet".to_owned(), selection::date),
                humantime::format_duration(self.store_stats().retention)
            )));
        }
        Ok((start, end))
    }

    pub(super) fn query_of(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        mode: ProfileMode,
        sight: Sight,
    ) -> Query {
        Query {
            start,
            end,
            selector,
            access: sight.access,
            mode,
            frequency_hz: self.frequency_hz(),
        }
    }

    /// Keeps the reports' stack indexes current until the daemon stops:
    /// every [`stack_indexes::STACK_INDEX_REFRESH`] the indexes in use take in the
    /// stacks the drains added once they are a
    /// [`stack_indexes::STACK_INDEX_LAG`]th of those held (and follow the store's
    /// compactions), so that a report's own share is small; the unused ones
    /// go.
    pub async fn keep_stack_indexes_current(self: Arc<Self>) {
        let mut every = tokio::time::interval(stack_indexes::STACK_INDEX_REFRESH);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                () = self.stopping.wait() => return,
            }
            if !self.stack_indexes.refresh_due(&self.store) {
                continue;
            }
            let (indexes, store) = (self.stack_indexes.clone(), self.store.clone());
            let kept = tokio::task::spawn_blocking(move || indexes.keep_current(&store)).await;
            if let Err(err) = kept {
                tracing::warn!("keeping the stack indexes current failed: {err}");
            }
        }
    }

    /// Reads a window from the store and renders it, off the async threads.
    async fn report(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        mode: ProfileMode,
        options: ReportOptions,
        sight: Sight,
    ) -> Result<Report, ServiceError> {
        let query = self.query_of(start, end, selector, mode, sight);
        answers::read_report(
            &self.report_gate,
            self.store.clone(),
            self.stack_indexes.clone(),
            query,
            sight.kernel_addresses,
            options,
            self.limits.max_response_bytes,
        )
        .await
    }
}
