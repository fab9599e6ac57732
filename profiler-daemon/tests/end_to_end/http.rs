//! The HTTP listener: Go's `net/http/pprof` CPU and heap profiles read by
//! `go tool pprof` itself, its index page, ProfileEndpoints' routes, the peeks, errors that say what
//! to fix, and TLS that lets in only clients with a certificate of the CA.

use std::process::Command;

use rustix::process::{Pid, Signal, kill_process};

use crate::{
    remote::{Authority, TlsFiles, free_port},
    support::{Daemon, Workload},
};

/// A daemon serving HTTP in plaintext on a loopback port.
pub async fn daemon_over_http() -> (Daemon, String) {
    daemon_over_http_with(&[]).await
}

/// A daemon serving HTTP in plaintext on a loopback port, with `flags`.
pub async fn daemon_over_http_with(flags: &[&str]) -> (Daemon, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let listen = [
        "--http-listen",
        &address,
        "--http-plaintext-loopback",
        "true",
    ];
    let daemon = Daemon::start_with(&[&listen[..], flags].concat()).await;
    (daemon, format!("http://{address}"))
}

/// What curl got: the status code and the body.
pub fn curl(url: &str, extra: &[&str]) -> (u16, Vec<u8>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let body = dir.path().join("body");
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60", "--output"])
        .arg(&body)
        .args(["--write-out", "%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl runs: install curl (cargo xtask test does)");
    let code = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, std::fs::read(&body).unwrap_or_default())
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// `go tool pprof -top` of a URL, as Go users run it.
/// (`go tool pprof` has no flags for TLS: its `-tls_*` are the standalone
/// pprof's, so over TLS with client certificates it cannot fetch; curl can.)
fn go_pprof_top_of(url: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .args(extra)
        .arg(url)
        .env("HOME", dir.path())
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("`go` runs: install golang-go (cargo xtask test does)");
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "go tool pprof {url} failed:\n{}",
        text(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn go_tool_pprof_reads_the_profile_route_like_a_go_service() {
    let (_daemon, base) = daemon_over_http().await;
    let workload = Workload::start("split", &[]);
    let top = go_pprof_top_of(
        &format!(
            "{base}/debug/pprof/profile?seconds=2&pid={}",
            workload.pid()
        ),
        &[],
    );
    assert!(top.contains("Type: cpu"), "{top}");
    // Lines: flat flat% sum% cum cum% name [(inline)]; hot and cold
    // share the time 3:1 (the workload's own split).
    let cum_share = |function: &str| -> f64 {
        top.lines()
            .find(|line| line.split_whitespace().nth(5) == Some(function))
            .and_then(|line| line.split_whitespace().nth(4))
            .and_then(|share| share.trim_end_matches('%').parse().ok())
            .unwrap_or_else(|| panic!("go tool pprof -top does not name {function}:\n{top}"))
    };
    assert!(cum_share("main") > 99.0, "{top}");
    assert!((70.0..80.0).contains(&cum_share("hot")), "{top}");
    assert!((20.0..30.0).contains(&cum_share("cold")), "{top}");
    assert!(cum_share("spin") > 99.0, "{top}");
    // Nothing of other processes.
    assert!(!top.contains("swapper") && !top.contains("halt"), "{top}");
}

#[tokio::test(flavor = "multi_thread")]
async fn go_tool_pprof_reads_the_heap_route_and_names_the_allocating_function() {
    let (_daemon, base) = daemon_over_http().await;
    // site_three_quarters allocates 3 bytes for each of site_one_quarter's.
    let workload = Workload::start("allocs", &["ratio"]);
    let url = format!("{base}/debug/pprof/heap?seconds=3&pid={}", workload.pid());
    let top = go_pprof_top_of(&url, &["-sample_index=alloc_space"]);
    assert!(top.contains("Type: alloc_space"), "{top}");
    let first = top
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.contains("site_three_quarters"), "{top}");
    assert!(top.contains("site_one_quarter"), "{top}");
    // Go's heap profile values; what is still in use at the end is what
    // the workload did not free yet (it frees all it allocates): at most a
    // few samples, against 3 s of allocations.
    let (code, body) = curl(&url, &[]);
    assert_eq!(code, 200, "{}", text(&body));
    let profile = crate::support::decode_pprof(&body);
    let types: Vec<&str> = profile
        .sample_type
        .iter()
        .map(|value| profile.string_table[value.r#type as usize].as_str())
        .collect();
    assert_eq!(
        types,
        [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space"
        ]
    );
    let total = |index: usize| -> i64 {
        profile
            .sample
            .iter()
            .map(|sample| sample.value[index])
            .sum()
    };
    let (allocated, in_use) = (total(1), total(3));
    assert!(allocated > 0 && total(0) > 0, "{allocated}");
    assert!(
        in_use < allocated / 4,
        "{in_use} of {allocated} bytes in use"
    );
    // As Go's heap profile: in-use bytes by default.
    assert_eq!(
        profile.string_table[profile.default_sample_type as usize],
        "inuse_space"
    );
    // Nothing of other processes: every sample is the workload's.
    let pid_key = profile
        .string_table
        .iter()
        .position(|text| text == "pid")
        .expect("a pid label") as i64;
    for sample in &profile.sample {
        let pid = sample.label.iter().find(|label| label.key == pid_key);
        assert_eq!(
            pid.map(|label| label.num),
            Some(i64::from(workload.pid())),
            "{sample:?}"
        );
    }
}

/// `/debug/pprof/allocs` (Grafana Alloy's default path for memory) is
/// the heap profile by bytes allocated, as Go's: `go tool pprof -top`
/// without a sample index names the allocating function; the process is
/// selected by its command name alone.
#[tokio::test(flavor = "multi_thread")]
async fn the_allocs_route_is_the_heap_profile_by_bytes_allocated() {
    let (_daemon, base) = daemon_over_http().await;
    let _workload = Workload::start_as("allocs", "http-allocs", &["ratio"]);
    let top = go_pprof_top_of(
        &format!("{base}/debug/pprof/allocs?seconds=3&comm=http-allocs"),
        &[],
    );
    assert!(top.contains("Type: alloc_space"), "{top}");
    let first = top
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.contains("site_three_quarters"), "{top}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pprof_index_page_lists_heap_and_profile_with_links() {
    let (_daemon, base) = daemon_over_http().await;
    for path in ["/debug/pprof/", "/debug/pprof"] {
        let (code, body) = curl(&format!("{base}{path}"), &[]);
        assert_eq!(code, 200, "{path}: {}", text(&body));
        let page = text(&body);
        for listed in [
            "<a href=\"heap?seconds=30&amp;pid=P\">heap</a>",
            "<a href=\"allocs?seconds=30&amp;pid=P\">allocs</a>",
            "<a href=\"profile?seconds=30\">profile</a>",
            "<div class=profile-name>heap: </div>",
            "<div class=profile-name>profile: </div>",
        ] {
            assert!(page.contains(listed), "{path}: no {listed} in:\n{page}");
        }
    }
    // A link of the index, followed from /debug/pprof/, is a profile.
    let (code, body) = curl(&format!("{base}/debug/pprof/profile?seconds=0.5"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
    assert_eq!(body[..2], [0x1f, 0x8b], "a gzipped pprof");
}

#[tokio::test(flavor = "multi_thread")]
async fn profile_endpoints_routes_profile_sessions_and_peeks() {
    // Peeks by signal of its own workload only: other tests' signals would
    // take the peeks' room.
    let (daemon, base) = daemon_over_http_with(&["--peek-allow-commands", "http-peeked"]).await;
    let workload = Workload::start("split", &[]);
    let pid = workload.pid();

    // /profile: pprof by default, the tree report with pprof=false.
    let (code, body) = curl(&format!("{base}/profile?duration=1&pid={pid}"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
    assert_eq!(body[..2], [0x1f, 0x8b], "a gzipped pprof");
    let (code, body) = curl(
        &format!("{base}/profile?duration=1&pprof=false&pid={pid}"),
        &[],
    );
    assert_eq!(code, 200, "{}", text(&body));
    let tree = text(&body);
    assert!(tree.contains("; hot") && tree.contains("; main"), "{tree}");

    // A session between /profile_start and /profile_stop, stopped once the
    // workload has been sampled meanwhile.
    let started = crate::support::unix_nanos();
    let (code, body) = curl(&format!("{base}/profile_start?pid={pid}"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
    assert!(text(&body).contains("/profile_stop?id="), "{}", text(&body));
    let mut client = daemon.client().await;
    crate::support::wait_for_samples(&mut client, &[pid], started, "hot", 20).await;
    let (code, body) = curl(&format!("{base}/profile_stop?pprof=false"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
    assert!(text(&body).contains("; spin"), "{}", text(&body));
    let (code, body) = curl(&format!("{base}/profile_stop"), &[]);
    assert_eq!(code, 404, "{}", text(&body));
    assert!(text(&body).contains("start one with /profile_start"));

    // A peek by signal shows in /peeks, and reads at /peeks/ID.
    let peeked = Workload::start_as("peek_threads", "http-peeked", &[]);
    // Its handler is set once its threads are started.
    crate::support::wait_for_threads(peeked.pid(), &crate::support::PEEK_THREADS).await;
    let peeked_pid = Pid::from_raw(peeked.pid() as i32).expect("a pid");
    kill_process(peeked_pid, Signal::USR1).expect("SIGUSR1 is sent");
    let peek =
        crate::support::eventually("the peek is listed", crate::support::PATIENCE, async || {
            let (code, body) = curl(&format!("{base}/peeks"), &[]);
            assert_eq!(code, 200, "{}", text(&body));
            let listed: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            let peek = listed
                .as_array()
                .and_then(|peeks| peeks.iter().find(|peek| peek["pid"] == peeked.pid()))
                .cloned();
            peek.ok_or(format!("{listed}; {:?}", daemon.status().await.peek))
        })
        .await;
    let id = peek["id"].as_str().expect("an id");
    let (code, body) = curl(&format!("{base}/peeks/{id}"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
    assert!(
        text(&body).contains(&format!("process {}", peeked.pid())),
        "{}",
        text(&body)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_http_requests_get_400_or_404_with_what_to_fix() {
    let (_daemon, base) = daemon_over_http().await;
    for (path, code, message) in [
        (
            "/debug/pprof/profile?seconds=ten",
            400,
            "give e.g. seconds=30",
        ),
        (
            "/debug/pprof/profile?secs=1",
            400,
            "does not take the parameter \"secs\"",
        ),
        (
            "/profile?duration=100000",
            400,
            "longer than the longest the daemon allows",
        ),
        ("/profile?duration=1&delay=0.01", 400, "leave delay out"),
        (
            "/profile?duration=1&pprof=maybe",
            400,
            "must be true or false",
        ),
        (
            "/profile?duration=1&mode=gil",
            400,
            "give cpu, offcpu or wall",
        ),
        ("/profile?duration=1&pid=abc", 400, "not a process id"),
        ("/profile?duration=1&comm_regex=(", 400, "is not valid"),
        ("/peeks/nope", 404, "no peek report"),
        (
            "/debug/pprof/heap?seconds=1",
            400,
            "give its process id (pid=P)",
        ),
        ("/debug/pprof/heap?pid=1", 400, "needs seconds=N"),
        (
            "/debug/pprof/heap?seconds=100000&pid=1",
            400,
            "longer than the longest the daemon allows",
        ),
        (
            "/debug/pprof/heap?seconds=1&pid=999999999",
            404,
            "no process with id 999999999 is running; check the id",
        ),
        (
            "/debug/pprof/heap?seconds=1&comm=no-such-comm",
            404,
            "no running process matches the selection",
        ),
        ("/debug/pprof/heap?seconds=1&pid=1,2", 400, "give one"),
        (
            "/debug/pprof/heap?seconds=1&pid=1&mode=cpu",
            400,
            "leave mode out",
        ),
        (
            "/debug/pprof/heap?seconds=1&pid=1&sample_bytes=1&sample_rate=0.5",
            400,
            "not both",
        ),
        (
            "/debug/pprof/heap?seconds=1&pid=1&sample_rate=2",
            400,
            "not a probability above 0 and at most 1",
        ),
        (
            "/debug/pprof/heap?seconds=1&pid=1&gc=1",
            400,
            "does not take the parameter \"gc\"",
        ),
        ("/nowhere", 404, "/debug/pprof/profile?seconds=N"),
    ] {
        let (got, body) = curl(&format!("{base}{path}"), &[]);
        assert_eq!(got, code, "{path}: {}", text(&body));
        assert!(text(&body).contains(message), "{path}: {}", text(&body));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn https_answers_only_clients_with_a_certificate_of_the_ca() {
    let clients = Authority::new("profilerd test clients");
    let servers = Authority::new("profilerd test servers");
    let tls = TlsFiles::new(&servers, &clients);
    let write = |name: &str, text: &str| tls.write(name, text);
    let (client_cert, client_key) = clients.issue(&["scraper"]);
    let (rogue_cert, rogue_key) = Authority::new("someone else").issue(&["intruder"]);
    let server_ca = write("servers.pem", &servers.pem());
    let (client_cert, client_key) = (
        write("client.pem", &client_cert),
        write("client.key", &client_key),
    );
    let (rogue_cert, rogue_key) = (
        write("rogue.pem", &rogue_cert),
        write("rogue.key", &rogue_key),
    );
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _daemon =
        Daemon::start_with(&[&["--http-listen", &address][..], &tls.flags()].concat()).await;
    let url = format!("https://localhost:{port}/profile?duration=0.5&pprof=false");

    let (code, body) = curl(
        &url,
        &[
            "--cacert",
            &server_ca,
            "--cert",
            &client_cert,
            "--key",
            &client_key,
        ],
    );
    assert_eq!(code, 200, "{}", text(&body));
    // Without a certificate: told why, not a failed handshake.
    let (code, body) = curl(&url, &["--cacert", &server_ca]);
    assert_eq!(code, 403, "{}", text(&body));
    assert!(
        text(&body).contains("certificate signed by its tls_client_ca"),
        "{}",
        text(&body)
    );
    // Another CA's certificate: the handshake fails.
    let (code, _) = curl(
        &url,
        &[
            "--cacert",
            &server_ca,
            "--cert",
            &rogue_cert,
            "--key",
            &rogue_key,
        ],
    );
    assert_eq!(code, 0, "a client of another CA got an answer");
}
