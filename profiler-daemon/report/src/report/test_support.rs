//! Test-only builders of small, fixed profiles.
//!
//! Frame specs: `"name"` is a user location in `/usr/bin/app` with one frame
//! `name` at `app.c:10`; `"k:name"` is a kernel location (module `[kernel]`,
//! no file). Equal specs share one location.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use crate::profile::{Frame, Location, LocationKind, Profile, Sample, ThreadInfo};

pub fn frame(function: &str, file: Option<&str>, line: u32, inlined: bool) -> Frame {
    Frame {
        function: function.into(),
        file: file.map(Arc::from),
        line,
        inlined,
    }
}

pub fn location(kind: LocationKind, module: &str, address: u64, frames: Vec<Frame>) -> Location {
    Location {
        kind,
        module: module.into(),
        address,
        frames: frames.into(),
    }
}

/// Builds a profile of a 1 s window sampled at 100 Hz (100 ticks per CPU),
/// with thread 0 = tid 1234 "worker" of pid 1230 "server".
pub struct Builder {
    profile: Profile,
    named: HashMap<String, u32>,
}

impl Builder {
    pub fn new() -> Self {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut builder = Self {
            profile: Profile::empty(
                start,
                start + Duration::from_secs(1),
                100,
                10_000_000,
                crate::profile::ProfileMode::Cpu,
            ),
            named: HashMap::new(),
        };
        builder.thread(1230, 1234, "worker", "server");
        builder
    }

    pub fn thread(&mut self, pid: u32, tid: u32, thread_name: &str, process_name: &str) -> u32 {
        self.profile.threads.push(ThreadInfo {
            pid,
            tid,
            thread_name: thread_name.into(),
            process_name: process_name.into(),
            uid: 0,
            gid: 0,
            protected: false,
            cgroup: "/".into(),
        });
        self.profile.threads.len() as u32 - 1
    }

    pub fn location(&mut self, location: Location) -> u32 {
        self.profile.locations.push(location);
        self.profile.locations.len() as u32 - 1
    }

    /// The location of a frame spec (see the module doc).
    /// libz's `deflate` at deflate.c:100 with `fill_window` (at `file`:`line`)
    /// inlined into it: one location, two frames.
    pub fn deflate_inlining_fill_window(&mut self, file: Option<&str>, line: u32) -> u32 {
        self.location(location(
            LocationKind::User,
            "/usr/lib/libz.so.1",
            0x2000,
            vec![
                frame("deflate", Some("deflate.c"), 100, false),
                frame("fill_window", file, line, true),
            ],
        ))
    }

    pub fn named(&mut self, spec: &str) -> u32 {
        if let Some(&index) = self.named.get(spec) {
            return index;
        }
        let new = match spec.strip_prefix("k:") {
            Some(name) => location(
                LocationKind::Kernel,
                "[kernel]",
                0xffff_0000 + self.profile.locations.len() as u64,
                vec![frame(name, None, 0, false)],
            ),
            None => location(
                LocationKind::User,
                "/usr/bin/app",
                0x1000 + self.profile.locations.len() as u64,
                vec![frame(spec, Some("app.c"), 10, false)],
            ),
        };
        let index = self.location(new);
        self.named.insert(spec.to_owned(), index);
        index
    }

    /// Adds `count` samples (10 ms each) of `thread` with a stack of these
    /// locations, root first, merging with an existing (thread, stack) pair.
    pub fn sample(&mut self, thread: u32, locations: Vec<u32>, count: u64) {
        let known = self.profile.stacks.iter().position(|s| *s == locations);
        let stack = match known {
            Some(index) => index as u32,
            None => self.profile.stacks.push(locations),
        };
        let weight = count.saturating_mul(self.profile.period_ns);
        match self
            .profile
            .samples
            .iter_mut()
            .find(|s| s.thread == thread && s.stack == stack)
        {
            Some(sample) => {
                sample.count = sample.count.saturating_add(count);
                sample.weight = sample.weight.saturating_add(weight);
            }
            None => self.profile.samples.push(Sample {
                thread,
                stack,
                count,
                weight,
                state: crate::profile::ThreadState::Cpu,
            }),
        }
    }

    /// Adds `count` random stacks of 1 to 10 of `sites` to random
    /// `threads`: mostly a sample or a few each, one in `wide_one_in` up to
    /// `widest` samples (a flame graph's wide frames among narrow ones).
    pub fn random_samples(
        &mut self,
        random: &mut Random,
        (threads, sites): (&[u32], &[u32]),
        count: usize,
        (wide_one_in, widest): (usize, usize),
    ) {
        for _ in 0..count {
            let length = 1 + random.below(10);
            let stack = (0..length)
                .map(|_| sites[random.below(sites.len())])
                .collect();
            let samples = match random.below(wide_one_in) {
                0 => 1 + random.below(widest) as u64,
                _ => 1 + random.below(3) as u64,
            };
            self.sample(threads[random.below(threads.len())], stack, samples);
        }
    }

    /// Adds stacks of frame specs, root first, to `thread`.
    pub fn stacks(&mut self, thread: u32, stacks: &[(&[&str], u64)]) {
        for (specs, count) in stacks {
            let locations = specs.iter().map(|spec| self.named(spec)).collect();
            self.sample(thread, locations, *count);
        }
    }

    pub fn build(self) -> Profile {
        self.profile
    }
}

/// A profile of thread 0 with these stacks of frame specs.
pub fn profile(stacks: &[(&[&str], u64)]) -> Profile {
    let mut builder = Builder::new();
    builder.stacks(0, stacks);
    builder.build()
}

/// A fixed pseudo-random sequence (xorshift64) for tests that shake inputs.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// A number below `below`.
    pub fn below(&mut self, below: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % below as u64) as usize
    }
}

/// `hot` at app.c:42, compiled at `address` of /usr/bin/app: several calls
/// give one source line at several addresses.
pub fn hot_at(b: &mut Builder, address: u64) -> u32 {
    b.location(location(
        LocationKind::User,
        "/usr/bin/app",
        address,
        vec![frame("hot", Some("app.c"), 42, false)],
    ))
}

/// A tree or flat report without its `%` columns and its closing legend:
/// what the tests of the rest of its layout compare.
pub fn without_percents(text: &str) -> String {
    let legend = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map_or(0, |end| end + 1);
    let text = &text[..legend];
    let values = regex::Regex::new(r" [ \d]{2}\d\.\d%").expect("a valid pattern");
    let headings = regex::Regex::new(r"(\S) {6}[%=] ").expect("a valid pattern");
    let text = values.replace_all(text, "");
    headings.replace_all(&text, "$1 ").into_owned()
}
