//! The web view's first screen and choices, judged from what view.mjs's
//! view scenario saw (see web_view.rs): at 1600×1000 the graph's base is
//! on the first screen, every frame wide enough is labelled (the icicle's
//! too), the timeline has a y axis and 24-hour times; the processes table follows the selection and is
//! bounded, the sandwich of the chain workload's `drive` counts its caller
//! and callee as the graph's own lines do, one thread is drawn (and
//! tabled, and downloaded) alone, a selection of nothing and an off-CPU
//! mode nobody records say so.

use serde_json::Value;

use crate::{http::curl, support::samples_where, web_view::folded_from};

/// The samples of `stacks` in which the first `function` is called by
/// `caller` (`callee: false`) or calls `callee` (`callee: true`).
fn through(stacks: &[(Vec<String>, u64)], function: &str, other: &str, callee: bool) -> u64 {
    samples_where(stacks, |frames| {
        let Some(at) = frames.iter().position(|frame| frame == function) else {
            return false;
        };
        let next = if callee {
            frames.get(at + 1)
        } else {
            at.checked_sub(1).and_then(|before| frames.get(before))
        };
        next.is_some_and(|frame| frame == other)
    })
}

/// Asserts what the page showed of the choices: `pid` and `command`, the
/// chain workload's; `rows`, how many rows the processes table had for
/// every process.
pub fn assert_selections(seen: &Value, url: &str, pid: &str, command: &str, rows: usize) {
    let processes_rows = rows;
    // The processes table follows the selection: the chosen process only.
    let selected = seen["selectedProcesses"].as_array().expect("selected");
    assert!(
        !selected.is_empty()
            && selected
                .iter()
                .all(|row| row[0] == pid && row[1] == command),
        "selecting {pid}, the processes table lists {selected:?}"
    );
    assert!(
        processes_rows <= 26,
        "the processes table is not bounded: {} rows",
        processes_rows
    );

    // The sandwich of `drive` (main → drive → hot_leaf): its caller and
    // callee with the samples of the graph's own lines for that window.
    let window = seen["selectedWindow"]
        .as_str()
        .expect("the selected window");
    let stacks = folded_from(&format!("{url}/api/query?{window}"));
    for (key, other, callee) in [
        ("sandwichCallers", "main", false),
        ("sandwichCallees", "hot_leaf", true),
    ] {
        let listed = seen[key].as_array().expect("sandwich rows");
        let row = listed
            .iter()
            .find(|row| row[0] == other)
            .unwrap_or_else(|| panic!("{other} is not in {key}: {listed:?}"));
        let expected = through(&stacks, "drive", other, callee);
        assert!(expected > 0, "{window}: nothing through drive and {other}");
        assert_eq!(row[1].as_u64(), Some(expected), "{key}: {row}");
    }

    // One thread of the peeked process drawn alone.
    let status = seen["threadStatus"].as_str().unwrap_or_default();
    assert!(status.contains("(thread spin-alpha-"), "{status}");
    let chains = seen["threadChains"].as_array().expect("thread chains");
    let names: Vec<&str> = chains
        .iter()
        .flat_map(|chain| chain.as_array().expect("a chain"))
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"spin_alpha"), "{names:?}");
    assert!(!names.contains(&"spin_beta"), "{names:?}");
    for chain in chains {
        if let Some(thread) = chain.get(2) {
            assert!(
                thread
                    .as_str()
                    .is_some_and(|t| t.starts_with("spin-alpha-")),
                "a frame of another thread: {chain}"
            );
        }
    }

    // The functions table and the downloads follow the thread chosen.
    let functions = seen["threadFunctions"]
        .as_array()
        .expect("thread functions");
    assert!(
        functions.iter().any(|name| name == "spin_alpha")
            && !functions.iter().any(|name| name == "spin_beta"),
        "the functions of spin-alpha alone: {functions:?}"
    );
    let download = seen["threadWindow"].as_str().unwrap_or_default();
    assert!(download.contains("&tid="), "{download}");

    // A selection of no process says so, and what to do.
    // In the graph's place, and once (no notice above it saying it again).
    let none = &seen["noMatch"];
    assert_eq!(none["noticeShown"], false, "{none}");
    let said = none["graph"].as_str().unwrap_or_default();
    assert!(
        said.contains("No process matches “no-such-command”") && said.contains("clear the box"),
        "{said}"
    );
    assert!(
        none["processes"][0][0]
            .as_str()
            .is_some_and(|row| row.contains("No process matching")),
        "{none}"
    );

    // This daemon's offcpu setting is 0: it records off-CPU time only
    // while something asks for it (the peeks did, for a second each), and
    // the off-CPU mode says so, as /api/status said when the page asked.
    let (code, body) = curl(&format!("{url}/api/status"), &[]);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let status: Value = serde_json::from_slice(&body).expect("the status's JSON");
    assert_eq!(status["offcpu"]["sample_probability"], 0.0, "{status}");
    let notice = seen["offcpuNotice"].as_str().unwrap_or_default();
    let not_recorded = notice.contains("Off-CPU time is not being recorded");
    match seen["offcpuRecorded"].as_str() {
        Some("false") => assert!(not_recorded && notice.contains("offcpu"), "{notice}"),
        Some("true") => assert!(!not_recorded, "recorded, yet: {notice}"),
        other => panic!("the page did not say what it read of off-CPU recording: {other:?}"),
    }
}

/// A rectangle as view.mjs's baseRects reads it lies within the viewport
/// `[width, height]`.
fn within(rect: &Value, viewport: &Value) -> bool {
    let at = |key: &str| rect[key].as_f64().unwrap_or(f64::NAN);
    let (width, height) = (
        viewport[0].as_f64().unwrap_or(0.0),
        viewport[1].as_f64().unwrap_or(0.0),
    );
    at("top") >= 0.0 && at("bottom") <= height && at("left") >= 0.0 && at("right") <= width
}

/// Asserts that the labels view.mjs counted (`key`) label every frame wide
/// enough for one, and that there are some.
fn assert_labelled(seen: &Value, key: &str) {
    let counts = &seen[key];
    let wide = counts["wide"].as_u64().unwrap_or(0);
    assert!(
        wide > 0,
        "{key}: no frame wide enough for a label: {counts}"
    );
    assert_eq!(
        counts["labelled"].as_u64(),
        Some(wide),
        "{key}: frames drawn without their label: {counts}"
    );
}

/// Asserts what the page's first screen showed: the graph's base within
/// it, the labels, the timeline's axes and the status line's time.
pub fn assert_first_screen(seen: &Value) {
    // At 1600×1000, the first screen shows the graph's base: the root
    // frame and every process frame lie within it.
    let first = &seen["firstScreen"];
    assert_eq!(
        first["viewport"],
        serde_json::json!([1600, 1000]),
        "{first}"
    );
    assert_eq!(first["scrollY"], 0, "{first}");
    let roots = first["root"].as_array().expect("the root's rectangle");
    let processes = first["processes"].as_array().expect("the processes'");
    assert_eq!(roots.len(), 1, "{first}");
    assert!(processes.len() > 1, "{first}");
    for rect in roots.iter().chain(processes) {
        assert!(
            within(rect, &first["viewport"]),
            "{} is drawn outside the first screen at 1600×1000: {rect} (the page is {} px high)",
            rect["name"],
            first["pageHeight"]
        );
    }
    // Every frame wide enough is labelled, in the icicle too (drawn on
    // the page as it first came), whose root is on the first screen.
    assert_labelled(seen, "flameLabels");
    assert_labelled(seen, "icicleLabels");
    let icicle = &seen["icicleScreen"];
    assert!(
        within(&icicle["root"][0], &icicle["viewport"]),
        "the icicle's root is outside the first screen: {icicle}"
    );

    // The timeline has a y axis in samples per second, and writes its
    // times of day 24-hour, as the status line does.
    let axes = &seen["timelineAxes"];
    assert_eq!(axes["unit"], "samples/s", "{axes}");
    let rates = axes["rates"].as_array().expect("the y axis's ticks");
    assert!(rates.len() >= 2 && rates[0] == "0", "{axes}");
    let clock = |text: &str| {
        let parts: Vec<&str> = text.split(':').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|part| part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit()))
            && parts[0] < "24"
    };
    let times = axes["times"].as_array().expect("the x axis's ticks");
    assert!(
        !times.is_empty()
            && times
                .iter()
                .all(|time| clock(time.as_str().unwrap_or_default())),
        "{axes}"
    );
    let status = seen["liveStatus"].as_str().unwrap_or_default();
    let loaded = status
        .rsplit_once("(loaded ")
        .and_then(|(_, time)| time.strip_suffix(')'))
        .unwrap_or_default();
    assert!(clock(loaded), "the status line's time: {status}");
}
