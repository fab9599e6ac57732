//! Drives Debian's Chromium and Firefox ESR, headless, through the web
//! view for the end-to-end tests: tests/web/view.mjs runs a scenario with
//! puppeteer-core (installed by `cargo xtask test`) and prints what it saw
//! as JSON, which the tests judge; screenshots are left for a person to
//! look at.

use std::{path::PathBuf, process::Command};

use serde_json::Value;

/// The browsers the web view is tested in, as view.mjs names them.
#[derive(Clone, Copy, Debug)]
pub enum Browser {
    Chromium,
    Firefox,
}

impl Browser {
    pub fn name(self) -> &'static str {
        match self {
            Browser::Chromium => "chromium",
            Browser::Firefox => "firefox",
        }
    }
}

/// Runs tests/web/view.mjs's `scenario` in `browser` with `arguments`;
/// what it saw.
pub async fn drive_browser(browser: Browser, scenario: &str, mut arguments: Value) -> Value {
    let modules = std::env::var("PROFILERD_TEST_NODE_MODULES").expect(
        "PROFILERD_TEST_NODE_MODULES names the node_modules with puppeteer-core: run the \
         tests with `cargo xtask test`, which installs it (and Debian's chromium and \
         firefox-esr)",
    );
    arguments["browser"] = browser.name().into();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/web/view.mjs");
    let scenario = scenario.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .arg(scenario)
            .arg(arguments.to_string())
            .env("PROFILERD_TEST_NODE_MODULES", modules)
            .output()
            .expect("node runs (cargo xtask test installs nodejs)")
    })
    .await
    .expect("the browser task ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "view.mjs failed in {browser:?}: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|err| panic!("view.mjs printed no JSON ({err}): {stdout}"));
    assert!(
        seen.get("error").is_none(),
        "{browser:?} did not see what it waited for: {}\nthe page: {}\nunanswered: {}\n\
         answered (ms): {}\nconsole: {}",
        seen["error"],
        seen["pageAtError"],
        seen["pendingAtError"],
        seen["timings"],
        seen["console"]
    );
    eprintln!(
        "{browser:?}: the daemon's answers (ms): {}",
        seen["timings"]
    );
    seen
}

/// Where the tests leave their screenshots for a person to look at:
/// target/web-screenshots/BROWSER-MODE.png.
pub fn screenshot_dir() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = target.parent().unwrap_or(&target).join("web-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory is made");
    dir
}
