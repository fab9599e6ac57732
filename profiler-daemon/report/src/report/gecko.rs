//! The Firefox Profiler's format (`--format gecko`): a timeline of each
//! thread, every sample at its own time, in the profiler's processed
//! profile JSON, written by `fxprof-processed-profile` (the crate samply
//! writes it with, by the profiler's authors), so the schema is theirs.
//!
//! Made from [`Profile::timeline`]; a profile without one (the store keeps
//! no sample's time) is refused with what to ask for instead. Each
//! process is a process of the profile, each thread its track; a CPU
//! sample carries the CPU time it stands for, so the track's graph shows
//! when the thread ran and when it did not. Frames are labels (function
//! names), categorised as user, kernel, Python or other code; kernel
//! frames are one `[kernel]` frame unless `kernel` is asked.

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo,
    Profile as GeckoProfile, ReferenceTimestamp, SamplingInterval, StackHandle, ThreadHandle,
    Timestamp,
};
use rustc_hash::FxHashMap as HashMap;

use super::{
    ReportError,
    frames::{KERNEL_MARKER, Site},
};
use crate::profile::{LocationKind, Profile, ReportOptions, ThreadState};

/// Renders `profile`'s timeline as a Firefox Profiler profile (JSON).
pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<Vec<u8>, ReportError> {
    if profile.timeline.is_empty() && profile.total_samples() > 0 {
        return Err(ReportError::Unsupported(
            "the Firefox Profiler format (gecko) places each sample at its own time, which the \
             daemon keeps only for the samples of chosen processes: ask for a profile of them \
             (-p PID, sampled the way a peek samples) or a peek's report"
                .to_owned(),
        ));
    }
    let interval = SamplingInterval::from_nanos(profile.period_ns.max(1));
    let mut gecko = GeckoProfile::new(
        "profilerd",
        ReferenceTimestamp::from_system_time(profile.start),
        interval,
    );
    gecko.set_os_name("Linux");
    let categories = Categories {
        user: gecko.add_category("User", CategoryColor::Yellow).into(),
        kernel: gecko.add_category("Kernel", CategoryColor::Orange).into(),
        python: gecko.add_category("Python", CategoryColor::Blue).into(),
        waiting: gecko.add_category("Off CPU", CategoryColor::Gray).into(),
        other: fxprof_processed_profile::CategoryHandle::OTHER.into(),
    };
    let cpu_per_sample = cpu_per_sample(profile);
    // Every thread of the profile is a track, those without samples too.
    let mut tracks = Tracks::default();
    for info in &profile.threads {
        tracks.thread(&mut gecko, info);
    }
    let mut stacks: HashMap<(u32, u32), Option<StackHandle>> = HashMap::default();
    for timed in &profile.timeline {
        let Some(info) = profile.threads.get(timed.thread as usize) else {
            return Err(ReportError::InvalidProfile(format!(
                "a timed sample's thread {} is not in the profile",
                timed.thread
            )));
        };
        let thread = tracks.thread(&mut gecko, info);
        let stack = match stacks.get(&(timed.thread, timed.stack)) {
            Some(&stack) => stack,
            None => {
                let frames = frames_of(profile, timed.stack, options.kernel, &categories)?;
                let frames = frames
                    .into_iter()
                    .map(|(label, category_pair)| FrameInfo {
                        frame: Frame::Label(gecko.intern_string(&label)),
                        category_pair,
                        flags: FrameFlags::empty(),
                    })
                    .collect::<Vec<_>>();
                let stack = gecko.intern_stack_frames(thread, frames.into_iter());
                stacks.insert((timed.thread, timed.stack), stack);
                stack
            }
        };
        let cpu = match timed.state {
            ThreadState::Cpu => cpu_per_sample
                .get(&timed.thread)
                .copied()
                .unwrap_or(profile.period_ns),
            _ => 0,
        };
        gecko.add_sample(
            thread,
            Timestamp::from_nanos_since_reference(timed.offset_ns),
            stack,
            CpuDelta::from_nanos(cpu),
            1,
        );
    }
    serde_json::to_vec(&gecko)
        .map_err(|err| ReportError::InvalidProfile(format!("writing the gecko JSON: {err}")))
}

/// The category of each kind of frame.
struct Categories {
    user: CategoryPairHandle,
    kernel: CategoryPairHandle,
    python: CategoryPairHandle,
    waiting: CategoryPairHandle,
    other: CategoryPairHandle,
}

impl Categories {
    fn of(&self, kind: LocationKind, function: &str) -> CategoryPairHandle {
        match kind {
            LocationKind::User => self.user,
            LocationKind::Kernel => self.kernel,
            LocationKind::Python => self.python,
            // The leaf markers of time off CPU ("[sleeping]" …).
            LocationKind::Marker
                if ThreadState::TIMES
                    .iter()
                    .any(|state| state.leaf_marker() == Some(function)) =>
            {
                self.waiting
            }
            LocationKind::Marker => self.other,
        }
    }
}

/// The processes and threads of the profile made so far, by pid and tid.
#[derive(Default)]
struct Tracks {
    processes: HashMap<u32, fxprof_processed_profile::ProcessHandle>,
    threads: HashMap<u32, ThreadHandle>,
}

impl Tracks {
    fn thread(
        &mut self,
        gecko: &mut GeckoProfile,
        info: &crate::profile::ThreadInfo,
    ) -> ThreadHandle {
        if let Some(&thread) = self.threads.get(&info.tid) {
            return thread;
        }
        let start = Timestamp::from_nanos_since_reference(0);
        let process = *self
            .processes
            .entry(info.pid)
            .or_insert_with(|| gecko.add_process(&info.process_name, info.pid, start));
        let thread = gecko.add_thread(process, info.tid, start, info.tid == info.pid);
        gecko.set_thread_name(thread, &format!("{} ({})", info.thread_name, info.tid));
        self.threads.insert(info.tid, thread);
        thread
    }
}

/// The CPU time one CPU sample of each thread stands for: its CPU samples'
/// time shared out by their number.
fn cpu_per_sample(profile: &Profile) -> HashMap<u32, u64> {
    let mut sums: HashMap<u32, (u64, u64)> = HashMap::default();
    for sample in &profile.samples {
        if sample.state == ThreadState::Cpu && sample.count > 0 {
            let sum = sums.entry(sample.thread).or_default();
            sum.0 += sample.count;
            sum.1 += sample.weight;
        }
    }
    sums.into_iter()
        .map(|(thread, (count, weight))| (thread, weight / count))
        .collect()
}

/// The frames of a profile stack, root first: each a label and its
/// category; a run of kernel frames one `[kernel]` frame unless `kernel`.
fn frames_of(
    profile: &Profile,
    stack: u32,
    kernel: bool,
    categories: &Categories,
) -> Result<Vec<(String, CategoryPairHandle)>, ReportError> {
    let Some(locations) = profile.stacks.get(stack) else {
        return Err(ReportError::InvalidProfile(format!(
            "a timed sample's stack {stack} is not in the profile"
        )));
    };
    let mut frames: Vec<(String, CategoryPairHandle)> = Vec::with_capacity(locations.len());
    for &index in locations {
        let Some(location) = profile.locations.get(index as usize) else {
            return Err(ReportError::InvalidProfile(format!(
                "stack {stack} refers to location {index}, which the profile does not hold"
            )));
        };
        if !kernel && location.kind == LocationKind::Kernel {
            if frames
                .last()
                .is_none_or(|(label, _)| label != KERNEL_MARKER)
            {
                frames.push((KERNEL_MARKER.to_owned(), categories.kernel));
            }
            continue;
        }
        for frame in Site::Location(location).frames() {
            let label = match frame.function {
                super::frames::UNKNOWN_MARKER => format!(
                    "{} {}",
                    super::frames::UNKNOWN_MARKER,
                    frame.module.rsplit('/').next().unwrap_or(frame.module)
                ),
                function => function.to_owned(),
            };
            frames.push((label, categories.of(frame.kind, frame.function)));
        }
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, SystemTime},
    };

    use serde_json::Value;

    use super::*;
    use crate::profile::{Frame as ProfileFrame, Location, ProfileMode, Sample, ThreadInfo};

    fn location(kind: LocationKind, function: &str) -> Location {
        Location {
            kind,
            module: Arc::from("/usr/bin/app"),
            address: 0x10,
            frames: vec![ProfileFrame {
                function: Arc::from(function),
                file: None,
                line: 0,
                inlined: false,
            }]
            .into(),
        }
    }

    /// A spinning thread (10 ticks a millisecond apart, in `spin`) and a
    /// sleeping one (1 tick, in the kernel's `nanosleep`), of process 7.
    fn spinning_and_sleeping() -> Profile {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut profile = Profile::empty(
            start,
            start + Duration::from_millis(10),
            1000,
            1_000_000,
            ProfileMode::Cpu,
        );
        let thread = |tid, name: &str| ThreadInfo {
            tid,
            thread_name: Arc::from(name),
            process_name: Arc::from("app"),
            ..ThreadInfo::of_test(7)
        };
        profile.threads = vec![thread(7, "spinner"), thread(8, "sleeper")];
        profile.locations = vec![
            location(LocationKind::User, "main"),
            location(LocationKind::User, "spin"),
            location(LocationKind::Kernel, "do_syscall_64"),
            location(LocationKind::Kernel, "hrtimer_nanosleep"),
        ];
        let spin = profile.stacks.push([0, 1]);
        let sleep = profile.stacks.push([0, 2, 3]);
        let sample = |thread, stack, count| Sample {
            thread,
            stack,
            count,
            weight: count * 1_000_000,
            state: ThreadState::Cpu,
        };
        profile.samples = vec![sample(0, spin, 10), sample(1, sleep, 1)];
        let timed = |thread, stack, offset_ns| TimedSample {
            thread,
            stack,
            state: ThreadState::Cpu,
            offset_ns,
        };
        profile.timeline = (0..10)
            .map(|tick| timed(0, spin, tick * 1_000_000))
            .chain([timed(1, sleep, 5_000_000)])
            .collect();
        profile.timeline.sort_by_key(|timed| timed.offset_ns);
        profile
    }

    use crate::profile::TimedSample;

    /// The leaf function of each sample of thread `index`, with its time.
    fn leaves(document: &Value, index: usize) -> Vec<(f64, String)> {
        let thread = &document["threads"][index];
        let strings = &thread["stringArray"];
        let samples = &thread["samples"];
        let count = samples["length"].as_u64().unwrap() as usize;
        // Times are written as the milliseconds from the sample before.
        let mut time = 0.0;
        (0..count)
            .map(|sample| {
                time += samples["timeDeltas"][sample].as_f64().unwrap();
                let stack = samples["stack"][sample].as_u64().unwrap() as usize;
                let frame = thread["stackTable"]["frame"][stack].as_u64().unwrap() as usize;
                let func = thread["frameTable"]["func"][frame].as_u64().unwrap() as usize;
                let name = thread["funcTable"]["name"][func].as_u64().unwrap() as usize;
                (time, strings[name].as_str().unwrap().to_owned())
            })
            .collect()
    }

    #[test]
    fn each_thread_is_a_track_with_its_samples_at_their_times() {
        let profile = spinning_and_sleeping();
        let json = render(&profile, &ReportOptions::default()).expect("rendered");
        let document: Value = serde_json::from_slice(&json).expect("JSON");
        assert_eq!(document["meta"]["preprocessedProfileVersion"], 55);
        assert_eq!(document["meta"]["startTime"], 1_700_000_000_000.0);
        let threads = document["threads"].as_array().expect("threads");
        assert_eq!(threads.len(), 2, "{document}");
        // A main thread is named after its process.
        assert_eq!(threads[0]["name"], "app");
        assert_eq!(threads[0]["processName"], "app");
        assert_eq!(threads[0]["pid"], "7");
        assert_eq!(threads[0]["isMainThread"], true);
        assert_eq!(threads[1]["name"], "sleeper (8)");
        let spinner = leaves(&document, 0);
        let times: Vec<f64> = spinner.iter().map(|(time, _)| *time).collect();
        assert_eq!(times, (0..10).map(f64::from).collect::<Vec<_>>());
        assert!(
            spinner.iter().all(|(_, leaf)| leaf == "spin"),
            "{spinner:?}"
        );
        assert_eq!(
            leaves(&document, 1),
            [(5.0, "hrtimer_nanosleep".to_owned())]
        );
        // Without the kernel's frames, they are one.
        let user_only = ReportOptions {
            kernel: false,
            ..ReportOptions::default()
        };
        let user_only: Value =
            serde_json::from_slice(&render(&profile, &user_only).expect("rendered")).expect("JSON");
        assert_eq!(leaves(&user_only, 1), [(5.0, "[kernel]".to_owned())]);
        // Each CPU sample stands for its millisecond of CPU time (µs).
        let deltas = &document["threads"][0]["samples"]["threadCPUDelta"];
        assert_eq!(deltas[1], 1000, "{deltas}");
    }

    #[test]
    fn a_profile_without_times_is_refused_with_what_to_ask() {
        let mut profile = spinning_and_sleeping();
        profile.timeline.clear();
        let err = render(&profile, &ReportOptions::default()).expect_err("refused");
        assert!(err.to_string().contains("-p PID"), "{err}");
        // Nothing to place: each thread a track without samples, not an
        // error.
        profile.samples.clear();
        let json = render(&profile, &ReportOptions::default()).expect("rendered");
        let document: Value = serde_json::from_slice(&json).expect("JSON");
        assert_eq!(document["threads"].as_array().map(Vec::len), Some(2));
        assert_eq!(document["threads"][1]["samples"]["length"], 0);
    }
}
