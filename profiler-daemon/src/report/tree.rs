//! The tree report, after Julia's `Profile.print(format=:tree)`: a prefix
//! tree of the stacks, one line per node with its self count ("overhead",
//! blank when 0), `╎` guides one column per level (a `+n` tag past
//! [`MAX_INDENT`] columns), its inclusive count and `file:line; function`.
//!
//! Owns the tree's shape, its order and its `maxdepth`, `mincount` and
//! `noisefloor` filters. It must not decide how frames are expanded or
//! named (see `frames`) nor how sections are formed (see the parent module).
//!
//! Deviation from Julia: `sortedby = Count` and `Overhead` list the biggest
//! child first (Julia lists it last), ties broken by count, then by file,
//! function and line; `maxdepth = n` prints n levels; and the noise floor
//! also applies to roots, against the section's total.

use std::{collections::HashMap, fmt::Write as _};

use super::frames::LineKey;
use super::{ReportError, Section, digits, render_sections};
use crate::profile::{Profile, ReportOptions, SortedBy};

/// Indentation columns (one per level) shown before deeper levels are
/// summarized by a `+n` tag.
const MAX_INDENT: usize = 60;

const HEADER: &str = "Overhead ╎ [+additional indent] Count File:Line; Function\n\
                      =========================================================\n";

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<String, ReportError> {
    render_sections(profile, options, HEADER, write_tree)
}

struct Node<'a> {
    key: LineKey<'a>,
    /// Samples whose stack passes through this node.
    count: u64,
    /// Samples whose stack ends at this node.
    overhead: u64,
    children: Vec<usize>,
}

/// The prefix tree of a section's stacks, in an arena.
struct Tree<'a> {
    nodes: Vec<Node<'a>>,
    roots: Vec<usize>,
    total: u64,
}

impl<'a> Tree<'a> {
    fn build(section: &Section<'_, 'a>, combine: bool) -> Self {
        let mut tree = Tree {
            nodes: Vec::new(),
            roots: Vec::new(),
            total: section.total,
        };
        let mut index: HashMap<(Option<usize>, LineKey<'a>), usize> = HashMap::new();
        for sample in &section.samples {
            let mut parent = None;
            for frame in sample.frames() {
                let key = LineKey::new(frame, combine);
                let id = match index.get(&(parent, key)) {
                    Some(&id) => id,
                    None => {
                        let id = tree.nodes.len();
                        tree.nodes.push(Node {
                            key,
                            count: 0,
                            overhead: 0,
                            children: Vec::new(),
                        });
                        match parent {
                            Some(parent) => tree.nodes[parent].children.push(id),
                            None => tree.roots.push(id),
                        }
                        index.insert((parent, key), id);
                        id
                    }
                };
                tree.nodes[id].count = tree.nodes[id].count.saturating_add(sample.count);
                parent = Some(id);
            }
            if let Some(leaf) = parent {
                tree.nodes[leaf].overhead = tree.nodes[leaf].overhead.saturating_add(sample.count);
            }
        }
        tree
    }

    /// The nodes to print, in print order, with their depth (1 = root).
    /// Iterative, so that deep (e.g. recursive) stacks cannot overflow.
    fn visible(&self, options: &ReportOptions) -> Vec<(usize, usize)> {
        let mut shown = Vec::new();
        let mut pending = Vec::new();
        self.push_children(&mut pending, &self.roots, self.total, 1, options);
        while let Some((id, depth)) = pending.pop() {
            shown.push((id, depth));
            let node = &self.nodes[id];
            self.push_children(&mut pending, &node.children, node.count, depth + 1, options);
        }
        shown
    }

    /// Pushes the children that pass the filters so that the first in
    /// order is popped first.
    fn push_children(
        &self,
        pending: &mut Vec<(usize, usize)>,
        children: &[usize],
        parent_count: u64,
        depth: usize,
        options: &ReportOptions,
    ) {
        if options
            .maxdepth
            .is_some_and(|maxdepth| depth > maxdepth as usize)
        {
            return;
        }
        let noise = options.noisefloor * (parent_count as f64).sqrt();
        let mut kept: Vec<usize> = children
            .iter()
            .copied()
            .filter(|&id| {
                let count = self.nodes[id].count;
                count >= options.mincount && !(options.noisefloor > 0.0 && count as f64 <= noise)
            })
            .collect();
        kept.sort_by(|&a, &b| {
            let (a, b) = (&self.nodes[a], &self.nodes[b]);
            match options.sortedby {
                SortedBy::FileFuncLine => a.key.cmp(&b.key),
                SortedBy::Count => b.count.cmp(&a.count).then(a.key.cmp(&b.key)),
                SortedBy::Overhead => b
                    .overhead
                    .cmp(&a.overhead)
                    .then(b.count.cmp(&a.count))
                    .then(a.key.cmp(&b.key)),
            }
        });
        pending.extend(kept.into_iter().rev().map(|id| (id, depth)));
    }
}

fn write_tree(
    out: &mut String,
    section: &Section<'_, '_>,
    options: &ReportOptions,
) -> Result<(), ReportError> {
    let tree = Tree::build(section, options.combine);
    let shown = tree.visible(options);
    let nodes = shown.iter().map(|&(id, _)| &tree.nodes[id]);
    let overhead_width = digits(nodes.clone().map(|node| node.overhead).max().unwrap_or(0));
    let count_width = digits(nodes.map(|node| node.count).max().unwrap_or(0));
    for (id, depth) in shown {
        let node = &tree.nodes[id];
        let overhead = match node.overhead {
            0 => String::new(),
            overhead => overhead.to_string(),
        };
        writeln!(
            out,
            "{overhead:>overhead_width$}╎{}{:<count_width$} {}",
            indent(depth - 1),
            node.count,
            node.key.text()
        )?;
    }
    Ok(())
}

/// The indentation of a node `level` levels below the roots, one column per
/// level. Past [`MAX_INDENT`] columns the deepest shown column is followed
/// by `+n `, `n` being the levels not drawn, so the text stays in view.
fn indent(level: usize) -> String {
    if level <= MAX_INDENT {
        return guides(level);
    }
    let mut tag_width = "+n ".len();
    loop {
        let drawn = MAX_INDENT - tag_width;
        let tag = format!("+{} ", level - drawn);
        if tag.len() <= tag_width {
            return guides(drawn) + &tag;
        }
        tag_width = tag.len();
    }
}

/// `columns` columns of guides: a `╎` in every fifth, the last one blank.
fn guides(columns: usize) -> String {
    (0..columns)
        .map(|column| {
            if column % 5 == 4 && column + 1 < columns {
                '╎'
            } else {
                ' '
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Builder, frame, location, profile};
    use super::*;
    use crate::profile::{Format, GroupBy, LocationKind, LossCause};

    fn tree(profile: &Profile, options: ReportOptions) -> String {
        render(
            profile,
            &ReportOptions {
                format: Format::Tree,
                ..options
            },
        )
        .expect("renders")
    }

    fn default_tree(profile: &Profile) -> String {
        tree(profile, ReportOptions::default())
    }

    /// The lines between the header and the closing summary.
    fn body(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..2], HEADER.lines().collect::<Vec<_>>()[..]);
        lines[2..lines.len() - 1].to_vec()
    }

    #[test]
    fn split_under_a_common_caller() {
        let p = profile(&[(&["main", "a"], 75), (&["main", "b"], 25)]);
        assert_eq!(
            default_tree(&p),
            "Overhead ╎ [+additional indent] Count File:Line; Function\n\
             =========================================================\n  \
             ╎100 app.c:10; main\n\
             75╎ 75  app.c:10; a\n\
             25╎ 25  app.c:10; b\n\
             Total snapshots: 100 (100% of one CPU)\n"
        );
    }

    #[test]
    fn guides_mark_every_fifth_level() {
        let chain = ["f0", "f1", "f2", "f3", "f4", "f5", "f6"];
        let p = profile(&[(&chain, 3)]);
        assert_eq!(
            body(&default_tree(&p)),
            [
                " ╎3 app.c:10; f0",
                " ╎ 3 app.c:10; f1",
                " ╎  3 app.c:10; f2",
                " ╎   3 app.c:10; f3",
                " ╎    3 app.c:10; f4",
                " ╎     3 app.c:10; f5",
                "3╎    ╎ 3 app.c:10; f6",
            ]
        );
    }

    #[test]
    fn deep_stacks_summarize_hidden_indentation() {
        let names: Vec<String> = (0..70).map(|i| format!("f{i}")).collect();
        let chain: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = profile(&[(&chain, 1)]);
        let text = default_tree(&p);
        let lines = body(&text);
        assert_eq!(lines.len(), 70);
        // Level 60 still fits: 59 guide columns and a blank.
        assert_eq!(lines[60], format!(" ╎{}1 app.c:10; f60", guides(60)));
        // Level 61: 57 columns drawn, then "+4 ".
        assert_eq!(lines[61], format!(" ╎{}+4 1 app.c:10; f61", guides(57)));
        // Level 69: a two-digit tag takes one more column.
        assert_eq!(lines[69], format!("1╎{}+13 1 app.c:10; f69", guides(56)));
        assert_eq!(indent(61).chars().count(), MAX_INDENT);
        assert_eq!(indent(100_000).chars().count(), MAX_INDENT);
        assert!(indent(100_000).ends_with("+99947 "));
    }

    #[test]
    fn recursion_nests_without_merging() {
        let p = profile(&[(&["main", "f", "f", "f"], 2), (&["main", "f"], 1)]);
        assert_eq!(
            body(&default_tree(&p)),
            [
                " ╎3 app.c:10; main",
                "1╎ 3 app.c:10; f",
                " ╎  2 app.c:10; f",
                "2╎   2 app.c:10; f",
            ]
        );
    }

    #[test]
    fn maxdepth_cuts_deeper_levels() {
        let p = profile(&[(&["main", "a", "x"], 5), (&["main", "b"], 2)]);
        let options = ReportOptions {
            maxdepth: Some(2),
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [" ╎7 app.c:10; main", " ╎ 5 app.c:10; a", "2╎ 2 app.c:10; b"]
        );
        let options = ReportOptions {
            maxdepth: Some(0),
            ..ReportOptions::default()
        };
        assert!(body(&tree(&p, options)).is_empty());
    }

    #[test]
    fn mincount_hides_small_nodes_and_their_subtrees() {
        let p = profile(&[(&["main", "a", "x"], 5), (&["main", "b", "y"], 2)]);
        let options = ReportOptions {
            mincount: 3,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [
                " ╎7 app.c:10; main",
                " ╎ 5 app.c:10; a",
                "5╎  5 app.c:10; x"
            ]
        );
    }

    #[test]
    fn noisefloor_hides_a_small_branch_but_not_a_big_one() {
        // Under main (N = 100, √N = 10): a (75) and b (20) stay, c (5) goes.
        let p = profile(&[
            (&["main", "a"], 75),
            (&["main", "b"], 20),
            (&["main", "c"], 5),
        ]);
        let options = ReportOptions {
            noisefloor: 1.0,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [
                "  ╎100 app.c:10; main",
                "75╎ 75  app.c:10; a",
                "20╎ 20  app.c:10; b",
            ]
        );
        // A higher floor (2·10 = 20) hides b too; n equal to the floor goes.
        let options = ReportOptions {
            noisefloor: 2.0,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            ["  ╎100 app.c:10; main", "75╎ 75  app.c:10; a"]
        );
    }

    #[test]
    fn noisefloor_compares_roots_with_the_section_total() {
        // Total 104, √104 ≈ 10.2: the root with 4 samples is noise.
        let p = profile(&[(&["main"], 100), (&["other"], 4)]);
        let options = ReportOptions {
            noisefloor: 1.0,
            ..ReportOptions::default()
        };
        assert_eq!(body(&tree(&p, options)), ["100╎100 app.c:10; main"]);
    }

    #[test]
    fn sortedby_orders_siblings() {
        // a: count 60, self 0; b: count 40, self 40; c: count 10, self 10.
        let p = profile(&[
            (&["main", "c"], 10),
            (&["main", "b"], 40),
            (&["main", "a", "x"], 60),
        ]);
        let children = |sortedby| -> Vec<String> {
            let options = ReportOptions {
                sortedby,
                maxdepth: Some(2),
                ..ReportOptions::default()
            };
            body(&tree(&p, options))[1..]
                .iter()
                .map(|line| line.to_string())
                .collect()
        };
        assert_eq!(
            children(SortedBy::FileFuncLine),
            [
                "  ╎ 60  app.c:10; a",
                "40╎ 40  app.c:10; b",
                "10╎ 10  app.c:10; c"
            ]
        );
        assert_eq!(
            children(SortedBy::Count),
            [
                "  ╎ 60  app.c:10; a",
                "40╎ 40  app.c:10; b",
                "10╎ 10  app.c:10; c"
            ]
        );
        assert_eq!(
            children(SortedBy::Overhead),
            [
                "40╎ 40  app.c:10; b",
                "10╎ 10  app.c:10; c",
                "  ╎ 60  app.c:10; a"
            ]
        );
    }

    #[test]
    fn sortedby_count_puts_the_biggest_first() {
        let p = profile(&[(&["main", "a"], 25), (&["main", "b"], 75)]);
        let options = ReportOptions {
            sortedby: SortedBy::Count,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [
                "  ╎100 app.c:10; main",
                "75╎ 75  app.c:10; b",
                "25╎ 25  app.c:10; a"
            ]
        );
        assert_eq!(
            body(&default_tree(&p)),
            [
                "  ╎100 app.c:10; main",
                "25╎ 25  app.c:10; a",
                "75╎ 75  app.c:10; b"
            ]
        );
    }

    #[test]
    fn filefuncline_orders_by_file_then_function_then_line() {
        let mut b = Builder::new();
        let mut at = |function: &str, file: &str, line: u32| {
            b.location(location(
                LocationKind::User,
                "/usr/bin/app",
                u64::from(line),
                vec![frame(function, Some(file), line, false)],
            ))
        };
        let (z9, a12, a3, b1) = (
            at("z", "a.c", 9),
            at("a", "b.c", 12),
            at("a", "b.c", 3),
            at("b", "a.c", 1),
        );
        for leaf in [z9, a12, a3, b1] {
            b.sample(0, vec![leaf], 1);
        }
        let p = b.build();
        assert_eq!(
            body(&default_tree(&p)),
            [
                "1╎1 a.c:1; b",
                "1╎1 a.c:9; z",
                "1╎1 b.c:3; a",
                "1╎1 b.c:12; a",
            ]
        );
    }

    #[test]
    fn groupby_thread_prints_one_section_per_thread() {
        let mut b = Builder::new();
        let io = b.thread(1230, 1235, "io", "server");
        let other = b.thread(77, 78, "tool", "tool");
        b.stacks(0, &[(&["main", "work"], 98)]);
        b.stacks(io, &[(&["main", "poll"], 52)]);
        b.stacks(other, &[(&["main"], 52)]);
        let p = b.build();
        let options = ReportOptions {
            groupby: GroupBy::Thread,
            ..ReportOptions::default()
        };
        assert_eq!(
            tree(&p, options),
            "Overhead ╎ [+additional indent] Count File:Line; Function\n\
             =========================================================\n\
             Thread 1234 \"worker\" of process 1230 \"server\"  Total snapshots: 98. Utilization: 98%\n  \
             ╎98 app.c:10; main\n\
             98╎ 98 app.c:10; work\n\
             \n\
             Thread 78 \"tool\" of process 77 \"tool\"  Total snapshots: 52. Utilization: 52%\n\
             52╎52 app.c:10; main\n\
             \n\
             Thread 1235 \"io\" of process 1230 \"server\"  Total snapshots: 52. Utilization: 52%\n  \
             ╎52 app.c:10; main\n\
             52╎ 52 app.c:10; poll\n\
             \n"
        );
    }

    #[test]
    fn groupby_process_adds_up_threads_beyond_one_cpu() {
        let mut b = Builder::new();
        let io = b.thread(1230, 1235, "io", "server");
        let other = b.thread(77, 78, "tool", "tool");
        b.stacks(0, &[(&["main", "work"], 98)]);
        b.stacks(io, &[(&["main", "poll"], 52)]);
        b.stacks(other, &[(&["main"], 7)]);
        let p = b.build();
        let options = ReportOptions {
            groupby: GroupBy::Process,
            ..ReportOptions::default()
        };
        assert_eq!(
            tree(&p, options),
            "Overhead ╎ [+additional indent] Count File:Line; Function\n\
             =========================================================\n\
             Process 1230 \"server\"  Total snapshots: 150. Utilization: 150%\n  \
             ╎150 app.c:10; main\n\
             52╎ 52  app.c:10; poll\n\
             98╎ 98  app.c:10; work\n\
             \n\
             Process 77 \"tool\"  Total snapshots: 7. Utilization: 7%\n\
             7╎7 app.c:10; main\n\
             \n"
        );
    }

    #[test]
    fn utilization_is_na_without_ticks() {
        let mut p = profile(&[(&["main"], 5)]);
        p.end = p.start;
        assert!(default_tree(&p).ends_with("Total snapshots: 5 (n/a of one CPU)\n"));
        let options = ReportOptions {
            groupby: GroupBy::Process,
            ..ReportOptions::default()
        };
        assert!(tree(&p, options).contains("Total snapshots: 5. Utilization: n/a\n"));
    }

    #[test]
    fn kernel_off_collapses_kernel_runs() {
        let p = profile(&[
            (&["main", "read", "k:sys_read", "k:vfs_read"], 3),
            (&["main", "read", "k:sys_read"], 1),
        ]);
        let options = ReportOptions {
            kernel: false,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [
                " ╎4 app.c:10; main",
                " ╎ 4 app.c:10; read",
                "4╎  4 [kernel]"
            ]
        );
        assert_eq!(
            body(&default_tree(&p)),
            [
                " ╎4 app.c:10; main",
                " ╎ 4 app.c:10; read",
                "1╎  4 [kernel]:?; sys_read",
                "3╎   3 [kernel]:?; vfs_read",
            ]
        );
    }

    #[test]
    fn combine_off_splits_one_line_by_address() {
        let mut b = Builder::new();
        let main = b.named("main");
        let mut hot = |address| {
            b.location(location(
                LocationKind::User,
                "/usr/bin/app",
                address,
                vec![frame("hot", Some("app.c"), 42, false)],
            ))
        };
        let (first, second) = (hot(0x1a2b), hot(0x1a30));
        b.sample(0, vec![main, first], 3);
        b.sample(0, vec![main, second], 2);
        let p = b.build();
        assert_eq!(
            body(&default_tree(&p)),
            [" ╎5 app.c:10; main", "5╎ 5 app.c:42; hot"]
        );
        let options = ReportOptions {
            combine: false,
            ..ReportOptions::default()
        };
        assert_eq!(
            body(&tree(&p, options)),
            [
                " ╎5 app.c:10; main @0x1000",
                "3╎ 3 app.c:42; hot @0x1a2b",
                "2╎ 2 app.c:42; hot @0x1a30",
            ]
        );
    }

    #[test]
    fn inlined_frames_are_levels_of_their_own() {
        let mut b = Builder::new();
        let main = b.named("main");
        let both = b.deflate_inlining_fill_window(None, 0);
        b.sample(0, vec![main, both], 4);
        let p = b.build();
        assert_eq!(
            body(&default_tree(&p)),
            [
                " ╎4 app.c:10; main",
                " ╎ 4 deflate.c:100; deflate",
                "4╎  4 libz.so.1:?; fill_window",
            ]
        );
    }

    #[test]
    fn empty_stacks_count_as_unknown() {
        let p = profile(&[(&[], 2), (&["main"], 1)]);
        assert_eq!(
            body(&default_tree(&p)),
            ["2╎2 [unknown]", "1╎1 app.c:10; main"]
        );
    }

    #[test]
    fn empty_profile_has_header_and_zero_total() {
        let p = profile(&[]);
        assert_eq!(
            default_tree(&p),
            "Overhead ╎ [+additional indent] Count File:Line; Function\n\
             =========================================================\n\
             Total snapshots: 0 (0% of one CPU)\n"
        );
        let options = ReportOptions {
            groupby: GroupBy::Thread,
            ..ReportOptions::default()
        };
        assert_eq!(tree(&p, options), HEADER);
    }

    #[test]
    fn warnings_and_losses_come_first() {
        let mut p = profile(&[(&["main"], u64::MAX)]);
        p.warnings.push("kernel symbols unavailable".to_owned());
        p.lost.push((LossCause::StackMapFull, 3));
        let text = default_tree(&p);
        assert!(text.starts_with(
            "# warning: kernel symbols unavailable\n# lost: stack_map_full=3\nOverhead ╎"
        ));
        assert!(text.contains(&format!("\n{0}╎{0} app.c:10; main\n", u64::MAX)));
    }
}
