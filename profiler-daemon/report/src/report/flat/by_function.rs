//! The flat report by function (`--functions`): one row per function, all
//! its source lines and addresses merged, with its module, as perf report
//! and pprof's `top` list them: Count (samples with the function anywhere
//! in their stack, once each), Overhead (samples in the function itself).
//!
//! Owns the rows' order and layout; the counting is `functions`'. Sections
//! (`groupby`) and `maxdepth` do not apply: the rows cover the whole
//! profile.

use std::fmt::Write as _;

use super::super::{ReportError, counted_unit, functions::function_counts};
use crate::profile::{Profile, ReportOptions, SortedBy};

/// The widest module column; longer names keep their end (`…libc.so.6`).
const MODULE_WIDTH: usize = 24;

pub(in crate::report) fn render(
    profile: &Profile,
    options: &ReportOptions,
) -> Result<String, ReportError> {
    let counts = function_counts(profile, options.kernel);
    let mut rows: Vec<_> = counts
        .functions
        .iter()
        .filter(|(_, count)| count.total_samples >= options.mincount.max(1))
        .collect();
    match options.sortedby {
        SortedBy::Overhead => rows.sort_by(|a, b| {
            (b.1.self_samples, b.1.total_samples, a.0).cmp(&(
                a.1.self_samples,
                a.1.total_samples,
                b.0,
            ))
        }),
        SortedBy::Count => rows.sort_by(|a, b| {
            (b.1.total_samples, b.1.self_samples, a.0).cmp(&(
                a.1.total_samples,
                a.1.self_samples,
                b.0,
            ))
        }),
        SortedBy::FileFuncLine => rows.sort_by(|a, b| (&a.1.module, a.0).cmp(&(&b.1.module, b.0))),
    }
    let shown = rows
        .len()
        .min(usize::try_from(options.maxlines).unwrap_or(usize::MAX));
    let width = rows
        .iter()
        .map(|(_, count)| count.total_samples.to_string().len())
        .max()
        .unwrap_or(0)
        .max("Count".len());
    let mut out = String::new();
    writeln!(
        out,
        " {:>width$}      %  Overhead      % {:<MODULE_WIDTH$} Function",
        "Count", "Module"
    )?;
    writeln!(
        out,
        " {:>width$}      =  ========      = {:<MODULE_WIDTH$} ========",
        "=====", "======"
    )?;
    for (function, count) in &rows[..shown] {
        writeln!(
            out,
            " {:>width$} {:>5.1}% {:>9} {:>5.1}% {:<MODULE_WIDTH$} {function}",
            count.total_samples,
            counts.percent(count.total_samples),
            count.self_samples,
            counts.percent(count.self_samples),
            module_column(&count.module),
        )?;
    }
    if shown < rows.len() {
        writeln!(
            out,
            "... {} more functions (maxlines {})",
            rows.len() - shown,
            options.maxlines
        )?;
    }
    let unit = counted_unit(profile);
    writeln!(
        out,
        "Count: {unit} with the function anywhere in their stack (once each); Overhead: {unit} in \
         the function itself, not in its callees; %: a share of all {} {unit}",
        counts.samples
    )?;
    Ok(out)
}

/// A module name fit to its column: its file name, and its end when too
/// long.
fn module_column(module: &str) -> String {
    let name = module.rsplit('/').next().unwrap_or(module);
    let chars = name.chars().count();
    if chars <= MODULE_WIDTH {
        return name.to_owned();
    }
    let tail: String = name.chars().skip(chars - (MODULE_WIDTH - 1)).collect();
    format!("…{tail}")
}
