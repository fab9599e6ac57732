//! Requests no client should send: each is refused with a short error that
//! says what is wrong, costs the daemon no memory to speak of, and changes
//! nothing.

use std::{process::Command, time::Duration};

use profilerd_client::v1;
use tonic::Code;

use crate::support::{self, Daemon, User, error_of, stdout_of};

/// The daemon's memory, in KiB, as its `/proc/PID/status` says.
#[derive(Clone, Copy, Debug)]
struct Memory {
    resident: u64,
    peak: u64,
    anonymous: u64,
    file: u64,
}

impl Memory {
    fn of(daemon: &Daemon) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid()))
            .expect("the daemon's status");
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("{name} in\n{status}"))
        };
        Self {
            resident: field("VmRSS:"),
            peak: field("VmHWM:"),
            anonymous: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }

    /// The daemon's memory once it has stopped changing (within 1 MiB over
    /// a second), or after 20 s: a daemon that sampled the whole machine
    /// before its targets were narrowed may still be symbolizing (and paging
    /// in debugging information) for a while.
    async fn settled(daemon: &Daemon) -> Self {
        let mut last = Self::of(daemon);
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = Self::of(daemon);
            if now.resident.abs_diff(last.resident) < 1024 {
                return now;
            }
            last = now;
        }
        last
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |kib: u64| kib as f64 / 1024.0;
        write!(
            f,
            "RSS {:.0} MiB ({:.0} anonymous, {:.0} file), peak {:.0} MiB",
            mib(self.resident),
            mib(self.anonymous),
            mib(self.file),
            mib(self.peak)
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_fields_cost_no_memory_and_errors_quote_a_prefix() {
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    // Only a sleeping process is sampled (so nothing is): what the tests
    // running beside this one do, or the daemon's own request handling
    // (whose symbolizing pages in the daemon's debugging information), must
    // not grow its memory while the requests are measured.
    let mut sleeper = Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("sleep starts");
    client
        .set_targets(v1::SetTargetsRequest {
            pids: vec![sleeper.id()],
            ..Default::default()
        })
        .await
        .expect("the targets are set");
    let _ = client.get_status(v1::GetStatusRequest::default()).await;
    let before = Memory::settled(&daemon).await;

    let query = |comm_regex: String| v1::QueryRequest {
        start_unix_nanos: (std::time::SystemTime::now() - Duration::from_secs(60))
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos() as i64,
        selector: Some(v1::Selector {
            comm_regex,
            ..Default::default()
        }),
        ..Default::default()
    };
    let short = |status: &tonic::Status| {
        assert!(
            status.message().len() < 400,
            "{} bytes of error: {:.400}",
            status.message().len(),
            status.message()
        );
    };
    // A 3 MB pattern: more than any request may be.
    let status = client
        .query(query("(a|b)*".repeat(500_000)))
        .await
        .expect_err("a 3 MB request is refused");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
    short(&status);
    // 100 KB of pattern: longer than a pattern may be.
    let status = client
        .query(query("(((".repeat(35_000)))
        .await
        .expect_err("a 100 KB pattern is refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("at most 1024"), "{status:?}");
    short(&status);
    // A short pattern whose program would be huge.
    let status = client
        .query(query(r"\w{1000}\w{1000}".to_owned()))
        .await
        .expect_err("a pattern too big to compile is refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("simplify it"), "{status:?}");
    assert!(!status.message().contains('\n'), "{status:?}");

    // Ids of 200 KB: the error quotes a prefix.
    let long_id = "x".repeat(200_000);
    let status = client
        .get_peek(v1::GetPeekRequest {
            id: long_id.clone(),
        })
        .await
        .expect_err("no such report");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    short(&status);
    let status = client
        .stop_profile(v1::StopProfileRequest {
            session_id: long_id,
            ..Default::default()
        })
        .await
        .expect_err("no such session");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    short(&status);
    let status = client
        .get_peek(v1::GetPeekRequest {
            id: "y".repeat(1 << 20),
        })
        .await
        .expect_err("a 1 MB request is refused");
    assert_ne!(status.code(), Code::Internal, "{status:?}");
    short(&status);

    let after = Memory::of(&daemon);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Pages of files the daemon maps (its own code and debugging
    // information, paged in as it runs) are no memory the requests took:
    // only the anonymous memory counts, at the end and at the peak.
    let file_paged_in = after.file.saturating_sub(before.file);
    assert!(
        after.peak < before.peak + file_paged_in + 16 * 1024
            && after.anonymous < before.anonymous + 16 * 1024,
        "the requests raised the daemon's memory: before {before}, after {after}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_protobuf_is_an_invalid_argument() {
    let python = std::env::var("PROFILERD_TEST_PYTHON").expect(
        "PROFILERD_TEST_PYTHON names a Python with grpcio: run the tests with `cargo xtask test`",
    );
    let daemon = Daemon::start().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/raw_client.py");
    for method in [
        "/profilerd.v1.Profiler/GetPeek",
        "/profilerd.v1.Profiler/Query",
        "/profilerd.v1.Profiler/Top",
    ] {
        let output = Command::new(&python)
            .arg(script)
            .arg(&daemon.socket)
            .arg(method)
            // Field 1, length-delimited, claiming 127 bytes it does not have.
            .arg("0a7f41")
            .output()
            .expect("python runs");
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(
            printed.starts_with("INVALID_ARGUMENT "),
            "{method}: {printed}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(printed.contains("is not a valid"), "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn absurd_durations_and_pids_are_refused_before_anything_happens() {
    let daemon = Daemon::start().await;
    let socket = &daemon.socket;

    for duration in ["18446744073709552s", "100000000000000000s", "2h"] {
        let refused = error_of(
            &support::profilerctl(socket, &["profile", "--pid", "1", "--duration", duration]).await,
        );
        assert!(
            refused.contains("is longer than the longest profile the daemon allows, 1h"),
            "{duration}: {refused}"
        );
    }
    let refused = error_of(&support::profilerctl(socket, &["profile", "-d", "0s"]).await);
    assert!(
        refused.contains("--duration must be at least 1ms"),
        "{refused}"
    );
    // The daemon was never asked for a profile.
    let metrics = stdout_of(&support::profilerctl(socket, &["metrics"]).await);
    assert!(
        !metrics.contains("profilerd_rpcs_total{method=\"Profile\""),
        "it profiled:\n{metrics}"
    );

    // A pid that does not exist changes nothing (it used to stop all sampling).
    let refused = error_of(&support::profilerctl(socket, &["targets", "--pid", "4000000"]).await);
    assert!(
        refused.contains("no process 4000000 is running") && refused.contains("InvalidArgument"),
        "{refused}"
    );
    let targets = stdout_of(&support::profilerctl(socket, &["targets"]).await);
    assert_eq!(targets.trim(), "every process");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_ends_profilerctl_quietly() {
    let daemon = Daemon::start().await;
    let workload = support::Workload::start("peek_threads", &[]);
    support::wait_for_threads(workload.pid(), &support::PEEK_THREADS).await;
    let mut client = daemon.client().await;
    client
        .peek(v1::PeekRequest {
            pid: workload.pid(),
        })
        .await
        .expect("a report is kept");
    let profilerctl = crate::support::profilerctl_binary().display().to_string();
    for command in ["peeks", "metrics", "status --verbose"] {
        // `true` exits without reading: profilerctl writes into a closed pipe.
        let script = format!(
            "set -o pipefail; {profilerctl} --socket {} {command} | true; echo \"status $?\" >&2",
            daemon.socket.display()
        );
        let output = tokio::task::spawn_blocking(move || {
            Command::new("bash")
                .args(["-c", &script])
                .output()
                .expect("bash runs")
        })
        .await
        .expect("finishes");
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Killed by SIGPIPE (128 + 13), as `cat` is, or done before `true`
        // closed the pipe: nothing printed either way.
        assert!(
            stderr == "status 141\n" || stderr == "status 0\n",
            "{command}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn numbers_and_flags_are_checked_in_the_clis_terms() {
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let socket = &daemon.socket;
    // Whether the error comes from the daemon (one line) or the parser.
    let (daemon_error, parse_error) = (true, false);
    for (args, expected, one_line) in [
        (
            vec!["profile", "--pid", "-1", "-d", "1s"],
            "a process id cannot be negative",
            parse_error,
        ),
        (
            vec!["query", "--since", "1m", "--mincount", "-5"],
            "a number of samples cannot be negative",
            parse_error,
        ),
        (
            vec!["top", "--limit", "-3"],
            "a number of functions cannot be negative",
            parse_error,
        ),
        (
            vec!["profile", "-d", "1s", "-f", "nonsense"],
            "[possible values: tree, flat, folded, pprof, flamegraph, speedscope, pstats, gecko]",
            parse_error,
        ),
        (
            vec!["top", "--interval", "10ms"],
            "--interval 10ms is out of range: 100ms to 1m",
            daemon_error,
        ),
        (
            vec![
                "query",
                "--since",
                "1m",
                "--uid",
                "65534",
                "--comm-regex",
                "(unclosed",
            ],
            "the regular expression \"(unclosed\" is not valid: unclosed group",
            daemon_error,
        ),
        (
            vec![
                "query",
                "--uid",
                "65534",
                "--start",
                "2026-01-01T00:00:00Z",
                "--end",
                "2025-01-01T00:00:00Z",
            ],
            "(start 2026-01-01T00:00:00Z, end 2025-01-01T00:00:00Z, now ",
            daemon_error,
        ),
    ] {
        let refused = error_of(&nobody.profilerctl(socket, &args).await);
        assert!(refused.contains(expected), "{args:?}: {refused}");
        if one_line {
            assert_eq!(refused.trim_end().lines().count(), 1, "one line: {refused}");
        }
        assert!(
            !refused.contains("_ms") && !refused.contains("unix_nanos"),
            "{args:?} speaks the API's field names: {refused}"
        );
    }
}
