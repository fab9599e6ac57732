//! The prefix tree of a section's stacks: built from their lines in
//! lexicographic order, or from what they share alone
//! ([`super::prefixes`]). It must not filter nor print.

use super::super::ReportError;
use super::super::frames::{LineId, small_id};
use super::prefixes::{SectionStacks, Step};

/// A node of a [`Tree`].
pub(super) struct Node {
    pub line: LineId,
    /// One past the last node of this node's subtree.
    pub end: u32,
    /// Samples whose stack passes through this node.
    pub count: u64,
    /// Samples whose stack ends at this node.
    pub overhead: u64,
}

/// The prefix tree of a section's stacks, its nodes in depth-first order
/// with siblings in line (that is `LineKey`) order: a node's subtree is
/// `nodes[id..end]`, its first child `id + 1`, its next sibling `end`.
#[derive(Default)]
pub(super) struct Tree {
    pub nodes: Vec<Node>,
    /// The path to the node of the stack being added, root first.
    path: Vec<u32>,
}

impl Tree {
    /// Builds the tree of `stacks` (line sequences with their counts),
    /// which must come in lexicographic order: each stack then shares its
    /// first nodes with the stack before it and adds the rest anew.
    pub fn build<'l>(
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

    /// Builds the tree of a section's stacks as [`Tree::build`] does, from
    /// what they share alone, keeping only the nodes of at least `floor`
    /// samples (their subtrees have fewer still): each node's line is
    /// `line_of` a stack's place and the node's depth (from 1).
    pub fn build_from(
        &mut self,
        stacks: &SectionStacks,
        floor: u64,
        line_of: impl Fn(u32, u32) -> LineId,
    ) -> Result<(), ReportError> {
        self.nodes.clear();
        self.path.clear();
        let (nodes, path) = (&mut self.nodes, &mut self.path);
        stacks.walk(floor, |step| {
            match step {
                Step::Open {
                    depth,
                    count,
                    overhead,
                    place,
                } => {
                    path.push(small_id(nodes.len(), "tree nodes")?);
                    nodes.push(Node {
                        line: line_of(place, depth),
                        end: 0,
                        count,
                        overhead,
                    });
                }
                Step::Close => {
                    let end = small_id(nodes.len(), "tree nodes")?;
                    if let Some(id) = path.pop() {
                        nodes[id as usize].end = end;
                    }
                }
            }
            Ok(())
        })
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

    /// The roots of the subtrees that `nodes[first..end]` is made of, in
    /// line order: the children of node `first - 1`, or all roots when
    /// `first` is 0 and `end` the number of nodes.
    pub fn children(&self, first: u32, end: u32) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors((first < end).then_some(first), move |&child| {
            let next = self.nodes[child as usize].end;
            (next < end).then_some(next)
        })
    }
}
