//! A profile's stacks without a Python interpreter's own C frames, as
//! py-spy shows them without `--native`: what a report shows when asked to
//! hide them (`ReportOptions::interpreter` false).
//!
//! In a stack that holds Python frames ([`LocationKind::Python`]) the
//! frames rootward of the outermost one (how the interpreter and its
//! thread started; markers kept) and every frame of the interpreter's own
//! binary or library between and leafward of them (the evaluation loop's
//! and calling machinery, C builtins such as `sorted`) are left out. What
//! is not the interpreter's stays: a C extension's functions, the libc
//! functions and kernel frames a Python function leads to. Stacks without
//! Python frames are unchanged. The interpreter is told by its file's name,
//! as the daemon finds it (`python3.N`, `libpython3.N….so…`).
//!
//! It must not change what a sample counts: samples whose stacks become
//! alike are summed.

use rustc_hash::FxHashMap;

use super::{LocationKind, Profile, Sample, Stacks, TimedSample};

/// Whether `module` (a path or a file name) is named like a CPython 3
/// interpreter's binary or library: `python3.N` (and `python3.Nd`,
/// `python3.Nt`) or `libpython3.N….so…`, as the daemon finds interpreters
/// by (`python3` and `libpython3.so` are links or stubs, never the file
/// mapped).
pub fn is_python_interpreter(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    let name = name.strip_prefix("lib").unwrap_or(name);
    name.strip_prefix("python3.")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// What a location is to the filter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Python,
    Interpreter,
    Marker,
    Other,
}

impl Profile {
    /// The profile with the Python interpreter's own frames left out of
    /// the stacks that hold Python frames (see the module doc).
    pub fn without_interpreter_frames(&self) -> Profile {
        let kinds: Vec<Kind> = self
            .locations
            .iter()
            .map(|location| match location.kind {
                LocationKind::Python => Kind::Python,
                LocationKind::Marker => Kind::Marker,
                LocationKind::User if is_python_interpreter(&location.module) => Kind::Interpreter,
                _ => Kind::Other,
            })
            .collect();
        let kind = |location: u32| kinds.get(location as usize).copied().unwrap_or(Kind::Other);
        let mut stacks = Stacks::with_capacity(self.stacks.len(), self.stacks.location_count());
        let mut numbered: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut kept = Vec::new();
        // The new index of each stack.
        let renumbered: Vec<u32> = self
            .stacks
            .iter()
            .map(|stack| {
                kept.clear();
                match stack
                    .iter()
                    .position(|&location| kind(location) == Kind::Python)
                {
                    None => kept.extend_from_slice(stack),
                    Some(outermost) => {
                        let (before, from) = stack.split_at(outermost);
                        kept.extend(before.iter().filter(|&&l| kind(l) == Kind::Marker));
                        kept.extend(from.iter().filter(|&&l| kind(l) != Kind::Interpreter));
                    }
                }
                match numbered.get(kept.as_slice()) {
                    Some(&index) => index,
                    None => {
                        let index = stacks.push(kept.iter().copied());
                        numbered.insert(kept.clone(), index);
                        index
                    }
                }
            })
            .collect();
        let stack_of = |sample: &Sample| {
            renumbered
                .get(sample.stack as usize)
                .copied()
                .unwrap_or(sample.stack)
        };
        Profile {
            stacks,
            samples: merged(&self.samples, stack_of),
            unread_stacks: merged(&self.unread_stacks, stack_of),
            timeline: self
                .timeline
                .iter()
                .map(|timed| TimedSample {
                    stack: renumbered
                        .get(timed.stack as usize)
                        .copied()
                        .unwrap_or(timed.stack),
                    ..*timed
                })
                .collect(),
            locations: self.locations.clone(),
            threads: self.threads.clone(),
            lost: self.lost.clone(),
            own_lost: self.own_lost.clone(),
            warnings: self.warnings.clone(),
            unread: self.unread.clone(),
            ..*self
        }
    }
}

/// `samples` with their stacks renumbered by `stack_of`, those of one
/// thread, stack and state summed, in their first one's place.
fn merged(samples: &[Sample], stack_of: impl Fn(&Sample) -> u32) -> Vec<Sample> {
    let mut places: FxHashMap<(u32, u32, super::ThreadState), usize> = FxHashMap::default();
    let mut merged: Vec<Sample> = Vec::with_capacity(samples.len());
    for sample in samples {
        let stack = stack_of(sample);
        match places.get(&(sample.thread, stack, sample.state)) {
            Some(&place) => {
                let sum = &mut merged[place];
                sum.count = sum.count.saturating_add(sample.count);
                sum.weight = sum.weight.saturating_add(sample.weight);
            }
            None => {
                places.insert((sample.thread, stack, sample.state), merged.len());
                merged.push(Sample { stack, ..*sample });
            }
        }
    }
    merged
}

#[cfg(test)]
mod tests;
