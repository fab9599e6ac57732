//! The tree report, after Julia's `Profile.print(format=:tree)`: a prefix
//! tree of the stacks, one line per node with its self count ("overhead",
//! blank when 0), `╎` guides one column per level (a `+n` tag past
//! [`MAX_INDENT`] columns), its inclusive count and `file:line; function`.
//!
//! Owns the tree's shape, its order and its `maxdepth`, `mincount`,
//! `noisefloor` and `maxlines` filters. It must not decide how frames are expanded or
//! named (see `frames`) nor how sections are formed (see the parent module).
//!
//! The lines of each distinct stack are sorted once per report; a
//! section's tree is then built in one pass over its stacks in that order,
//! each stack sharing its first nodes with the one before, the nodes laid
//! out depth first: siblings come in `FileFuncLine` order, and finding the
//! nodes to print is a walk over the nodes in order.
//!
//! Deviation from Julia: `sortedby = Count` and `Overhead` list the biggest
//! child first (Julia lists it last), ties broken by count, then by file,
//! function and line; `maxdepth = n` prints n levels; and the noise floor
//! also applies to roots, against the section's total.

use std::collections::VecDeque;

use super::budget::{LineBudget, LinesCut, Ties};
use super::frames::{Expansion, LineId, Lines, StackSample};
use super::parallel;
use super::sections::{Section, Sections, sections, thread_sections};
use super::stack_index::{Ranked, StackIndex};
use super::{
    PERCENT_WIDTH, ReportError, SECTION_END_BYTES, ThreadSection, digits, push_decimal,
    push_percent, push_spaces, render_sections,
};
use crate::profile::{Profile, ReportOptions};
use nodes::{Node, Tree};
use prefixes::{Prefixes, SectionStacks};
use walk::{Filter, Walk};

/// Indentation columns (one per level) shown before deeper levels are
/// summarized by a `+n` tag.
const MAX_INDENT: usize = 60;

/// The line of the nodes of a tree built only to count lines.
const NO_LINE: LineId = LineId::MAX;

const HEADER: &str = "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
                      ===========================================================\n";

/// What the columns mean, as Julia's documentation says it.
const LEGEND: &str = "Overhead: samples in the line itself, not in its callees; Count: samples \
                      in the line or its callees";

/// The column between the overhead and the indentation.
const GUIDE: char = '╎';

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<String, ReportError> {
    render_with(profile, options, |expansion| {
        sections(profile, expansion, options)
    })
}

/// The tree in explicit sections (see [`super::render_thread_trees`]).
pub(super) fn render_threads(
    profile: &Profile,
    options: &ReportOptions,
    titled: &[ThreadSection],
) -> Result<String, ReportError> {
    render_with(profile, options, |expansion| {
        thread_sections(profile, expansion, titled)
    })
}

fn render_with(
    profile: &Profile,
    options: &ReportOptions,
    sections: impl FnOnce(&Expansion<'_>) -> Result<Sections, ReportError>,
) -> Result<String, ReportError> {
    let expansion = Expansion::new(profile, options.kernel)?;
    let lines = Lines::new(&expansion, options.combine)?;
    // The stacks' lines in lexicographic order: the order of the nodes.
    let (stacks, ranks) = lines.of_stacks(&expansion)?.sorted(lines.keys().len());
    let texts: Vec<String> = lines
        .keys()
        .iter()
        .map(|key| format!(" {}\n", key.text()))
        .collect();
    let printer = Printer::new(&expansion, &texts, Ranked::Sorted(stacks), &ranks, options);
    write(profile, &expansion, printer, sections)
}

/// The tree of `profile`, whose samples refer to `index`'s stacks, with
/// their lines and order from the index (which must hold them with the
/// options' `kernel` and `combine`): the same bytes as [`render`] of the
/// profile with its stacks.
pub(super) fn render_indexed(
    profile: &Profile,
    options: &ReportOptions,
    index: &StackIndex,
) -> Result<String, ReportError> {
    let expansion = Expansion::without_sites(profile, index.len())?;
    let printer = Printer::new(
        &expansion,
        index.texts(),
        Ranked::Index(index),
        index.ranks(),
        options,
    );
    write(profile, &expansion, printer, |expansion| {
        sections(profile, expansion, options)
    })
}

fn write(
    profile: &Profile,
    expansion: &Expansion<'_>,
    mut printer: Printer<'_>,
    sections: impl FnOnce(&Expansion<'_>) -> Result<Sections, ReportError>,
) -> Result<String, ReportError> {
    let sections = sections(expansion)?;
    let cut = printer.within_maxlines(&sections.shown)?;
    printer.build_ahead(&sections.shown)?;
    render_sections(profile, sections, cut, HEADER, LEGEND, |out, section| {
        printer.write_tree(out, section)
    })
}

/// Writes the trees of a report's sections, with what they share computed
/// once and buffers kept from section to section.
struct Printer<'l> {
    /// What every section's tree is made of.
    source: Source<'l>,
    /// The report's options, `mincount` raised to stay within `maxlines`.
    options: ReportOptions,
    /// Room for the lines at the edge of `maxlines`, left for the sections
    /// not written yet.
    ties: Ties,
    /// ` file:line; function` and a line break, for each line.
    texts: &'l [String],
    indents: Indents,
    /// The buffers of the sections written on this thread.
    scratch: Scratch,
    /// The tree of the one section, built while counting lines.
    counted: Option<Tree>,
    /// What the stacks share, once the lines of sections had to be counted.
    prefixes: Option<Prefixes>,
    /// The stacks of each section, as counting its lines found them: `None`
    /// for those under the count's floor, which `mincount` leaves empty.
    counted_stacks: Vec<Option<SectionStacks>>,
    /// The trees of the sections not written yet, in the order they are
    /// written, built ahead (on more than one core) once the lines of
    /// sections were counted: `None` for those `mincount` leaves empty.
    built: VecDeque<Option<Tree>>,
}

/// The samples and stacks the sections' trees are made of, read by every
/// thread that builds them.
struct Source<'l> {
    samples: &'l [StackSample],
    /// Samples per stack, over all samples.
    stack_counts: &'l [u64],
    /// The distinct stacks as lines, in lexicographic order.
    stacks: Ranked<'l>,
    /// The rank in `stacks` of each stack of the expansion.
    ranks: &'l [u32],
}

/// A thread's buffers for building trees, kept from section to section.
#[derive(Default)]
struct Scratch {
    /// A section's samples as (rank of the stack, count).
    entries: Vec<(u32, u64)>,
    /// A section's samples per stack rank, for big sections.
    rank_counts: Vec<u64>,
    tree: Tree,
    walk: Walk,
}

impl<'l> Printer<'l> {
    fn new(
        expansion: &'l Expansion<'_>,
        texts: &'l [String],
        stacks: Ranked<'l>,
        ranks: &'l [u32],
        options: &'l ReportOptions,
    ) -> Self {
        Printer {
            source: Source {
                samples: &expansion.samples,
                stack_counts: &expansion.stack_counts,
                stacks,
                ranks,
            },
            options: options.clone(),
            ties: Ties::default(),
            texts,
            indents: Indents::new(),
            scratch: Scratch::default(),
            counted: None,
            prefixes: None,
            counted_stacks: Vec::new(),
            built: VecDeque::new(),
        }
    }

    /// Raises `mincount` so that the sections' trees print at most
    /// `maxlines` lines in all, when they would print more; returns what
    /// is then left out.
    fn within_maxlines(&mut self, sections: &[Section]) -> Result<Option<LinesCut>, ReportError> {
        let Some(mut budget) = LineBudget::new(self.options.maxlines) else {
            return Ok(None);
        };
        // No tree has more lines than its samples' stacks have lines: a
        // small report needs no counting (and a big one is known to be
        // big after its first few samples).
        let source = &self.source;
        let maxlines = self.options.maxlines;
        let more_than_maxlines = source
            .samples
            .iter()
            .try_fold(0_u64, |lines, sample| {
                let stack = source.ranks[sample.stack as usize];
                let lines = lines + source.stacks.get(stack).len() as u64;
                match lines > maxlines {
                    true => Err(()),
                    false => Ok(lines),
                }
            })
            .is_err();
        if !more_than_maxlines {
            return Ok(None);
        }
        if let [section] = sections {
            // One tree, with its lines, built once: it is kept for writing.
            let scratch = &mut self.scratch;
            source.build_tree(section, scratch)?;
            let mut every_line = Ties::default();
            scratch.walk.visit(
                &scratch.tree,
                &self.options,
                &mut every_line,
                section.total,
                |node, _| budget.offer(node.count),
            );
            self.counted = Some(std::mem::take(&mut scratch.tree));
            return Ok(self.cut(budget));
        }
        // Counted from the lines the stacks share, without reading them:
        // a section's stacks are scattered across the order. Each thread
        // counts its share of the sections into a budget of its own; the
        // budgets' biggest counts, merged, are those of every line.
        let prefixes = Prefixes::new(&source.stacks);
        let options = &self.options;
        let (counted, budgets) = parallel::map_in_order(
            sections,
            |section| section.samples.len(),
            || (Scratch::default(), LineBudget::new(options.maxlines)),
            |(scratch, budget), section| match budget {
                Some(budget) => source.count_lines(section, &prefixes, options, scratch, budget),
                None => Ok(None),
            },
        );
        self.counted_stacks = counted.into_iter().collect::<Result<_, _>>()?;
        for (_, counted) in budgets {
            budget.merge(counted.expect("a budget as the report's"));
        }
        self.prefixes = Some(prefixes);
        Ok(self.cut(budget))
    }

    /// What `budget` leaves out, `mincount` raised to it.
    fn cut(&mut self, budget: LineBudget) -> Option<LinesCut> {
        let cut = budget.cut();
        if let Some(cut) = &cut {
            self.options.mincount = self.options.mincount.max(cut.mincount);
            self.ties = cut.ties;
        }
        cut
    }

    /// Builds the trees of the sections ahead of writing them, on more
    /// than one core, once their lines were counted: only the lines
    /// `mincount` lets through.
    fn build_ahead(&mut self, sections: &[Section]) -> Result<(), ReportError> {
        let Some(prefixes) = &self.prefixes else {
            return Ok(());
        };
        let (source, mincount) = (&self.source, self.options.mincount);
        let counted = std::mem::take(&mut self.counted_stacks);
        let sections: Vec<_> = sections.iter().zip(counted).collect();
        let (built, _) = parallel::map_in_order(
            &sections,
            |(section, _)| match section.total < mincount {
                true => 0,
                false => section.samples.len(),
            },
            Scratch::default,
            |scratch, (section, counted)| {
                // No line has more samples than its section: under
                // `mincount` (as most sections of a busy machine are once
                // `maxlines` raised it), none is shown.
                if section.total < mincount {
                    return Ok(None);
                }
                let section_stacks = match counted {
                    Some(counted) => counted,
                    None => {
                        source.collect_entries(section, scratch);
                        &SectionStacks::new(&scratch.entries, prefixes)
                    }
                };
                let stacks = &source.stacks;
                let line_of = |place, depth: u32| stacks.get(place)[depth as usize - 1];
                let mut tree = Tree::default();
                tree.build_from(section_stacks, mincount, line_of)?;
                Ok(Some(tree))
            },
        );
        self.built = built.into_iter().collect::<Result<_, ReportError>>()?;
        Ok(())
    }

    /// Writes the section's tree; returns how many lines it holds.
    fn write_tree(&mut self, out: &mut String, section: &Section) -> Result<usize, ReportError> {
        let built = self.built.pop_front();
        // No line has more samples than its section: under `mincount` (as
        // most sections of a busy machine are once `maxlines` raised it),
        // none is shown and the tree need not be built.
        if section.total < self.options.mincount {
            return Ok(0);
        }
        let scratch = &mut self.scratch;
        if let Some(counted) = self.counted.take() {
            scratch.tree = counted;
        } else if let Some(Some(built)) = built {
            scratch.tree = built;
        } else {
            self.source.build_tree(section, scratch)?;
        }
        let (texts, indents, options) = (&self.texts, &self.indents, &self.options);

        // First the widths of the columns and the size of the text.
        let (mut max_overhead, mut max_count) = (0, 0);
        let (mut shown, mut size) = (0, 0);
        let mut ties = self.ties;
        scratch.walk.visit(
            &scratch.tree,
            options,
            &mut ties,
            section.total,
            |node, depth| {
                max_overhead = max_overhead.max(node.overhead);
                max_count = max_count.max(node.count);
                shown += 1;
                size += indents.len(depth as usize - 1) + texts[node.line as usize].len();
            },
        );
        let overhead_width = digits(max_overhead);
        let count_width = digits(max_count);
        let columns = overhead_width + count_width + " ".len() + PERCENT_WIDTH;
        out.reserve(size + shown * columns + SECTION_END_BYTES);
        let total = section.total;

        // The same walk again, the same ties admitted.
        scratch.walk.visit(
            &scratch.tree,
            options,
            &mut self.ties,
            section.total,
            |node, depth| {
                if node.overhead == 0 {
                    push_spaces(out, overhead_width);
                } else {
                    push_spaces(out, overhead_width - digits(node.overhead));
                    push_decimal(out, node.overhead);
                }
                indents.push(out, depth as usize - 1);
                push_decimal(out, node.count);
                push_spaces(out, count_width - digits(node.count));
                out.push(' ');
                push_percent(out, node.count, total);
                out.push_str(&texts[node.line as usize]);
            },
        );
        Ok(shown)
    }
}

impl Source<'_> {
    /// Builds the tree of a section's samples, with their lines, into
    /// `scratch.tree`.
    fn build_tree(&self, section: &Section, scratch: &mut Scratch) -> Result<(), ReportError> {
        self.collect_entries(section, scratch);
        let stacks = &self.stacks;
        scratch.tree.build(
            scratch
                .entries
                .iter()
                .map(|&(rank, count)| (stacks.get(rank), count)),
        )
    }

    /// Counts a section's lines into `budget` from what its stacks share
    /// (`prefixes`). With no filter but maxdepth, every node is a line,
    /// and only the nodes that may be among the `maxlines` of most samples
    /// are made. Returns the section's stacks, for its tree, unless no line
    /// of it can be shown.
    fn count_lines(
        &self,
        section: &Section,
        prefixes: &Prefixes,
        options: &ReportOptions,
        scratch: &mut Scratch,
        budget: &mut LineBudget,
    ) -> Result<Option<SectionStacks>, ReportError> {
        let every_node = options.mincount == 0 && options.noisefloor <= 0.0;
        self.collect_entries(section, scratch);
        let stacks = SectionStacks::new(&scratch.entries, prefixes);
        let floor = match every_node {
            true => {
                budget.count_lines(stacks.lines(options.maxdepth));
                budget.floor()
            }
            false => 0,
        };
        if section.total < floor {
            return Ok(None);
        }
        scratch.tree.build_from(&stacks, floor, |_, _| NO_LINE)?;
        let mut filter = Filter {
            options,
            ties: &mut Ties::default(),
        };
        // Every line that passes the filters, in whatever order.
        scratch
            .walk
            .in_line_order(
                &scratch.tree,
                &mut filter,
                section.total,
                |node, _| match every_node {
                    true => budget.consider(node.count),
                    false => budget.offer(node.count),
                },
            );
        Ok(Some(stacks))
    }

    /// Fills `scratch.entries` with the section's samples as (stack rank,
    /// count), by rank: in lexicographic order of their lines.
    fn collect_entries(&self, section: &Section, scratch: &mut Scratch) {
        let Scratch {
            entries,
            rank_counts,
            ..
        } = scratch;
        entries.clear();
        let samples = self.samples;
        let rank = |index: u32| self.ranks[samples[index as usize].stack as usize];
        let ranks = self.stacks.len();
        if section.samples.len() == samples.len() {
            // Every sample: their counts per stack are known.
            rank_counts.clear();
            rank_counts.resize(ranks, 0);
            for (&rank, &count) in self.ranks.iter().zip(self.stack_counts) {
                let total = &mut rank_counts[rank as usize];
                *total = total.saturating_add(count);
            }
            entries.extend(
                (0..)
                    .zip(rank_counts.iter())
                    .filter(|&(_, &count)| count > 0)
                    .map(|(rank, &count)| (rank, count)),
            );
        } else if section.samples.len() < ranks / 4 {
            let counts = section
                .samples
                .iter()
                .map(|&index| samples[index as usize].count);
            entries.extend(section.samples.iter().map(|&index| rank(index)).zip(counts));
            entries.sort_unstable_by_key(|&(rank, _)| rank);
        } else {
            // Many samples: counting per rank beats sorting them.
            rank_counts.clear();
            rank_counts.resize(ranks, 0);
            for &index in &section.samples {
                let count = &mut rank_counts[rank(index) as usize];
                *count = count.saturating_add(samples[index as usize].count);
            }
            entries.extend(
                (0..)
                    .zip(rank_counts.iter())
                    .filter(|&(_, &count)| count > 0)
                    .map(|(rank, &count)| (rank, count)),
            );
        }
    }
}

/// The guide column and indentation of a node `level` levels below the
/// roots, one column per level. Past [`MAX_INDENT`] columns the deepest
/// shown column is followed by `+n `, `n` being the levels not drawn, so the
/// text stays in view.
struct Indents {
    /// The guide column and `guides(columns)`, for every number of columns
    /// drawn.
    guides: Vec<String>,
}

impl Indents {
    fn new() -> Self {
        Indents {
            guides: (0..=MAX_INDENT)
                .map(|columns| format!("{GUIDE}{}", guides(columns)))
                .collect(),
        }
    }

    /// The columns drawn, and the levels summarized by a `+n ` tag.
    fn layout(level: usize) -> (usize, Option<usize>) {
        if level <= MAX_INDENT {
            return (level, None);
        }
        let mut tag_width = "+n ".len();
        loop {
            let drawn = MAX_INDENT - tag_width;
            let hidden = level - drawn;
            let width = "+ ".len() + digits(hidden as u64);
            if width <= tag_width {
                return (drawn, Some(hidden));
            }
            tag_width = width;
        }
    }

    /// The length in bytes of the guide column and indentation of `level`.
    fn len(&self, level: usize) -> usize {
        let (drawn, hidden) = Self::layout(level);
        self.guides[drawn].len() + hidden.map_or(0, |hidden| "+ ".len() + digits(hidden as u64))
    }

    /// Appends the guide column and indentation of `level`.
    fn push(&self, out: &mut String, level: usize) {
        let (drawn, hidden) = Self::layout(level);
        out.push_str(&self.guides[drawn]);
        if let Some(hidden) = hidden {
            out.push('+');
            push_decimal(out, hidden as u64);
            out.push(' ');
        }
    }
}

/// The indentation of `level` (without the guide column) as a string.
#[cfg(test)]
fn indent(level: usize) -> String {
    let mut out = String::new();
    Indents::new().push(&mut out, level);
    out.split_off(GUIDE.len_utf8())
}

/// `columns` columns of guides: a `╎` in every fifth, the last one blank.
fn guides(columns: usize) -> String {
    (0..columns)
        .map(|column| {
            if column % 5 == 4 && column + 1 < columns {
                GUIDE
            } else {
                ' '
            }
        })
        .collect()
}

mod nodes;
mod prefixes;
mod walk;

#[cfg(test)]
mod tests;
