//! An allocation profile from the sampled allocations of one process: each
//! sample scaled back up by the chance it had of being sampled (an
//! unbiased estimate of the bytes and objects allocated at its stack), and
//! those the kernel still held live at the end counted again as held. What
//! the kernel dropped of this profile is said by cause, as its own counts.
//!
//! Pure: owns nothing, touches nothing.

use std::time::SystemTime;

use profiler_common::SampleKind;
use rustc_hash::FxHashMap as HashMap;

use crate::{
    kernel::allocs::{KernelAllocations, Sampling},
    pipeline::Delivered,
    profile::{LossCause, Profile, ProfileAssembly, ProfileMode, ThreadState},
};

/// The profile of `samples` (the sampled allocations of one process, each
/// weighing its size), taken with `sampling` over `window`; `held` says
/// which are still live. Its samples are `Allocated` and `Held`, counting
/// bytes and weighing objects; its mode is [`ProfileMode::Allocated`].
pub fn allocation_profile(
    delivered: &Delivered,
    held: &KernelAllocations,
    sampling: Sampling,
    (start, end): (SystemTime, SystemTime),
    mut warnings: Vec<String>,
) -> Profile {
    let samples = &delivered.samples;
    let dropped = &held.dropped;
    if delivered.dropped > 0 {
        warnings.push(format!(
            "{} sampled allocations were read but dropped, and the estimates miss them: the \
             daemon's room for the samples of allocation profiles under way (a share of \
             memory_budget) was full; sample less often, or raise memory_budget",
            delivered.dropped
        ));
    }
    if dropped.share_full > 0 {
        warnings.push(format!(
            "{} sampled allocations ({} bytes) were dropped, and the estimates miss them: the \
             daemon had not yet read this profile's earlier ones, which filled its share of the \
             allocation ring buffer (alloc_stack_copy_buffer, shared by the profiles running); \
             sample less often (a larger --sample-bytes, a smaller --sample-rate)",
            dropped.share_full, dropped.share_full_bytes
        ));
    }
    if dropped.ring_full > 0 {
        warnings.push(format!(
            "{} sampled allocations ({} bytes) were dropped, and the estimates miss them: the \
             allocation ring buffer was full; raise alloc_stack_copy_buffer or sample less often",
            dropped.ring_full, dropped.ring_full_bytes
        ));
    }
    if held.calls_not_followed > 0 {
        warnings.push(format!(
            "{} allocator calls were not followed (the map of calls under way was full): they \
             could not be sampled, and the estimates may miss them",
            held.calls_not_followed
        ));
    }
    if held.untracked > 0 {
        warnings.push(format!(
            "{} sampled allocations could not be followed to their free (the map of live \
             allocations was full): they count as allocated, not as held",
            held.untracked
        ));
    }
    let period = match sampling {
        Sampling::Bytes(mean) => mean,
        Sampling::Rate(_) => 0,
    };
    let lost = [
        (LossCause::AllocShareFull, dropped.share_full),
        (LossCause::AllocStackLost, dropped.ring_full),
        (LossCause::AllocCallsFull, held.calls_not_followed),
        (LossCause::AllocInboxFull, delivered.dropped),
    ]
    .into_iter()
    .filter(|&(_, count)| count > 0)
    .collect();
    let mut assembly = ProfileAssembly::new(Profile {
        warnings,
        lost,
        ..Profile::empty(start, end, 0, period, ProfileMode::Allocated)
    });
    // Estimates are fractions: summed before they are rounded.
    let mut sums: HashMap<(u32, u32, ThreadState), (f64, f64)> = HashMap::default();
    let mut spread = [Spread::default(); 2];
    for sample in samples
        .iter()
        .filter(|sample| sample.kind == SampleKind::Allocation)
    {
        let size = sample.weight;
        let chance = sampling.chance(size).max(f64::MIN_POSITIVE);
        let (bytes, objects) = (size as f64 / chance, 1.0 / chance);
        let thread = assembly.thread(&sample.thread);
        let stack = assembly.stack(&sample.stack);
        let mut add = |state| {
            let sum = sums.entry((thread, stack, state)).or_default();
            sum.0 += bytes;
            sum.1 += objects;
        };
        add(ThreadState::Allocated);
        spread[0].add(size, chance);
        if held.live.contains(&sample.allocation_id) {
            add(ThreadState::Held);
            spread[1].add(size, chance);
        }
    }
    if let Some(note) = uncertainty(spread) {
        assembly.warn(note);
    }
    for ((thread, stack, state), (bytes, objects)) in sums {
        assembly.add(
            thread,
            stack,
            state,
            bytes.round() as u64,
            objects.round() as u64,
        );
    }
    assembly.finish(|bytes, objects, _| (bytes, objects))
}

/// How uncertain a sampled byte total is: the total estimated and the
/// variance of that estimate (each sampled allocation of `size` bytes,
/// taken with chance `p`, stands for `size / p` bytes; the estimate's
/// variance is estimated by the sum of `(1 - p) / p² · size²`).
#[derive(Clone, Copy, Debug, Default)]
struct Spread {
    samples: u64,
    bytes: f64,
    variance: f64,
}

impl Spread {
    fn add(&mut self, size: u64, chance: f64) {
        let size = size as f64;
        self.samples += 1;
        self.bytes += size / chance;
        self.variance += (1.0 - chance) / (chance * chance) * size * size;
    }

    /// One standard error, as a share of the total.
    fn relative_error(&self) -> f64 {
        match self.bytes > 0.0 {
            true => self.variance.sqrt() / self.bytes,
            false => 0.0,
        }
    }
}

/// What a report says of how certain its totals are, when they are
/// estimates (some allocations were sampled with a chance below 1).
fn uncertainty([allocated, held]: [Spread; 2]) -> Option<String> {
    if allocated.variance <= 0.0 {
        return None;
    }
    let held = match held.samples {
        0 => "none of them still held".to_owned(),
        n => format!(
            "{n} still held: that total ±{:.0}%",
            held.relative_error() * 100.0
        ),
    };
    Some(format!(
        "the byte figures are estimates from {} sampled allocations: the allocated total \
         ±{:.0}%, {held} (one standard error; a site with few sampled allocations is less \
         certain; --sample-rate 1 samples every allocation)",
        allocated.samples,
        allocated.relative_error() * 100.0,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        profile::{Location, LocationKind, ThreadInfo},
        symbols::symbolizer::{LocationKey, SymbolizedLocation, SymbolizedSample},
    };

    fn location(name: &str) -> Arc<SymbolizedLocation> {
        Arc::new(SymbolizedLocation {
            key: LocationKey::Marker(name.into()),
            location: Location {
                kind: LocationKind::User,
                module: "app".into(),
                address: 0,
                frames: vec![crate::profile::Frame {
                    function: name.into(),
                    file: None,
                    line: 0,
                    inlined: false,
                }]
                .into(),
            },
        })
    }

    /// Every sample delivered, none dropped.
    fn all(samples: Vec<SymbolizedSample>) -> Delivered {
        Delivered {
            samples,
            dropped: 0,
        }
    }

    fn allocation(site: &str, size: u64, id: u64) -> SymbolizedSample {
        SymbolizedSample {
            thread: ThreadInfo {
                pid: 7,
                tid: 7,
                thread_name: "app".into(),
                process_name: "app".into(),
                uid: 0,
                gid: 0,
                protected: false,
                cgroup: "/".into(),
            },
            kind: SampleKind::Allocation,
            stack: vec![location("main"), location(site)],
            count: 1,
            weight: size,
            allocation_id: id,
            times_ns: Vec::new(),
        }
    }

    #[test]
    fn samples_are_scaled_by_their_chance_and_live_ones_are_held() {
        let samples = vec![
            allocation("keep", 1024, 1),
            allocation("keep", 1024, 2),
            allocation("drop", 4096, 3),
        ];
        let held = KernelAllocations {
            live: [2].into_iter().collect(),
            ..KernelAllocations::default()
        };
        let now = SystemTime::now();
        let profile = allocation_profile(
            &all(samples),
            &held,
            Sampling::Rate(0.5),
            (now, now),
            Vec::new(),
        );
        let by_state = |state| -> Vec<(u64, u64)> {
            profile
                .samples
                .iter()
                .filter(|sample| sample.state == state)
                .map(|sample| (sample.count, sample.weight))
                .collect()
        };
        // Rate 0.5: each sample stands for two allocations.
        assert_eq!(by_state(ThreadState::Allocated), vec![(4096, 4), (8192, 2)]);
        assert_eq!(by_state(ThreadState::Held), vec![(2048, 2)]);
        assert_eq!(profile.mode, ProfileMode::Allocated);
        // sqrt(2 · (1024² + 1024² + 4096²)) = 6144 of 12288 bytes; the held
        // 2048: sqrt(2 · 1024²) ≈ 1448.
        assert_eq!(
            profile.warnings,
            vec![
                "the byte figures are estimates from 3 sampled allocations: the allocated total \
                 ±50%, 1 still held: that total ±71% (one standard error; a site with few \
                 sampled allocations is less certain; --sample-rate 1 samples every allocation)"
            ]
        );
        // Every allocation sampled: exact, nothing to say.
        let exact = allocation_profile(
            &all(vec![allocation("keep", 1024, 1)]),
            &KernelAllocations::default(),
            Sampling::Rate(1.0),
            (now, now),
            Vec::new(),
        );
        assert!(exact.warnings.is_empty(), "{:?}", exact.warnings);
    }

    #[test]
    fn byte_sampling_scales_small_allocations_to_the_mean_interval() {
        let now = SystemTime::now();
        let profile = allocation_profile(
            &all(vec![allocation("site", 16, 1)]),
            &KernelAllocations::default(),
            Sampling::Bytes(1 << 20),
            (now, now),
            Vec::new(),
        );
        let sample = profile.samples[0];
        // 16 / (1 - exp(-16 / 2^20)) ≈ 2^20 + 8.
        assert!(sample.count.abs_diff((1 << 20) + 8) <= 1, "{sample:?}");
        assert!(sample.weight.abs_diff((1 << 20) / 16) <= 1, "{sample:?}");
        assert_eq!(profile.period_ns, 1 << 20);
    }

    #[test]
    fn drops_are_warned_about_and_counted_by_cause() {
        let now = SystemTime::now();
        let held = KernelAllocations {
            dropped: crate::kernel::allocs::AllocationDrops {
                share_full: 3,
                share_full_bytes: 300,
                ring_full: 4,
                ring_full_bytes: 400,
            },
            untracked: 2,
            calls_not_followed: 5,
            ..KernelAllocations::default()
        };
        let read_but_dropped = Delivered {
            samples: Vec::new(),
            dropped: 6,
        };
        let profile = allocation_profile(
            &read_but_dropped,
            &held,
            Sampling::DEFAULT,
            (now, now),
            Vec::new(),
        );
        assert_eq!(profile.warnings.len(), 5, "{:?}", profile.warnings);
        assert!(profile.warnings[0].contains("6 sampled allocations were read but dropped"));
        let warnings = &profile.warnings[1..];
        assert!(warnings[0].contains("3 sampled allocations (300 bytes)"));
        assert!(warnings[0].contains("share"));
        assert!(warnings[1].contains("4 sampled allocations (400 bytes)"));
        assert!(warnings[2].contains("5 allocator calls"));
        assert_eq!(
            profile.lost,
            [
                (LossCause::AllocShareFull, 3),
                (LossCause::AllocStackLost, 4),
                (LossCause::AllocCallsFull, 5),
                (LossCause::AllocInboxFull, 6)
            ]
        );
        // Nothing dropped, nothing said.
        let clean = allocation_profile(
            &Delivered::default(),
            &KernelAllocations::default(),
            Sampling::DEFAULT,
            (now, now),
            Vec::new(),
        );
        assert!(clean.warnings.is_empty() && clean.lost.is_empty());
    }
}
