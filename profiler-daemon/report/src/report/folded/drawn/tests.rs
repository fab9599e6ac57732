//! The drawn lines against a reference: the whole prefix tree of the
//! lines built first, then walked (as `write` did before it skipped the
//! lines below narrow frames), on random profiles.

use super::super::super::test_support::{Builder, Random};
use super::super::{Folded, with_lines};
use super::*;
use crate::profile::{Format, GroupBy, ReportOptions};
use crate::report::frames::small_id;

/// A frame of consecutive lines: a node of their prefix tree, in line order.
struct Node {
    count: u64,
    overhead: u64,
    end: u32,
    line: u32,
    depth: u32,
}

fn reference(folded: &Folded<'_>, narrowest: f64) -> String {
    let nodes = prefix_tree(folded).expect("a tree");
    let mut out = String::new();
    let mut lines = Lines {
        out: &mut out,
        folded,
        skipped: usize::from(!grouped(folded)),
        pending: None,
    };
    let at = |id: usize| (nodes[id].line as usize, nodes[id].depth);
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
            match ancestors.last() {
                Some(&parent) => lines.add(at(parent), node.count),
                None => lines.add(at(id), node.count),
            }
            id = node.end as usize;
            continue;
        }
        if node.overhead > 0 {
            lines.add(at(id), node.overhead);
        }
        ancestors.push(id);
        id += 1;
    }
    lines.flush();
    out
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

#[test]
fn the_lines_drawn_are_the_reference_s() {
    let mut random = Random::new(0x9e37_79b9_7f4a_7c15);
    let mut b = Builder::new();
    let threads: Vec<u32> = (0..40)
        .map(|index| {
            let pid = 100 + index / 3;
            b.thread(pid, 1000 + index, "t", &format!("p{}", pid % 7))
        })
        .collect();
    let sites: Vec<u32> = ["a", "b", "c", "k:d", "f", "f b", "f-x", "f2", "g"]
        .iter()
        .map(|name| b.named(name))
        .collect();
    for _ in 0..5000 {
        let length = 1 + random.below(12);
        let stack = (0..length)
            .map(|_| sites[random.below(sites.len())])
            .collect();
        let count = match random.below(50) {
            0 => 1 + random.below(5_000) as u64,
            _ => 1 + random.below(4) as u64,
        };
        b.sample(threads[random.below(threads.len())], stack, count);
    }
    let profile = b.build();
    let mut compared = 0;
    for groupby in [GroupBy::None, GroupBy::Process, GroupBy::Thread] {
        for maxdepth in [None, Some(4)] {
            let options = ReportOptions {
                format: Format::DrawnFolded,
                groupby,
                maxdepth,
                ..ReportOptions::default()
            };
            for narrowest in [0.0, 1.5, 3.0, 20.0, 400.0, 1e9] {
                let (drawn, expected) = with_lines(&profile, &options, None, |folded| {
                    Ok((
                        write(folded, narrowest).unwrap(),
                        reference(folded, narrowest),
                    ))
                })
                .unwrap();
                assert_eq!(drawn, expected, "{groupby:?} {maxdepth:?} {narrowest}");
                compared += usize::from(!drawn.is_empty());
            }
        }
    }
    assert!(compared > 30);
}

#[test]
fn lines_drawn_a_group_at_a_time_are_those_of_every_line_at_once() {
    let mut random = Random::new(0x2545_f491_4f6c_dd1d);
    let mut b = Builder::new();
    // Threads of one process each, of several, of processes of one name.
    let threads: Vec<u32> = (0..60)
        .map(|index| {
            let pid = 100 + index / (1 + index % 4);
            b.thread(pid, 1000 + index, "t", &format!("p{}", pid % 9))
        })
        .collect();
    let sites: Vec<u32> = ["a", "b", "c", "k:d", "f", "f b", "g"]
        .iter()
        .map(|name| b.named(name))
        .collect();
    b.random_samples(&mut random, (&threads, &sites), 8000, (40, 3_000));
    let profile = b.build();
    let mut compared = 0;
    for groupby in [GroupBy::None, GroupBy::Process, GroupBy::Thread] {
        for mincount in [0, 1, 3] {
            let options = ReportOptions {
                format: Format::DrawnFolded,
                groupby,
                mincount,
                // Every section drawn whole (see `sections::tests` for those
                // past `maxsections`).
                maxsections: 0,
                ..ReportOptions::default()
            };
            for min_width in [0.0, 0.01, 0.1, 1.0, 30.0] {
                let drawn =
                    super::super::render_drawn(&profile, &options, None, min_width).unwrap();
                let expected = with_lines(&profile, &options, None, |folded| {
                    let total = folded.lines.iter().map(|&(_, count)| count).sum::<u64>();
                    write(folded, min_width / (100.0 / total as f64))
                })
                .unwrap();
                assert_eq!(drawn, expected, "{groupby:?} {mincount} {min_width}");
                compared += usize::from(!drawn.is_empty());
            }
        }
    }
    assert!(compared > 30);
}
