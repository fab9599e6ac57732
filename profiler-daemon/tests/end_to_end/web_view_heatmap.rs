//! The web view's source heatmap (`GET /api/source` and its dialog): the
//! chain workload's `hot_leaf`, built with -g from a copy of chain.c in a
//! directory of the test's own, shows its hot loop's line with the most
//! samples in Chromium and Firefox (screenshots BROWSER-heatmap.png, and
//! BROWSER-heatmap-withheld.png with the file closed to other users); the
//! route reads the source only under `http_source_dirs`: without any the
//! text is withheld with the reason and the counts stay, and a file
//! outside them, a link out of them, a FIFO (at once) and a file other
//! users cannot read are refused, each saying why.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    http::{curl, daemon_over_http, daemon_over_http_with},
    support::{self, PATIENCE, WORKLOAD_FLAGS, Workload, eventually, require_root},
    web_browser::{Browser, drive_browser, screenshot_dir},
};

/// The function whose lines are shown, and the words of its loop's lines
/// in chain.c.
const HOT: &str = "hot_leaf";
const LOOP: [&str; 2] = ["for (unsigned long i = 0; i < n; i++)", "acc += (i * i) ^"];

/// A directory of sources the daemon may read (`shown`) beside one it may
/// not (`elsewhere`), every directory open to other users.
struct Sources {
    _dir: tempfile::TempDir,
    shown: PathBuf,
    elsewhere: PathBuf,
}

fn sources() -> Sources {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let open = |path: &Path| {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    open(dir.path());
    let (shown, elsewhere) = (dir.path().join("shown"), dir.path().join("elsewhere"));
    for each in [&shown, &elsewhere] {
        fs::create_dir(each).expect("a directory");
        open(each);
    }
    Sources {
        _dir: dir,
        shown,
        elsewhere,
    }
}

/// chain.c copied into `dir` as NAME.c (readable by all) and built beside
/// it as NAME, whose debug information names that copy.
fn chain_from(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let source = dir.join(format!("{name}.c"));
    fs::write(&source, chain_c()).expect("chain.c copied");
    fs::set_permissions(&source, fs::Permissions::from_mode(0o644)).expect("chmod");
    let binary = dir.join(name);
    support::compile("gcc", &source, &binary, WORKLOAD_FLAGS);
    (source, binary)
}

fn chain_c() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/chain.c");
    fs::read_to_string(path).expect("chain.c")
}

/// The numbers of the lines of `hot_leaf`'s loop.
fn loop_lines() -> Vec<u64> {
    let lines: Vec<u64> = (1..)
        .zip(chain_c().lines())
        .filter(|(_, line)| LOOP.iter().any(|words| line.contains(words)))
        .map(|(number, _)| number)
        .collect();
    assert_eq!(lines.len(), 2, "chain.c's loop changed");
    lines
}

/// `/api/source` of `hot_leaf` in process `pid` over the last minute, once
/// it has `at_least` Self samples.
async fn heatmap_of(url: &str, pid: u32, at_least: u64) -> Value {
    let route = format!("{url}/api/source?since=60&pid={pid}&function={HOT}");
    eventually(
        &format!("{route} counts {at_least} samples"),
        PATIENCE,
        async || {
            let (code, body) = curl(&route, &[]);
            let body = String::from_utf8_lossy(&body).into_owned();
            match serde_json::from_str::<Value>(&body) {
                Ok(heat) if code == 200 && heat["self"].as_u64() >= Some(at_least) => Ok(heat),
                _ => Err(format!("{code} {body}")),
            }
        },
    )
    .await
}

/// The one file of a heatmap of `hot_leaf`, at `source`.
fn only_file<'a>(heat: &'a Value, source: &Path) -> &'a Value {
    let files = heat["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{heat}");
    assert_eq!(files[0]["path"], source.display().to_string(), "{heat}");
    &files[0]
}

/// Why the text of `hot_leaf`'s one file, at `source`, is withheld.
fn withheld(heat: &Value, source: &Path) -> String {
    let reason = only_file(heat, source)["withheld"].as_str();
    reason.unwrap_or_default().to_owned()
}

/// The line of `file`'s rows (the route's or the page's) with the most
/// Self samples, and those samples.
fn hottest(rows: &Value) -> (u64, u64) {
    (rows.as_array().expect("rows").iter())
        .filter_map(|row| Some((row["self"].as_u64()?, row["line"].as_u64()?)))
        .max()
        .map(|(samples, line)| (line, samples))
        .unwrap_or_else(|| panic!("no row with samples: {rows}"))
}

/// Asserts that the line `hottest` (line, samples) is one of the loop's.
fn assert_the_loop_is_hottest(hottest: (u64, u64), heat: &Value) {
    assert!(
        hottest.1 > 0 && loop_lines().contains(&hottest.0),
        "the hottest line {hottest:?} is not hot_leaf's loop ({:?}): {heat}",
        loop_lines()
    );
}

/// `/api/status`'s `source`.
fn source_status(url: &str) -> Value {
    let (code, body) = curl(&format!("{url}/api/status"), &[]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let status: Value = serde_json::from_slice(&body).expect("the status's JSON");
    status["source"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn without_source_dirs_the_heatmap_has_the_counts_and_says_why_not_the_text() {
    require_root();
    let sources = sources();
    let (source, binary) = chain_from(&sources.shown, "heat-none");
    let (daemon, url) = daemon_over_http().await;
    let workload = Workload::spawn(&binary, &[]);
    let heat = heatmap_of(&url, workload.pid(), 50).await;
    let file = only_file(&heat, &source);
    assert_eq!(file["text_shown"], false, "{heat}");
    let reason = file["withheld"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("source text is not shown: ")
            && reason.contains("http_source_dirs is empty")
            && reason.contains("add its directory to http_source_dirs")
            && reason.contains("`profilerctl annotate hot_leaf`"),
        "{reason}"
    );
    // The counts by line number: the lines with samples, no text.
    let rows = file["rows"].as_array().expect("rows");
    assert!(rows.iter().all(|row| row["text"].is_null()), "{heat}");
    assert!(
        rows.iter()
            .all(|row| row["self"].as_u64() > Some(0) || row["total"].as_u64() > Some(0)),
        "{heat}"
    );
    assert_the_loop_is_hottest(hottest(&file["rows"]), &heat);
    assert_eq!(
        heat["hottest"]["line"].as_u64(),
        Some(hottest(&file["rows"]).0)
    );
    assert!(heat["samples"].as_u64() >= heat["self"].as_u64(), "{heat}");

    // Status says what is read, and the bound.
    let said = source_status(&url);
    assert_eq!(said["dirs"], serde_json::json!([]), "{said}");
    assert_eq!(said["max_bytes"], 8 << 20, "{said}");
    assert_eq!(said["max_reads"], 4, "{said}");
    assert_eq!(said["read_timeout_ms"], 2000, "{said}");
    let status = support::profilerctl(&daemon.socket, &["status"]).await;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("\nhttp:       127.0.0.1:")
            && status.contains("reads no source file (http_source_dirs is empty"),
        "{status}"
    );

    // What the route refuses, saying why.
    for (query, code, says) in [
        ("since=60", 400, "name the function"),
        (
            "since=60&function=no_such_function",
            404,
            "no sample of that window",
        ),
        ("function=main", 400, "since=SECONDS"),
        ("since=60&function=main&format=tree", 400, "does not take"),
    ] {
        let (got, body) = curl(&format!("{url}/api/source?{query}"), &[]);
        let body = String::from_utf8_lossy(&body);
        assert!(got == code && body.contains(says), "{query}: {got} {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_heatmap_reads_only_world_readable_regular_files_under_source_dirs() {
    require_root();
    let sources = sources();
    let (source, binary) = chain_from(&sources.shown, "heat-dirs");
    let (outside, outside_binary) = chain_from(&sources.elsewhere, "heat-out");
    let shown = sources.shown.display().to_string();
    let (daemon, url) = daemon_over_http_with(&["--http-source-dirs", &shown]).await;
    let (inside_workload, outside_workload) = (
        Workload::spawn(&binary, &[]),
        Workload::spawn(&outside_binary, &[]),
    );

    // Under the directory: the text, the loop's line hottest.
    let heat = heatmap_of(&url, inside_workload.pid(), 50).await;
    let file = only_file(&heat, &source);
    assert_eq!(file["text_shown"], true, "{heat}");
    assert!(file["withheld"].is_null(), "{heat}");
    let text = chain_c();
    let lines: Vec<&str> = text.lines().collect();
    let rows = file["rows"].as_array().expect("rows");
    for row in rows {
        let number = row["line"].as_u64().expect("a line") as usize;
        assert_eq!(row["text"], lines[number - 1], "{row}");
    }
    // Lines without samples shown around those with.
    assert!(
        rows.iter()
            .any(|row| row["self"] == 0 && row["total"] == 0 && row["text"].is_string()),
        "{heat}"
    );
    assert_the_loop_is_hottest(hottest(&file["rows"]), &heat);

    // Outside it: the counts, and what to do.
    let heat = heatmap_of(&url, outside_workload.pid(), 20).await;
    let reason = withheld(&heat, &outside);
    assert!(
        reason.contains(&format!(
            "{} is outside http_source_dirs ({shown})",
            outside.display()
        )) && reason.contains("add its directory to http_source_dirs in the daemon's"),
        "{reason}"
    );

    // A link under it to a file outside it: refused, saying where it leads.
    let linked = sources.elsewhere.join("linked.c");
    fs::write(&linked, chain_c()).expect("a file outside");
    fs::set_permissions(&linked, fs::Permissions::from_mode(0o644)).expect("chmod");
    fs::remove_file(&source).expect("the source removed");
    std::os::unix::fs::symlink(&linked, &source).expect("a link");
    let heat = heatmap_of(&url, inside_workload.pid(), 50).await;
    let file = only_file(&heat, &source);
    let reason = file["withheld"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("(a link to {})", linked.display()))
            && reason.contains("is outside http_source_dirs"),
        "{reason}"
    );
    assert!(
        file["rows"]
            .as_array()
            .is_some_and(|rows| rows.iter().all(|row| row["text"].is_null()))
    );

    // A FIFO there: refused at once, not read (nothing writes to it).
    fs::remove_file(&source).expect("the link removed");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &source,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("a FIFO");
    let asked = Instant::now();
    let heat = heatmap_of(&url, inside_workload.pid(), 50).await;
    let took = asked.elapsed();
    let reason = withheld(&heat, &source);
    assert!(
        reason.contains("is not a regular file (a FIFO)"),
        "{reason}"
    );
    assert!(
        took < Duration::from_secs(30),
        "the FIFO held the request {took:?}"
    );

    // A regular file other users cannot read.
    fs::remove_file(&source).expect("the FIFO removed");
    fs::write(&source, chain_c()).expect("the source again");
    fs::set_permissions(&source, fs::Permissions::from_mode(0o600)).expect("chmod");
    let heat = heatmap_of(&url, inside_workload.pid(), 50).await;
    let reason = withheld(&heat, &source);
    assert!(
        reason.contains("is not readable by every user (mode 600)"),
        "{reason}"
    );

    // Status says what is read, and the bound.
    let said = source_status(&url);
    assert_eq!(said["dirs"], serde_json::json!([shown]), "{said}");
    let status = support::profilerctl(&daemon.socket, &["status"]).await;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(&format!(
            "reads source files under http_source_dirs {shown} (regular files every user may \
             read, of 8 MiB at most; 4 at once, 2s each at most)"
        )),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_source_heatmap_in_chromium_shows_the_hot_loop_s_line_hottest() {
    the_heatmap_works_in(Browser::Chromium).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_source_heatmap_in_firefox_shows_the_hot_loop_s_line_hottest() {
    the_heatmap_works_in(Browser::Firefox).await;
}

async fn the_heatmap_works_in(browser: Browser) {
    require_root();
    let sources = sources();
    let (source, binary) = chain_from(&sources.shown, &format!("heat-{}", browser.name()));
    let shown = sources.shown.display().to_string();
    let (_daemon, url) = daemon_over_http_with(&["--http-source-dirs", &shown]).await;
    let workload = Workload::spawn(&binary, &[]);
    let api = heatmap_of(&url, workload.pid(), 100).await;
    assert_the_loop_is_hottest(hottest(&only_file(&api, &source)["rows"]), &api);
    let screenshots = screenshot_dir();
    let screenshot = |mode: &str| screenshots.join(format!("{}-{mode}.png", browser.name()));
    for mode in ["heatmap", "heatmap-withheld"] {
        let _ = fs::remove_file(screenshot(mode));
    }
    let seen = drive_browser(
        browser,
        "heatmap",
        serde_json::json!({
            "url": format!("{url}/"),
            "pid": workload.pid(),
            "function": HOT,
            "sourceFile": source,
            "screenshots": screenshots,
        }),
    )
    .await;

    // Opened from the functions table: the function and its file named,
    // the text shown, the loop's line hottest, marked, in view.
    let table = &seen["table"];
    assert_eq!(table["visible"], true, "{table}");
    assert!(
        table["title"]
            .as_str()
            .is_some_and(|title| title.starts_with(HOT)),
        "{table}"
    );
    let file = &table["files"][0];
    assert_eq!(file["path"], source.display().to_string(), "{table}");
    assert_eq!(file["heading"], file["path"], "{table}");
    assert_eq!(file["textShown"], "true", "{table}");
    assert!(file["withheld"].is_null(), "{table}");
    let rows: Vec<&Value> = (file["rows"].as_array().expect("rows").iter())
        .filter(|row| row.get("line").is_some())
        .collect();
    let hot = hottest(&file["rows"]);
    assert_the_loop_is_hottest(hot, table);
    let marked: Vec<&&Value> = rows.iter().filter(|row| row["hottest"] == true).collect();
    assert_eq!(marked.len(), 1, "{table}");
    assert_eq!(marked[0]["line"].as_u64(), Some(hot.0), "{table}");
    let text = chain_c();
    let line = text.lines().nth(hot.0 as usize - 1).unwrap_or_default();
    assert_eq!(marked[0]["text"], line, "{table}");
    let at = &table["hottest"];
    let number = |key: &str| at[key].as_f64().unwrap_or(f64::NAN);
    let screen_height = at["viewport"][1].as_f64().unwrap_or(0.0);
    assert!(
        number("top") >= number("boxTop").max(0.0)
            && number("bottom") <= number("boxBottom").min(screen_height),
        "the hottest line is not in view: {at}"
    );
    assert!(number("fontSize") >= 11.0, "{at}");
    // Coloured by Self: the hottest the deepest, lines without none.
    let alpha = |row: &Value| -> f64 {
        let background = row["background"].as_str().unwrap_or_default();
        let channels: Vec<f64> = (background
            .trim_start_matches("rgba(")
            .trim_start_matches("rgb("))
        .trim_end_matches(')')
        .split(',')
        .filter_map(|part| part.trim().parse().ok())
        .collect();
        match channels[..] {
            [_, _, _, alpha] => alpha,
            [_, _, _] => 1.0,
            _ => panic!("a colour {background}"),
        }
    };
    for row in &rows {
        match row["self"].as_u64() {
            Some(0) => assert_eq!(alpha(row), 0.0, "{row}"),
            _ => assert!(alpha(row) > 0.0 && alpha(row) <= alpha(marked[0]), "{row}"),
        }
    }

    // From the sandwich and from the flame graph's frame: the same.
    for key in ["sandwich", "frame"] {
        let heat = &seen[key];
        assert_eq!(heat["function"], HOT, "{key}: {heat}");
        assert_eq!(heat["files"][0]["textShown"], "true", "{key}: {heat}");
        assert!(
            heat["hottest"]["line"]
                .as_u64()
                .is_some_and(|line| loop_lines().contains(&line)),
            "{key}: {heat}"
        );
    }
    assert_eq!(seen["closedByEscape"], true);

    // The file closed to other users: the counts by line number, and why.
    let withheld = &seen["withheld"]["files"][0];
    assert_eq!(withheld["textShown"], "false", "{withheld}");
    let reason = withheld["withheld"].as_str().unwrap_or_default();
    assert!(
        reason.contains("is not readable by every user") && reason.contains("profilerctl annotate"),
        "{reason}"
    );
    let counted = withheld["rows"].as_array().expect("rows");
    assert!(
        counted
            .iter()
            .all(|row| row.get("gap").is_some()
                || (row["text"] == "" && row["line"].as_u64() > Some(0))),
        "{withheld}"
    );
    assert_the_loop_is_hottest(hottest(&withheld["rows"]), withheld);

    for mode in ["heatmap", "heatmap-withheld"] {
        assert!(
            fs::metadata(screenshot(mode)).is_ok_and(|file| file.len() > 10_000),
            "no screenshot at {}",
            screenshot(mode).display()
        );
    }
    assert_eq!(seen["cspViolations"], serde_json::json!([]), "{browser:?}");
}
