//! The flat report, after Julia's `Profile.print(format=:flat)`: one row per
//! distinct frame with its Count (samples in which it appears, once per
//! sample however often it recurs), its Overhead (samples in which it is
//! the leaf), File, Line and Function, in Julia's column layout.
//!
//! Owns the counting, the row order (`sortedby`), `mincount`, `maxlines`
//! and the column widths. It must not decide how frames are expanded or named (see
//! `frames`) nor how sections are formed (see the parent module); `maxdepth`
//! and `noisefloor` do not apply to it.
//!
//! A section's samples are summed per stack first: a profile has several
//! samples (one per thread) of most stacks, and a stack's lines are then
//! walked once.
//!
//! Deviation from Julia: `sortedby = Count` and `Overhead` list the biggest
//! row first (Julia lists it last), ties broken by count, then by file,
//! function and line.

use std::{collections::VecDeque, fmt::Write as _};

use super::budget::{LineBudget, LinesCut, Ties};
use super::frames::{Expansion, LineId, LineKey, Lines, StackId};
use super::parallel;
use super::sections::{Section, sections};
use super::sequences::Gathered;
use super::stack_index::StackIndex;
use super::{
    PERCENT_WIDTH, ReportError, SECTION_END_BYTES, digits, push_decimal, push_percent, push_spaces,
    render_sections,
};

/// What the columns mean.
const LEGEND: &str = "Count: samples with the line anywhere in their stack (once each); \
                      Overhead: samples in the line itself, not in its callees";
use crate::profile::{Profile, ReportOptions, SortedBy};

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<String, ReportError> {
    if options.functions {
        return by_function::render(profile, options);
    }
    let expansion = Expansion::new(profile, options.kernel)?;
    let lines = Lines::new(&expansion, options.combine)?;
    let keys = lines.keys();
    write(
        profile,
        &expansion,
        StackLines::Profile(&lines),
        keys,
        options,
    )
}

/// The flat report of `profile`, whose samples refer to `index`'s stacks,
/// with their lines from the index (which must hold the tree's lines with
/// the options' `kernel` and `combine`): the same bytes as [`render`] of
/// the profile with its stacks.
pub(super) fn render_indexed(
    profile: &Profile,
    options: &ReportOptions,
    index: &StackIndex,
) -> Result<String, ReportError> {
    let expansion = Expansion::without_sites(profile, index.len())?;
    let keys = index.line_keys();
    write(
        profile,
        &expansion,
        StackLines::Index(index),
        &keys,
        options,
    )
}

fn write(
    profile: &Profile,
    expansion: &Expansion<'_>,
    stacks: StackLines<'_, '_>,
    keys: &[LineKey<'_>],
    options: &ReportOptions,
) -> Result<String, ReportError> {
    let sections = sections(profile, expansion, options)?;
    let mut table = Table::new(expansion, stacks, keys, options, &sections.shown);
    let cut = table.within_maxlines();
    render_sections(profile, sections, cut, "", LEGEND, |out, section| {
        table.write(out, section)
    })
}

/// Where the lines of a stack come from: the report's own expansion of the
/// profile's stacks, or an index of a store's.
#[derive(Clone, Copy)]
enum StackLines<'l, 'a> {
    Profile(&'l Lines<'a>),
    Index(&'l StackIndex),
}

/// Calls `line` with each line of the expansion's `stack`, root first;
/// returns the leaf's (stacks are never empty).
fn each_line(
    lines: &Lines<'_>,
    expansion: &Expansion<'_>,
    stack: StackId,
    mut line: impl FnMut(LineId),
) -> Option<LineId> {
    let mut leaf = None;
    for &site in expansion.sites_of(stack) {
        for &id in lines.of_site(expansion, site) {
            line(id);
            leaf = Some(id);
        }
    }
    leaf
}

struct Row {
    line: LineId,
    /// Samples whose stack holds the frame.
    count: u64,
    /// Samples whose leaf is the frame.
    overhead: u64,
}

/// The text of a line's cells.
struct Cells<'a> {
    file: &'a str,
    /// Characters in `file`.
    file_width: usize,
    line: String,
    function: String,
}

/// Writes the tables of a report's sections, with what they share computed
/// once and buffers kept from section to section.
struct Table<'l> {
    /// The report's options, `mincount` raised to stay within `maxlines`.
    options: ReportOptions,
    /// Room for the rows at the edge of `maxlines`, left for the sections
    /// not written yet.
    ties: Ties,
    /// The rows of each section (those `mincount` let through before it
    /// was raised), of the sections not written yet, in the order they are
    /// written.
    counted: VecDeque<Vec<Row>>,
    /// The cells of each line.
    cells: Vec<Cells<'l>>,
}

impl<'l> Table<'l> {
    /// The table of `sections`, their rows counted (on more than one core
    /// when they are many).
    fn new(
        expansion: &Expansion<'_>,
        stacks: StackLines<'_, '_>,
        keys: &[LineKey<'l>],
        options: &ReportOptions,
        sections: &[Section],
    ) -> Self {
        let (counted, _) = parallel::map_in_order(
            sections,
            |section| section.samples.len(),
            || Counter::new(keys.len(), expansion.stack_counts.len()),
            |counter, section| counter.rows(expansion, stacks, section, options.mincount),
        );
        Table {
            options: options.clone(),
            ties: Ties::default(),
            counted: counted.into(),
            cells: keys
                .iter()
                .map(|key| Cells {
                    file: key.file,
                    file_width: key.file.chars().count(),
                    line: key.line_text(),
                    function: key.function_text(),
                })
                .collect(),
        }
    }

    /// Raises `mincount` so that the sections' tables print at most
    /// `maxlines` rows in all, when they would print more; returns what is
    /// then left out.
    fn within_maxlines(&mut self) -> Option<LinesCut> {
        let mut budget = LineBudget::new(self.options.maxlines)?;
        for row in self.counted.iter().flatten() {
            budget.offer(row.count);
        }
        let cut = budget.cut()?;
        self.options.mincount = self.options.mincount.max(cut.mincount);
        self.ties = cut.ties;
        Some(cut)
    }

    /// The rows of the next section that pass `mincount`, in `sortedby`
    /// order.
    fn rows(&mut self) -> Vec<Row> {
        let mut rows = self.counted.pop_front().unwrap_or_default();
        let mincount = self.options.mincount;
        rows.retain(|row| row.count >= mincount);
        // Line ids are in `LineKey` order.
        match self.options.sortedby {
            SortedBy::FileFuncLine => rows.sort_unstable_by_key(|row| row.line),
            SortedBy::Count => {
                rows.sort_unstable_by(|a, b| b.count.cmp(&a.count).then(a.line.cmp(&b.line)));
            }
            SortedBy::Overhead => rows.sort_unstable_by(|a, b| {
                b.overhead
                    .cmp(&a.overhead)
                    .then(b.count.cmp(&a.count))
                    .then(a.line.cmp(&b.line))
            }),
        }
        let ties = &mut self.ties;
        rows.retain(|row| ties.admit(row.count));
        rows
    }

    /// Writes the next section's table; returns how many rows it holds.
    fn write(&mut self, out: &mut String, section: &Section) -> Result<usize, ReportError> {
        let rows = self.rows();
        let cells = |row: &Row| &self.cells[row.line as usize];
        // Julia's minimum widths, widened to the widest entry.
        let count_width = digits(rows.iter().map(|row| row.count).max().unwrap_or(0)).max(6);
        let overhead_width = digits(rows.iter().map(|row| row.overhead).max().unwrap_or(0)).max(9);
        let file_width = rows
            .iter()
            .map(|row| cells(row).file_width)
            .fold(6, usize::max);
        let line_width = rows
            .iter()
            .map(|row| cells(row).line.len())
            .fold(5, usize::max);
        writeln!(
            out,
            "{:>count_width$} {:>PERCENT_WIDTH$} {:>overhead_width$} {:>PERCENT_WIDTH$} \
             {:<file_width$} {:>line_width$} Function",
            "Count", "%", "Overhead", "%", "File", "Line"
        )?;
        writeln!(
            out,
            "{:>count_width$} {:>PERCENT_WIDTH$} {:>overhead_width$} {:>PERCENT_WIDTH$} \
             {:<file_width$} {:>line_width$} ========",
            "=====", "=", "========", "=", "====", "===="
        )?;
        let size = rows.iter().fold(0, |size, row| {
            let row_width = count_width
                + overhead_width
                + file_width
                + line_width
                + 2 * PERCENT_WIDTH
                + " ".len() * 6;
            size + row_width + cells(row).function.len() + "\n".len()
        });
        let total = section.total;
        out.reserve(size + SECTION_END_BYTES);
        for row in &rows {
            let cells = cells(row);
            push_spaces(out, count_width - digits(row.count));
            push_decimal(out, row.count);
            out.push(' ');
            push_percent(out, row.count, total);
            out.push(' ');
            push_spaces(out, overhead_width - digits(row.overhead));
            push_decimal(out, row.overhead);
            out.push(' ');
            push_percent(out, row.overhead, total);
            out.push(' ');
            out.push_str(cells.file);
            push_spaces(out, file_width - cells.file_width);
            out.push(' ');
            // Line numbers, `?` or nothing: as many characters as bytes.
            push_spaces(out, line_width - cells.line.len());
            out.push_str(&cells.line);
            out.push(' ');
            out.push_str(&cells.function);
            out.push('\n');
        }
        Ok(rows.len())
    }
}

/// Counts a section's rows: its scratch, kept from section to section
/// (one per thread counting).
struct Counter {
    /// Per line: what the section's stacks so far hold of it (zero between
    /// sections), kept together as each visit reads them together.
    tallies: Vec<Tally>,
    /// Per stack: its samples in the section so far (0 between sections).
    stack_counts: Vec<u64>,
    /// The stamp of the last stack counted; stacks are stamped from 1 on.
    stamp: usize,
    /// The words of the stacks being counted, from an index.
    gathered: Gathered,
}

/// Stacks whose words a section's walk through the index copies at once
/// (see [`Sequences::gather`]).
const GATHERED_STACKS: usize = 32;

/// One line's counts in a section.
#[derive(Clone, Copy, Default)]
struct Tally {
    /// Samples whose stack holds it.
    count: u64,
    /// Samples whose leaf it is.
    overhead: u64,
    /// The stamp of the last stack counted, so that a frame recurring in
    /// one stack counts once.
    last_stack: usize,
}

impl Counter {
    fn new(lines: usize, stacks: usize) -> Self {
        Counter {
            tallies: vec![Tally::default(); lines],
            stack_counts: vec![0; stacks],
            gathered: Gathered::default(),
            stamp: 0,
        }
    }

    /// The rows of a section that pass `mincount`, in no order.
    fn rows(
        &mut self,
        expansion: &Expansion<'_>,
        lines: StackLines<'_, '_>,
        section: &Section,
        mincount: u64,
    ) -> Vec<Row> {
        // The section's samples per stack, in order of first sight: samples
        // with one stack count towards the same lines. Counts are above 0,
        // so 0 means not seen yet.
        let mut stacks: Vec<StackId> = Vec::new();
        if expansion.is_every_sample(&section.samples) {
            // Their counts per stack are known.
            self.stack_counts.copy_from_slice(&expansion.stack_counts);
            stacks.extend(
                (0..)
                    .zip(&self.stack_counts)
                    .filter_map(|(stack, &count)| (count > 0).then_some(stack)),
            );
        } else {
            for &index in &section.samples {
                let sample = &expansion.samples[index as usize];
                let count = &mut self.stack_counts[sample.stack as usize];
                if *count == 0 {
                    stacks.push(sample.stack);
                }
                *count = count.saturating_add(sample.count);
            }
        }
        let mut walk: Vec<(StackId, u64)> = stacks
            .into_iter()
            .map(|stack| {
                (
                    stack,
                    std::mem::take(&mut self.stack_counts[stack as usize]),
                )
            })
            .collect();
        if let StackLines::Index(index) = lines {
            // The index's stacks are read in its order, where their words
            // lie: by rank, stacks of equal words as one.
            for (stack, _) in &mut walk {
                *stack = index.ranks()[*stack as usize];
            }
            walk.sort_unstable_by_key(|&(rank, _)| rank);
            walk.dedup_by(|(rank, count), (kept_rank, kept_count)| {
                let same = rank == kept_rank;
                if same {
                    *kept_count = kept_count.saturating_add(*count);
                }
                same
            });
        }
        // The lines in the section's stacks, in order of first sight.
        let mut seen: Vec<LineId> = Vec::new();
        for batch in walk.chunks(GATHERED_STACKS) {
            if let StackLines::Index(index) = lines {
                index.gather_words(batch.iter().map(|&(rank, _)| rank), &mut self.gathered);
            }
            for (at, &(stack, count)) in batch.iter().enumerate() {
                self.stamp += 1;
                let (stamp, tallies) = (self.stamp, &mut self.tallies);
                let mut tally_line = |line: LineId| {
                    let tally = &mut tallies[line as usize];
                    if tally.last_stack != stamp {
                        tally.last_stack = stamp;
                        if tally.count == 0 {
                            seen.push(line);
                        }
                        tally.count = tally.count.saturating_add(count);
                    }
                };
                let leaf = match lines {
                    StackLines::Index(_) => {
                        let words = self.gathered.get(at);
                        words.iter().for_each(|&line| tally_line(line));
                        words.last().copied()
                    }
                    StackLines::Profile(lines) => each_line(lines, expansion, stack, tally_line),
                };
                if let Some(leaf) = leaf {
                    let tally = &mut self.tallies[leaf as usize];
                    tally.overhead = tally.overhead.saturating_add(count);
                }
            }
        }
        let mut rows = Vec::with_capacity(seen.len());
        for line in seen {
            let tally = &mut self.tallies[line as usize];
            if tally.count >= mincount {
                rows.push(Row {
                    line,
                    count: tally.count,
                    overhead: tally.overhead,
                });
            }
            // Ready for the next section.
            (tally.count, tally.overhead) = (0, 0);
        }
        rows
    }
}

mod by_function;

#[cfg(test)]
mod tests;
