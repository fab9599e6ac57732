//! Samples per function, the figures Diff and Top compare: how many samples
//! a function is the leaf of (self) and appears in (total, once per sample
//! however often it recurs), by function name.
//!
//! Owns the counting only; it must not format.

use std::{collections::HashMap, sync::Arc};

use crate::profile::{LocationKind, Profile};

/// Stands for a stack's kernel frames when they are left out and nothing
/// else is left (a kernel thread's samples).
const KERNEL: &str = "[kernel]";

/// One function's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCount {
    /// The module (binary, library or `[kernel]`) of its first frame seen.
    pub module: Arc<str>,
    pub self_samples: u64,
    pub total_samples: u64,
}

/// Every function of a profile and the profile's samples.
#[derive(Clone, Debug, Default)]
pub struct FunctionCounts {
    pub functions: HashMap<Arc<str>, FunctionCount>,
    pub samples: u64,
}

impl FunctionCounts {
    /// `count` as a percentage of the profile's samples (0 when it has none).
    pub fn percent(&self, count: u64) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            count as f64 * 100.0 / self.samples as f64
        }
    }
}

/// Counts the samples of `profile` per function; without `kernel`, kernel
/// frames are left out (a sample in the kernel counts as self for the user
/// function that entered it).
pub fn function_counts(profile: &Profile, kernel: bool) -> FunctionCounts {
    let kernel_marker: Arc<str> = Arc::from(KERNEL);
    let mut counts = FunctionCounts::default();
    let mut frames: Vec<(&Arc<str>, &Arc<str>)> = Vec::new();
    for sample in &profile.samples {
        let Some(stack) = profile.stacks.get(sample.stack) else {
            continue;
        };
        counts.samples += sample.count;
        frames.clear();
        frames.extend(
            stack
                .iter()
                .filter_map(|&location| profile.locations.get(location as usize))
                .filter(|location| kernel || location.kind != LocationKind::Kernel)
                .flat_map(|location| {
                    location
                        .frames
                        .iter()
                        .map(move |frame| (&frame.function, &location.module))
                }),
        );
        if frames.is_empty() && !kernel && !stack.is_empty() {
            frames.push((&kernel_marker, &kernel_marker));
        }
        let functions = &mut counts.functions;
        let mut add = |function: &Arc<str>, module: &Arc<str>, self_samples, total_samples| {
            let count = functions
                .entry(function.clone())
                .or_insert_with(|| FunctionCount {
                    module: module.clone(),
                    self_samples: 0,
                    total_samples: 0,
                });
            count.self_samples += self_samples;
            count.total_samples += total_samples;
        };
        if let Some(&(leaf, module)) = frames.last() {
            add(leaf, module, sample.count, 0);
        }
        for (index, &(function, module)) in frames.iter().enumerate() {
            // Once per sample: only at its first appearance in the stack.
            if frames[..index].iter().all(|(seen, _)| *seen != function) {
                add(function, module, 0, sample.count);
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::profile;

    #[test]
    fn self_counts_the_leaf_and_total_each_sample_once() {
        let profile = profile(&[
            (&["main", "recurse", "recurse"], 3),
            (&["main", "recurse", "k:do_syscall_64"], 2),
            (&["k:do_syscall_64"], 1),
        ]);
        let of = |counts: &FunctionCounts, name: &str| {
            let count = &counts.functions[name];
            (count.self_samples, count.total_samples)
        };
        let with_kernel = function_counts(&profile, true);
        assert_eq!(with_kernel.samples, 6);
        assert_eq!(of(&with_kernel, "recurse"), (3, 5));
        assert_eq!(of(&with_kernel, "main"), (0, 5));
        assert_eq!(of(&with_kernel, "do_syscall_64"), (3, 3));
        assert_eq!(&*with_kernel.functions["do_syscall_64"].module, "[kernel]");
        assert_eq!(&*with_kernel.functions["main"].module, "/usr/bin/app");
        assert!((with_kernel.percent(3) - 50.0).abs() < 1e-9);

        let user_only = function_counts(&profile, false);
        assert_eq!(of(&user_only, "recurse"), (5, 5));
        assert_eq!(of(&user_only, "[kernel]"), (1, 1));
        assert!(!user_only.functions.contains_key("do_syscall_64"));
    }
}
