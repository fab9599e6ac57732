//! Profiles of chosen processes at a rate of their own (`profilerctl
//! profile -p PID -F HZ`): sampled the way a peek samples its process
//! (per-thread CPU clocks, see `peek::rated`), while the daemon samples
//! every CPU at its own rate into the store as before. Their samples never
//! enter the store: the profile is assembled from them and rendered as any
//! other.
//!
//! Owns the validation of such a request and the profile made of its
//! samples; it must not switch clocks on or off itself.

use profiler_common::SampleKind;

use super::{
    Service, ServiceError,
    answers::{self, Report},
};
use crate::{
    peek::{MAX_RATE_HZ, RatedSamples},
    profile::{
        Format, OWN_LOSS_MARKERS, Profile, ProfileAssembly, ProfileMode, ThreadState, own_loss_of,
    },
    store::Selector,
};

/// Why a profile at a rate of its own cannot be made as asked, if it
/// cannot.
pub(super) fn check(
    frequency_hz: u32,
    mode: ProfileMode,
    selector: &Selector,
) -> Result<(), ServiceError> {
    if !(1..=MAX_RATE_HZ).contains(&frequency_hz) {
        return Err(ServiceError::invalid(format!(
            "a profile's own rate (-F) must be 1 to {MAX_RATE_HZ} Hz, not {frequency_hz}"
        )));
    }
    if mode != ProfileMode::Cpu {
        return Err(ServiceError::invalid(
            "a profile at its own rate (-F) samples CPU time only; leave -F out for --mode wall \
             or offcpu",
        ));
    }
    if selector.pids.is_empty() {
        return Err(ServiceError::invalid(
            "a profile at its own rate (-F) samples the processes it names: select them by pid \
             (-p PID); without -F a profile covers any selection at the daemon's rate",
        ));
    }
    Ok(())
}

/// Why a profile in the Firefox Profiler's format (a timeline) cannot be
/// made as asked, if it cannot: only the samples of chosen processes keep
/// their times, and those are CPU samples.
pub(super) fn check_timeline(mode: ProfileMode, selector: &Selector) -> Result<(), ServiceError> {
    if selector.pids.is_empty() {
        return Err(ServiceError::FailedPrecondition(
            "the Firefox Profiler format (gecko) places each sample at its own time, which the \
             daemon keeps only for chosen processes (sampled the way a peek samples them): \
             select them by pid (-p PID), or ask another format"
                .to_owned(),
        ));
    }
    if mode != ProfileMode::Cpu {
        return Err(ServiceError::FailedPrecondition(
            "the Firefox Profiler format (gecko) of a profile holds CPU samples only (each \
             thread's track shows when it ran, and gaps when it did not); use --mode cpu"
                .to_owned(),
        ));
    }
    Ok(())
}

impl Service {
    /// Samples `selector`'s processes at `frequency_hz` until `window`
    /// resolves, and reports what they did as `options` ask.
    pub(super) async fn profile_at_rate(
        &self,
        selector: Selector,
        frequency_hz: u32,
        options: crate::profile::ReportOptions,
        kernel_addresses: bool,
        bound_uid: Option<u32>,
        window: impl Future<Output = ()>,
    ) -> Result<Report, ServiceError> {
        let rated = self
            .peeker
            .sample_at_rate(&selector.pids, frequency_hz, bound_uid, window)
            .await?;
        let lost = crate::read_lock(&self.store).window_losses(rated.start, rated.end);
        let max_response_bytes = self.limits.max_response_bytes;
        self.report_gate
            .run(move || {
                let timeline = options.format == Format::Gecko;
                let mut profile = rated_profile(rated, &selector, frequency_hz, timeline);
                profile.lost = lost;
                if !kernel_addresses {
                    profile.hide_kernel_addresses();
                }
                answers::render(&profile, &options, max_response_bytes)
            })
            .await?
    }
}

/// The CPU profile of `rated`'s samples of the threads `selector` picks,
/// their CPU time the threads' own (by the scheduler), shared out by
/// samples; one period of `frequency_hz` each when it was not read. For a
/// `timeline`, every thread sampled is in it, those that never ran too.
fn rated_profile(
    rated: RatedSamples,
    selector: &Selector,
    frequency_hz: u32,
    timeline: bool,
) -> Profile {
    let period_ns = 1_000_000_000 / u64::from(frequency_hz.max(1));
    let mut warnings = rated.warnings;
    let taken: u64 = rated.samples.iter().map(|sample| sample.count).sum();
    if let Some(note) = rated
        .ran_ns
        .and_then(|ran| ticks_missed(taken, ran, frequency_hz))
    {
        warnings.push(note);
    }
    if rated.dropped > 0 {
        warnings.push(format!(
            "{} samples were read but dropped: the room for the samples of peeks and profiles \
             at their own rate (a share of memory_budget) was full; ask a lower rate (-F) or \
             raise memory_budget",
            rated.dropped
        ));
    }
    let mut assembly = ProfileAssembly::new(Profile {
        warnings,
        ..Profile::empty(
            rated.start,
            rated.end,
            frequency_hz,
            period_ns,
            ProfileMode::Cpu,
        )
    });
    if timeline {
        for thread in rated
            .threads
            .iter()
            .filter(|thread| selector.matches(thread))
        {
            assembly.thread(thread);
        }
    }
    let mut own_lost = [0_u64; OWN_LOSS_MARKERS.len()];
    for sample in &rated.samples {
        let kept = matches!(sample.kind, SampleKind::Peek | SampleKind::PeekInstant)
            && selector.matches(&sample.thread);
        if !kept {
            continue;
        }
        if let Some(cause) = sample
            .stack
            .first()
            .and_then(|root| own_loss_of(&root.location))
        {
            own_lost[cause] += sample.count;
        }
        let thread = assembly.thread(&sample.thread);
        let stack = assembly.stack(&sample.stack);
        assembly.add(thread, stack, ThreadState::Cpu, sample.count, 0);
        // Ticks taken as the clocks started, a moment before `start`, are
        // placed at it.
        for &time_ns in &sample.times_ns {
            let offset_ns = time_ns.saturating_sub(rated.start_ns);
            assembly.place(thread, stack, ThreadState::Cpu, offset_ns);
        }
    }
    // The CPU time the samples stand for is the scheduler's count of what
    // the threads ran, shared out by samples: true even where the clocks
    // fired less often than asked.
    let sample_ns = match rated.ran_ns {
        Some(ran) if taken > 0 => ran as f64 / taken as f64,
        _ => period_ns as f64,
    };
    let mut profile =
        assembly.finish(|count, _, _| (count, (count as f64 * sample_ns).round() as u64));
    profile.own_lost = OWN_LOSS_MARKERS
        .iter()
        .zip(own_lost)
        .filter(|&(_, count)| count > 0)
        .map(|(&(_, cause), count)| (cause, count))
        .collect();
    profile
}

/// What a profile at its own rate says when its clocks fired much less
/// often than the CPU time its threads ran (`ran_ns`) asks: the kernel's
/// per-thread clocks lose ticks when their thread is preempted often (a
/// machine whose CPUs are oversubscribed), as `perf record -p` does.
fn ticks_missed(taken: u64, ran_ns: u64, frequency_hz: u32) -> Option<String> {
    let expected = ran_ns as f64 / 1e9 * f64::from(frequency_hz);
    if expected < 20.0 || taken as f64 >= expected * TICKS_SAID_BELOW {
        return None;
    }
    Some(format!(
        "the threads ran {:.2} CPU-seconds, {:.0} ticks at {frequency_hz} Hz, but their clocks \
         fired {taken} times ({:.0}%): the kernel's per-thread CPU clocks lose ticks when their \
         thread is preempted often (its CPUs are shared with other busy threads), as perf \
         record -p does; the shares between functions hold, the counts and CPU-seconds are low",
        ran_ns as f64 / 1e9,
        expected,
        taken as f64 * 100.0 / expected
    ))
}

/// Below this share of the ticks its threads' CPU time asks, a profile at
/// its own rate says so.
const TICKS_SAID_BELOW: f64 = 0.8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_that_fired_much_less_than_the_cpu_time_asks_are_said() {
        // 1 CPU-second at 997 Hz: 997 ticks.
        assert_eq!(ticks_missed(900, 1_000_000_000, 997), None);
        let note = ticks_missed(400, 1_000_000_000, 997).expect("said");
        assert!(
            note.starts_with(
                "the threads ran 1.00 CPU-seconds, 997 ticks at 997 Hz, but their \
                              clocks fired 400 times (40%)"
            ),
            "{note}"
        );
        // Too little CPU time to tell.
        assert_eq!(ticks_missed(1, 10_000_000, 997), None);
    }
}
