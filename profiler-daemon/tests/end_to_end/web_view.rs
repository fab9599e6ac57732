//! The web view in real browsers: Debian's Chromium and Firefox ESR,
//! headless, driven by puppeteer-core (tests/web/view.mjs, installed by
//! `cargo xtask test`), load `/` from a daemon profiling real workloads.
//! What the page shows is checked frame by frame and against the daemon's
//! own report of the same window.

use serde_json::Value;

use crate::{
    http::{curl, daemon_over_http},
    remote::{Authority, TlsFiles, free_port},
    support::{Daemon, Workload, decode_pprof, folded, parse_svg, require_root, samples_where},
    web_browser::{Browser, drive_browser, screenshot_dir},
};

/// The samples of a folded report fetched from `url`.
pub(crate) fn folded_from(url: &str) -> Vec<(Vec<String>, u64)> {
    let (code, body) = curl(url, &[]);
    assert_eq!(code, 200, "{url}: {}", String::from_utf8_lossy(&body));
    folded(&body)
}

/// The number in `text` just before `words`.
fn number_before(text: &str, words: &str) -> Option<u64> {
    let before = &text[..text.find(words)?];
    before.split_whitespace().last()?.parse().ok()
}

/// Asserts that the page's `status` says the window was compared with the
/// daemon's own samples of `base` (query parameters); those samples.
fn assert_compared_with(url: &str, status: &str, base: &str) -> u64 {
    let total = total_of(url, base);
    assert_eq!(number_before(status, "samples of"), Some(total), "{status}");
    total
}

/// Asserts that every fill in `fills` (a JSON array) is differential.
fn assert_differential(fills: &Value) {
    let fills = fills.as_array().expect("fills");
    assert!(!fills.is_empty());
    for fill in fills {
        let fill = fill.as_str().unwrap_or_default();
        assert!(is_differential(fill), "{fill} is not a differential colour");
    }
}

/// Whether `fill` is one of the differential flame graph's colours: grey
/// (unchanged), red (more: red 220, blue and green alike, from 235 down),
/// blue (fewer: blue 220, red and green alike, from 235 down) or orange
/// (all new).
fn is_differential(fill: &str) -> bool {
    let Some(rgb) = fill
        .strip_prefix("rgb(")
        .and_then(|rest| rest.strip_suffix(')'))
    else {
        return false;
    };
    let channels: Vec<u32> = rgb
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    match channels[..] {
        [255, 190, 90] => true,
        [r, g, b] => (r == 220 && g == b && g <= 235) || (b == 220 && r == g && r <= 235),
        _ => false,
    }
}

/// The screenshots the view scenario writes, one a mode of the page.
const SCREENSHOTS: &[&str] = &[
    "flame",
    "flame-page",
    "icicle",
    "search",
    "icicle-zoom",
    "timeline-window",
    "timeline-window-page",
    "diff",
    "diff-range",
    "sandwich",
    "thread",
    "empty",
    "offcpu",
];

/// The total samples of the folded report of `window` (query parameters).
fn total_of(url: &str, window: &str) -> u64 {
    let stacks = folded_from(&format!("{url}/api/query?{window}"));
    stacks.iter().map(|(_, count)| count).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_view_in_chromium_draws_zooms_searches_peeks_compares_and_goes_back_in_time() {
    the_web_view_works_in(Browser::Chromium).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_view_in_firefox_draws_zooms_searches_peeks_compares_and_goes_back_in_time() {
    the_web_view_works_in(Browser::Firefox).await;
}

async fn the_web_view_works_in(browser: Browser) {
    require_root();
    let (_daemon, url) = daemon_over_http().await;
    let command = format!("chain-{}", &browser.name()[..3]);
    let chain = Workload::start_as("chain", &command, &[]);
    let peeked = Workload::start_as("peek_threads", "peek-web", &[]);
    let screenshots = screenshot_dir();
    let screenshot = |mode: &str| screenshots.join(format!("{}-{mode}.png", browser.name()));
    for mode in SCREENSHOTS {
        let _ = std::fs::remove_file(screenshot(mode));
    }
    let process = format!("{command}-{}", chain.pid());

    let seen = drive_browser(
        browser,
        "view",
        serde_json::json!({
            "url": format!("{url}/"),
            "hot": "hot_leaf",
            "zoom": process,
            "peekPid": peeked.pid(),
            "chainPid": chain.pid(),
            "sandwich": "drive",
            "thread": "spin-alpha",
            // Seconds of history before a past window is dragged.
            "history": 50,
            "screenshots": screenshots,
        }),
    )
    .await;

    // The hot function, drawn in its process's tower under every frame of
    // its chain.
    let chains: Vec<Vec<&str>> = seen["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|frame| {
            frame["chain"]
                .as_array()
                .expect("a chain")
                .iter()
                .map(|name| name.as_str().unwrap_or_default())
                .collect()
        })
        .collect();
    assert!(
        chains
            .iter()
            .any(|chain| chain.get(1) == Some(&process.as_str())
                && chain.ends_with(&["main", "drive", "hot_leaf"])),
        "no hot_leaf drawn under {process} … main, drive: {chains:?}"
    );

    // The first screen, the labels, the timeline's axes (web_view_checks).
    crate::web_view_checks::assert_first_screen(&seen);

    // The search highlights it, and only it, and says its share.
    let highlighted = seen["highlighted"].as_array().expect("highlighted");
    assert!(!highlighted.is_empty(), "the search highlighted nothing");
    for frame in highlighted {
        assert_eq!(frame["name"], "hot_leaf", "{frame}");
        assert_eq!(frame["fill"], "#E600E6", "{frame}");
    }
    let share = seen["matchedShare"].as_f64().expect("a matched share");
    assert!(
        share > 0.0 && share <= 100.0,
        "matched share {share}: {}",
        seen["matched"]
    );

    // The live window was loaded again unasked.
    let live = seen["liveStatus"].as_str().expect("the live status");
    assert!(live.contains("ending now (live)"), "{live}");

    // A click zoomed into the process's frame (the whole width, through a
    // live refresh and in the icicle too); the icicle drew the root at the
    // top, the flame graph at the bottom; Reset zoom gave back its share.
    let share = |key: &str| {
        seen[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {seen}"))
    };
    assert!(
        share("widthBefore") > 0.0 && share("widthBefore") < 0.99,
        "{process} spans {} of the graph before the zoom",
        share("widthBefore")
    );
    assert!(share("zoomWidth") > 0.99, "zoomed: {}", share("zoomWidth"));
    let matched = seen["zoomMatched"].as_str().unwrap_or_default();
    assert!(
        matched.contains(&format!("of the samples under {process}")),
        "zoomed, the search's share is not said to be of {process}: {matched}"
    );
    assert!(
        share("zoomWidthIcicle") > 0.99,
        "icicle: {}",
        share("zoomWidthIcicle")
    );
    assert!(
        share("rootTopBefore") > 0.5,
        "flame graph root at {}",
        share("rootTopBefore")
    );
    assert!(
        share("rootTopIcicle") < 0.1,
        "icicle root at {}",
        share("rootTopIcicle")
    );
    assert!(
        share("widthReset") < 0.99,
        "after reset: {}",
        share("widthReset")
    );

    // A kill -USR1 peek appeared in the open page, and reads per thread.
    let report = seen["peekReport"].as_str().expect("a peek report");
    assert!(
        report.contains(&format!("Peek at process {}", peeked.pid()))
            && report.contains("spin_alpha")
            && report.contains("spin_beta"),
        "{report}"
    );

    // The page's peek button made a peek of its own, shown selected.
    let report = seen["buttonPeekReport"]
        .as_str()
        .expect("the button's peek");
    assert!(
        report.contains(&format!("Peek at process {}", peeked.pid()))
            && report.contains("by a Peek request"),
        "{report}"
    );
    assert_eq!(seen["buttonPeekSelected"], peeked.pid().to_string());

    // A window dragged on the timeline reloaded the graph; the page's
    // numbers are the daemon's own for that (past, so fixed) window.
    let window = seen["pastWindow"].as_str().expect("the past window");
    assert!(
        window.contains("from=") && window.contains("to="),
        "{window}"
    );
    assert_eq!(
        seen["pastHot"], true,
        "hot_leaf not drawn in the past window"
    );
    // The graph draws the lines a flame graph draws (`drawn=true`); the
    // functions table counts the whole report's.
    assert!(window.contains("drawn=true"), "{window}");
    let drawn_total = total_of(&url, window);
    let whole = window.replace("&drawn=true", "");
    let stacks = folded_from(&format!("{url}/api/query?{whole}"));
    let total: u64 = stacks.iter().map(|(_, count)| count).sum();
    assert_eq!(drawn_total, total, "the drawn lines lost samples");
    assert_eq!(
        seen["pastSamples"].as_u64(),
        Some(total),
        "the page's samples are not the report's"
    );
    let hot_self: u64 = samples_where(&stacks, |frames| {
        frames.last().is_some_and(|leaf| leaf == "hot_leaf")
    });
    let functions = seen["functions"].as_array().expect("functions");
    let hot_row = functions
        .iter()
        .find(|row| row[0] == "hot_leaf")
        .unwrap_or_else(|| panic!("hot_leaf is not in the functions table: {functions:?}"));
    // Function, module, self, total.
    assert!(
        hot_row[1]
            .as_str()
            .is_some_and(|module| module.contains("chain")),
        "hot_leaf's module {hot_row} is not the chain workload's"
    );
    assert!(
        hot_row[2]
            .as_str()
            .is_some_and(|text| text.starts_with(&format!("{hot_self} ("))),
        "hot_leaf's self samples {hot_row} are not the report's {hot_self}"
    );
    let processes = seen["processes"].as_array().expect("processes");
    let pid = chain.pid().to_string();
    assert!(
        processes
            .iter()
            .any(|row| row[0] == pid.as_str() && row[1] == command.as_str()),
        "{} is not in the process list: {processes:?}",
        chain.pid()
    );

    // The diff against the window before: its samples the daemon's, every
    // frame in the differential colours.
    let status = seen["diffStatus"].as_str().expect("the diff's status");
    let base_window = seen["baseWindow"].as_str().expect("the base window");
    let base_total = assert_compared_with(&url, status, base_window);
    assert!(base_total > 0, "the window before {base_window} is empty");
    assert!(status.contains("of the window before"), "{status}");
    assert_differential(&seen["diffFills"]);
    let legend = seen["diffLegend"].as_str().unwrap_or_default();
    assert!(
        legend.contains("more") && legend.contains("fewer"),
        "the diff's colours have no legend: {}",
        seen["diffLegend"]
    );

    // The diff against a range dragged on the timeline: asked for first,
    // then the dragged range (before the window, marked apart from it) is
    // the one compared with, and the window stays.
    let asked = seen["rangeAsked"].as_str().expect("the range's prompt");
    assert!(
        asked.contains("drag on the timeline the range to compare with"),
        "{asked}"
    );
    assert_eq!(seen["rangeWindow"], seen["diffWindow"]);
    let status = seen["rangeStatus"]
        .as_str()
        .expect("the range diff's status");
    let range = seen["rangeBaseWindow"]
        .as_str()
        .expect("the range compared with");
    let millis = |query: &str, key: &str| -> u64 {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(&format!("{key}=")))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {query}"))
    };
    assert!(
        millis(range, "from") < millis(range, "to") && millis(range, "to") < millis(window, "from"),
        "the dragged range {range} is not before the window {window}"
    );
    assert_compared_with(&url, status, range);
    assert_differential(&seen["rangeFills"]);
    let marks = seen["rangeMarks"].as_array().expect("the timeline's marks");
    assert!(
        marks.iter().any(|mark| mark[0] == "window-mark")
            && marks.iter().any(|mark| mark[0] == "selection"),
        "the timeline marks {marks:?}"
    );

    // The downloads are the formats they say.
    for link in seen["downloads"].as_array().expect("downloads") {
        let (format, href) = (link[0].as_str().unwrap(), link[1].as_str().unwrap());
        let (code, body) = curl(&format!("{url}{href}"), &[]);
        assert_eq!(code, 200, "{href}: {}", String::from_utf8_lossy(&body));
        match format {
            "pprof" => assert!(!decode_pprof(&body).sample.is_empty(), "{href}"),
            "folded" => assert!(!folded(&body).is_empty(), "{href}"),
            "flamegraph" => drop(parse_svg(&String::from_utf8_lossy(&body))),
            "speedscope" => {
                let document: Value = serde_json::from_slice(&body).expect("speedscope JSON");
                assert!(
                    document["$schema"]
                        .as_str()
                        .is_some_and(|s| s.contains("speedscope"))
                );
            }
            other => panic!("an unknown download {other}"),
        }
    }

    // The page's routes refuse what they cannot answer, saying why.
    for (route, says) in [
        ("api/functions?since=60&by=name", "must be self or total"),
        ("api/functions?since=60&limit=0", "limit must be 1 to 1000"),
        (
            "api/query?since=60&format=pprof&drawn=true",
            "drawn=true is for format=folded",
        ),
        ("api/query?format=folded", "since=SECONDS"),
        (
            "api/processes?since=60&format=tree",
            "does not take the parameter \"format\"",
        ),
        ("ui/secret", "has no file"),
    ] {
        let (code, body) = curl(&format!("{url}/{route}"), &[]);
        let body = String::from_utf8_lossy(&body);
        assert!(code == 400 || code == 404, "{route}: {code} {body}");
        assert!(body.contains(says), "{route}: {body}");
    }

    // The timeline of one process counts its samples only.
    let timeline_samples = |selector: &str| -> u64 {
        let (code, body) = curl(&format!("{url}/api/timeline?{selector}"), &[]);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let timeline: Value = serde_json::from_slice(&body).expect("the timeline's JSON");
        let spans = timeline["spans"].as_array().expect("spans");
        spans
            .iter()
            .filter_map(|span| span["samples"].as_u64())
            .sum()
    };
    let everyone = timeline_samples("mode=cpu");
    let chain_only = timeline_samples(&format!("pid={}", chain.pid()));
    assert!(
        chain_only > 0 && chain_only < everyone,
        "{command}'s timeline holds {chain_only} samples, every process's {everyone}"
    );

    // Nothing was asked of any other server; the peek list followed the
    // event stream.
    let origin = format!("{url}/");
    for url in seen["requests"].as_array().expect("requests") {
        let url = url.as_str().unwrap_or_default();
        assert!(
            url.starts_with(&origin) || url.starts_with("data:"),
            "the page asked {url}"
        );
    }
    assert!(
        seen["responses"]
            .as_array()
            .expect("responses")
            .iter()
            .any(|response| response[0]
                .as_str()
                .is_some_and(|url| url.ends_with("/api/peeks/events"))
                && response[1] == 200),
        "the page did not follow /api/peeks/events"
    );

    // The choices of processes, threads and mode (web_view_checks).
    crate::web_view_checks::assert_selections(&seen, &url, &pid, &command, processes.len());

    for mode in SCREENSHOTS {
        let file = screenshot(mode);
        assert!(
            std::fs::metadata(&file).is_ok_and(|file| file.len() > 10_000),
            "no screenshot at {}",
            file.display()
        );
    }

    // The page's Content-Security-Policy blocked nothing it does.
    assert_eq!(
        seen["cspViolations"],
        serde_json::json!([]),
        "{browser:?}: the Content-Security-Policy blocked part of the page"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_the_listener_refuses_sees_why_on_the_page() {
    require_root();
    let tls = TlsFiles::new(
        &Authority::new("profilerd test servers"),
        &Authority::new("profilerd test clients"),
    );
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _daemon =
        Daemon::start_with(&[&["--http-listen", &address][..], &tls.flags()].concat()).await;

    // The browsers present no certificate: the page loads, and says why
    // its requests are refused instead of staying blank.
    for browser in [Browser::Chromium, Browser::Firefox] {
        let seen = drive_browser(
            browser,
            "refused",
            serde_json::json!({ "url": format!("https://localhost:{port}/") }),
        )
        .await;
        let status = seen["status"].as_str().expect("a status line");
        assert!(
            status.contains("403") && status.contains("certificate signed by its tls_client_ca"),
            "{browser:?}: {status}"
        );
        assert_eq!(seen["visible"], true, "{browser:?}");
    }
}

/// Unix milliseconds now.
fn now_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flame_graph_draws_the_busiest_processes_and_merges_the_others() {
    require_root();
    let (_daemon, url) = daemon_over_http().await;
    let from = now_millis();
    let chains: Vec<Workload> = ["merge-a", "merge-b", "merge-c"]
        .into_iter()
        .map(|command| Workload::start_as("chain", command, &[]))
        .collect();
    for chain in &chains {
        crate::support::wait_for_cpu(chain.pid(), std::time::Duration::from_millis(500)).await;
    }
    // A past window: every request below reads the same samples.
    let window = format!("from={from}&to={}&mode=cpu", now_millis());
    let drawn_with = |maxsections: u64| {
        folded_from(&format!(
            "{url}/api/query?{window}&format=folded&groupby=process&drawn=true&\
             maxsections={maxsections}"
        ))
    };
    // Every section (a process, by pid and name) and its samples.
    let every = drawn_with(0);
    let mut sections: std::collections::BTreeMap<&str, u64> = Default::default();
    for (frames, count) in &every {
        // (A process gone before its name was read is `[exited]-PID`.)
        assert!(
            !frames[0].contains(" other processes, merged "),
            "merged with maxsections 0: {frames:?}"
        );
        *sections.entry(frames[0].as_str()).or_default() += count;
    }
    assert!(sections.len() > 2, "{sections:?}");

    let drawn = drawn_with(2);
    let others = format!(
        "[{} other processes, merged (maxsections 2)]",
        sections.len() - 2
    );
    let roots: std::collections::BTreeSet<&str> =
        drawn.iter().map(|(frames, _)| frames[0].as_str()).collect();
    // The two processes of most samples drawn each under its own frame,
    // every other one merged under one frame.
    let shown: Vec<&str> = roots
        .iter()
        .copied()
        .filter(|&root| root != others)
        .collect();
    assert_eq!(shown.len(), 2, "{roots:?}, {others} expected");
    assert!(
        roots.contains(others.as_str()),
        "{roots:?}, {others} expected"
    );
    let fewest_shown = shown.iter().map(|&frame| sections[frame]).min();
    for (section, samples) in &sections {
        if !shown.contains(section) {
            assert!(
                Some(*samples) <= fewest_shown,
                "{section} ({samples}) left out for {shown:?}: {sections:?}"
            );
        }
    }
    // Every sample is drawn; at least one chain is merged, its stacks
    // whole under the others' frame.
    let whole = total_of(&url, &format!("{window}&format=folded"));
    let drawn_total: u64 = drawn.iter().map(|(_, count)| count).sum();
    assert_eq!(drawn_total, whole, "the drawn lines lost samples");
    assert!(
        drawn.iter().any(|(frames, _)| frames[0] == others
            && frames.ends_with(&["main".to_owned(), "drive".to_owned(), "hot_leaf".to_owned()])),
        "no chain merged under {others}: {drawn:?}"
    );
    let (code, body) = curl(
        &format!("{url}/api/query?{window}&format=folded&drawn=true&maxsections=two"),
        &[],
    );
    let body = String::from_utf8_lossy(&body);
    assert!(
        code == 400 && body.contains("maxsections=\"two\" is not"),
        "{code} {body}"
    );
}
