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

#[cfg(test)]
mod tests {
    use super::super::test_support::{Builder, frame, hot_at, location, profile, without_percents};
    use super::*;
    use crate::profile::{Format, GroupBy, LocationKind, LossCause};

    const HEADER: &str = " Count  Overhead File    Line Function\n \
                          =====  ======== ====    ==== ========\n";

    /// The report without its `%` columns and legend (see
    /// `percents_and_the_legend`).
    fn flat(profile: &Profile, options: ReportOptions) -> String {
        without_percents(&full_flat(profile, options))
    }

    fn full_flat(profile: &Profile, options: ReportOptions) -> String {
        render(
            profile,
            &ReportOptions {
                format: Format::Flat,
                ..options
            },
        )
        .expect("renders")
    }

    #[test]
    fn percents_and_the_legend() {
        let p = profile(&[(&["main", "a"], 3), (&["main", "b"], 1)]);
        assert_eq!(
            full_flat(&p, ReportOptions::default()),
            " Count      %  Overhead      % File    Line Function\n \
             =====      =  ========      = ====    ==== ========\n     \
             3  75.0%         3  75.0% app.c     10 a\n     \
             1  25.0%         1  25.0% app.c     10 b\n     \
             4 100.0%         0   0.0% app.c     10 main\n\
             Total snapshots: 4 (4% of one CPU)\n\
             Count: samples with the line anywhere in their stack (once each); Overhead: \
             samples in the line itself, not in its callees; %: a share of all samples\n"
        );
    }

    /// The rows between the column header and the closing summary.
    fn body(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        lines[2..lines.len() - 1].to_vec()
    }

    #[test]
    fn split_under_a_common_caller() {
        let p = profile(&[(&["main", "a"], 75), (&["main", "b"], 25)]);
        assert_eq!(
            flat(&p, ReportOptions::default()),
            " Count  Overhead File    Line Function\n \
             =====  ======== ====    ==== ========\n    \
             75        75 app.c     10 a\n    \
             25        25 app.c     10 b\n   \
             100         0 app.c     10 main\n\
             Total snapshots: 100 (100% of one CPU)\n"
        );
    }

    #[test]
    fn recursion_counts_once_per_sample() {
        let p = profile(&[(&["main", "f", "g", "f", "f"], 2), (&["main", "f"], 1)]);
        assert_eq!(
            body(&flat(&p, ReportOptions::default())),
            [
                "     3         3 app.c     10 f",
                "     2         0 app.c     10 g",
                "     3         0 app.c     10 main",
            ]
        );
    }

    #[test]
    fn sortedby_orders_rows() {
        // a: count 60, self 0; b: count 40, self 40; x: count 60, self 60.
        let p = profile(&[(&["main", "b"], 40), (&["main", "a", "x"], 60)]);
        let functions = |sortedby| -> Vec<String> {
            let options = ReportOptions {
                sortedby,
                ..ReportOptions::default()
            };
            body(&flat(&p, options))
                .iter()
                .map(|row| row.rsplit(' ').next().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(functions(SortedBy::FileFuncLine), ["a", "b", "main", "x"]);
        assert_eq!(functions(SortedBy::Count), ["main", "a", "x", "b"]);
        assert_eq!(functions(SortedBy::Overhead), ["x", "b", "main", "a"]);
    }

    #[test]
    fn mincount_hides_rows() {
        let p = profile(&[(&["main", "a"], 75), (&["main", "b"], 25)]);
        let options = ReportOptions {
            mincount: 26,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&flat(&p, options)),
            [
                "    75        75 app.c     10 a",
                "   100         0 app.c     10 main",
            ]
        );
    }

    #[test]
    fn maxlines_keeps_the_rows_of_most_samples_across_sections() {
        let mut b = Builder::new();
        let other = b.thread(2000, 2000, "other", "other");
        let (main, a, c, d) = (b.named("main"), b.named("a"), b.named("c"), b.named("d"));
        b.sample(0, vec![main, a], 75);
        b.sample(0, vec![main, c], 4);
        b.sample(other, vec![main, c], 4);
        b.sample(other, vec![d], 2);
        let p = b.build();
        let options = |maxlines| ReportOptions {
            groupby: GroupBy::Process,
            sortedby: SortedBy::Count,
            maxlines,
            ..ReportOptions::default()
        };
        // Six rows in all; three fit: main and a, and the first c of 4.
        let text = flat(&p, options(3));
        let rows: Vec<&str> = text
            .lines()
            .filter(|line| {
                line.ends_with(" main")
                    || line.ends_with(" a")
                    || line.ends_with(" c")
                    || line.ends_with(" d")
            })
            .collect();
        assert!(
            text.starts_with(
                "# 3 of 6 lines shown, those of more than 4 samples and the first 1 of 4 \
                 (maxlines 3; maxlines 0 shows every line)\n"
            ),
            "{text}"
        );
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows[0].trim_start().starts_with("79 ") && rows[1].trim_start().starts_with("75 "));
        assert!(
            rows[2].ends_with(" c") && rows[2].trim_start().starts_with("4 "),
            "{text}"
        );
        // Two rows, both of the first process: the other one is counted.
        let text = flat(&p, options(2));
        assert!(!text.contains("\"other\""), "{text}");
        assert!(
            text.contains(
                "\n1 more section (6 samples in all) with no line shown (maxlines 2; \
                 maxlines 0 shows every line)\n"
            ),
            "{text}"
        );
        // Every row when they fit, and with no limit.
        assert!(!flat(&p, options(6)).starts_with('#'));
        assert_eq!(flat(&p, options(0)), flat(&p, options(6)));
    }

    #[test]
    fn columns_widen_to_their_widest_entry() {
        let mut b = Builder::new();
        let long = b.location(location(
            LocationKind::User,
            "/usr/bin/app",
            0x10,
            vec![frame(
                "parse",
                Some("src/parser/expression.rs"),
                123_456,
                false,
            )],
        ));
        b.sample(0, vec![long], 12_345_678_901);
        let p = b.build();
        assert_eq!(
            flat(&p, ReportOptions::default()),
            "      Count    Overhead File                       Line Function\n      \
             =====    ======== ====                       ==== ========\n\
             12345678901 12345678901 src/parser/expression.rs 123456 parse\n\
             Total snapshots: 12345678901 (12345678901% of one CPU)\n"
        );
    }

    #[test]
    fn combine_off_splits_one_line_by_address() {
        let mut b = Builder::new();
        let main = b.named("main");
        let (first, second) = (hot_at(&mut b, 0x1a2b), hot_at(&mut b, 0x1a30));
        b.sample(0, vec![main, first], 3);
        b.sample(0, vec![main, second], 2);
        let p = b.build();
        assert_eq!(
            body(&flat(&p, ReportOptions::default())),
            [
                "     5         5 app.c     42 hot",
                "     5         0 app.c     10 main",
            ]
        );
        let options = ReportOptions {
            combine: false,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&flat(&p, options)),
            [
                "     3         3 app.c     42 hot @0x1a2b",
                "     2         2 app.c     42 hot @0x1a30",
                "     5         0 app.c     10 main @0x1000",
            ]
        );
    }

    #[test]
    fn kernel_markers_and_inlined_frames_get_rows() {
        let mut b = Builder::new();
        let main = b.named("main");
        let sys_write = b.named("k:sys_write");
        let ksys_write = b.named("k:ksys_write");
        let both = b.deflate_inlining_fill_window(None, 0);
        b.sample(0, vec![main, both, sys_write, ksys_write], 4);
        let p = b.build();
        let options = ReportOptions {
            kernel: false,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&flat(&p, options)),
            [
                "     4         4                 [kernel]",
                "     4         0 app.c        10 main",
                "     4         0 deflate.c   100 deflate",
                "     4         0 libz.so.1     ? fill_window",
            ]
        );
        assert_eq!(
            body(&flat(&p, ReportOptions::default()))[..2],
            [
                "     4         4 [kernel]      ? ksys_write",
                "     4         0 [kernel]      ? sys_write",
            ]
        );
    }

    #[test]
    fn groupby_process_titles_each_table() {
        let mut b = Builder::new();
        let io = b.thread(1230, 1235, "io", "server");
        let other = b.thread(77, 78, "tool", "tool");
        b.stacks(0, &[(&["main"], 98)]);
        b.stacks(io, &[(&["main"], 52)]);
        b.stacks(other, &[(&["tool"], 7)]);
        let mut p = b.build();
        p.lost.push((LossCause::CountsMapFull, 2));
        let options = ReportOptions {
            groupby: GroupBy::Process,
            ..ReportOptions::default()
        };
        assert_eq!(
            flat(&p, options),
            format!(
                "# lost: counts_map_full=2\n\
                 Process 1230 \"server\"  Total snapshots: 150. Utilization: 150%\n\
                 {HEADER}   \
                 150       150 app.c     10 main\n\
                 \n\
                 Process 77 \"tool\"  Total snapshots: 7. Utilization: 7%\n\
                 {HEADER}     \
                 7         7 app.c     10 tool\n\
                 \n"
            )
        );
    }

    #[test]
    fn groupby_thread_titles_name_thread_and_process() {
        let mut b = Builder::new();
        let io = b.thread(1230, 1235, "io", "server");
        b.stacks(0, &[(&["main"], 3)]);
        b.stacks(io, &[(&["main"], 5)]);
        let p = b.build();
        let options = ReportOptions {
            groupby: GroupBy::Thread,
            ..ReportOptions::default()
        };
        let titles: Vec<String> = flat(&p, options)
            .lines()
            .filter(|line| line.starts_with("Thread"))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            titles,
            [
                "Thread 1235 \"io\" of process 1230 \"server\"  Total snapshots: 5. Utilization: 5%",
                "Thread 1234 \"worker\" of process 1230 \"server\"  Total snapshots: 3. Utilization: 3%",
            ]
        );
    }

    #[test]
    fn empty_profile_has_header_and_zero_total() {
        let p = profile(&[]);
        assert_eq!(
            flat(&p, ReportOptions::default()),
            format!("{HEADER}Total snapshots: 0 (0% of one CPU)\n")
        );
    }
}
