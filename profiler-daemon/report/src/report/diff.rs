//! Two profiles compared function by function: each function's share of
//! its profile's samples (self: the stack's leaf frame; total: anywhere in
//! the stack, once per sample) in the base and in the target, and the
//! change in percentage points. Shares, not counts, so windows of
//! different lengths compare. The rows may be only those of functions a
//! person named, matched as everywhere a function is named
//! ([`FunctionName`]: `malloc` finds `__GI___libc_malloc`).

use std::{fmt::Write as _, sync::Arc};

use profilerd_words::FunctionName;

use super::functions::function_counts;
use crate::profile::Profile;

/// One function in both profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionChange {
    pub function: Arc<str>,
    /// Shares of the profile's samples, in percent.
    pub base_self: f64,
    pub target_self: f64,
    pub base_total: f64,
    pub target_total: f64,
}

impl FunctionChange {
    /// The change of the self share, in percentage points.
    pub fn self_change(&self) -> f64 {
        self.target_self - self.base_self
    }

    pub fn total_change(&self) -> f64 {
        self.target_total - self.base_total
    }
}

/// Every function of either profile that one of `named` matches (every
/// function when `named` is empty), the largest change (self, then total)
/// first.
pub fn diff(base: &Profile, target: &Profile, named: &[FunctionName]) -> Vec<FunctionChange> {
    let (base, target) = (function_counts(base, true), function_counts(target, true));
    let mut functions: Vec<&Arc<str>> = base
        .functions
        .keys()
        .chain(target.functions.keys())
        .filter(|function| named.is_empty() || named.iter().any(|name| name.matches(function)))
        .collect();
    functions.sort();
    functions.dedup();
    let mut changes: Vec<FunctionChange> = functions
        .into_iter()
        .map(|function| {
            let counts = |of: &super::functions::FunctionCounts| {
                of.functions.get(function).map_or((0.0, 0.0), |count| {
                    (
                        of.percent(count.self_samples),
                        of.percent(count.total_samples),
                    )
                })
            };
            let ((base_self, base_total), (target_self, target_total)) =
                (counts(&base), counts(&target));
            FunctionChange {
                function: function.clone(),
                base_self,
                target_self,
                base_total,
                target_total,
            }
        })
        .collect();
    changes.sort_by(|a, b| {
        b.self_change()
            .abs()
            .total_cmp(&a.self_change().abs())
            .then(b.total_change().abs().total_cmp(&a.total_change().abs()))
            .then_with(|| a.function.cmp(&b.function))
    });
    changes
}

/// The changes as a text table, at most `limit` rows; `named`: the
/// functions the rows were restricted to, if any.
pub fn diff_text(
    base: &Profile,
    target: &Profile,
    changes: &[FunctionChange],
    limit: usize,
    named: &[FunctionName],
) -> String {
    let mut out = String::new();
    for (name, profile) in [("base:  ", base), ("target:", target)] {
        let _ = writeln!(
            out,
            "{name} {} to {} ({:.0} s): {} samples",
            humantime::format_rfc3339_seconds(profile.start),
            humantime::format_rfc3339_seconds(profile.end),
            profile.duration_secs(),
            profile.total_samples()
        );
    }
    for warning in base.warnings.iter().chain(&target.warnings) {
        let _ = writeln!(out, "warning: {warning}");
    }
    let _ = writeln!(out);
    if !named.is_empty() {
        let names: Vec<&str> = named.iter().map(FunctionName::asked).collect();
        let names = names.join(", ");
        if changes.is_empty() {
            let _ = writeln!(
                out,
                "no function of either window is named {names} (nor ends in :: and the name, \
                 nor is a C library alias of it); the diff without --function lists them all"
            );
            return out;
        }
        let _ = writeln!(
            out,
            "only the functions named {names} (their C library aliases and qualified names \
             included)"
        );
    }
    let _ = writeln!(
        out,
        "  self%: base → target (change)      total%: base → target (change)   function"
    );
    for change in changes.iter().take(limit) {
        let _ = writeln!(
            out,
            "{:>6.1} → {:>5.1} ({:>+6.1})      {:>6.1} → {:>5.1} ({:>+6.1})      {}",
            change.base_self,
            change.target_self,
            change.self_change(),
            change.base_total,
            change.target_total,
            change.total_change(),
            change.function
        );
    }
    if changes.len() > limit {
        let _ = writeln!(out, "... and {} more functions", changes.len() - limit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::profile;

    #[test]
    fn shares_change_with_the_right_sign() {
        let base = profile(&[(&["main", "a"], 75), (&["main", "b"], 25)]);
        let target = profile(&[(&["main", "a"], 10), (&["main", "b"], 30)]);
        let changes = diff(&base, &target, &[]);
        let of = |name: &str| changes.iter().find(|c| &*c.function == name).unwrap();
        assert!((of("a").self_change() - -50.0).abs() < 1e-9);
        assert!((of("b").self_change() - 50.0).abs() < 1e-9);
        assert_eq!(of("main").total_change(), 0.0);
        assert_eq!(&*changes[2].function, "main");
        let text = diff_text(&base, &target, &changes, 2, &[]);
        assert!(text.contains("-50.0") && text.contains("+50.0"), "{text}");
        assert!(
            text.starts_with("base:   2023-11-14T22:13:20Z to ")
                && text.contains(": 100 samples\ntarget: ")
                && text.contains(": 40 samples\n"),
            "{text}"
        );
        assert!(text.contains("and 1 more"), "{text}");
    }

    /// Named functions keep their rows only: `malloc` those of the C
    /// library's names of it, whichever window has them.
    #[test]
    fn named_functions_keep_their_rows_aliases_included() {
        let base = profile(&[(&["main", "malloc"], 10), (&["main", "xmalloc"], 10)]);
        let target = profile(&[
            (&["main", "__GI___libc_malloc"], 30),
            (&["main", "app::spin"], 10),
        ]);
        let named = [FunctionName::new("malloc"), FunctionName::new("spin")];
        let changes = diff(&base, &target, &named);
        let rows: Vec<&str> = changes.iter().map(|c| &*c.function).collect();
        assert_eq!(rows, ["__GI___libc_malloc", "malloc", "app::spin"]);
        let text = diff_text(&base, &target, &changes, 10, &named);
        assert!(
            text.contains("only the functions named malloc, spin (")
                && text.contains("__GI___libc_malloc")
                && !text.contains("xmalloc"),
            "{text}"
        );
        let nothing = [FunctionName::new("free")];
        let text = diff_text(
            &base,
            &target,
            &diff(&base, &target, &nothing),
            10,
            &nothing,
        );
        assert!(
            text.contains("no function of either window is named free"),
            "{text}"
        );
        assert!(!text.contains("self%"), "{text}");
    }
}
