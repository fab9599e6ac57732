//! Two profiles compared function by function: each function's share of
//! its profile's samples (self: the stack's leaf frame; total: anywhere in
//! the stack, once per sample) in the base and in the target, and the
//! change in percentage points. Shares, not counts, so windows of
//! different lengths compare.

use std::{collections::HashMap, fmt::Write as _, sync::Arc};

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

/// Self and total samples per function, and the profile's samples.
fn shares(profile: &Profile) -> (HashMap<Arc<str>, (u64, u64)>, u64) {
    let mut counts: HashMap<Arc<str>, (u64, u64)> = HashMap::new();
    let mut all = 0;
    for sample in &profile.samples {
        let Some(stack) = profile.stacks.get(sample.stack) else {
            continue;
        };
        all += sample.count;
        let functions: Vec<&Arc<str>> = stack
            .iter()
            .filter_map(|&location| profile.locations.get(location as usize))
            .flat_map(|location| location.frames.iter().map(|frame| &frame.function))
            .collect();
        if let Some(leaf) = functions.last() {
            counts.entry((*leaf).clone()).or_default().0 += sample.count;
        }
        let mut seen: Vec<&Arc<str>> = Vec::new();
        for function in functions {
            if !seen.contains(&function) {
                seen.push(function);
                counts.entry(function.clone()).or_default().1 += sample.count;
            }
        }
    }
    (counts, all)
}

/// Every function of either profile, the largest change (self, then total)
/// first.
pub fn diff(base: &Profile, target: &Profile) -> Vec<FunctionChange> {
    let (base_counts, base_all) = shares(base);
    let (target_counts, target_all) = shares(target);
    let percent = |count: u64, all: u64| {
        if all == 0 {
            0.0
        } else {
            count as f64 * 100.0 / all as f64
        }
    };
    let mut functions: Vec<&Arc<str>> = base_counts.keys().chain(target_counts.keys()).collect();
    functions.sort();
    functions.dedup();
    let mut changes: Vec<FunctionChange> = functions
        .into_iter()
        .map(|function| {
            let (base_self, base_total) = base_counts.get(function).copied().unwrap_or_default();
            let (target_self, target_total) =
                target_counts.get(function).copied().unwrap_or_default();
            FunctionChange {
                function: function.clone(),
                base_self: percent(base_self, base_all),
                target_self: percent(target_self, target_all),
                base_total: percent(base_total, base_all),
                target_total: percent(target_total, target_all),
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

/// The changes as a text table, at most `limit` rows.
pub fn diff_text(changes: &[FunctionChange], limit: usize) -> String {
    let mut out = String::new();
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
        let changes = diff(&base, &target);
        let of = |name: &str| changes.iter().find(|c| &*c.function == name).unwrap();
        assert!((of("a").self_change() - -50.0).abs() < 1e-9);
        assert!((of("b").self_change() - 50.0).abs() < 1e-9);
        assert_eq!(of("main").total_change(), 0.0);
        assert_eq!(&*changes[2].function, "main");
        let text = diff_text(&changes, 2);
        assert!(text.contains("-50.0") && text.contains("+50.0"), "{text}");
        assert!(text.contains("and 1 more"), "{text}");
    }
}
