//! The web view's `web/names.js` against the Rust rule it mirrors
//! (`profilerd_words::FunctionName`): node runs the page's own file over
//! every pair of a list of names, and each answer must be the Rust one;
//! then what the page adds (a drawn frame's function, the search).
//!
//! Test code only; node is a test dependency (`cargo xtask test` installs
//! Debian's nodejs).

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

use profilerd_words::FunctionName;
use serde_json::{Value, json};

const NAMES_JS: &str = include_str!("web/names.js");

/// Runs names.js under node: `namesFunction` over `pairs` (name, asked),
/// `frameFunction` over `frames` and `searchMatches` over `searches`
/// (frame, term); their answers.
fn in_node(pairs: &[(&str, &str)], frames: &[&str], searches: &[(&str, &str)]) -> Value {
    const RUN: &str = r#"
        const vm = require("vm");
        let input = "";
        process.stdin.on("data", (chunk) => (input += chunk));
        process.stdin.on("end", () => {
          const { source, pairs, frames, searches } = JSON.parse(input);
          const page = vm.createContext({});
          vm.runInContext(source, page);
          const answers = {
            names: pairs.map(([name, asked]) => page.namesFunction(name, asked)),
            frames: frames.map((frame) => page.frameFunction(frame)),
            searches: searches.map(([frame, term]) => page.searchMatches(frame, term)),
          };
          process.stdout.write(JSON.stringify(answers));
        });
    "#;
    let mut node = Command::new("node")
        .args(["-e", RUN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| {
            panic!(
                "node runs the web view's names.js ({err}): install Debian's nodejs (`cargo xtask \
                 test` does)"
            )
        });
    let input = json!({
        "source": NAMES_JS,
        "pairs": pairs,
        "frames": frames,
        "searches": searches,
    });
    node.stdin
        .take()
        .expect("node's input")
        .write_all(input.to_string().as_bytes())
        .expect("names.js's cases are written to node");
    let output = node.wait_with_output().expect("node ends");
    assert!(
        output.status.success(),
        "node failed on names.js: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("node's answers are JSON")
}

/// Names as frames carry them and as people type them, the awkward ones
/// included.
const NAMES: &[&str] = &[
    "malloc",
    "__GI___libc_malloc",
    "__libc_malloc",
    "malloc@@GLIBC_2.2.5",
    "malloc@GLIBC_2.2.5",
    "__GI___malloc",
    "__GI_malloc",
    "__GI___libc_",
    "__libc_",
    "__libc_@x",
    "xmalloc",
    "malloc_consolidate",
    "_int_malloc",
    "spin",
    "spinner",
    "app::spin",
    "app::server::spin",
    "server::spin",
    "<app::Server as Handler>::spin",
    "::spin",
    "a::b@c",
    "@",
    "",
];

#[test]
fn names_js_answers_as_the_rust_rule_does() {
    let pairs: Vec<(&str, &str)> = NAMES
        .iter()
        .flat_map(|&name| NAMES.iter().map(move |&asked| (name, asked)))
        .collect();
    let frames = [
        "memcpy_[i]",
        "do_syscall_64_[k]",
        "spin (/tmp/chain.py:4)",
        "operator()(int) const",
        "[kernel]",
    ];
    let searches = [
        ("__GI___libc_malloc", "malloc"),
        ("__GI___libc_malloc_[i]", "malloc"),
        ("__GI___libc_malloc", "malloc@@GLIBC_2.2.5"),
        ("xmalloc", "malloc"),
        ("spin (/tmp/chain.py:4)", "spin"),
        ("operator()(int) const", "("),
        ("free", "malloc"),
        ("malloc", ""),
    ];
    let answers = in_node(&pairs, &frames, &searches);
    let names = answers["names"]
        .as_array()
        .expect("namesFunction's answers");
    assert_eq!(names.len(), pairs.len());
    let differ: Vec<String> = (pairs.iter().zip(names))
        .filter(|((name, asked), js)| js.as_bool() != Some(FunctionName::new(asked).matches(name)))
        .map(|((name, asked), js)| format!("{name:?} asked as {asked:?}: names.js {js}"))
        .collect();
    assert!(
        differ.is_empty(),
        "names.js differs from the Rust rule: {differ:#?}"
    );
    // The pairs hold both answers, and the rule's alias case.
    assert!(names.iter().any(|js| js == true) && names.iter().any(|js| js == false));
    assert!(FunctionName::new("malloc").matches("__GI___libc_malloc"));
    assert_eq!(
        answers["frames"],
        json!([
            "memcpy",
            "do_syscall_64",
            "spin",
            "operator()(int) const",
            "[kernel]"
        ])
    );
    assert_eq!(
        answers["searches"],
        json!([true, true, true, true, true, true, false, false])
    );
}
