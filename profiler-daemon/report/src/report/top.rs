//! The functions with the most self samples of a profile, like `perf top`:
//! what Top sends every interval.
//!
//! Owns the ranking only; the counting is `functions`', and the live display
//! is the client's.

use std::sync::Arc;

use super::functions::function_counts;
use crate::profile::Profile;

/// One row of a top list.
#[derive(Clone, Debug, PartialEq)]
pub struct TopFunction {
    pub function: Arc<str>,
    pub module: Arc<str>,
    pub self_samples: u64,
    pub total_samples: u64,
    /// Shares of the profile's samples, in percent.
    pub self_percent: f64,
    pub total_percent: f64,
}

/// What functions are ranked by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionRanking {
    /// Their own samples (functions without are left out).
    SelfSamples,
    /// The samples of the stacks through them.
    TotalSamples,
}

/// The `limit` functions with the most self samples (then total samples,
/// then by name), and the profile's samples.
pub fn top(profile: &Profile, limit: usize, kernel: bool) -> (Vec<TopFunction>, u64) {
    ranked(profile, limit, kernel, FunctionRanking::SelfSamples)
}

/// The `limit` functions first by `ranking` (then by the other count, then
/// by name), and the profile's samples.
pub fn ranked(
    profile: &Profile,
    limit: usize,
    kernel: bool,
    ranking: FunctionRanking,
) -> (Vec<TopFunction>, u64) {
    let counts = function_counts(profile, kernel);
    let by_total = ranking == FunctionRanking::TotalSamples;
    let mut rows: Vec<TopFunction> = counts
        .functions
        .iter()
        .filter(|(_, count)| by_total || count.self_samples > 0)
        .map(|(function, count)| TopFunction {
            function: function.clone(),
            module: count.module.clone(),
            self_samples: count.self_samples,
            total_samples: count.total_samples,
            self_percent: counts.percent(count.self_samples),
            total_percent: counts.percent(count.total_samples),
        })
        .collect();
    let key = |row: &TopFunction| match ranking {
        FunctionRanking::SelfSamples => (row.self_samples, row.total_samples),
        FunctionRanking::TotalSamples => (row.total_samples, row.self_samples),
    };
    rows.sort_by(|a, b| {
        key(b)
            .cmp(&key(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    rows.truncate(limit);
    (rows, counts.samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::profile;

    #[test]
    fn the_most_self_samples_first_up_to_the_limit() {
        let profile = profile(&[
            (&["main", "a"], 5),
            (&["main", "b"], 7),
            (&["main", "c"], 5),
            (&["main"], 1),
            (&["main", "b", "k:memcpy"], 2),
        ]);
        let (rows, samples) = top(&profile, 3, true);
        assert_eq!(samples, 20);
        let names: Vec<&str> = rows.iter().map(|row| &*row.function).collect();
        assert_eq!(names, ["b", "a", "c"]);
        assert_eq!((rows[0].self_samples, rows[0].total_samples), (7, 9));
        assert!((rows[0].self_percent - 35.0).abs() < 1e-9);
        assert!((rows[0].total_percent - 45.0).abs() < 1e-9);
        // Without kernel frames memcpy's samples are b's own.
        let (user_only, _) = top(&profile, 1, false);
        assert_eq!(user_only[0].self_samples, 9);
        assert_eq!(&*user_only[0].module, "/usr/bin/app");
        // By total: main, whose own samples are few, comes first.
        let (by_total, _) = ranked(&profile, 2, true, FunctionRanking::TotalSamples);
        let names: Vec<(&str, u64)> = by_total
            .iter()
            .map(|row| (&*row.function, row.total_samples))
            .collect();
        assert_eq!(names, [("main", 20), ("b", 9)]);
    }
}
