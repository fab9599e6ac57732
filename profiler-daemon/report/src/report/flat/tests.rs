//! The flat report against hand-made profiles: counts, order, filters,
//! column widths and sections.

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
            "# lost machine-wide: counts_map_full=2\n\
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

/// `--functions`: one row per function, its lines merged, with its module.
#[test]
fn by_function_one_row_per_function_with_its_module() {
    let mut b = Builder::new();
    let a10 = b.location(location(
        LocationKind::User,
        "/usr/lib/libapp.so",
        0x10,
        vec![frame("a", Some("app.c"), 10, false)],
    ));
    let a11 = b.location(location(
        LocationKind::User,
        "/usr/lib/libapp.so",
        0x20,
        vec![frame("a", Some("app.c"), 11, false)],
    ));
    let main = b.named("main");
    b.sample(0, vec![main, a10], 3);
    b.sample(0, vec![main, a11], 2);
    b.sample(0, vec![main], 1);
    let options = ReportOptions {
        functions: true,
        sortedby: SortedBy::Count,
        ..ReportOptions::default()
    };
    let p = b.build();
    let text = full_flat(&p, options.clone());
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(" Count      %  Overhead      % Module "),
        "{text}"
    );
    assert!(
        lines[2].starts_with("     6 100.0%         1  16.7% "),
        "{text}"
    );
    assert!(lines[2].ends_with(" main"), "{text}");
    // a's two lines are one row, under its library's file name.
    assert!(
        lines[3].starts_with("     5  83.3%         5  83.3% libapp.so ")
            && lines[3].ends_with(" a"),
        "{text}"
    );
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[4].starts_with("Count: samples with the function anywhere"),
        "{text}"
    );
    // Overhead first: a, then main.
    let text = full_flat(
        &p,
        ReportOptions {
            sortedby: SortedBy::Overhead,
            ..options
        },
    );
    assert!(
        text.lines().nth(2).is_some_and(|line| line.ends_with(" a")),
        "{text}"
    );
}
