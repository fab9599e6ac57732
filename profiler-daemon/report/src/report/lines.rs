//! A function's samples by source line: pprof's `list`, perf annotate's
//! source view, Python's profiling.sampling heatmap; what the web view's
//! source heatmap shows. The rules are `profilerctl annotate`'s (which
//! counts a pprof profile the same way): Self is the samples taken at the
//! line (code inlined into the function included: the innermost line of
//! the sample's leaf), Total the samples with the function at that line
//! anywhere in their stack, once each. Functions are named as `callers`
//! names them.
//!
//! Owns the counting only; it must not read source files nor choose which
//! lines are shown.

use std::{collections::HashMap, sync::Arc};

use crate::profile::Profile;
use profilerd_words::FunctionName;

/// One source line's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineCount {
    pub line: u32,
    pub self_samples: u64,
    pub total_samples: u64,
}

/// The lines of one source file with samples, in line order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLines {
    pub file: Arc<str>,
    pub lines: Vec<LineCount>,
}

/// A function's samples by line, file by file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionLines {
    /// The module of the first location of it found.
    pub module: Option<Arc<str>>,
    /// Samples with the function in their stack, and those of them taken
    /// in it (its Self).
    pub samples: u64,
    pub self_samples: u64,
    /// The files, most samples (Self and Total together) first.
    pub files: Vec<FileLines>,
    /// Self samples at addresses without line information (built without
    /// `-g`), by address, in address order.
    pub addresses: Vec<(u64, u64)>,
}

/// The samples of `function` in `profile`, by source line.
pub fn function_lines(profile: &Profile, function: &str) -> FunctionLines {
    let asked = FunctionName::new(function);
    // Each stack once, with the samples of all its threads.
    let mut stack_counts: Vec<u64> = vec![0; profile.stacks.len()];
    for sample in &profile.samples {
        if let Some(count) = stack_counts.get_mut(sample.stack as usize) {
            *count = count.saturating_add(sample.count);
        }
    }
    // Per location: the innermost of its frames that is the function.
    let at: Vec<Option<usize>> = (profile.locations.iter())
        .map(|location| (location.frames.iter()).rposition(|frame| asked.matches(&frame.function)))
        .collect();
    let found = |location: u32| at.get(location as usize).copied().flatten();
    let mut counted: HashMap<(Arc<str>, u32), (u64, u64)> = HashMap::new();
    let mut addresses: HashMap<u64, u64> = HashMap::new();
    let mut lines = FunctionLines::default();
    let mut seen: Vec<(&Arc<str>, u32)> = Vec::new();
    for (stack, &count) in stack_counts.iter().enumerate() {
        let Some(stack) = profile.stacks.get(stack as u32).filter(|_| count > 0) else {
            continue;
        };
        if !stack.iter().any(|&location| found(location).is_some()) {
            continue;
        }
        lines.samples = lines.samples.saturating_add(count);
        seen.clear();
        for (depth, &index) in stack.iter().enumerate() {
            let (Some(at), Some(location)) = (found(index), profile.locations.get(index as usize))
            else {
                continue;
            };
            if lines.module.is_none() {
                lines.module = Some(location.module.clone());
            }
            if depth + 1 == stack.len() {
                // Where the sample was: the innermost line, code inlined
                // into the function included.
                lines.self_samples = lines.self_samples.saturating_add(count);
                match location.frames.last() {
                    Some(frame) if frame.line > 0 && frame.file.is_some() => {
                        let file = frame.file.clone().unwrap_or_default();
                        let own = &mut counted.entry((file, frame.line)).or_default().0;
                        *own = own.saturating_add(count);
                    }
                    _ => {
                        let own = addresses.entry(location.address).or_default();
                        *own = own.saturating_add(count);
                    }
                }
            }
            let frame = &location.frames[at];
            let line = frame.file.as_ref().filter(|_| frame.line > 0);
            if let Some(file) = line.filter(|file| !seen.contains(&(file, frame.line))) {
                seen.push((file, frame.line));
                let total = &mut counted.entry((file.clone(), frame.line)).or_default().1;
                *total = total.saturating_add(count);
            }
        }
    }
    let mut by_file: HashMap<Arc<str>, (u64, Vec<LineCount>)> = HashMap::new();
    for ((file, line), (self_samples, total_samples)) in counted {
        let (weight, lines) = by_file.entry(file).or_default();
        *weight = weight.saturating_add(self_samples.saturating_add(total_samples));
        lines.push(LineCount {
            line,
            self_samples,
            total_samples,
        });
    }
    let mut files: Vec<(u64, FileLines)> = (by_file.into_iter())
        .map(|(file, (weight, mut lines))| {
            lines.sort_by_key(|line| line.line);
            (weight, FileLines { file, lines })
        })
        .collect();
    files.sort_by(|(a_weight, a), (b_weight, b)| b_weight.cmp(a_weight).then(a.file.cmp(&b.file)));
    lines.files = files.into_iter().map(|(_, file)| file).collect();
    lines.addresses = addresses.into_iter().collect();
    lines.addresses.sort_unstable();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::LocationKind,
        report::test_support::{Builder, frame, location},
    };

    fn line(line: u32, self_samples: u64, total_samples: u64) -> LineCount {
        LineCount {
            line,
            self_samples,
            total_samples,
        }
    }

    /// `hot` at hot.c:5 calling `leaf`; `spin` (spin.h:3) inlined into
    /// `hot` at hot.c:7; `hot` recursing into itself at hot.c:9; a sample
    /// in the kernel under `hot`; an address of `hot` without a line.
    #[test]
    fn self_is_the_innermost_line_and_total_each_line_once_per_sample() {
        let mut b = Builder::new();
        let user = |b: &mut Builder, address, frames| {
            b.location(location(
                LocationKind::User,
                "/usr/bin/app",
                address,
                frames,
            ))
        };
        let main = user(&mut b, 0x10, vec![frame("main", Some("main.c"), 2, false)]);
        let calls_leaf = user(&mut b, 0x20, vec![frame("hot", Some("hot.c"), 5, false)]);
        let leaf = user(&mut b, 0x30, vec![frame("leaf", Some("leaf.c"), 1, false)]);
        let spinning = user(
            &mut b,
            0x40,
            vec![
                frame("app::hot", Some("hot.c"), 7, false),
                frame("spin", Some("spin.h"), 3, true),
            ],
        );
        let recursing = user(&mut b, 0x50, vec![frame("hot", Some("hot.c"), 9, false)]);
        let kernel = b.location(location(
            LocationKind::Kernel,
            "[kernel]",
            0xffff_0000,
            vec![frame("do_syscall_64", None, 0, false)],
        ));
        let unlined = user(&mut b, 0x60, vec![frame("hot", None, 0, false)]);
        b.sample(0, vec![main, calls_leaf, leaf], 4);
        b.sample(0, vec![main, spinning], 10);
        b.sample(0, vec![main, recursing, recursing, spinning], 3);
        b.sample(0, vec![main, calls_leaf, kernel], 2);
        b.sample(0, vec![main, unlined], 1);
        b.sample(0, vec![main], 6);
        let profile = b.build();

        let lines = function_lines(&profile, "hot");
        assert_eq!(lines.samples, 4 + 10 + 3 + 2 + 1);
        assert_eq!(lines.self_samples, 10 + 3 + 1);
        assert_eq!(lines.module.as_deref(), Some("/usr/bin/app"));
        let files: Vec<&str> = lines.files.iter().map(|file| &*file.file).collect();
        assert_eq!(files, ["hot.c", "spin.h"]);
        assert_eq!(
            lines.files[0].lines,
            [line(5, 0, 6), line(7, 0, 13), line(9, 0, 3)]
        );
        assert_eq!(lines.files[1].lines, [line(3, 13, 0)]);
        assert_eq!(lines.addresses, [(0x60, 1)]);

        let nothing = function_lines(&profile, "cold");
        assert_eq!(nothing, FunctionLines::default());
    }

    /// A C library alias and a path are the function, as for callers.
    #[test]
    fn functions_are_named_as_callers_names_them() {
        let mut b = Builder::new();
        let malloc = b.location(location(
            LocationKind::User,
            "/lib/libc.so.6",
            0x99,
            vec![frame("__GI___libc_malloc", Some("malloc.c"), 3300, false)],
        ));
        b.sample(0, vec![malloc], 5);
        let lines = function_lines(&b.build(), "malloc");
        assert_eq!(lines.files[0].lines, [line(3300, 5, 5)]);
        assert_eq!(lines.module.as_deref(), Some("/lib/libc.so.6"));
    }
}
