//! Assembles a [`Profile`] from symbolized samples outside the store (a
//! peek's, an allocation profile's): threads, locations and stacks are
//! numbered once each, samples summed per thread, stack and state.
//!
//! Owns only the numbering while a profile is assembled; it must not
//! decide what a sample counts (its callers do).

use std::{hash::Hash, sync::Arc};

use rustc_hash::FxHashMap as HashMap;

use super::{Location, Profile, Sample, ThreadInfo, ThreadState, TimedSample};

/// A location as its source knows it: the key that makes two locations
/// the same one (numbered once in the profile), and what the profile
/// holds of it.
pub trait KeyedLocation {
    /// The identity of a location (the symbolizer's: binary and offset,
    /// kernel address, marker…).
    type Key: Eq + Hash;

    /// This location's identity.
    fn key(&self) -> &Self::Key;

    /// What the profile holds of this location.
    fn location(&self) -> &Location;
}

/// A profile being assembled: `profile` holds the threads, locations and
/// stacks added so far; the samples are summed here until [`finish`].
/// Locations are numbered by their [`KeyedLocation::Key`].
///
/// [`finish`]: ProfileAssembly::finish
pub struct ProfileAssembly<'a, L: KeyedLocation> {
    profile: Profile,
    threads: HashMap<u32, u32>,
    locations: HashMap<&'a L::Key, u32>,
    stacks: HashMap<Vec<u32>, u32>,
    samples: HashMap<(u32, u32, ThreadState), (u64, u64)>,
}

impl<'a, L: KeyedLocation> ProfileAssembly<'a, L> {
    /// Starts from `profile`'s window, mode and settings (its tables and
    /// samples must be empty).
    pub fn new(profile: Profile) -> Self {
        Self {
            profile,
            threads: HashMap::default(),
            locations: HashMap::default(),
            stacks: HashMap::default(),
            samples: HashMap::default(),
        }
    }

    /// The index of a thread (by thread id), added when new.
    pub fn thread(&mut self, thread: &ThreadInfo) -> u32 {
        let threads = &mut self.profile.threads;
        *self.threads.entry(thread.tid).or_insert_with(|| {
            threads.push(thread.clone());
            threads.len() as u32 - 1
        })
    }

    /// Whether a thread (by thread id) is in the profile.
    pub fn has_thread(&self, tid: u32) -> bool {
        self.threads.contains_key(&tid)
    }

    /// The index of a stack (outermost caller first), added when new.
    pub fn stack(&mut self, stack: &'a [Arc<L>]) -> u32 {
        let locations = &mut self.profile.locations;
        let ids: Vec<u32> = stack
            .iter()
            .map(|location| {
                *self.locations.entry(location.key()).or_insert_with(|| {
                    locations.push(location.location().clone());
                    locations.len() as u32 - 1
                })
            })
            .collect();
        let next = self.stacks.len() as u32;
        let stacks = &mut self.profile.stacks;
        *self.stacks.entry(ids).or_insert_with_key(|ids| {
            stacks.push(ids.iter().copied());
            next
        })
    }

    /// Adds `count` and `weight` to the sample of (`thread`, `stack`,
    /// `state`).
    pub fn add(&mut self, thread: u32, stack: u32, state: ThreadState, count: u64, weight: u64) {
        let entry = self.samples.entry((thread, stack, state)).or_default();
        entry.0 = entry.0.saturating_add(count);
        entry.1 = entry.1.saturating_add(weight);
    }

    /// Places one sample of (`thread`, `stack`, `state`) at `offset_ns`
    /// after the profile's start on its timeline (its count is
    /// [`add`](Self::add)ed apart).
    pub fn place(&mut self, thread: u32, stack: u32, state: ThreadState, offset_ns: u64) {
        self.profile.timeline.push(TimedSample {
            thread,
            stack,
            state,
            offset_ns,
        });
    }

    /// The profile, its samples in (thread, stack, state) order, each
    /// with its sums passed through `finish_sample` (count, weight, state
    /// to count, weight).
    pub fn finish(
        mut self,
        finish_sample: impl Fn(u64, u64, ThreadState) -> (u64, u64),
    ) -> Profile {
        let mut samples: Vec<_> = self.samples.into_iter().collect();
        samples.sort_unstable_by_key(|&(key, _)| key);
        self.profile.samples = samples
            .into_iter()
            .map(|((thread, stack, state), (count, weight))| {
                let (count, weight) = finish_sample(count, weight, state);
                Sample {
                    thread,
                    stack,
                    count,
                    weight,
                    state,
                }
            })
            .collect();
        self.profile
            .timeline
            .sort_by_key(|timed| (timed.offset_ns, timed.thread));
        self.profile
    }

    /// Adds a warning to the profile.
    pub fn warn(&mut self, warning: String) {
        self.profile.warnings.push(warning);
    }

    /// The profile assembled so far.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }
}
