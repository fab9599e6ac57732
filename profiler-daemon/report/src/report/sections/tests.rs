//! Sections within `maxsections`: which are shown, and that a profile read
//! only for those renders the same bytes.

use super::super::{render, test_support::Builder};
use super::*;
use crate::profile::UnreadThread;

/// Four processes: 10 "alpha" (two threads, 30 + 20 samples), 20
/// "beta" and 30 "gamma" (30 each: a tie, told apart by pid) and 40
/// "delta" (5), each with its own stacks and some shared.
fn four_processes() -> Profile {
    let mut b = Builder::new();
    let alpha = b.thread(10, 10, "alpha", "alpha");
    let alpha_worker = b.thread(10, 11, "worker", "alpha");
    let beta = b.thread(20, 20, "beta", "beta");
    let gamma = b.thread(30, 30, "gamma", "gamma");
    let delta = b.thread(40, 40, "delta", "delta");
    b.stacks(alpha, &[(&["main", "a"], 20), (&["main", "b"], 10)]);
    b.stacks(alpha_worker, &[(&["start", "a"], 20)]);
    b.stacks(beta, &[(&["main", "b"], 25), (&["main", "k:read"], 5)]);
    b.stacks(gamma, &[(&["main", "c"], 30)]);
    b.stacks(delta, &[(&["main", "a"], 5)]);
    b.build()
}

fn text(profile: &Profile, options: &ReportOptions) -> String {
    String::from_utf8(render(profile, options).expect("renders")).expect("UTF-8")
}

/// `profile` as the store reads it for `options`: the threads of the
/// sections left out only counted.
fn read_for(profile: &Profile, options: &ReportOptions) -> Profile {
    let totals: Vec<(&ThreadInfo, u64)> = profile
        .threads
        .iter()
        .enumerate()
        .map(|(index, thread)| {
            let samples = profile.samples.iter();
            let mine = samples.filter(|sample| sample.thread as usize == index);
            (thread, mine.map(|sample| sample.count).sum())
        })
        .collect();
    let Some(read) = threads_shown(options, &totals) else {
        return profile.clone();
    };
    let mut pruned = profile.clone();
    pruned.samples.retain(|sample| read[sample.thread as usize]);
    for (thread, &read) in (0..).zip(&read) {
        let samples = profile.samples.iter().filter(|s| s.thread == thread);
        let (count, weight) = samples.fold((0, 0), |(c, w), s| (c + s.count, w + s.weight));
        if !read && count > 0 {
            pruned.unread.push(UnreadThread {
                thread,
                count,
                weight,
            });
        }
    }
    // A flame graph's lines: the threads left out summed per stack too, in
    // stack order, naming the first of them (as the store sums them).
    if options.format == Format::DrawnFolded
        && let Some(first) = pruned.unread.first()
    {
        let mut sums: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for sample in profile.samples.iter().filter(|s| !read[s.thread as usize]) {
            let (count, weight) = sums.entry(sample.stack).or_default();
            *count += sample.count;
            *weight += sample.weight;
        }
        pruned.unread_stacks = (sums.into_iter())
            .map(|(stack, (count, weight))| crate::profile::Sample {
                thread: first.thread,
                stack,
                count,
                weight,
                state: ThreadState::Cpu,
            })
            .collect();
    }
    pruned
}

#[test]
fn maxsections_shows_the_sections_of_most_samples_and_counts_the_others() {
    let profile = four_processes();
    let options = |format, maxsections| ReportOptions {
        format,
        groupby: GroupBy::Process,
        maxsections,
        ..ReportOptions::default()
    };
    for format in [Format::Tree, Format::Flat] {
        let all = text(&profile, &options(format, 0));
        let cut = text(&profile, &options(format, 2));
        assert!(
            cut.starts_with(
                "# 2 of 4 sections shown, those of most samples (maxsections 2; \
                 maxsections 0 shows every section)\n"
            ),
            "{cut}"
        );
        let titles = |text: &str| -> Vec<String> {
            let titles = text.lines().filter(|line| line.starts_with("Process "));
            titles.map(str::to_owned).collect()
        };
        assert_eq!(
            titles(&all),
            [
                "Process 10 \"alpha\"  Total snapshots: 50. Utilization: 50%",
                "Process 20 \"beta\"  Total snapshots: 30. Utilization: 30%",
                "Process 30 \"gamma\"  Total snapshots: 30. Utilization: 30%",
                "Process 40 \"delta\"  Total snapshots: 5. Utilization: 5%",
            ]
        );
        assert_eq!(titles(&cut), titles(&all)[..2]);
        // The sections shown are those of the whole report, to the byte.
        let body = |text: &str| -> String {
            let from = text.find("Process 10 ").expect("the first section");
            let to = text.find("Process 30 ").unwrap_or(text.len());
            text[from..to].to_owned()
        };
        let shown = body(&cut);
        let shown = shown.split("2 more sections").next().expect("a body");
        assert_eq!(shown, body(&all));
        assert!(
            cut.contains(
                "\n2 more sections (35 samples in all) not shown (maxsections 2; \
                 maxsections 0 shows every section)\n\n"
            ),
            "{cut}"
        );
        // As many as there are, or more: nothing is said.
        for maxsections in [4, 5] {
            assert_eq!(text(&profile, &options(format, maxsections)), all);
        }
    }
}

#[test]
fn a_profile_read_only_for_the_sections_shown_renders_the_same_bytes() {
    let profile = four_processes();
    for format in [Format::Tree, Format::Flat, Format::DrawnFolded] {
        for groupby in [GroupBy::Auto, GroupBy::Process, GroupBy::Thread] {
            for maxsections in [0, 1, 2, 3, 4, 5] {
                let options = ReportOptions {
                    format,
                    groupby,
                    maxsections,
                    ..ReportOptions::default()
                };
                let read = read_for(&profile, &options);
                let what = format!("{format:?} by {groupby:?}, maxsections {maxsections}");
                let left_out = match (groupby, maxsections) {
                    (_, 0) => 0,
                    // A flame graph's lines have sections only when asked.
                    (GroupBy::Auto, _) if format == Format::DrawnFolded => 0,
                    (GroupBy::Thread, max) => 5_usize.saturating_sub(max as usize),
                    (_, max) => 4_usize.saturating_sub(max as usize),
                };
                // The threads of the sections left out are not read.
                assert_eq!(read.unread.is_empty(), left_out == 0, "{what}");
                assert_eq!(read.total_samples(), profile.total_samples(), "{what}");
                assert_eq!(text(&read, &options), text(&profile, &options), "{what}");
            }
        }
    }
}

#[test]
fn unread_threads_are_refused_where_they_would_be_drawn() {
    let profile = four_processes();
    let options = ReportOptions {
        groupby: GroupBy::Process,
        maxsections: 2,
        ..ReportOptions::default()
    };
    let mut read = read_for(&profile, &options);
    assert_eq!(read.unread.len(), 2, "gamma and delta");
    // In a section shown (alpha's worker), or in a format without
    // sections: an error, not a report missing samples.
    let mut shown = read.clone();
    shown.unread.push(UnreadThread {
        thread: 1,
        count: 1,
        weight: 1,
    });
    let err = render(&shown, &options).expect_err("alpha is shown");
    assert!(err.to_string().contains("in a section shown"), "{err}");
    for format in [Format::Folded, Format::Pprof, Format::Flamegraph] {
        let options = ReportOptions {
            format,
            ..options.clone()
        };
        assert!(render(&read, &options).is_err(), "{format:?}");
    }
    read.unread[0].thread = 99;
    assert!(render(&read, &options).is_err(), "no thread 99");
}

#[test]
fn a_flame_graph_draws_the_sections_past_maxsections_merged_under_one_frame() {
    let profile = four_processes();
    let options = |groupby, maxsections| ReportOptions {
        format: Format::DrawnFolded,
        groupby,
        maxsections,
        ..ReportOptions::default()
    };
    let lines = |options: &ReportOptions| -> Vec<String> {
        let text = text(&read_for(&profile, options), options);
        text.lines().map(str::to_owned).collect()
    };
    let all = lines(&options(GroupBy::Process, 0));
    let cut = lines(&options(GroupBy::Process, 2));
    // The two processes of most samples as they are drawn whole, then
    // gamma's and delta's stacks merged under one frame: every sample.
    let shown: Vec<&String> = (all.iter())
        .filter(|line| line.starts_with("alpha-10;") || line.starts_with("beta-20;"))
        .collect();
    assert_eq!(cut[..shown.len()].iter().collect::<Vec<_>>(), shown);
    assert_eq!(
        cut[shown.len()..],
        [
            "[2 other processes, merged (maxsections 2)];main;a 5",
            "[2 other processes, merged (maxsections 2)];main;c 30",
        ]
    );
    let total = |lines: &[String]| -> u64 {
        let counts = lines
            .iter()
            .map(|line| line.rsplit(' ').next().unwrap_or("0"));
        counts
            .map(|count| count.parse::<u64>().expect("a count"))
            .sum()
    };
    assert_eq!(total(&cut), profile.total_samples());
    // Per thread: one thread left out, named as a thread.
    let cut = lines(&options(GroupBy::Thread, 4));
    assert_eq!(
        cut.last().map(String::as_str),
        Some("[1 other thread, merged (maxsections 4)];main;a 5")
    );
    // Without groups, nothing is left out.
    assert_eq!(
        lines(&options(GroupBy::Auto, 1)),
        lines(&options(GroupBy::Auto, 0))
    );
}
