//! The folded lines a flame graph draws. A flame graph leaves out every
//! frame narrower than a fraction of the whole (inferno: 0.01%), and so
//! every frame below it: a window of many small stacks (hundreds of
//! thousands of lines, most of them a few samples) draws a few thousand
//! frames. The samples through a frame that narrow are handed to its
//! parent instead, on a line that ends at the parent where the narrow
//! frame was (one line for a run of them, and for the parent's own samples
//! when they come first); a frame narrow at the first level, which has no
//! parent to end at, becomes one line cut after it. Every frame drawn
//! starts and ends where it did, narrow frames leave the same gaps, and
//! the flame graph is the same, made from far fewer and shorter lines.
//! (Cut lines no longer sort as text where a name continues past a shorter
//! one, `f b` before `f;…`: they must be merged in the order given.)
//!
//! A frame is what inferno merges: the same name at the same depth in
//! consecutive lines. Owns that prefix tree of the lines; it must not
//! decide the lines' order or text (the parent module's).

use super::{Folded, ReportError, digits, push_decimal, small_id};

/// A frame of consecutive lines: a node of their prefix tree, in line order.
struct Node {
    /// Samples of the lines through it, and of those ending at it.
    count: u64,
    overhead: u64,
    /// One past the last node of its subtree.
    end: u32,
    /// The first line through it, and its depth there (1: the first
    /// level).
    line: u32,
    depth: u32,
}

/// Writes the lines of `folded`, the samples through a frame of fewer
/// than `narrowest` samples on a line ending at its parent (cut after it
/// at the first level).
pub(super) fn write(folded: &Folded<'_>, narrowest: f64) -> Result<String, ReportError> {
    let nodes = prefix_tree(folded)?;
    // The group's text is one level of the tree (empty when ungrouped).
    let skipped = usize::from(!grouped(folded));
    let mut lines = Lines {
        out: String::new(),
        folded,
        nodes: &nodes,
        skipped,
        pending: None,
    };
    // The frames drawn around the node visited, root first.
    let mut ancestors: Vec<usize> = Vec::new();
    let mut id = 0;
    while let Some(node) = nodes.get(id) {
        while ancestors
            .last()
            .is_some_and(|&ancestor| nodes[ancestor].end as usize <= id)
        {
            ancestors.pop();
        }
        if (node.count as f64) < narrowest {
            // Too narrow to draw, with everything below it.
            match ancestors.last() {
                Some(&parent) => lines.add(parent, node.count),
                None => lines.add(id, node.count),
            }
            id = node.end as usize;
            continue;
        }
        // The line ending at a frame comes first among the lines through
        // it.
        if node.overhead > 0 {
            lines.add(id, node.overhead);
        }
        ancestors.push(id);
        id += 1;
    }
    lines.flush();
    Ok(lines.out)
}

/// The lines written, the last one held back while the next may end at
/// the same frame (its samples then added to it).
struct Lines<'a> {
    out: String,
    folded: &'a Folded<'a>,
    nodes: &'a [Node],
    skipped: usize,
    /// The last line: the node it ends at and its samples so far.
    pending: Option<(usize, u64)>,
}

impl Lines<'_> {
    /// Adds `count` samples on a line ending at node `id`.
    fn add(&mut self, id: usize, count: u64) {
        match &mut self.pending {
            Some((last, samples)) if *last == id => *samples = samples.saturating_add(count),
            _ => {
                self.flush();
                self.pending = Some((id, count));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((id, count)) = self.pending.take() {
            write_line(
                &mut self.out,
                self.folded,
                self.skipped,
                &self.nodes[id],
                count,
            );
        }
    }
}

/// The line of `node`'s frames, root first, with `count`; `skipped` is 1
/// when lines have no group level (its empty text is skipped).
fn write_line(out: &mut String, folded: &Folded<'_>, skipped: usize, node: &Node, count: u64) {
    let (line, _) = folded.lines[node.line as usize];
    for text in folded
        .texts_of(line)
        .skip(skipped)
        .take(node.depth as usize)
    {
        out.push_str(text);
    }
    // The last frame without the `;` that follows it.
    if out.ends_with(';') {
        out.pop();
    }
    out.reserve(" \n".len() + digits(count));
    out.push(' ');
    push_decimal(out, count);
    out.push('\n');
}

/// Whether lines start with group frames (`groupby` process or thread).
fn grouped(folded: &Folded<'_>) -> bool {
    folded.groups.texts.iter().any(|text| !text.is_empty())
}

/// The prefix tree of the lines, nodes in line order: lines through a node
/// are consecutive, a node's subtree is `nodes[id..end]`.
fn prefix_tree(folded: &Folded<'_>) -> Result<Vec<Node>, ReportError> {
    let grouped = grouped(folded);
    let names = &folded.tokens.names;
    // A level's key: a group's rank, or past them a frame's name.
    let groups = folded.groups.texts.len() as u32;
    let mut nodes: Vec<Node> = Vec::new();
    let mut path: Vec<u32> = Vec::new();
    let (mut keys, mut previous): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    for (index, &((group, stack), count)) in folded.lines.iter().enumerate() {
        keys.clear();
        if grouped {
            keys.push(group);
        }
        keys.extend(
            folded
                .stacks
                .get(stack)
                .iter()
                .map(|&token| groups + names[token as usize]),
        );
        let common = previous
            .iter()
            .zip(&keys)
            .take_while(|(a, b)| a == b)
            .count();
        close(&mut nodes, &mut path, common)?;
        // Depths are at most a line's frames, whose number fits 32 bits.
        for depth in common as u32 + 1..=keys.len() as u32 {
            path.push(small_id(nodes.len(), "flame graph frames")?);
            nodes.push(Node {
                count: 0,
                overhead: 0,
                end: 0,
                line: small_id(index, "folded lines")?,
                depth,
            });
        }
        if let Some(&leaf) = path.last() {
            let leaf = &mut nodes[leaf as usize];
            leaf.count = leaf.count.saturating_add(count);
            leaf.overhead = leaf.overhead.saturating_add(count);
        }
        std::mem::swap(&mut keys, &mut previous);
    }
    close(&mut nodes, &mut path, 0)?;
    Ok(nodes)
}

/// Ends the nodes of `path` past its first `depth`: their subtrees end
/// here, and their samples go to their parents.
fn close(nodes: &mut [Node], path: &mut Vec<u32>, depth: usize) -> Result<(), ReportError> {
    let end = small_id(nodes.len(), "flame graph frames")?;
    while path.len() > depth {
        let Some(id) = path.pop() else { break };
        let node = &mut nodes[id as usize];
        node.end = end;
        let count = node.count;
        if let Some(&parent) = path.last() {
            let parent = &mut nodes[parent as usize];
            parent.count = parent.count.saturating_add(count);
        }
    }
    Ok(())
}
