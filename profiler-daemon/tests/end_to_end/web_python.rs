//! Python processes in the web view (Chromium): their Python frames drawn
//! with file and line, the interpreter switch showing them as py-spy does;
//! and the same from `/api/query`, `profilerctl` and the gRPC default.

use std::process::Command;

use profilerd_client::v1;

use crate::{
    http::daemon_over_http,
    support::{Workload, folded, require_root},
    web_browser::{Browser, drive_browser},
};

/// `outer → middle → spin`, at known lines of a known file.
const CHAIN: &str = "def spin():
    s = 0
    while True:
        s += 1
def middle():
    spin()
def outer():
    middle()
outer()
";

/// The strings of `seen[key]`, what a scenario saw.
pub(crate) fn names(seen: &serde_json::Value, key: &str) -> Vec<String> {
    seen[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {seen}"))
        .iter()
        .map(|name| name.as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn python_frames_are_drawn_with_file_and_line_and_the_interpreter_can_be_hidden() {
    require_root();
    let (daemon, url) = daemon_over_http().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("chain.py");
    std::fs::write(&script, CHAIN).expect("the script is written");
    let file = script.display().to_string();
    let workload: Workload = Command::new("/usr/bin/python3")
        .arg(&script)
        .spawn()
        .expect("Debian's python3 (a test dependency) runs")
        .into();
    let pid = workload.pid();
    // Past its first samples, taken before its interpreter is known.
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;

    // Folded over gRPC by default: `name (file:line)`, the line it was at.
    let mut client = daemon.client().await;
    let reply = crate::support::profile(
        &mut client,
        &[pid],
        std::time::Duration::from_secs(1),
        v1::ReportOptions {
            format: v1::Format::Folded as i32,
            ..Default::default()
        },
    )
    .await;
    let chain = [
        format!("<module> ({file}:9)"),
        format!("outer ({file}:8)"),
        format!("middle ({file}:6)"),
    ];
    let stacks = folded(&reply.report);
    let along = crate::support::samples_where(&stacks, |frames| {
        frames
            .windows(4)
            .any(|w| w[..3] == chain && w[3].starts_with(&format!("spin ({file}:")))
    });
    assert!(
        along as f64 >= 0.9 * crate::support::total(&stacks) as f64,
        "{along} samples along {chain:?}: {stacks:#?}"
    );

    let screenshot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("web-view")
        .join("web-view-python.png");
    std::fs::create_dir_all(screenshot.parent().expect("a directory")).expect("made");
    let seen = drive_browser(
        Browser::Chromium,
        "python",
        serde_json::json!({
            "url": format!("{url}/"),
            "pid": pid,
            "hot": "spin",
            "screenshot": screenshot,
        }),
    )
    .await;
    let with = names(&seen, "withInterpreter");
    let without = names(&seen, "withoutInterpreter");
    for frame in &chain {
        assert!(with.contains(frame), "{frame} drawn: {with:?}");
        assert!(
            without.contains(frame),
            "{frame} drawn without the interpreter: {without:?}"
        );
    }
    let interpreter =
        |name: &str| name.starts_with("_PyEval_EvalFrameDefault") || name == "Py_RunMain";
    // Each hot chain drawn holds the Python chain whole, root first; with
    // the interpreter's frames around it, or (switched off) without any.
    for (key, with_interpreter) in [("hotChains", true), ("hotChainsWithout", false)] {
        let chains = seen[key].as_array().expect("hot chains");
        assert!(!chains.is_empty(), "{key}: {seen}");
        for drawn in chains {
            let drawn: Vec<&str> = drawn
                .as_array()
                .expect("a chain")
                .iter()
                .filter_map(|name| name.as_str())
                .collect();
            let python: Vec<&str> = drawn
                .iter()
                .copied()
                .filter(|name| name.contains(&file))
                .collect();
            assert_eq!(
                python[..3],
                chain.each_ref().map(String::as_str),
                "{drawn:?}"
            );
            assert_eq!(
                drawn.iter().any(|name| interpreter(name)),
                with_interpreter,
                "{key}: {drawn:?}"
            );
        }
    }
    let labels = names(&seen, "labels");
    assert!(
        labels
            .iter()
            .any(|label| label.starts_with("middle (") && label.contains(".py:6")),
        "a frame's label reads middle (…chain.py:6): {labels:?}"
    );
    for asked in ["windowWithout", "download"] {
        let asked = seen[asked].as_str().unwrap_or_default();
        assert!(asked.contains("interpreter=false"), "{asked}");
    }
}
