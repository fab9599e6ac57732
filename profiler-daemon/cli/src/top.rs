//! `top`'s figures accumulated over updates with decay, as perf top shows
//! them: each update, what was counted fades by [`DECAY`] and the new
//! interval's samples are added, so that a reading is steady at low rates
//! and still follows a change within a few updates.

use std::collections::HashMap;

use profilerd_client::v1;

/// What is left of the figures after each update (perf top's 7/8).
pub const DECAY: f64 = 7.0 / 8.0;

/// Said under an accumulated update.
pub const DECAY_NOTE: &str = "(counts accumulate over updates, the older fading by 7/8 an update; --no-decay shows each \
     interval alone)\n";

/// Below this, a function's faded figure is forgotten.
const FORGOTTEN_BELOW: f64 = 0.5;

/// The decayed figures of every function seen.
#[derive(Debug, Default)]
pub struct Accumulated {
    /// (function, module) -> (self, total).
    functions: HashMap<(String, String), (f64, f64)>,
    samples: f64,
}

impl Accumulated {
    /// Fades what was counted and adds `update`'s interval.
    pub fn add(&mut self, update: &v1::TopUpdate) {
        self.samples *= DECAY;
        for figures in self.functions.values_mut() {
            figures.0 *= DECAY;
            figures.1 *= DECAY;
        }
        self.samples += update.summary.as_ref().map_or(0, |summary| summary.samples) as f64;
        for function in &update.functions {
            let figures = self
                .functions
                .entry((function.function.clone(), function.module.clone()))
                .or_default();
            figures.0 += function.self_samples as f64;
            figures.1 += function.total_samples as f64;
        }
        self.functions
            .retain(|_, (own, total)| *own >= FORGOTTEN_BELOW || *total >= FORGOTTEN_BELOW);
    }

    /// The `limit` functions of most accumulated self samples, as an
    /// update of `latest`'s interval (its summary says what it sampled).
    pub fn update(&self, latest: &v1::TopUpdate, limit: usize) -> v1::TopUpdate {
        let percent = |count: f64| match self.samples > 0.0 {
            true => count * 100.0 / self.samples,
            false => 0.0,
        };
        let mut functions: Vec<_> = self.functions.iter().collect();
        functions.sort_by(|a, b| {
            (b.1.0, b.1.1)
                .partial_cmp(&(a.1.0, a.1.1))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.cmp(b.0))
        });
        v1::TopUpdate {
            summary: latest.summary.clone(),
            functions: functions
                .into_iter()
                .take(limit)
                .map(|((function, module), &(own, total))| v1::TopFunction {
                    function: function.clone(),
                    module: module.clone(),
                    self_samples: own.round() as u64,
                    total_samples: total.round() as u64,
                    self_percent: percent(own),
                    total_percent: percent(total),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(samples: u64, functions: &[(&str, u64)]) -> v1::TopUpdate {
        v1::TopUpdate {
            summary: Some(v1::ProfileSummary {
                samples,
                ..Default::default()
            }),
            functions: functions
                .iter()
                .map(|&(name, count)| v1::TopFunction {
                    function: name.to_owned(),
                    module: "app".to_owned(),
                    self_samples: count,
                    total_samples: count,
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn figures_accumulate_and_fade() {
        let mut accumulated = Accumulated::default();
        accumulated.add(&update(10, &[("a", 8), ("b", 2)]));
        accumulated.add(&update(10, &[("b", 10)]));
        let shown = accumulated.update(&update(10, &[]), 1);
        // b: 2 · 7/8 + 10 = 11.75 of 18.75 samples; a: 7 (not shown).
        assert_eq!(shown.functions.len(), 1);
        assert_eq!(shown.functions[0].function, "b");
        assert_eq!(shown.functions[0].self_samples, 12);
        assert!((shown.functions[0].self_percent - 62.666).abs() < 0.01);
        // A function not seen again fades out and is forgotten.
        for _ in 0..40 {
            accumulated.add(&update(10, &[("b", 10)]));
        }
        assert!(
            !accumulated
                .functions
                .contains_key(&("a".to_owned(), "app".to_owned()))
        );
    }
}
