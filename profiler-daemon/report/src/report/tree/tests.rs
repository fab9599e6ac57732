use super::super::sequences::Sequences;
use super::super::test_support::{Builder, Random, frame, location, profile, without_percents};
use super::*;
use crate::profile::{Format, GroupBy, LocationKind, LossCause, SortedBy};

/// The tree without its `%` column and legend (see
/// `percents_and_the_legend`).
fn tree(profile: &Profile, options: ReportOptions) -> String {
    without_percents(&full_tree(profile, options))
}

fn full_tree(profile: &Profile, options: ReportOptions) -> String {
    render(
        profile,
        &ReportOptions {
            format: Format::Tree,
            ..options
        },
    )
    .expect("renders")
}

#[test]
fn percents_and_the_legend() {
    let p = profile(&[(&["main", "a"], 3), (&["main", "b"], 1)]);
    assert_eq!(
        full_tree(&p, ReportOptions::default()),
        "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
         ===========================================================\n \
         ╎4 100.0% app.c:10; main\n\
         3╎ 3  75.0% app.c:10; a\n\
         1╎ 1  25.0% app.c:10; b\n\
         Total snapshots: 4 (4% of one CPU)\n\
         Overhead: samples in the line itself, not in its callees; Count: samples in the \
         line or its callees; %: a share of all samples\n"
    );
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
        "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
         ===========================================================\n  \
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
        "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
         ===========================================================\n\
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
        "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
         ===========================================================\n\
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
fn with_off_cpu_time_sections_say_how_the_window_was_spent() {
    let mut p = profile(&[
        (&["main", "spin"], 25),
        (&["main", "read", "[off-cpu: S]"], 75),
    ]);
    p.mode = crate::profile::ProfileMode::Wall;
    p.samples[0].weight = 250_000_000;
    p.samples[1].state = crate::profile::ThreadState::Sleeping;
    p.samples[1].weight = 750_000_000;
    let options = ReportOptions {
        groupby: GroupBy::Thread,
        ..ReportOptions::default()
    };
    let text = tree(&p, options);
    assert!(
        text.contains(
            "Total snapshots: 100. cpu 0.25 s, S 0.75 s, D 0.00 s, run queue 0.00 s; wall \
             1.00 s, 100% of the window\n"
        ),
        "{text}"
    );
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
        "Overhead ╎ [+additional indent] Count % File:Line; Function\n\
         ===========================================================\n\
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
        "# warning: kernel symbols unavailable\n# lost machine-wide: stack_map_full=3\nOverhead ╎"
    ));
    assert!(text.contains(&format!("\n{0}╎{0} app.c:10; main\n", u64::MAX)));
}

#[test]
fn sections_whose_lines_maxlines_left_out_are_counted_on_one_line() {
    let mut b = Builder::new();
    let (other, third) = (
        b.thread(2000, 2000, "other", "other"),
        b.thread(3000, 3000, "third", "third"),
    );
    let (main, a, d) = (b.named("main"), b.named("a"), b.named("d"));
    b.sample(0, vec![main, a], 75);
    b.sample(other, vec![d], 2);
    b.sample(third, vec![d], 1);
    let p = b.build();
    let options = |maxlines| ReportOptions {
        groupby: GroupBy::Process,
        maxlines,
        ..ReportOptions::default()
    };
    let text = tree(&p, options(2));
    assert!(!text.contains("other") && !text.contains("third"), "{text}");
    assert!(
        text.contains(
            "\n2 more sections (3 samples in all) with no line shown (maxlines 2; maxlines 0 \
             shows every line)\n"
        ),
        "{text}"
    );
    // Uncut, every section is there, and no such line.
    let every = tree(&p, options(0));
    assert!(
        every.contains("\"other\"") && every.contains("\"third\""),
        "{every}"
    );
    assert!(!every.contains("more section"), "{every}");
}

#[test]
fn very_deep_stacks_render() {
    let names: Vec<String> = (0..100_000).map(|i| format!("f{}", i % 3)).collect();
    let chain: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = profile(&[(&chain, 2), (&chain[..50_000], 1)]);
    let every_line = ReportOptions {
        maxlines: 0,
        ..ReportOptions::default()
    };
    let text = tree(&p, every_line);
    let lines = body(&text);
    assert_eq!(lines.len(), 100_000);
    // Within the default maxlines: the first 10,000 levels, all of 3
    // samples.
    let bounded = default_tree(&p);
    let mut bounded = bounded.lines();
    assert_eq!(
        bounded.next(),
        Some(
            "# 10000 of 100000 lines shown, the first 10000 of those of 3 samples (maxlines \
             10000; maxlines 0 shows every line)"
        )
    );
    let bounded: Vec<&str> = bounded.collect();
    assert_eq!(body(&bounded.join("\n"))[..], lines[..10_000]);
    // Level 49,999: 53 columns drawn and a 7-column tag.
    assert_eq!(
        lines[49_999],
        format!("1╎{}+49946 3 app.c:10; f1", guides(53))
    );
    assert_eq!(
        lines[99_999],
        format!("2╎{}+99946 2 app.c:10; f0", guides(53))
    );
}

/// A node of [`reference_body`]'s tree.
#[derive(Default)]
struct ReferenceNode<'a> {
    count: u64,
    overhead: u64,
    children: std::collections::BTreeMap<super::super::frames::LineKey<'a>, ReferenceNode<'a>>,
}

/// The lines of `count` samples still to be shown at the edge of
/// `maxlines`: (count, room).
type ReferenceTies = (u64, u64);

/// The body of an ungrouped tree report as a naive recursive tree of
/// `LineKey`s gives it.
fn reference_body(profile: &Profile, options: &ReportOptions) -> Vec<String> {
    use super::super::frames::LineKey;

    type Shown<'n, 'a> = Vec<(&'n LineKey<'a>, &'n ReferenceNode<'a>, usize)>;

    fn admit(ties: &mut ReferenceTies, count: u64) -> bool {
        match ties {
            (edge, room) if *edge == count && *edge > 0 => {
                let admitted = *room > 0;
                *room = room.saturating_sub(1);
                admitted
            }
            _ => true,
        }
    }

    fn shown<'n, 'a>(
        node: &'n ReferenceNode<'a>,
        depth: usize,
        options: &ReportOptions,
        ties: &mut ReferenceTies,
        out: &mut Shown<'n, 'a>,
    ) {
        if options
            .maxdepth
            .is_some_and(|maxdepth| depth > maxdepth as usize)
        {
            return;
        }
        let noise = options.noisefloor * (node.count as f64).sqrt();
        let mut children: Vec<_> = node
            .children
            .iter()
            .filter(|(_, child)| {
                child.count >= options.mincount
                    && !(options.noisefloor > 0.0 && child.count as f64 <= noise)
            })
            .collect();
        // Stable sorts keep the map's key order among ties.
        match options.sortedby {
            SortedBy::FileFuncLine => {}
            SortedBy::Count => children.sort_by_key(|(_, child)| std::cmp::Reverse(child.count)),
            SortedBy::Overhead => children.sort_by_key(|(_, child)| {
                (
                    std::cmp::Reverse(child.overhead),
                    std::cmp::Reverse(child.count),
                )
            }),
        }
        // In line order each node's place at the edge is decided as it is
        // printed; sorted, siblings are decided together.
        if options.sortedby != SortedBy::FileFuncLine {
            children.retain(|(_, child)| admit(ties, child.count));
        }
        for (key, child) in children {
            if options.sortedby == SortedBy::FileFuncLine && !admit(ties, child.count) {
                continue;
            }
            out.push((key, child, depth));
            shown(child, depth + 1, options, ties, out);
        }
    }

    let expansion = Expansion::new(profile, options.kernel).expect("valid");
    let mut root = ReferenceNode::default();
    for sample in expansion.samples.iter() {
        root.count += sample.count;
        let mut node = &mut root;
        for frame in expansion.frames_of(sample.stack) {
            let key = LineKey::new(expansion.frames[frame as usize], options.combine);
            node = node.children.entry(key).or_default();
            node.count += sample.count;
        }
        node.overhead += sample.count;
    }
    let mut nodes = Vec::new();
    let every_line = ReportOptions {
        maxlines: 0,
        ..options.clone()
    };
    shown(&root, 1, &every_line, &mut (0, 0), &mut nodes);
    // Within maxlines: the lines of most samples, those at the edge in
    // order.
    let maxlines = options.maxlines as usize;
    if maxlines > 0 && nodes.len() > maxlines {
        let mut counts: Vec<u64> = nodes.iter().map(|(_, node, _)| node.count).collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let edge = counts[maxlines];
        let above = counts.iter().filter(|&&count| count > edge).count() as u64;
        let bounded = ReportOptions {
            mincount: options.mincount.max(edge),
            ..every_line
        };
        nodes.clear();
        let mut ties = (edge, maxlines as u64 - above);
        shown(&root, 1, &bounded, &mut ties, &mut nodes);
    }
    let overhead_width = digits(nodes.iter().map(|(_, n, _)| n.overhead).max().unwrap_or(0));
    let count_width = digits(nodes.iter().map(|(_, n, _)| n.count).max().unwrap_or(0));
    nodes
        .iter()
        .map(|(key, node, depth)| {
            let overhead = match node.overhead {
                0 => String::new(),
                overhead => overhead.to_string(),
            };
            format!(
                "{overhead:>overhead_width$}╎{}{:<count_width$} {}",
                indent(depth - 1),
                node.count,
                key.text()
            )
        })
        .collect()
}

#[test]
fn random_trees_match_a_naive_tree() {
    let mut random = Random::new(0x9e37_79b9_7f4a_7c15_u64);
    let mut next = |below: usize| random.below(below);
    let mut b = Builder::new();
    let mut sites = Vec::new();
    for (index, name) in ["a", "b", "c", "k:d", "k:e", "f"].iter().enumerate() {
        sites.push(b.named(name));
        // The same source line at another address.
        if index % 2 == 0 {
            sites.push(b.location(location(
                LocationKind::User,
                "/usr/bin/app",
                0x9000 + index as u64,
                vec![frame(name, Some("app.c"), 10, false)],
            )));
        }
    }
    sites.push(b.deflate_inlining_fill_window(None, 0));
    for _ in 0..300 {
        let length = next(9);
        let stack = (0..length).map(|_| sites[next(sites.len())]).collect();
        b.sample(0, stack, 1 + next(20) as u64);
    }
    let p = b.build();
    let mut cuts = 0;
    for sortedby in [SortedBy::FileFuncLine, SortedBy::Count, SortedBy::Overhead] {
        for (mincount, noisefloor, maxdepth, maxlines) in [
            (0, 0.0, None, 10_000),
            (15, 0.0, Some(4), 10_000),
            (0, 0.7, None, 10_000),
            (0, 0.0, None, 60),
            (0, 0.0, None, 7),
            (15, 0.0, Some(4), 30),
            (0, 0.7, None, 5),
        ] {
            for (combine, kernel) in [(true, true), (false, false)] {
                let options = ReportOptions {
                    sortedby,
                    mincount,
                    noisefloor,
                    maxdepth,
                    combine,
                    kernel,
                    maxlines,
                    ..ReportOptions::default()
                };
                let text = tree(&p, options.clone());
                // Past the comment on what maxlines left out.
                let text = match text.strip_prefix("# ") {
                    Some(commented) => {
                        let (comment, rest) = commented.split_once('\n').expect("a comment line");
                        assert!(
                            comment.contains(&format!("maxlines {maxlines}")),
                            "{comment}"
                        );
                        assert_eq!(body(rest).len(), maxlines as usize, "{options:?}");
                        cuts += 1;
                        rest.to_owned()
                    }
                    None => text,
                };
                assert_eq!(body(&text), reference_body(&p, &options), "{options:?}");
            }
        }
    }
    // Each of the four smaller budgets cuts, in every order and layout.
    assert_eq!(cuts, 3 * 4 * 2);
}

/// The nodes of `tree` in depth-first order as (depth, line, count,
/// overhead), read through `children`, as the printing walks them.
fn layout(tree: &Tree) -> Vec<(usize, LineId, u64, u64)> {
    fn walk(
        tree: &Tree,
        first: u32,
        end: u32,
        depth: usize,
        out: &mut Vec<(usize, LineId, u64, u64)>,
    ) {
        for child in tree.children(first, end) {
            let node = &tree.nodes[child as usize];
            out.push((depth, node.line, node.count, node.overhead));
            walk(tree, child + 1, node.end, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    walk(tree, 0, tree.nodes.len() as u32, 0, &mut out);
    out
}

#[test]
fn a_tree_from_shared_prefixes_is_the_tree_of_the_lines_cut_at_its_floor() {
    // Lexicographic order, as trees are built.
    let stacks: [(&[LineId], u64); 8] = [
        (&[0, 1, 2], 5),
        (&[0, 1, 3], 1),
        (&[0, 4], 2),
        (&[0, 4, 5, 6], 4),
        (&[0, 4, 5, 6, 2, 2], 2),
        (&[7], 1),
        (&[7, 8], 3),
        (&[9, 1], 1),
    ];
    let mut tree = Tree::default();
    tree.build(stacks.iter().map(|&(lines, count)| (lines, count)))
        .expect("builds");
    let whole = layout(&tree);
    let mut sequences = Sequences::with_capacity(stacks.len(), 0);
    for (lines, _) in &stacks {
        lines.iter().for_each(|&line| sequences.push(line));
        sequences.finish().expect("a stack");
    }
    let ranked = Ranked::Sorted(sequences);
    let prefixes = Prefixes::new(&ranked);
    // Each place once, or a place's count in two entries.
    let once: Vec<(u32, u64)> = (0..).zip(stacks.iter().map(|&(_, count)| count)).collect();
    let mut split = Vec::new();
    for &(place, count) in &once {
        split.push((place, count / 2));
        split.push((place, count - count / 2));
    }
    for entries in [once, split] {
        let section = SectionStacks::new(&entries, &prefixes);
        assert_eq!(section.lines(None), whole.len() as u64);
        let within_2 = whole.iter().filter(|&&(depth, ..)| depth < 2).count();
        assert_eq!(section.lines(Some(2)), within_2 as u64);
        for floor in [0, 1, 2, 3, 4, 5, 6, 20] {
            let mut from_prefixes = Tree::default();
            let line_of = |place, depth: u32| ranked.get(place)[depth as usize - 1];
            from_prefixes
                .build_from(&section, floor, line_of)
                .expect("builds");
            let mut expected = Vec::new();
            // A node under the floor goes with its subtree.
            let mut skipping_below: Option<usize> = None;
            for &(depth, line, count, overhead) in &whole {
                if skipping_below.is_some_and(|skipped| depth > skipped) {
                    continue;
                }
                skipping_below = None;
                if count < floor {
                    skipping_below = Some(depth);
                    continue;
                }
                expected.push((depth, line, count, overhead));
            }
            assert_eq!(layout(&from_prefixes), expected, "floor {floor}");
            assert_eq!(from_prefixes.nodes.len(), expected.len(), "floor {floor}");
        }
    }
}
