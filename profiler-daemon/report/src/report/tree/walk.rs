//! Walking a section's tree in print order, through the filters
//! (`maxdepth`, `mincount`, `noisefloor`, and the room at the edge of
//! `maxlines`). It must not build trees nor write text.

use super::super::budget::Ties;
use super::{Node, Tree};
use crate::profile::{ReportOptions, SortedBy};

/// Finds the nodes to print, with buffers kept from walk to walk.
/// Iterative, so that deep (e.g. recursive) stacks cannot overflow.
#[derive(Default)]
pub(super) struct Walk {
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
    pub fn visit(
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
    pub fn in_line_order(
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
pub(super) struct Filter<'a> {
    pub options: &'a ReportOptions,
    pub ties: &'a mut Ties,
}

impl Filter<'_> {
    /// Whether a node with `count` samples, `depth` levels deep, under a
    /// parent with `parent_count` is shown. Ask once per node, in print
    /// order.
    pub fn passes(&mut self, count: u64, parent_count: u64, depth: u32) -> bool {
        let options = self.options;
        options.maxdepth.is_none_or(|maxdepth| depth <= maxdepth)
            && count >= options.mincount
            && !(options.noisefloor > 0.0
                && count as f64 <= options.noisefloor * (parent_count as f64).sqrt())
            && self.ties.admit(count)
    }
}
