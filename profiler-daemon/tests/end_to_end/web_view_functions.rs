//! A function named in the web view as a person types it (Chromium): the
//! search and the sandwich of `malloc` find the C library's malloc by the
//! name the daemon drew it with (Debian's glibc: `__GI___libc_malloc`),
//! as `profilerctl callers` does (the page's names.js mirrors that rule).

use profilerd_words::FunctionName;

use crate::{
    http::daemon_over_http,
    support::{Workload, require_root},
    web_browser::{Browser, drive_browser},
    web_python::names,
};

#[tokio::test(flavor = "multi_thread")]
async fn the_search_and_the_sandwich_of_malloc_find_the_c_library_s_malloc() {
    require_root();
    let (_daemon, url) = daemon_over_http().await;
    let workload = Workload::start_as("allocs", "storm-web", &["storm"]);
    let seen = drive_browser(
        Browser::Chromium,
        "functionNames",
        serde_json::json!({
            "url": format!("{url}/"),
            "pid": workload.pid(),
            "name": "malloc",
        }),
    )
    .await;
    let malloc = FunctionName::new("malloc");
    // The daemon drew malloc under another of its names, which the search
    // highlights (every frame of malloc's, under whichever name).
    let drawn = names(&seen, "drawnNames");
    let aliases: Vec<&String> = (drawn.iter())
        .filter(|name| name.as_str() != "malloc" && malloc.matches(name))
        .collect();
    assert!(
        !aliases.is_empty(),
        "no C library name of malloc drawn (Debian's glibc: __GI___libc_malloc): {drawn:?}"
    );
    let highlighted = names(&seen, "highlighted");
    for alias in &aliases {
        assert!(
            highlighted.contains(alias),
            "{alias} not highlighted: {highlighted:?}"
        );
    }
    for name in &highlighted {
        assert!(
            malloc.matches(name) || name.contains("malloc"),
            "{name} highlighted by the search for malloc"
        );
    }
    // The sandwich of malloc: its frames' callers, the workload's site
    // among them.
    let summary = seen["sandwichSummary"].as_str().unwrap_or_default();
    assert!(summary.starts_with("malloc: "), "{summary}");
    let callers: Vec<&str> = (seen["sandwichCallers"].as_array())
        .expect("the sandwich's callers")
        .iter()
        .filter_map(|row| row[0].as_str())
        .collect();
    assert!(
        callers.contains(&"site_storm"),
        "the sandwich of malloc: {summary}; callers {callers:?}"
    );
}
