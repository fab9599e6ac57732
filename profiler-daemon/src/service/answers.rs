//! What a window's answer is made of: the profile read from the store as
//! its asker may see it (`Sight`), rendered in the asked format, with a
//! summary that states plainly what it covers.

use std::{
    collections::HashSet,
    sync::{Arc, RwLock},
    time::{Duration, Instant, SystemTime},
};

use super::{
    error::ServiceError,
    limits,
    report_memory::ReportGate,
    stack_indexes::{StackIndexes, extend_index},
};
use crate::{
    profile::{Format, LossCause, Profile, ReportOptions, ThreadInfo, ThreadState},
    report::{self, OwnersShown, StackIndexKey},
    service::access::Caller,
    store::{Query, SampleAccess, Store, SumBy},
};

/// What a report may show its asker: whose samples, and whether kernel
/// addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sight {
    pub access: SampleAccess,
    pub kernel_addresses: bool,
}

impl Sight {
    pub fn of(caller: Caller) -> Self {
        Self {
            access: caller.sample_access(),
            kernel_addresses: caller.reads_kernel_addresses(),
        }
    }
}

/// What a report covers, stated plainly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// The window the samples were taken in.
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
    pub frequency_hz: u32,
    /// Samples in the report, after selection.
    pub samples: u64,
    /// CPU time those samples stand for.
    pub cpu_nanos: u64,
    /// Time waited off CPU those samples stand for.
    pub off_cpu_nanos: u64,
    pub processes: u32,
    pub threads: u32,
    /// Samples or stacks lost system-wide during the window, by cause.
    pub lost: Vec<(LossCause, u64)>,
    /// Samples of the report itself kept without their stacks, by cause
    /// (see [`crate::profile::OWN_LOSS_MARKERS`]).
    pub own_lost: Vec<(&'static str, u64)>,
    pub warnings: Vec<String>,
    /// The window was ended early and is shorter than asked for.
    pub cut_short: bool,
    /// An allocation profile's totals.
    pub memory: Option<MemoryTotals>,
}

/// What an allocation profile estimates: bytes and objects allocated in
/// its window, and of those, still held at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    pub allocated_bytes: u64,
    pub allocated_objects: u64,
    pub held_bytes: u64,
    pub held_objects: u64,
}

impl Summary {
    pub fn of(profile: &Profile) -> Self {
        let processes: HashSet<u32> = profile.threads.iter().map(|thread| thread.pid).collect();
        // One pass over the samples: (count, weight) per state.
        let mut sums = [(0_u64, 0_u64); ThreadState::ALL.len()];
        for sample in &profile.samples {
            let (count, weight) = &mut sums[sample.state as usize];
            *count = count.saturating_add(sample.count);
            *weight = weight.saturating_add(sample.weight);
        }
        // Threads not read per stack ran on CPU (see `Profile::unread`).
        for unread in &profile.unread {
            let (count, weight) = &mut sums[ThreadState::Cpu as usize];
            *count = count.saturating_add(unread.count);
            *weight = weight.saturating_add(unread.weight);
        }
        let sums_where = |state: ThreadState| sums[state as usize];
        let nanos_where = |wanted: fn(ThreadState) -> bool| -> u64 {
            ThreadState::ALL
                .iter()
                .filter(|&&state| wanted(state))
                .map(|&state| sums_where(state).1)
                .sum()
        };
        let memory = profile.mode.is_memory().then(|| {
            let (allocated_bytes, allocated_objects) = sums_where(ThreadState::Allocated);
            let (held_bytes, held_objects) = sums_where(ThreadState::Held);
            MemoryTotals {
                allocated_bytes,
                allocated_objects,
                held_bytes,
                held_objects,
            }
        });
        Self {
            start: Some(profile.start),
            end: Some(profile.end),
            frequency_hz: profile.frequency_hz,
            samples: if memory.is_some() {
                0
            } else {
                profile.total_samples()
            },
            cpu_nanos: nanos_where(|state| state == ThreadState::Cpu),
            off_cpu_nanos: nanos_where(|state| state.is_time() && state != ThreadState::Cpu),
            processes: processes.len() as u32,
            threads: profile.threads.len() as u32,
            lost: profile.lost.clone(),
            own_lost: profile.own_lost.clone(),
            warnings: profile.warnings.clone(),
            cut_short: false,
            memory,
        }
    }
}

/// A rendered report and what it covers.
#[derive(Clone, Debug)]
pub struct Report {
    /// UTF-8 text, or for pprof a gzipped profile.proto.
    pub bytes: Vec<u8>,
    pub format: Format,
    pub summary: Summary,
}

/// Reads `query`'s profile from the store (the kernel addresses taken out
/// unless `kernel_addresses`) summed by `sum_by`, and hands it to `make`,
/// off the async threads.
pub async fn read_profile<T: Send + 'static>(
    gate: &ReportGate,
    store: Arc<RwLock<Store>>,
    query: Query,
    sum_by: SumBy,
    kernel_addresses: bool,
    make: impl FnOnce(&Profile) -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ServiceError> {
    gate.run(move || {
        let started = Instant::now();
        let profile = window_profile(&store, &query, kernel_addresses, sum_by);
        let read = started.elapsed();
        let made = make(&profile);
        log_answer(&profile, started, read);
        made
    })
    .await?
}

/// Reads `query`'s window from the store and renders it as `options` ask,
/// off the async threads, refusing a report over `max_response_bytes`. The
/// stacks of the reports an index serves ([`StackIndexKey::of`]) come from
/// the index of their options, brought up to the store's stacks first.
pub async fn read_report(
    gate: &ReportGate,
    store: Arc<RwLock<Store>>,
    indexes: Arc<StackIndexes>,
    query: Query,
    kernel_addresses: bool,
    options: ReportOptions,
    max_response_bytes: u64,
) -> Result<Report, ServiceError> {
    gate.run(move || {
        let started = Instant::now();
        let index = StackIndexKey::of(&options, !kernel_addresses)
            .filter(|_| !query.mode.is_memory())
            .and_then(|key| indexes.get(key, crate::read_lock(&store).stack_count()));
        // The index before the store: the refresher, which takes them the
        // other way round, never waits for an index (see `keep_current`).
        let (profile, indexed) = match &index {
            Some(index) => {
                let mut locked = crate::write_lock(index);
                let store = crate::read_lock(&store);
                let locked_at = started.elapsed();
                extend_index(&store, &mut locked);
                // Reports of the same index wait only for its extension.
                drop(locked);
                let extended_at = started.elapsed();
                // No stacks or locations to hide kernel addresses in: the
                // index's words hide them.
                let profile = report_profile(&store, &query, false, &options);
                tracing::debug!(
                    locks_ms = locked_at.as_secs_f64() * 1e3,
                    extension_ms = (extended_at - locked_at).as_secs_f64() * 1e3,
                    window_ms = (started.elapsed() - extended_at).as_secs_f64() * 1e3,
                    "read a window from the store's stacks"
                );
                crate::memory::trim::after_report();
                (profile, Some((index, store.generation())))
            }
            None => (
                report_window_profile(&store, &query, kernel_addresses, &options),
                None,
            ),
        };
        let read = started.elapsed();
        let bytes = match indexed {
            Some((index, generation)) => match crate::read_lock(index) {
                index if index.generation() == generation => {
                    report::render_indexed(&profile, &options, &index)
                }
                // A compaction since the read renumbered the store's stacks
                // and started the index anew: the window is read again.
                _ => {
                    let profile = report_window_profile(&store, &query, kernel_addresses, &options);
                    report::render(&profile, &options)
                }
            },
            None => report::render(&profile, &options),
        };
        log_answer(&profile, started, read);
        answer(bytes, &profile, &options, max_response_bytes)
    })
    .await?
}

/// Logs how long a window's answer took to read and to make.
fn log_answer(profile: &Profile, started: Instant, read: Duration) {
    tracing::debug!(
        samples = profile.samples.len(),
        stacks = profile.stacks.len(),
        read_ms = read.as_secs_f64() * 1e3,
        made_ms = (started.elapsed() - read).as_secs_f64() * 1e3,
        "read a window's profile and made its answer"
    );
}

/// The window's profile a report made as `options` ask is made of: summed
/// per stack when it shows no threads, per command and stack when it shows
/// no more (see [`report::owners_shown`]); per thread and stack otherwise,
/// but
/// for a tree or flat report that may leave sections out (`maxsections`),
/// only the threads of those it shows (the others only counted). Its stacks
/// are copied, or left as the store's ids for a report from an index.
pub fn report_profile(
    store: &Store,
    query: &Query,
    copy_stacks: bool,
    options: &ReportOptions,
) -> Profile {
    let sum_by = match report::owners_shown(options) {
        // Summing per process would send most entries through a map where
        // processes run the same program (see `cpu_totals_per_owner`).
        OwnersShown::Threads | OwnersShown::Processes => SumBy::ThreadAndStack,
        OwnersShown::CommandsOrThreads => SumBy::CommandAndStack,
        OwnersShown::Nobody => SumBy::Stack,
    };
    if sum_by == SumBy::ThreadAndStack && report::may_leave_out_sections(options) {
        let pick = |threads: &[(&ThreadInfo, u64)]| report::threads_shown(options, threads);
        // A flame graph draws the sections it leaves out merged under one
        // frame, from their samples summed per stack.
        let sum_unread = options.format == Format::DrawnFolded;
        return store.profile_picking_threads(query, copy_stacks, &pick, sum_unread);
    }
    match copy_stacks {
        true => store.profile_summed(query, sum_by),
        false => store.profile_of_store_stacks(query, sum_by),
    }
}

/// [`report_profile`] with its stacks, the kernel addresses taken out unless
/// `kernel_addresses`. It blocks: call it off the async threads.
fn report_window_profile(
    store: &RwLock<Store>,
    query: &Query,
    kernel_addresses: bool,
    options: &ReportOptions,
) -> Profile {
    let profile = report_profile(&crate::read_lock(store), query, true, options);
    read_out(profile, kernel_addresses)
}

/// `query`'s profile as the store holds it, summed by `sum_by`, the kernel
/// addresses taken out unless `kernel_addresses`. It blocks: call it off
/// the async threads.
pub fn window_profile(
    store: &RwLock<Store>,
    query: &Query,
    kernel_addresses: bool,
    sum_by: SumBy,
) -> Profile {
    read_out(
        crate::read_lock(store).profile_summed(query, sum_by),
        kernel_addresses,
    )
}

/// A window's profile as read from the store, made fit to leave it: the
/// kernel addresses taken out unless `kernel_addresses`, and the memory of
/// the read given back.
fn read_out(mut profile: Profile, kernel_addresses: bool) -> Profile {
    if !kernel_addresses {
        profile.hide_kernel_addresses();
    }
    crate::memory::trim::after_report();
    profile
}

/// Renders `profile` as `options` ask, refusing a report over
/// `max_response_bytes`.
pub fn render(
    profile: &Profile,
    options: &ReportOptions,
    max_response_bytes: u64,
) -> Result<Report, ServiceError> {
    answer(
        report::render(profile, options),
        profile,
        options,
        max_response_bytes,
    )
}

/// The answer of a rendered report, refused over `max_response_bytes`.
fn answer(
    rendered: Result<Vec<u8>, report::ReportError>,
    profile: &Profile,
    options: &ReportOptions,
    max_response_bytes: u64,
) -> Result<Report, ServiceError> {
    let bytes = rendered.map_err(|err| match err {
        report::ReportError::Unsupported(why) => ServiceError::FailedPrecondition(why),
        err => ServiceError::Internal(format!("cannot render the report: {err}")),
    })?;
    limits::check_reply_size(bytes.len(), max_response_bytes)?;
    Ok(Report {
        bytes,
        format: options.format,
        summary: Summary::of(profile),
    })
}
