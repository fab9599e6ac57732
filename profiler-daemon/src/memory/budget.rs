//! One memory budget for the whole daemon (`memory_budget`), divided into
//! a share for each part that holds memory. What the program itself takes
//! (its code, stacks and runtime) and the kernel's ring buffers it maps
//! come off first; the rest is divided among the parts by weight, except
//! the parts given a bound of their own in the configuration
//! (`memory_limit` for the store, `unwind_info_limit`), which take it
//! first.
//!
//! Owns the division; it must not measure or hold anything.

use std::fmt::Write as _;

use bytesize::ByteSize;

/// What the program takes before it holds anything: its code and data
/// resident, its threads' stacks, the async runtime and the logger
/// (measured on a release build at start, before sampling: BENCHMARKS.md).
pub const PROGRAM_BYTES: u64 = 24 << 20;

/// The smallest budget accepted: below it the parts' shares are too small
/// to hold a useful history.
pub const MIN_BUDGET: u64 = 64 << 20;

/// A part of the daemon that holds memory within its share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// The profile store's buckets and tables (`memory_limit`).
    Store,
    /// The stack indexes kept beside the store for fast reports.
    ReportIndexes,
    /// What the reports being made hold while they are made.
    Reports,
    /// Unwind information of the binaries sampled (`unwind_info_limit`).
    UnwindInfo,
    /// The symbolizer's parsed debug information and its cache of names.
    Symbolizer,
    /// Names of JIT-compiled code from perf maps.
    JitNames,
    /// The process table: each process's mappings and binaries.
    Processes,
    /// The samples of peeks under way.
    Peeks,
    /// Profiles queued for the push targets.
    Export,
}

impl Part {
    pub const ALL: [Part; 9] = [
        Part::Store,
        Part::ReportIndexes,
        Part::Reports,
        Part::UnwindInfo,
        Part::Symbolizer,
        Part::JitNames,
        Part::Processes,
        Part::Peeks,
        Part::Export,
    ];

    /// Its name in the status report, the metrics and the logs.
    pub fn name(self) -> &'static str {
        match self {
            Part::Store => "store",
            Part::ReportIndexes => "report_indexes",
            Part::Reports => "reports",
            Part::UnwindInfo => "unwind_info",
            Part::Symbolizer => "symbolizer",
            Part::JitNames => "jit_names",
            Part::Processes => "processes",
            Part::Peeks => "peeks",
            Part::Export => "export",
        }
    }

    /// Its weight in the division (per mille of what is divided).
    fn weight(self) -> u64 {
        match self {
            // Two indexes are warm (the tree's and the folded stacks'),
            // each about 0.6 times the store's bytes (16 MiB each beside a
            // 26.6 MiB store over a 10-minute storm, BENCHMARKS.md table
            // 5): room for both as the store fills to its share, or the
            // folded one is let go of and the flame graphs wait for their
            // stacks. The reports' share only admits them (a big report is
            // counted over it, never refused) and unwind information held
            // at most 14.6 MiB in the soak (table 10): both give to it.
            Part::Store => 230,
            Part::ReportIndexes => 300,
            Part::Reports => 100,
            Part::UnwindInfo => 90,
            Part::Symbolizer => 150,
            Part::JitNames => 30,
            Part::Processes => 40,
            Part::Peeks => 20,
            Part::Export => 40,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BudgetError {
    #[error("memory_budget {budget} is below the smallest accepted, {min}: raise memory_budget")]
    TooSmall { budget: ByteSize, min: ByteSize },
    #[error(
        "memory_budget {budget} leaves {left} once the program ({program}), the kernel's ring \
         buffers ({kernel}, mapped twice) and the bounds set apart ({set}) are taken, less than \
         the {min} the other parts need: raise memory_budget or lower {keys}"
    )]
    Overcommitted {
        budget: ByteSize,
        program: ByteSize,
        kernel: ByteSize,
        set: ByteSize,
        left: ByteSize,
        min: ByteSize,
        keys: String,
    },
}

/// The budget divided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    pub total: u64,
    /// The program itself, and the kernel's ring buffers it maps.
    pub program: u64,
    pub kernel_buffers: u64,
    shares: [u64; Part::ALL.len()],
    /// Parts whose share was set in the configuration, and by which key.
    set: Vec<(Part, &'static str)>,
}

/// A part's bound set in the configuration rather than taken from the
/// budget: the part, its bytes and the key that set it.
pub type SetBound = (Part, u64, &'static str);

impl MemoryBudget {
    /// Divides `total` among the parts, once the program and
    /// `kernel_buffers` are taken, the `set` bounds first.
    pub fn divide(total: u64, kernel_buffers: u64, set: &[SetBound]) -> Result<Self, BudgetError> {
        if total < MIN_BUDGET {
            return Err(BudgetError::TooSmall {
                budget: ByteSize::b(total),
                min: ByteSize::b(MIN_BUDGET),
            });
        }
        let set_bytes: u64 = set.iter().map(|&(_, bytes, _)| bytes).sum();
        let divided = total
            .saturating_sub(PROGRAM_BYTES)
            .saturating_sub(kernel_buffers)
            .saturating_sub(set_bytes);
        let others: u64 = Part::ALL
            .iter()
            .filter(|part| !set.iter().any(|(set, _, _)| set == *part))
            .map(|part| part.weight())
            .sum();
        // Every part divided needs a few MiB to be of use.
        let min = others * (16 << 10);
        if divided < min {
            return Err(BudgetError::Overcommitted {
                budget: ByteSize::b(total),
                program: ByteSize::b(PROGRAM_BYTES),
                kernel: ByteSize::b(kernel_buffers),
                set: ByteSize::b(set_bytes),
                left: ByteSize::b(divided),
                min: ByteSize::b(min),
                keys: set
                    .iter()
                    .map(|(_, _, key)| *key)
                    .chain(["stack_copy_buffer", "alloc_stack_copy_buffer"])
                    .collect::<Vec<_>>()
                    .join(" or "),
            });
        }
        let mut shares = [0; Part::ALL.len()];
        for (index, part) in Part::ALL.iter().enumerate() {
            shares[index] = match set.iter().find(|(set, _, _)| set == part) {
                Some(&(_, bytes, _)) => bytes,
                None => divided / others * part.weight(),
            };
        }
        Ok(Self {
            total,
            program: PROGRAM_BYTES,
            kernel_buffers,
            shares,
            set: set.iter().map(|&(part, _, key)| (part, key)).collect(),
        })
    }

    /// The share of `part`.
    pub fn share(&self, part: Part) -> u64 {
        self.shares[part as usize]
    }

    /// The configuration key that set the share of `part`, if one did.
    pub fn set_by(&self, part: Part) -> Option<&'static str> {
        self.set
            .iter()
            .find(|(set, _)| *set == part)
            .map(|(_, key)| *key)
    }

    /// One line saying how the budget is divided, for the log at start.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "memory budget {}: program {}, kernel ring buffers {}",
            ByteSize::b(self.total),
            ByteSize::b(self.program),
            ByteSize::b(self.kernel_buffers)
        );
        for part in Part::ALL {
            let _ = write!(text, ", {} {}", part.name(), ByteSize::b(self.share(part)));
            if let Some(key) = self.set_by(part) {
                let _ = write!(text, " ({key})");
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_budget_is_divided_by_weight_once_the_program_and_buffers_are_taken() {
        let budget = MemoryBudget::divide(256 * MIB, 8 * MIB, &[]).unwrap();
        let divided = 256 * MIB - PROGRAM_BYTES - 8 * MIB;
        let total: u64 = Part::ALL.iter().map(|&part| budget.share(part)).sum();
        assert!(
            total <= divided && divided - total < 1000,
            "{total} of {divided}"
        );
        assert_eq!(
            budget.share(Part::Store),
            divided / 1000 * Part::Store.weight()
        );
        assert!(
            budget
                .describe()
                .starts_with("memory budget 256.0 MiB: program 24.0 MiB")
        );
    }

    #[test]
    fn bounds_set_apart_are_taken_first() {
        let set = [(Part::Store, 100 * MIB, "memory_limit")];
        let budget = MemoryBudget::divide(256 * MIB, 8 * MIB, &set).unwrap();
        assert_eq!(budget.share(Part::Store), 100 * MIB);
        let divided = 256 * MIB - PROGRAM_BYTES - 8 * MIB - 100 * MIB;
        let others = 1000 - Part::Store.weight();
        assert_eq!(
            budget.share(Part::Reports),
            divided / others * Part::Reports.weight()
        );
        assert_eq!(budget.set_by(Part::Store), Some("memory_limit"));
        assert!(budget.describe().contains("store 100.0 MiB (memory_limit)"));
    }

    #[test]
    fn a_budget_too_small_or_overcommitted_is_refused_with_what_to_change() {
        let err = MemoryBudget::divide(32 * MIB, 0, &[]).unwrap_err();
        assert!(err.to_string().contains("raise memory_budget"), "{err}");
        let set = [
            (Part::Store, 200 * MIB, "memory_limit"),
            (Part::UnwindInfo, 64 * MIB, "unwind_info_limit"),
        ];
        let err = MemoryBudget::divide(256 * MIB, 8 * MIB, &set).unwrap_err();
        assert!(
            err.to_string()
                .contains("raise memory_budget or lower memory_limit or unwind_info_limit or"),
            "{err}"
        );
    }
}
