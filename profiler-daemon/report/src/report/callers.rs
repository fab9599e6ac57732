//! Who called a function, with counts: Julia's `Profile.callers(funcname)`.
//!
//! A frame matches when its function is the name given, ends with `::`
//! and the name (so `spin` finds `app::spin`), or is one of the C
//! library's aliases of it (so `malloc` finds Debian glibc's
//! `__GI___libc_malloc`, and `memcpy@@GLIBC_2.14` is `memcpy`). Each sample counts once
//! per distinct caller of its stack, however often the function recurs in
//! it; a match at the root of a stack has the caller `[root]`.

use std::{collections::HashMap, fmt::Write as _, sync::Arc};

use crate::profile::{Frame, Profile};

/// A caller's function, file and line.
type Site = (Arc<str>, Option<Arc<str>>, u32);

/// One caller and the samples in which it called the function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerCount {
    pub function: Arc<str>,
    pub file: Option<Arc<str>>,
    pub line: u32,
    pub count: u64,
}

/// The callers of `function` in `profile`, most samples first, and the
/// samples in which the function appears at all.
pub fn callers(profile: &Profile, function: &str) -> (Vec<CallerCount>, u64) {
    let asked = FunctionName::new(function);
    let matches = |frame: &Frame| asked.is(&frame.function);
    let root = Frame {
        function: Arc::from("[root]"),
        file: None,
        line: 0,
        inlined: false,
    };
    // Each stack once, with the samples of all its threads: a window of a
    // whole machine holds a million samples of a few hundred thousand
    // stacks.
    let mut stack_counts: Vec<u64> = vec![0; profile.stacks.len()];
    for sample in &profile.samples {
        if let Some(count) = stack_counts.get_mut(sample.stack as usize) {
            *count = count.saturating_add(sample.count);
        }
    }
    // Every frame's site numbered once per location, with whether it is
    // the function: names compared and hashed once per location, not once
    // per stack it is in.
    let mut site_ids: HashMap<Site, u32> = HashMap::new();
    let mut sites: Vec<Site> = Vec::new();
    let mut site_of = |frame: &Frame| -> u32 {
        let key = (frame.function.clone(), frame.file.clone(), frame.line);
        *site_ids.entry(key).or_insert_with_key(|key| {
            sites.push(key.clone());
            // Fewer sites than frames of locations, whose ids are 32-bit.
            (sites.len() - 1) as u32
        })
    };
    let root = site_of(&root);
    // Per location: its frames as (site, is the function), root first.
    let frames_of: Vec<Vec<(u32, bool)>> = profile
        .locations
        .iter()
        .map(|location| {
            (location.frames.iter())
                .map(|frame| (site_of(frame), matches(frame)))
                .collect()
        })
        .collect();
    let has_function: Vec<bool> = (frames_of.iter())
        .map(|frames| frames.iter().any(|&(_, is)| is))
        .collect();
    let mut counts: Vec<u64> = vec![0; sites.len()];
    let mut total: u64 = 0;
    let mut seen: Vec<u32> = Vec::new();
    for (stack, &count) in stack_counts.iter().enumerate() {
        let Some(stack) = profile.stacks.get(stack as u32).filter(|_| count > 0) else {
            continue;
        };
        let has = |&location: &u32| has_function.get(location as usize) == Some(&true);
        if !stack.iter().any(has) {
            continue;
        }
        seen.clear();
        let mut caller = root;
        let frames = (stack.iter()).filter_map(|&location| frames_of.get(location as usize));
        for &(site, is_function) in frames.flatten() {
            if is_function && !seen.contains(&caller) {
                seen.push(caller);
            }
            caller = site;
        }
        if !seen.is_empty() {
            total = total.saturating_add(count);
        }
        for &caller in &seen {
            let sum = &mut counts[caller as usize];
            *sum = sum.saturating_add(count);
        }
    }
    let mut callers: Vec<CallerCount> = (sites.into_iter().zip(counts))
        .filter(|&(_, count)| count > 0)
        .map(|((function, file, line), count)| CallerCount {
            function,
            file,
            line,
            count,
        })
        .collect();
    callers.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
            .then_with(|| a.line.cmp(&b.line))
    });
    (callers, total)
}

/// The callers as a text table, Julia-style: count, `file:line; function`.
pub fn callers_text(function: &str, callers: &[CallerCount], total: u64) -> String {
    let mut out = String::new();
    if callers.is_empty() {
        let _ = writeln!(out, "no sample holds a function named {function:?}");
        return out;
    }
    let _ = writeln!(out, "Callers of {function} ({total} samples):");
    let _ = writeln!(out, " Count File:Line; Function");
    for caller in callers {
        let place = match (&caller.file, caller.line) {
            (Some(file), line) if line > 0 => format!("{file}:{line}"),
            (Some(file), _) => format!("{file}:?"),
            (None, _) => "?".to_owned(),
        };
        let _ = writeln!(out, "{:>6} {place}; {}", caller.count, caller.function);
    }
    out
}

/// A function's name as asked for, and which frames' functions it names:
/// the same name, one ending with `::` and the name, or a C library alias
/// of it (see the module doc).
pub(super) struct FunctionName<'a> {
    name: &'a str,
    suffix: String,
}

impl<'a> FunctionName<'a> {
    pub(super) fn new(name: &'a str) -> Self {
        Self {
            name,
            suffix: format!("::{name}"),
        }
    }

    /// Whether `function` is the function asked for.
    pub(super) fn is(&self, function: &str) -> bool {
        function == self.name || function.ends_with(&self.suffix) || alias_of(function) == self.name
    }
}

/// The C library's prefixes of internal aliases of a public function,
/// longest first: glibc names `malloc`'s own code `__GI___libc_malloc`, and
/// a symbol table may name it `__libc_malloc`.
const ALIAS_PREFIXES: &[&str] = &["__GI___libc_", "__GI___", "__GI_", "__libc_"];

/// The public name `name` is an alias of: without a symbol version
/// (`@@GLIBC_2.2.5`) and an alias prefix; `name` itself otherwise.
fn alias_of(name: &str) -> &str {
    let name = name.split_once('@').map_or(name, |(name, _)| name);
    ALIAS_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::profile;

    #[test]
    fn callers_are_counted_once_per_sample() {
        let profile = profile(&[
            (&["main", "a", "hot"], 5),
            (&["main", "b", "hot"], 3),
            (&["main", "hot", "hot"], 2),
            (&["hot"], 1),
            (&["main", "cold"], 7),
        ]);
        let (callers, total) = callers(&profile, "hot");
        assert_eq!(total, 11);
        let counts: Vec<(&str, u64)> = callers
            .iter()
            .map(|caller| (&*caller.function, caller.count))
            .collect();
        assert_eq!(
            counts,
            [("a", 5), ("b", 3), ("hot", 2), ("main", 2), ("[root]", 1)]
        );
        let text = callers_text("hot", &callers, total);
        assert!(text.starts_with("Callers of hot (11 samples):"), "{text}");
        assert!(callers_text("nope", &[], 0).contains("no sample holds"));
    }

    /// `malloc` finds glibc's own names of it, not another function.
    #[test]
    fn c_library_aliases_are_the_function() {
        let glibc = profile(&[
            (&["main", "a", "__GI___libc_malloc"], 4),
            (&["main", "b", "malloc@@GLIBC_2.2.5"], 1),
            (&["main", "__libc_malloc"], 2),
            (&["main", "xmalloc"], 9),
        ]);
        let (by_alias, aliased) = callers(&glibc, "malloc");
        assert_eq!(aliased, 7, "{by_alias:?}");
        assert_eq!(alias_of("__GI_memcpy"), "memcpy");
        assert_eq!(alias_of("__libc_"), "__libc_");
        assert_eq!(alias_of("spin"), "spin");
    }
}
