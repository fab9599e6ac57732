//! profilerctl against a real daemon: reports, files, and one-line errors.

use std::process::Command;

use crate::support::{Daemon, Workload, error_of};

fn profilerctl(daemon: &Daemon, args: &[&str]) -> std::process::Output {
    Command::new(crate::support::profilerctl_binary())
        .arg("--socket")
        .arg(&daemon.socket)
        .args(args)
        .output()
        .expect("profilerctl runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn profilerctl_profiles_reports_status_and_errors() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("split", &[]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output_file = dir.path().join("flat.txt");
    let pid = workload.pid().to_string();

    let output = tokio::task::spawn_blocking({
        let args: Vec<String> = [
            "profile",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--format",
            "flat",
            "--output",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .chain([output_file.display().to_string()])
        .collect();
        let socket = daemon.socket.clone();
        move || {
            Command::new(crate::support::profilerctl_binary())
                .arg("--socket")
                .arg(socket)
                .args(args)
                .output()
                .expect("profilerctl runs")
        }
    })
    .await
    .expect("profilerctl finishes");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("samples") && stderr.contains("report written to"),
        "{stderr}"
    );
    let flat = std::fs::read_to_string(&output_file).expect("the report file");
    assert!(
        flat.contains("Count") && flat.contains("Overhead"),
        "{flat}"
    );
    assert!(flat.lines().any(|line| line.ends_with(" hot")), "{flat}");

    let status = profilerctl(&daemon, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        text.contains("samples taken") && text.contains("lost:"),
        "{text}"
    );
    // The history's defaults: an hour, 10 s buckets once past.
    assert!(text.contains("at 10s resolution; retention 1h"), "{text}");

    // The flame graph shortcut, of the next second and of the last ones.
    for window in [["--duration", "1s"], ["--since", "3s"]] {
        let svg_file = dir.path().join("flamegraph.svg");
        let svg_path = svg_file.display().to_string();
        let mut args = vec!["flamegraph", "--pid", &pid, "-o", &svg_path];
        args.extend(window);
        let output = crate::support::profilerctl(&daemon.socket, &args).await;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let svg = std::fs::read_to_string(&svg_file).expect("the flame graph file");
        crate::support::parse_svg(&svg);
        assert!(
            svg.contains(">hot"),
            "{window:?}: no hot in the flame graph"
        );
        std::fs::remove_file(&svg_file).expect("removed");
    }
    let no_window = profilerctl(&daemon, &["flamegraph", "--pid", &pid]);
    assert!(!no_window.status.success());
    assert!(
        String::from_utf8_lossy(&no_window.stderr).contains("--duration 10s"),
        "{}",
        String::from_utf8_lossy(&no_window.stderr)
    );

    let bad = profilerctl(
        &daemon,
        &["profile", "--pid", "4294967290", "--duration", "1s"],
    );
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("no process with id 4294967290"), "{stderr}");

    let nowhere = Command::new(crate::support::profilerctl_binary())
        .args(["--socket", "/nonexistent/profilerd.sock", "status"])
        .output()
        .expect("profilerctl runs");
    assert!(!nowhere.status.success());
    let stderr = String::from_utf8_lossy(&nowhere.stderr);
    assert!(stderr.contains("is the daemon running"), "{stderr}");
    assert!(
        stderr.contains("Start it"),
        "says how to start it: {stderr}"
    );

    // PROFILERD_SOCKET names the socket when --socket does not.
    let from_environment = Command::new(crate::support::profilerctl_binary())
        .arg("status")
        .env("PROFILERD_SOCKET", "/nonexistent/from-environment.sock")
        .output()
        .expect("profilerctl runs");
    assert!(!from_environment.status.success());
    let stderr = String::from_utf8_lossy(&from_environment.stderr);
    assert!(
        stderr.contains("/nonexistent/from-environment.sock"),
        "{stderr}"
    );
    let served = Command::new(crate::support::profilerctl_binary())
        .arg("status")
        .env("PROFILERD_SOCKET", &daemon.socket)
        .output()
        .expect("profilerctl runs");
    assert!(served.status.success(), "{}", error_of(&served));
}
