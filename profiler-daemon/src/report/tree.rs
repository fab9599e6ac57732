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
use super::frames::{Expansion, LineId, Lines, StackSample, small_id};
use super::stack_index::{Ranked, StackIndex};
use super::{
    PERCENT_WIDTH, ReportError, SECTION_END_BYTES, Section, ThreadSection, digits, push_decimal,
    push_percent, push_spaces, render_sections, sections, thread_sections,
};
use crate::profile::{Profile, ReportOptions, SortedBy};

/// Indentation columns (one per level) shown before deeper levels are
/// summarized by a `+n` tag.
const MAX_INDENT: usize = 60;

/// Bytes of the trees built to count lines for `maxlines` that are kept
/// for writing (those past it are built again): a large report by process
/// would otherwise build every tree twice.
const KEPT_TREE_BYTES: usize = 32 << 20;

const HEADER: &str = "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
                      ===========================================================\n";

/// What the columns mean, as Julia's documentation says it.
const LEGEND: &str = "Overhead: samples in the line itself, not in its callees; Count: samples \
                      in the line or its callees";

/// The column between the overhead and the indentation.
const GUIDE: char = '╎';

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<String, ReportError> {
    render_with(profile, options, |expansion| {
        sections(profile, expansion, options.groupby)
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
    sections: impl FnOnce(&Expansion<'_>) -> Result<Vec<Section>, ReportError>,
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
        sections(profile, expansion, options.groupby)
    })
}

fn write(
    profile: &Profile,
    expansion: &Expansion<'_>,
    mut printer: Printer<'_>,
    sections: impl FnOnce(&Expansion<'_>) -> Result<Vec<Section>, ReportError>,
) -> Result<String, ReportError> {
    let sections = sections(expansion)?;
    let cut = printer.within_maxlines(&sections)?;
    render_sections(profile, sections, cut, HEADER, LEGEND, |out, section| {
        printer.write_tree(out, section)
    })
}

/// A node of a [`Tree`].
struct Node {
    line: LineId,
    /// One past the last node of this node's subtree.
    end: u32,
    /// Samples whose stack passes through this node.
    count: u64,
    /// Samples whose stack ends at this node.
    overhead: u64,
}

/// The prefix tree of a section's stacks, its nodes in depth-first order
/// with siblings in line (that is `LineKey`) order: a node's subtree is
/// `nodes[id..end]`, its first child `id + 1`, its next sibling `end`.
#[derive(Default)]
struct Tree {
    nodes: Vec<Node>,
    /// The path to the node of the stack being added, root first.
    path: Vec<u32>,
}

impl Tree {
    /// Builds the tree of `stacks` (line sequences with their counts),
    /// which must come in lexicographic order: each stack then shares its
    /// first nodes with the stack before it and adds the rest anew.
    fn build<'l>(
        &mut self,
        stacks: impl Iterator<Item = (&'l [LineId], u64)>,
    ) -> Result<(), ReportError> {
        self.nodes.clear();
        self.path.clear();
        let mut previous: &[LineId] = &[];
        for (lines, count) in stacks {
            let common = previous
                .iter()
                .zip(lines)
                .take_while(|(a, b)| a == b)
                .count();
            self.close(common)?;
            for &line in &lines[common..] {
                self.path.push(small_id(self.nodes.len(), "tree nodes")?);
                self.nodes.push(Node {
                    line,
                    end: 0,
                    count: 0,
                    overhead: 0,
                });
            }
            if let Some(&leaf) = self.path.last() {
                let leaf = &mut self.nodes[leaf as usize];
                leaf.count = leaf.count.saturating_add(count);
                leaf.overhead = leaf.overhead.saturating_add(count);
            }
            previous = lines;
        }
        self.close(0)
    }

    /// Completes the nodes of `path` past its first `depth`: their subtree
    /// ends here, and their count goes to their parent's.
    fn close(&mut self, depth: usize) -> Result<(), ReportError> {
        let end = small_id(self.nodes.len(), "tree nodes")?;
        while self.path.len() > depth {
            let Some(id) = self.path.pop() else { break };
            let node = &mut self.nodes[id as usize];
            node.end = end;
            let count = node.count;
            if let Some(&parent) = self.path.last() {
                let parent = &mut self.nodes[parent as usize];
                parent.count = parent.count.saturating_add(count);
            }
        }
        Ok(())
    }

    /// The tree without the nodes of fewer than `floor` samples (their
    /// subtrees have fewer still), laid out the same way.
    fn pruned(&self, floor: u64) -> Tree {
        let mut nodes: Vec<Node> = Vec::new();
        // The kept nodes whose subtree is not complete yet: (new id, end of
        // the subtree in `self.nodes`).
        let mut open: Vec<(usize, u32)> = Vec::new();
        let mut id = 0;
        while let Some(node) = self.nodes.get(id as usize) {
            while let Some(&(kept, end)) = open.last()
                && end <= id
            {
                // Fewer than the tree's nodes, which are numbered in 32 bits.
                nodes[kept].end = nodes.len() as u32;
                open.pop();
            }
            if node.count < floor {
                id = node.end;
                continue;
            }
            open.push((nodes.len(), node.end));
            nodes.push(Node {
                line: node.line,
                end: 0,
                count: node.count,
                overhead: node.overhead,
            });
            id += 1;
        }
        for (kept, _) in open {
            nodes[kept].end = nodes.len() as u32;
        }
        Tree {
            nodes,
            path: Vec::new(),
        }
    }

    /// The roots of the subtrees that `nodes[first..end]` is made of, in
    /// line order: the children of node `first - 1`, or all roots when
    /// `first` is 0 and `end` the number of nodes.
    fn children(&self, first: u32, end: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors((first < end).then_some(first), move |&child| {
            let next = self.nodes[child as usize].end;
            (next < end).then_some(next)
        })
    }
}

/// Writes the trees of a report's sections, with what they share computed
/// once and buffers kept from section to section.
struct Printer<'l> {
    samples: &'l [StackSample],
    /// Samples per stack, over all samples.
    stack_counts: &'l [u64],
    /// The report's options, `mincount` raised to stay within `maxlines`.
    options: ReportOptions,
    /// Room for the lines at the edge of `maxlines`, left for the sections
    /// not written yet.
    ties: Ties,
    /// ` file:line; function` and a line break, for each line.
    texts: &'l [String],
    /// The distinct stacks as lines, in lexicographic order.
    stacks: Ranked<'l>,
    /// The rank in `stacks` of each stack of the expansion.
    ranks: &'l [u32],
    indents: Indents,
    /// A section's samples as (rank of the stack, count).
    entries: Vec<(u32, u64)>,
    /// A section's samples per stack rank, for big sections.
    rank_counts: Vec<u64>,
    tree: Tree,
    /// The trees built while counting lines, a section's after another
    /// (`None`: not kept), for the writing to take in the same order.
    counted: VecDeque<Option<Tree>>,
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
            samples: &expansion.samples,
            stack_counts: &expansion.stack_counts,
            options: options.clone(),
            ties: Ties::default(),
            texts,
            stacks,
            ranks,
            indents: Indents::new(),
            entries: Vec::new(),
            rank_counts: Vec::new(),
            tree: Tree::default(),
            counted: VecDeque::new(),
            walk: Walk::default(),
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
        // small report needs no counting.
        let most_lines = self.samples.iter().fold(0_u64, |lines, sample| {
            let stack = self.ranks[sample.stack as usize];
            lines + self.stacks.get(stack).len() as u64
        });
        if most_lines <= self.options.maxlines {
            return Ok(None);
        }
        let mut kept_bytes = 0;
        for section in sections {
            self.build_tree(section)?;
            let mut every_line = Ties::default();
            self.walk.visit(
                &self.tree,
                &self.options,
                &mut every_line,
                section.total,
                |node, _| budget.offer(node.count),
            );
            // Lines under the budget's floor are never shown: their nodes
            // need not be kept.
            let kept = match budget.floor() {
                0 => std::mem::take(&mut self.tree),
                floor => self.tree.pruned(floor),
            };
            kept_bytes += kept.nodes.len() * std::mem::size_of::<Node>();
            self.counted
                .push_back((kept_bytes <= KEPT_TREE_BYTES).then_some(kept));
        }
        let cut = budget.cut();
        if let Some(cut) = &cut {
            self.options.mincount = self.options.mincount.max(cut.mincount);
            self.ties = cut.ties;
        }
        Ok(cut)
    }

    /// Builds the tree of a section's samples.
    fn build_tree(&mut self, section: &Section) -> Result<(), ReportError> {
        self.collect_entries(section);
        let stacks = &self.stacks;
        self.tree.build(
            self.entries
                .iter()
                .map(|&(rank, count)| (stacks.get(rank), count)),
        )
    }

    /// Writes the section's tree; returns how many lines it holds.
    fn write_tree(&mut self, out: &mut String, section: &Section) -> Result<usize, ReportError> {
        let counted = self.counted.pop_front().flatten();
        // No line has more samples than its section: under `mincount` (as
        // most sections of a busy machine are once `maxlines` raised it),
        // none is shown and the tree need not be built.
        if section.total < self.options.mincount {
            return Ok(0);
        }
        match counted {
            Some(tree) => self.tree = tree,
            None => self.build_tree(section)?,
        }
        let (texts, indents, options) = (&self.texts, &self.indents, &self.options);

        // First the widths of the columns and the size of the text.
        let (mut max_overhead, mut max_count) = (0, 0);
        let (mut shown, mut size) = (0, 0);
        let mut ties = self.ties;
        self.walk.visit(
            &self.tree,
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
        self.walk.visit(
            &self.tree,
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

    /// Fills `entries` with the section's samples as (stack rank, count),
    /// by rank: in lexicographic order of their lines.
    fn collect_entries(&mut self, section: &Section) {
        self.entries.clear();
        let samples = self.samples;
        let rank = |index: u32| self.ranks[samples[index as usize].stack as usize];
        let ranks = self.stacks.len();
        if section.samples.len() == samples.len() {
            // Every sample: their counts per stack are known.
            self.rank_counts.clear();
            self.rank_counts.resize(ranks, 0);
            for (&rank, &count) in self.ranks.iter().zip(self.stack_counts) {
                let total = &mut self.rank_counts[rank as usize];
                *total = total.saturating_add(count);
            }
            self.entries.extend(
                (0..)
                    .zip(&self.rank_counts)
                    .filter(|&(_, &count)| count > 0)
                    .map(|(rank, &count)| (rank, count)),
            );
        } else if section.samples.len() < ranks / 4 {
            let counts = section
                .samples
                .iter()
                .map(|&index| samples[index as usize].count);
            self.entries
                .extend(section.samples.iter().map(|&index| rank(index)).zip(counts));
            self.entries.sort_unstable_by_key(|&(rank, _)| rank);
        } else {
            // Many samples: counting per rank beats sorting them.
            self.rank_counts.clear();
            self.rank_counts.resize(ranks, 0);
            for &index in &section.samples {
                let count = &mut self.rank_counts[rank(index) as usize];
                *count = count.saturating_add(samples[index as usize].count);
            }
            self.entries.extend(
                (0..)
                    .zip(&self.rank_counts)
                    .filter(|&(_, &count)| count > 0)
                    .map(|(rank, &count)| (rank, count)),
            );
        }
    }
}

/// Finds the nodes to print, with buffers kept from walk to walk.
/// Iterative, so that deep (e.g. recursive) stacks cannot overflow.
#[derive(Default)]
struct Walk {
    /// Nodes to visit, the next on top, with their depth.
    pending: Vec<(u32, u32)>,
    /// Children that passed the filters.
    kept: Vec<u32>,
    /// The shown ancestors of a node: (end of subtree, count).
    ancestors: Vec<(u32, u64)>,
}

impl Walk {
    /// Calls `visit` with each node to print, in print order, and its depth
    /// (1 = root). `total` is the section's.
    fn visit(
        &mut self,
        tree: &Tree,
        options: &ReportOptions,
        ties: &mut Ties,
        total: u64,
        visit: impl FnMut(&Node, u32),
    ) {
        let mut filter = Filter { options, ties };
        match options.sortedby {
            SortedBy::FileFuncLine => self.in_line_order(tree, &mut filter, total, visit),
            SortedBy::Count | SortedBy::Overhead => self.sorted(tree, &mut filter, total, visit),
        }
    }

    /// Siblings print in line order, the order of the nodes: one pass,
    /// skipping the subtrees of hidden nodes.
    fn in_line_order(
        &mut self,
        tree: &Tree,
        filter: &mut Filter<'_>,
        total: u64,
        mut visit: impl FnMut(&Node, u32),
    ) {
        let ancestors = &mut self.ancestors;
        ancestors.clear();
        let mut id = 0;
        while let Some(node) = tree.nodes.get(id as usize) {
            while ancestors.last().is_some_and(|&(end, _)| id >= end) {
                ancestors.pop();
            }
            let parent_count = ancestors.last().map_or(total, |&(_, count)| count);
            // No deeper than the tree has nodes, whose ids are 32-bit.
            let depth = ancestors.len() as u32 + 1;
            if filter.passes(node.count, parent_count, depth) {
                visit(node, depth);
                ancestors.push((node.end, node.count));
                id += 1;
            } else {
                id = node.end;
            }
        }
    }

    /// Siblings print as `sortedby` asks.
    fn sorted(
        &mut self,
        tree: &Tree,
        filter: &mut Filter<'_>,
        total: u64,
        mut visit: impl FnMut(&Node, u32),
    ) {
        self.pending.clear();
        let roots_end = tree.nodes.len() as u32;
        self.push_children(tree, filter, 0, roots_end, total, 1);
        while let Some((id, depth)) = self.pending.pop() {
            let node = &tree.nodes[id as usize];
            visit(node, depth);
            self.push_children(tree, filter, id + 1, node.end, node.count, depth + 1);
        }
    }

    /// Pushes the children (the subtrees of `nodes[first..end]`) that pass
    /// the filters so that the first in order is popped first.
    fn push_children(
        &mut self,
        tree: &Tree,
        filter: &mut Filter<'_>,
        first: u32,
        end: u32,
        parent_count: u64,
        depth: u32,
    ) {
        let nodes = &tree.nodes;
        let kept = &mut self.kept;
        kept.clear();
        kept.extend(tree.children(first, end));
        // Children come in line order, that is by file, function and line.
        match filter.options.sortedby {
            SortedBy::FileFuncLine => {}
            SortedBy::Count => kept.sort_unstable_by(|&a, &b| {
                let (a, b) = (&nodes[a as usize], &nodes[b as usize]);
                b.count.cmp(&a.count).then(a.line.cmp(&b.line))
            }),
            SortedBy::Overhead => kept.sort_unstable_by(|&a, &b| {
                let (a, b) = (&nodes[a as usize], &nodes[b as usize]);
                b.overhead
                    .cmp(&a.overhead)
                    .then(b.count.cmp(&a.count))
                    .then(a.line.cmp(&b.line))
            }),
        }
        // Filtered once in order, so that of the lines at the edge of
        // `maxlines`, the first siblings are the ones shown.
        kept.retain(|&id| filter.passes(nodes[id as usize].count, parent_count, depth));
        self.pending
            .extend(kept.iter().rev().map(|&id| (id, depth)));
    }
}

/// The filters of the tree: `maxdepth`, `mincount`, `noisefloor`, and the
/// room left for the lines at the edge of `maxlines`.
struct Filter<'a> {
    options: &'a ReportOptions,
    ties: &'a mut Ties,
}

impl Filter<'_> {
    /// Whether a node with `count` samples, `depth` levels deep, under a
    /// parent with `parent_count` is shown. Ask once per node, in print
    /// order.
    fn passes(&mut self, count: u64, parent_count: u64, depth: u32) -> bool {
        let options = self.options;
        options.maxdepth.is_none_or(|maxdepth| depth <= maxdepth)
            && count >= options.mincount
            && !(options.noisefloor > 0.0
                && count as f64 <= options.noisefloor * (parent_count as f64).sqrt())
            && self.ties.admit(count)
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

#[cfg(test)]
mod tests;
