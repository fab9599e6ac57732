//! Profiles of known workloads come out with the right functions, shares,
//! call chains and kernel frames.

use std::time::Duration;

use profilerd_client::v1;

use crate::support::{
    folded, has_chain, options, profile, samples_containing, samples_where, total,
};

#[tokio::test(flavor = "multi_thread")]
async fn hot_and_cold_functions_get_their_shares_with_full_chains() {
    let (_daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;

    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(3),
        options(v1::Format::Folded),
    )
    .await;
    let stacks = folded(&reply.report);
    let samples = total(&stacks);
    assert!(
        samples > 500,
        "too few samples ({samples}) to judge:\n{stacks:?}"
    );

    let by_function = samples_containing(&stacks);
    let share =
        |name: &str| 100.0 * by_function.get(name).copied().unwrap_or(0) as f64 / samples as f64;
    let (hot, cold) = (share("hot"), share("cold"));
    assert!(
        (hot - 75.0).abs() <= 5.0,
        "hot has {hot:.1}% of {samples} samples, expected 75% ± 5"
    );
    assert!(
        (cold - 25.0).abs() <= 5.0,
        "cold has {cold:.1}% of {samples} samples, expected 25% ± 5"
    );

    // hot's own instructions (its push/mov prologue, pop/ret epilogue) are
    // outside hot_loop: a sample may land there once in millions of
    // instructions, so one in a hundred of hot's samples may lack it, not
    // more (without inlined frames all of them would).
    let (hot_samples, without_hot_loop) = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|frame| frame == "hot"))
        .fold((0, 0), |(all, without), (frames, count)| {
            let lacking = !has_chain(frames, &["hot", "hot_loop_[i]"]);
            (all + count, without + if lacking { *count } else { 0 })
        });
    assert!(
        without_hot_loop * 100 <= hot_samples,
        "{without_hot_loop} of {hot_samples} samples of hot lack hot_loop, inlined into it:\n{stacks:?}"
    );
    for (frames, count) in &stacks {
        // Every frame from the process's first function down to the hot
        // ones, each named.
        for function in ["hot", "cold"] {
            let chain = [
                "_start",
                "__libc_start_main_impl",
                "__libc_start_call_main",
                "main",
                "common",
                function,
            ];
            if frames.iter().any(|frame| frame == function) {
                assert!(
                    frames.starts_with(&chain.map(String::from)),
                    "{count} samples of {function} lack the whole chain {chain:?}: {frames:?}"
                );
            }
        }
    }
    let summary = reply.summary.expect("a summary");
    assert_eq!(summary.samples, samples);
    assert_eq!(summary.processes, 1);
    assert!(
        summary.lost.is_empty(),
        "samples were lost: {:?}",
        summary.lost
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kernel_frames_sit_under_user_frames_and_can_be_hidden() {
    let (_daemon, workload, mut client) =
        crate::support::daemon_and_workload("syscalls", &[]).await;

    let with_kernel = folded(
        &profile(
            &mut client,
            &[workload.pid()],
            Duration::from_secs(2),
            options(v1::Format::Folded),
        )
        .await
        .report,
    );
    let in_kernel: u64 = samples_where(&with_kernel, |frames| {
        frames.iter().any(|frame| frame.ends_with("_[k]"))
    });
    assert!(
        in_kernel * 2 > total(&with_kernel),
        "a loop reading /dev/zero should spend most samples in the kernel: {with_kernel:?}"
    );
    for (frames, count) in &with_kernel {
        if let Some(first_kernel) = frames.iter().position(|frame| frame.ends_with("_[k]")) {
            assert!(
                frames[..first_kernel]
                    .iter()
                    .any(|frame| frame == "read_zeros"),
                "{count} samples have kernel frames not under read_zeros: {frames:?}"
            );
            assert!(
                frames[first_kernel..]
                    .iter()
                    .all(|frame| frame.ends_with("_[k]")),
                "user frames below kernel frames: {frames:?}"
            );
        }
    }

    let mut without = options(v1::Format::Folded);
    without.kernel = Some(false);
    let without_kernel = folded(
        &profile(
            &mut client,
            &[workload.pid()],
            Duration::from_secs(1),
            without,
        )
        .await
        .report,
    );
    assert!(
        without_kernel
            .iter()
            .all(|(frames, _)| !frames.iter().any(|frame| frame.ends_with("_[k]"))),
        "kernel frames shown with kernel=false: {without_kernel:?}"
    );
    assert!(
        without_kernel
            .iter()
            .any(|(frames, _)| has_chain(frames, &["read_zeros"])
                && frames.last().is_some_and(|f| f == "[kernel]")),
        "kernel time should stay visible as [kernel]: {without_kernel:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_exits_mid_profile_is_still_symbolized() {
    let (_daemon, mut workload, mut client) =
        crate::support::daemon_and_workload("split", &["1"]).await;
    let pid = workload.pid();

    let profiling = tokio::spawn(async move {
        profile(
            &mut client,
            &[pid],
            Duration::from_secs(3),
            options(v1::Format::Folded),
        )
        .await
    });
    workload.wait();
    let reply = profiling.await.expect("the profile request completes");
    let stacks = folded(&reply.report);
    let by_function = samples_containing(&stacks);
    // hot does three quarters of the work; how many samples the second the
    // workload lives gets depends on the CPU it is given beside the other
    // tests.
    let hot = by_function.get("hot").copied().unwrap_or(0);
    assert!(
        total(&stacks) >= 40 && hot * 10 >= total(&stacks) * 6,
        "the exited process's hot function is missing or unnamed ({hot} of {}): {stacks:?}",
        total(&stacks)
    );
    // Samples taken between the fork and the exec, in the test's own image,
    // are few; the workload's own must all be named.
    let unknown: u64 = samples_where(&stacks, |frames| {
        frames.iter().any(|frame| frame.contains("[unknown]"))
    });
    assert!(
        unknown * 50 < total(&stacks),
        "{unknown} of {} samples of the exited process are unsymbolized: {stacks:?}",
        total(&stacks)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tree_reports_name_files_and_lines() {
    let (_daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let mut tree = options(v1::Format::Tree);
    tree.groupby = v1::GroupBy::Thread as i32;
    let reply = profile(&mut client, &[workload.pid()], Duration::from_secs(1), tree).await;
    let text = String::from_utf8(reply.report).expect("UTF-8");
    assert!(
        text.contains("Overhead ╎ [+additional indent] Count % File:Line; Function"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Thread {}", workload.pid())),
        "{text}"
    );
    assert!(text.contains("Utilization:"), "{text}");
    let hot_line = text
        .lines()
        .find(|line| line.ends_with("; hot"))
        .unwrap_or_else(|| panic!("no line for hot:\n{text}"));
    assert!(
        hot_line.contains("split.c:"),
        "hot has no file:line: {hot_line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn queries_report_past_windows_and_only_them() {
    const COMM: &str = "query-split";
    // Past windows are reported in whole buckets: 1 s ones, for windows of
    // a few seconds.
    let daemon = crate::support::Daemon::start_with(&["--resolution", "1s"]).await;
    let mut client = daemon.client().await;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos() as i64
    };
    let query = |start, end| v1::QueryRequest {
        start_unix_nanos: start,
        end_unix_nanos: end,
        selector: Some(v1::Selector {
            comms: vec![COMM.to_owned()],
            ..Default::default()
        }),
        options: Some(options(v1::Format::Folded)),
        mode: v1::Mode::Cpu as i32,
    };
    // Windows more than a bucket (a drain interval) apart, so that no
    // bucket straddles two of them; those before and after the workload are
    // 2 s of time in which it did not run.
    let gap = Duration::from_millis(1500);
    let before = (now(), {
        tokio::time::sleep(Duration::from_secs(2)).await;
        now()
    });
    tokio::time::sleep(gap).await;
    let during_start = now();
    crate::support::Workload::start_as("split", COMM, &["1.5"]).wait();
    let during_end = now();
    tokio::time::sleep(gap).await;
    let after = (now(), {
        tokio::time::sleep(Duration::from_secs(2)).await;
        now()
    });

    let hot_samples = |reply: &v1::ProfileReply| {
        samples_containing(&folded(&reply.report))
            .get("hot")
            .copied()
            .unwrap_or(0)
    };
    let during = client
        .query(query(during_start, during_end))
        .await
        .expect("Query")
        .into_inner();
    assert!(
        hot_samples(&during) > 100,
        "{}",
        String::from_utf8_lossy(&during.report)
    );
    let window = during.summary.clone().expect("a summary");
    let half_bucket = 500_000_000 + 50_000_000;
    assert!(
        (window.start_unix_nanos - during_start).abs() <= half_bucket
            && (window.end_unix_nanos - during_end).abs() <= half_bucket,
        "the report covers {window:?}, not the window asked for"
    );
    for (start, end) in [before, after] {
        let outside = client
            .query(query(start, end))
            .await
            .expect("Query")
            .into_inner();
        assert_eq!(
            outside.summary.expect("a summary").samples,
            0,
            "work done outside the window is in it: {}",
            String::from_utf8_lossy(&outside.report)
        );
    }
    let up_to_now = client
        .query(query(during_start, 0))
        .await
        .expect("Query")
        .into_inner();
    // The buckets nearest the window's end may hold the workload's last
    // samples (at most one bucket's worth).
    let (all, windowed) = (hot_samples(&up_to_now), hot_samples(&during));
    assert!(
        all >= windowed && all - windowed < u64::from(crate::support::TEST_FREQUENCY_HZ),
        "up to now: {all} samples of hot; in the window: {windowed}"
    );

    let backwards = client
        .query(query(during_end, during_start))
        .await
        .expect_err("a window that ends before it starts");
    assert_eq!(
        backwards.code(),
        tonic::Code::InvalidArgument,
        "{backwards:?}"
    );
    let ancient = client
        .query(query(1_000_000_000, 2_000_000_000))
        .await
        .expect_err("a window long before the daemon started");
    assert_eq!(ancient.code(), tonic::Code::NotFound, "{ancient:?}");
}

/// A flame graph is well-formed SVG with the hot function in it, and
/// speedscope JSON parses with the hot function among its frames.
#[tokio::test(flavor = "multi_thread")]
async fn flame_graphs_and_speedscope_show_the_hot_function() {
    let (_daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let svg = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(1),
        options(v1::Format::Flamegraph),
    )
    .await
    .report;
    let svg = String::from_utf8(svg).expect("SVG is text");
    let document = crate::support::parse_svg(&svg);
    assert_eq!(document.root_element().tag_name().name(), "svg");
    assert!(
        document
            .descendants()
            .any(|node| node.text().is_some_and(|text| text.contains("hot"))),
        "no frame names the hot function"
    );

    let json = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(1),
        options(v1::Format::Speedscope),
    )
    .await
    .report;
    let json: serde_json::Value = serde_json::from_slice(&json).expect("speedscope is JSON");
    let frames = json["shared"]["frames"].as_array().expect("a frame list");
    assert!(
        frames.iter().any(|frame| frame["name"] == "hot"),
        "{frames:?}"
    );
    assert_eq!(json["profiles"][0]["type"], "sampled");
}

/// `profilerctl callers spin` names spin's callers over the last seconds,
/// the hot path above the cold one, as the workload's 75/25 split has them.
#[tokio::test(flavor = "multi_thread")]
async fn callers_of_a_function_come_with_counts() {
    let (daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    // Seconds of the workload (as on a busy machine it may get little CPU
    // time): enough samples that its 75/25 split shows.
    let since = crate::support::unix_nanos();
    crate::support::wait_for_samples(&mut client, &[workload.pid()], since, "main", 500).await;
    let pid = workload.pid().to_string();
    let output = crate::support::profilerctl(
        &daemon.socket,
        &["callers", "spin", "--since", "1m", "--pid", &pid],
    )
    .await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.starts_with("Callers of spin ("), "{text}");
    let count_of = |caller: &str| -> u64 {
        text.lines()
            .find(|line| line.ends_with(&format!("; {caller}")))
            .and_then(|line| line.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{caller} is a caller:\n{text}"))
    };
    // hot's loop is inlined into it: spin's caller there is hot_loop.
    let (hot, cold) = (count_of("hot_loop"), count_of("cold"));
    assert!(hot > 2 * cold, "hot {hot} vs cold {cold}:\n{text}");
}

/// Diff of two windows with different hot functions: the function that
/// took over gains share, the one that stopped loses it.
#[tokio::test(flavor = "multi_thread")]
async fn diff_shows_which_function_took_over() {
    // Windows of 1.5 s: buckets of 1 s.
    let daemon = crate::support::Daemon::start_with(&["--resolution", "1s"]).await;
    let mut client = daemon.client().await;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos() as i64
    };
    // Each window 1.5 s of one workload: more than a bucket.
    let base_start = now();
    let first = crate::support::Workload::start_as("split", "diff-first", &[]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(first);
    let target_start = now();
    let second = crate::support::Workload::start_as("peek_threads", "diff-second", &[]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let target_end = now();
    let request = |options: Option<v1::ReportOptions>| v1::DiffRequest {
        base: Some(v1::Window {
            start_unix_nanos: base_start,
            end_unix_nanos: target_start,
        }),
        target: Some(v1::Window {
            start_unix_nanos: target_start,
            end_unix_nanos: target_end,
        }),
        selector: Some(v1::Selector {
            comm_regex: "^diff-".into(),
            ..Default::default()
        }),
        target_selector: None,
        limit: 10,
        options,
        normalize: true,
        functions: Vec::new(),
    };
    let reply = client
        .diff(request(None))
        .await
        .unwrap_or_else(|status| panic!("Diff failed: {status:?}"))
        .into_inner();
    drop(second);
    let change = |name: &str| {
        reply
            .changes
            .iter()
            .find(|change| change.function == name)
            .map(|change| change.target_self_percent - change.base_self_percent)
            .unwrap_or_else(|| panic!("{name} is in the diff:\n{}", reply.text))
    };
    assert!(change("spin_alpha") > 10.0, "{}", reply.text);
    assert!(change("spin") < -10.0, "{}", reply.text);
    assert!(reply.text.contains("spin_alpha"), "{}", reply.text);

    // As pprof: the target minus the base, which `go tool pprof` reads as
    // spin_alpha gained and spin lost.
    let drawn = client
        .diff(request(Some(options(v1::Format::Pprof))))
        .await
        .unwrap_or_else(|status| panic!("Diff as pprof failed: {status:?}"))
        .into_inner();
    let top = crate::support::go_pprof_top(&drawn.report);
    let flat_of = |name: &str| {
        top.lines()
            // flat flat% sum% cum cum% function [(inline)]
            .find(|line| line.split_whitespace().nth(5) == Some(name))
            .and_then(|line| line.split_whitespace().next())
            .unwrap_or_else(|| panic!("{name} in go tool pprof -top:\n{top}"))
            .to_owned()
    };
    assert!(!flat_of("spin_alpha").starts_with('-'), "{top}");
    assert!(flat_of("spin").starts_with('-'), "{top}");
    // As a differential flame graph.
    let svg = client
        .diff(request(Some(options(v1::Format::Flamegraph))))
        .await
        .unwrap_or_else(|status| panic!("Diff as flamegraph failed: {status:?}"))
        .into_inner()
        .report;
    let svg = String::from_utf8(svg).expect("SVG is text");
    crate::support::parse_svg(&svg);
    assert!(svg.contains("spin_alpha"), "{svg}");
    let tree = client
        .diff(request(Some(options(v1::Format::Tree))))
        .await
        .expect_err("a diff is not drawn as a tree");
    assert_eq!(tree.code(), tonic::Code::InvalidArgument, "{tree:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tree_within_maxlines_keeps_the_lines_of_most_samples_and_says_so() {
    // Nearly every sample its own stack: hundreds of tree lines.
    let (_daemon, workload, client) = crate::support::daemon_and_workload("many_stacks", &[]).await;
    let start = crate::support::unix_nanos();
    let tree = |maxlines: Option<u64>, end: i64| {
        let mut client = client.clone();
        let pids = [workload.pid()];
        async move {
            let options = v1::ReportOptions {
                maxlines,
                ..options(v1::Format::Tree)
            };
            let reply = query_window(&mut client, &pids, (start, end), options).await;
            String::from_utf8(reply.report).expect("UTF-8")
        }
    };
    // The tree's lines (after its two header lines) past their overhead
    // column (as wide as the widest shown), with their counts.
    let lines = |text: &str| -> Vec<(String, u64)> {
        text.lines()
            .skip_while(|line| !line.starts_with("====="))
            .skip(1)
            .take_while(|line| line.contains('╎'))
            .map(|line| {
                let (_, rest) = line.split_once('╎').expect("a guide");
                // Guides and indentation, a `+n` tag past 60 levels, then
                // the count.
                let count = rest
                    .split([' ', '╎'])
                    .find(|token| !token.is_empty() && !token.starts_with('+'))
                    .and_then(|count| count.parse().ok())
                    .unwrap_or_else(|| panic!("a count in {line:?}"));
                (rest.to_owned(), count)
            })
            .collect()
    };
    // A window of the workload long enough for a tree of over 100 lines.
    let (end, every) = crate::support::eventually(
        "a tree of over 100 lines",
        crate::support::PATIENCE,
        async || {
            let end = crate::support::unix_nanos();
            match tree(Some(0), end).await {
                every if lines(&every).len() > 100 => Ok((end, every)),
                every => Err(every),
            }
        },
    )
    .await;
    let tree = |maxlines| tree(maxlines, end);
    let all = lines(&every);
    assert!(all.len() > 100, "too few lines to cut: {every}");
    assert!(!every.starts_with('#'), "nothing is cut with maxlines 0");
    let bounded = tree(Some(20)).await;
    let shown = lines(&bounded);
    assert!(
        bounded.starts_with(&format!("# 20 of {} lines shown, ", all.len())),
        "{bounded}"
    );
    assert_eq!(shown.len(), 20, "{bounded}");
    // The 20 lines of most samples (ties at the edge aside), in the order
    // and layout of the whole tree.
    let mut counts: Vec<u64> = all.iter().map(|(_, count)| *count).collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let edge = counts[20];
    assert!(shown.iter().all(|(_, count)| *count >= edge), "{bounded}");
    let above: Vec<&String> = all
        .iter()
        .filter(|(_, count)| *count > edge)
        .map(|(line, _)| line)
        .collect();
    let shown_above: Vec<&String> = shown
        .iter()
        .filter(|(_, count)| *count > edge)
        .map(|(line, _)| line)
        .collect();
    assert_eq!(shown_above, above);
    // By default: every line of so small a tree.
    assert_eq!(lines(&tree(None).await).len(), all.len());
}

/// A two-minute window of a bounded storm (two processes walking many call
/// paths, then gone) in every format, whole and per process: each report's
/// parts (lines, rows, sections, samples, weights) add up to its total, and
/// every total is the window's sample count.
#[tokio::test(flavor = "multi_thread")]
async fn every_format_of_a_two_minute_window_adds_up_to_the_same_total() {
    let daemon = crate::support::Daemon::start().await;
    let client = daemon.client().await;
    let mut storm = [
        crate::support::Workload::start_as("many_stacks", "totals_a", &["3"]),
        crate::support::Workload::start_as("many_stacks", "totals_b", &["3"]),
    ];
    let pids: Vec<u32> = storm.iter().map(crate::support::Workload::pid).collect();
    for workload in &mut storm {
        workload.wait();
    }
    let end = crate::support::unix_nanos();
    let start = end - 120_000_000_000;
    let report = |format: v1::Format, groupby: v1::GroupBy| {
        let mut client = client.clone();
        let pids = pids.clone();
        async move {
            let options = v1::ReportOptions {
                groupby: groupby as i32,
                ..options(format)
            };
            let reply = query_window(&mut client, &pids, (start, end), options).await;
            (reply.summary.expect("a summary").samples, reply.report)
        }
    };
    let (window, _) = report(v1::Format::Folded, v1::GroupBy::None).await;
    assert!(window > 200, "too few samples of the storm: {window}");
    for format in [
        v1::Format::Tree,
        v1::Format::Flat,
        v1::Format::Folded,
        v1::Format::Pprof,
        v1::Format::Flamegraph,
        v1::Format::Speedscope,
    ] {
        for groupby in [v1::GroupBy::None, v1::GroupBy::Process] {
            let (samples, bytes) = report(format, groupby).await;
            let what = format!("{format:?} by {groupby:?}");
            assert_eq!(samples, window, "{what}: the summary's samples");
            for (part, sum) in parts(format, &bytes) {
                assert_eq!(sum, window, "{what}: {part}");
            }
        }
    }
}

/// What each part of a report adds up to, by part: the text reports'
/// Overhead column and section totals, folded lines, pprof sample values,
/// the flame graph's root, speedscope's weights.
fn parts(format: v1::Format, report: &[u8]) -> Vec<(&'static str, u64)> {
    let text = || String::from_utf8(report.to_vec()).expect("UTF-8");
    let section_totals = |text: &str| -> u64 {
        text.match_indices("Total snapshots: ")
            .map(|(at, found)| {
                let digits: String = text[at + found.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse::<u64>().expect("a total")
            })
            .sum()
    };
    match format {
        v1::Format::Tree => {
            let text = text();
            let overhead = text
                .lines()
                .filter_map(|line| line.split_once('╎'))
                .map(|(overhead, _)| overhead.trim().parse::<u64>().unwrap_or(0))
                .sum();
            vec![("sections", section_totals(&text)), ("overhead", overhead)]
        }
        v1::Format::Flat => {
            let text = text();
            // Rows: Count, %, Overhead, %, file, line, function.
            let overhead = text
                .lines()
                .filter_map(|line| {
                    let columns: Vec<&str> = line.split_whitespace().collect();
                    (columns.len() > 4 && columns[1].ends_with('%') && columns[3].ends_with('%'))
                        .then(|| columns[2].parse::<u64>().ok())
                        .flatten()
                })
                .sum();
            vec![("sections", section_totals(&text)), ("overhead", overhead)]
        }
        v1::Format::Folded => vec![("lines", total(&folded(report)))],
        v1::Format::Pprof => {
            let profile = crate::support::decode_pprof(report);
            let samples = profile
                .sample
                .iter()
                .map(|sample| sample.value[0])
                .sum::<i64>();
            vec![("samples", samples as u64)]
        }
        v1::Format::Flamegraph => {
            let svg = text();
            let document = crate::support::parse_svg(&svg);
            let root = document
                .descendants()
                .filter(|node| node.has_tag_name("title"))
                .filter_map(|node| node.text())
                .find_map(|title| title.strip_prefix("all ("))
                .expect("the root frame");
            let digits: String = root
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect();
            vec![("root", digits.parse().expect("the root's samples"))]
        }
        v1::Format::Speedscope => {
            let json: serde_json::Value = serde_json::from_slice(report).expect("JSON");
            let weights = json["profiles"]
                .as_array()
                .expect("profiles")
                .iter()
                .flat_map(|profile| profile["weights"].as_array().expect("weights"))
                .map(|weight| weight.as_u64().expect("a whole weight"))
                .sum();
            vec![("weights", weights)]
        }
        other => panic!("no parts for {other:?}"),
    }
}

/// The CPU profile of `pids` over the window `(start, end)` (Unix
/// nanoseconds), as `options` render it.
async fn query_window(
    client: &mut crate::support::Client,
    pids: &[u32],
    (start, end): (i64, i64),
    options: v1::ReportOptions,
) -> v1::ProfileReply {
    client
        .query(v1::QueryRequest {
            start_unix_nanos: start,
            end_unix_nanos: end,
            selector: crate::support::selector(pids),
            options: Some(options),
            mode: v1::Mode::Cpu as i32,
        })
        .await
        .unwrap_or_else(|status| panic!("Query failed: {status:?}"))
        .into_inner()
}

/// Three processes over a window, per process, shown within `maxsections`
/// 1: the report shows the busiest section exactly as the whole report does,
/// counts the other two and their samples, and the summary still covers all
/// three. The daemon reads only the shown section's stacks; what it says
/// must not change for that.
#[tokio::test(flavor = "multi_thread")]
async fn maxsections_shows_the_busiest_sections_and_counts_the_others() {
    let daemon = crate::support::Daemon::start().await;
    let mut client = daemon.client().await;
    let mut workloads = [
        crate::support::Workload::start_as("many_stacks", "sections_a", &["2"]),
        crate::support::Workload::start_as("many_stacks", "sections_b", &["2"]),
        crate::support::Workload::start_as("many_stacks", "sections_c", &["2"]),
    ];
    let pids: Vec<u32> = workloads
        .iter()
        .map(crate::support::Workload::pid)
        .collect();
    for workload in &mut workloads {
        workload.wait();
    }
    let end = crate::support::unix_nanos();
    let start = end - 60_000_000_000;
    for format in [v1::Format::Tree, v1::Format::Flat] {
        let options = |maxsections| v1::ReportOptions {
            groupby: v1::GroupBy::Process as i32,
            maxsections: Some(maxsections),
            ..options(format)
        };
        let all = query_window(&mut client, &pids, (start, end), options(0)).await;
        let cut = query_window(&mut client, &pids, (start, end), options(1)).await;
        let text = |reply: &v1::ProfileReply| String::from_utf8(reply.report.clone()).unwrap();
        let (all_text, cut_text) = (text(&all), text(&cut));
        // Title and total of each section, in print order.
        let sections = |text: &str| -> Vec<(String, u64)> {
            text.lines()
                .filter(|line| line.starts_with("Process "))
                .map(|line| {
                    let (_, total) = line.split_once("Total snapshots: ").expect("a total");
                    let total = total.split('.').next().unwrap().parse().unwrap();
                    (line.to_owned(), total)
                })
                .collect()
        };
        let every = sections(&all_text);
        // A section per workload, and one more for a process sampled
        // between its fork and its exec, under the test thread's name.
        let named = |name: &str| {
            every
                .iter()
                .filter(|(title, _)| title.contains(name))
                .count()
        };
        assert!(
            ["sections_a", "sections_b", "sections_c"]
                .iter()
                .all(|name| named(name) == 1),
            "{format:?}: a section per process\n{all_text}"
        );
        let shown = every.len();
        assert_eq!(sections(&cut_text), every[..1], "{format:?}\n{cut_text}");
        let others: u64 = every[1..].iter().map(|(_, total)| total).sum();
        // Comments come first (a warning may precede it).
        let comment = format!(
            "# 1 of {shown} sections shown, those of most samples (maxsections 1; maxsections \
             0 shows every section)"
        );
        let comments = cut_text.lines().take_while(|line| line.starts_with("# "));
        assert!(
            comments.clone().any(|line| line == comment),
            "{format:?}: {:?}",
            comments.collect::<Vec<_>>()
        );
        let line = format!(
            "\n{} more sections ({others} samples in all) not shown (maxsections 1; maxsections 0 \
             shows every section)\n",
            shown - 1
        );
        let end = &cut_text[cut_text.len().saturating_sub(600)..];
        assert!(cut_text.contains(&line), "{format:?}: {line}\n…{end}");
        // The busiest section, line for line as the whole report shows it.
        let first_section = |text: &str| -> String {
            let from = text.find("Process ").expect("a section");
            let rest = &text[from..];
            rest[..rest.find("\n\n").expect("the section's end")].to_owned()
        };
        let differs = first_section(&cut_text) != first_section(&all_text);
        assert!(!differs, "{format:?}: the busiest section differs");
        let summary = |reply: &v1::ProfileReply| reply.summary.clone().expect("a summary");
        let (all_summary, cut_summary) = (summary(&all), summary(&cut));
        assert_eq!(cut_summary.samples, all_summary.samples, "{format:?}");
        assert_eq!(
            cut_summary.samples,
            every.iter().map(|(_, n)| n).sum::<u64>()
        );
        assert_eq!(cut_summary.processes, 3, "{format:?}");
        assert_eq!(cut_summary.cpu_nanos, all_summary.cpu_nanos, "{format:?}");
    }
}
