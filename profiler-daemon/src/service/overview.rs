//! What the web view shows around its flame graph: the held history's
//! samples span by span in a mode (its timeline, to pick a window on), the
//! processes sampled in a window with their samples, command, user and
//! cgroup (to pick processes from), a window's functions by self or
//! total samples, and one function's samples by source line (its source
//! heatmap; the source text is the HTTP listener's to read, or not).
//!
//! Owns those reads; it must not render reports (`reports`) or decide who
//! sees what (`access`).

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

use super::{
    PastWindow, Service, ServiceError,
    access::{Asker, Window},
    answers::{self, Sight},
    selection::SelectorSpec,
};
use crate::{
    profile::{Profile, ProfileMode, ThreadInfo},
    report::{self, FunctionLines, FunctionRanking, TopFunction},
    store::{HeldSpan, SumBy},
};

/// A process sampled in a window, and its samples there (in a mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSamples {
    pub pid: u32,
    pub command: String,
    pub uid: u32,
    /// Its cgroup path (empty when not known): its systemd unit on a
    /// systemd machine.
    pub cgroup: String,
    pub threads: u32,
    pub samples: u64,
}

impl Service {
    /// The held history span by span, after a drain (so that it reaches
    /// now): the selected processes' samples in `mode`. Only for callers
    /// who see every process (it shows when anything ran).
    pub async fn timeline(
        &self,
        asker: Asker,
        selector: SelectorSpec,
        mode: ProfileMode,
    ) -> Result<Vec<HeldSpan>, ServiceError> {
        if !asker.caller.sees_everything() {
            return Err(ServiceError::PermissionDenied(
                "the timeline counts the samples of every process: only root and the admin \
                 group may read it; choose a window by its length instead"
                    .to_owned(),
            ));
        }
        self.check_selector(asker, &selector, Window::Past)?;
        self.pipeline.close_window_for_report().await?;
        let query = self.query_of(
            UNIX_EPOCH,
            SystemTime::now(),
            selector.past()?,
            mode,
            Sight::of(asker.caller),
        );
        Ok(crate::read_lock(&self.store).timeline(&query))
    }

    /// The selected processes with samples in `mode` in `window` that
    /// `asker` may see, most samples first.
    pub async fn processes(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        mode: ProfileMode,
    ) -> Result<Vec<ProcessSamples>, ServiceError> {
        self.check_selector(asker, &selector, Window::Past)?;
        let (start, end) = self.past_window(window).await?;
        let query = self.query_of(start, end, selector.past()?, mode, Sight::of(asker.caller));
        let store = self.store.clone();
        self.report_gate
            .run(move || {
                // No thread's CPU stacks are read: each is only counted (time
                // off CPU is read per stack, as stack ids, and summed).
                let none = |threads: &[(&ThreadInfo, u64)]| Some(vec![false; threads.len()]);
                let profile =
                    crate::read_lock(&store).profile_picking_threads(&query, false, &none, false);
                let mut by_thread: BTreeMap<u32, u64> = BTreeMap::new();
                let counted = (profile
                    .unread
                    .iter()
                    .map(|unread| (unread.thread, unread.count)))
                .chain(
                    profile
                        .samples
                        .iter()
                        .map(|sample| (sample.thread, sample.count)),
                );
                for (thread, count) in counted {
                    let samples = by_thread.entry(thread).or_default();
                    *samples = samples.saturating_add(count);
                }
                let mut by_pid: BTreeMap<u32, ProcessSamples> = BTreeMap::new();
                for (thread, samples) in by_thread {
                    let thread = &profile.threads[thread as usize];
                    let process = by_pid.entry(thread.pid).or_insert_with(|| ProcessSamples {
                        pid: thread.pid,
                        command: thread.process_name.to_string(),
                        uid: thread.uid,
                        cgroup: thread.cgroup.to_string(),
                        threads: 0,
                        samples: 0,
                    });
                    process.threads += 1;
                    process.samples = process.samples.saturating_add(samples);
                }
                let mut processes: Vec<ProcessSamples> = by_pid.into_values().collect();
                processes.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
                processes
            })
            .await
    }
}

/// The most functions [`Service::functions`] gives.
pub const MAX_FUNCTIONS: usize = 1000;

/// A window's functions, ranked, and the window's samples.
#[derive(Clone, Debug)]
pub struct RankedFunctions {
    pub functions: Vec<TopFunction>,
    pub samples: u64,
}

impl Service {
    /// The `limit` functions of the selected processes' stacks in `window`
    /// first by `ranking`, with their self and total samples.
    pub async fn functions(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        mode: ProfileMode,
        (ranking, limit): (FunctionRanking, usize),
    ) -> Result<RankedFunctions, ServiceError> {
        if !(1..=MAX_FUNCTIONS).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "limit must be 1 to {MAX_FUNCTIONS} functions, not {limit}"
            )));
        }
        self.read_window(asker, window, selector, mode, move |profile| {
            let (functions, samples) = report::ranked(profile, limit, true, ranking);
            RankedFunctions { functions, samples }
        })
        .await
    }

    /// The samples of `function` (named as Callers names it) by source
    /// line, in the selected processes' stacks in `window`, and the
    /// window's samples: what the web view's source heatmap shows.
    pub async fn function_lines(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        mode: ProfileMode,
        function: String,
    ) -> Result<(FunctionLines, u64), ServiceError> {
        if function.trim().is_empty() {
            return Err(ServiceError::invalid(
                "name the function whose lines to count, e.g. function=main",
            ));
        }
        self.read_window(asker, window, selector, mode, move |profile| {
            let samples = profile.samples.iter().map(|sample| sample.count).sum();
            (report::function_lines(profile, &function), samples)
        })
        .await
    }

    /// `read` of the profile of the selected processes' stacks in
    /// `window`, as `asker` may see it, run as the reports are (within
    /// their share of memory).
    async fn read_window<T: Send + 'static>(
        &self,
        asker: Asker,
        window: PastWindow,
        selector: SelectorSpec,
        mode: ProfileMode,
        read: impl FnOnce(&Profile) -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        self.check_selector(asker, &selector, Window::Past)?;
        let selector = selector.past()?;
        let (start, end) = self.past_window(window).await?;
        let sight = Sight::of(asker.caller);
        let query = self.query_of(start, end, selector, mode, sight);
        let store = self.store.clone();
        self.report_gate
            .run(move || {
                let profile =
                    answers::window_profile(&store, &query, sight.kernel_addresses, SumBy::Stack);
                read(&profile)
            })
            .await
    }
}

/// Unix milliseconds of `time` (0 before 1970).
pub fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
