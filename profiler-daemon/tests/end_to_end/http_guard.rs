//! What the HTTP listener answers a browser page and a careless client:
//! only its own Host names (and `http_allowed_hosts`), nothing that a page
//! of another site asks in a real browser, security headers on every
//! answer, and short 400s (no panic) for huge parameters and far times.

use std::process::Command;

use profilerd_client::v1;

use crate::{
    http::{curl, daemon_over_http},
    remote::free_port,
    support::{Daemon, Workload, peeks_of, require_root},
    web_browser::{Browser, drive_browser},
};

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// The status, the headers (lower case names) and the body curl got.
fn curl_with_headers(url: &str, extra: &[&str]) -> (u16, Vec<(String, String)>, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let headers = dir.path().join("headers");
    let (code, body) = curl(
        url,
        &[
            &["--dump-header", headers.to_str().expect("a UTF-8 path")],
            extra,
        ]
        .concat(),
    );
    let headers = std::fs::read_to_string(&headers)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (code, headers, text(&body))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_is_refused_and_the_listeners_own_names_are_answered() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_with(&[
        "--http-listen",
        &address,
        "--http-plaintext-loopback",
        "true",
        "--http-allowed-hosts",
        "profiler.example,proxy.example:8443",
    ])
    .await;
    let url = format!("http://{address}/api/processes?since=60");

    // A page of attacker.example whose name was pointed at this address
    // (DNS rebinding) names its own host.
    let (code, body) = curl(&url, &["-H", "Host: attacker.example:6071"]);
    let said = text(&body);
    assert_eq!(code, 421, "{said}");
    assert!(
        said.contains("not Host \"attacker.example:6071\"") && said.contains("http_allowed_hosts"),
        "{said}"
    );
    assert!(!said.contains("pid"), "{said}");
    for host in [
        "localhost.attacker.example",
        "proxy.example:8444",
        &format!("127.0.0.1:{}", port + 1),
    ] {
        let (code, body) = curl(&url, &["-H", &format!("Host: {host}")]);
        assert_eq!(code, 421, "{host}: {}", text(&body));
    }

    // Its own address, localhost and [::1] with its port, and the allowed
    // names.
    for host in [
        address.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "profiler.example".to_owned(),
        format!("Profiler.Example:{port}"),
        "proxy.example:8443".to_owned(),
    ] {
        let (code, body) = curl(&url, &["-H", &format!("Host: {host}")]);
        assert_eq!(code, 200, "{host}: {}", text(&body));
        assert!(text(&body).starts_with('['), "{host}: {}", text(&body));
    }
    let (code, body) = curl(&format!("http://localhost:{port}/api/timeline"), &[]);
    assert_eq!(code, 200, "{}", text(&body));

    // A name that is not a host is refused at start-up, naming the key.
    let output = Command::new(env!("CARGO_BIN_EXE_profilerd"))
        .args([
            "--http-allowed-hosts",
            "http://profiler.example/",
            "--socket",
        ])
        .arg(daemon.state_dir().join("other.sock"))
        .output()
        .expect("profilerd runs");
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("http_allowed_hosts") && stderr.contains("is not a host name"),
        "{stderr}"
    );
}

/// The headers every answer must carry, and what each must say.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("content-security-policy", "frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
];

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_the_security_headers() {
    let (_daemon, base) = daemon_over_http().await;
    for (path, host, status) in [
        ("/", None, 200),
        ("/ui/app.js", None, 200),
        ("/ui/d3-flamegraph.min.js", None, 200),
        ("/api/query?since=60", None, 200),
        ("/api/timeline", None, 200),
        ("/peeks", None, 200),
        ("/nowhere", None, 404),
        ("/api/query?since=ten", None, 400),
        ("/", Some("Host: attacker.example"), 421),
    ] {
        let extra: Vec<&str> = host.map(|host| vec!["-H", host]).unwrap_or_default();
        let (code, headers, body) = curl_with_headers(&format!("{base}{path}"), &extra);
        assert_eq!(code, status, "{path}: {body}");
        for (name, says) in SECURITY_HEADERS {
            let value = headers
                .iter()
                .find(|(header, _)| header == name)
                .map(|(_, value)| value.as_str())
                .unwrap_or_else(|| panic!("{path} has no {name}: {headers:?}"));
            assert!(value.contains(says), "{path}: {name}: {value}");
        }
        let policy = &headers
            .iter()
            .find(|(name, _)| name == "content-security-policy")
            .expect("a policy")
            .1;
        assert!(
            policy.contains("script-src 'self'") && !policy.contains("unsafe"),
            "{policy}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_parameters_and_far_times_get_short_400s_and_nothing_panics() {
    let (daemon, base) = daemon_over_http().await;
    // hyper refuses a request line over 64 KiB itself, with 414 and no
    // body; a parameter just under that reaches the routes.
    let (code, body) = curl(
        &format!("{base}/api/query?since=60&{}=1", "x".repeat(100_000)),
        &[],
    );
    assert_eq!(code, 414, "{}", text(&body));
    assert!(body.len() < 500, "{}", text(&body));
    let huge = "x".repeat(60_000);
    let far = "18446744073709551615";
    for (path, code, says) in [
        (
            format!("/api/query?since=60&{huge}=1"),
            400,
            "does not take the parameter \"xxxx",
        ),
        (
            format!("/api/query?since={huge}"),
            400,
            "is not a number of seconds",
        ),
        (
            format!("/profile?duration=1&pid={huge}"),
            400,
            "not a process id",
        ),
        (
            format!("/api/query?from={far}&to={far}"),
            400,
            "from 0 to 253402300799999",
        ),
        (
            "/api/processes?from=999000000000000&to=999000000001000".to_owned(),
            400,
            "from 0 to 253402300799999",
        ),
        (
            "/api/functions?from=1000&to=999900000000000".to_owned(),
            400,
            "to 253402300799999",
        ),
        (format!("/ui/{huge}"), 404, "has no file"),
    ] {
        let (got, body) = curl(&format!("{base}{path}"), &[]);
        let said = text(&body);
        let shown = &path[..path.len().min(80)];
        assert_eq!(got, code, "{shown}: {said}");
        assert!(said.contains(says), "{shown}: {said}");
        assert!(said.len() < 500, "{shown}: {} bytes: {said}", said.len());
        if path.contains(&huge) {
            assert!(said.contains("… (60000 bytes)"), "{shown}: {said}");
        }
    }
    // The listener still answers, and nothing panicked.
    let (code, _) = curl(&format!("{base}/api/query?since=60"), &[]);
    assert_eq!(code, 200);
    let log = daemon.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// The browser's headers as another site's page sends them are refused;
/// curl, which sends neither, is answered.
#[tokio::test(flavor = "multi_thread")]
async fn cross_site_headers_are_refused_and_tools_are_not() {
    let (_daemon, base) = daemon_over_http().await;
    let workload = Workload::start("split", &[]);
    let pid = workload.pid();
    for (method, path, headers, says) in [
        (
            "GET",
            format!("/profile_start?pid={pid}"),
            vec!["Sec-Fetch-Site: cross-site"],
            "Sec-Fetch-Site: \"cross-site\"",
        ),
        (
            "GET",
            format!("/debug/pprof/profile?seconds=1&pid={pid}"),
            vec!["Sec-Fetch-Site: same-site"],
            "Sec-Fetch-Site: \"same-site\"",
        ),
        (
            "POST",
            format!("/api/peek?pid={pid}"),
            vec!["Origin: http://localhost:8000", "X-Profilerd-Request: 1"],
            "a page of \"http://localhost:8000\"",
        ),
        (
            "POST",
            format!("/api/peek?pid={pid}"),
            vec!["Content-Type: application/x-www-form-urlencoded"],
            "needs the header X-Profilerd-Request: 1",
        ),
        (
            "GET",
            "/api/timeline".to_owned(),
            vec!["Sec-Fetch-Site: cross-site"],
            "only the listener's own pages may",
        ),
    ] {
        let mut extra = vec!["-X", method];
        for header in &headers {
            extra.extend(["-H", header]);
        }
        let (code, body) = curl(&format!("{base}{path}"), &extra);
        assert_eq!(code, 403, "{method} {path} {headers:?}: {}", text(&body));
        assert!(text(&body).contains(says), "{path}: {}", text(&body));
    }
    // A link from anywhere opens the page.
    let (code, _) = curl(&format!("{base}/"), &["-H", "Sec-Fetch-Site: cross-site"]);
    assert_eq!(code, 200);
    // The page's own peek, and curl's with the header.
    let (code, body) = curl(
        &format!("{base}/api/peek?pid={pid}"),
        &[
            "-X",
            "POST",
            "-H",
            "X-Profilerd-Request: 1",
            "-H",
            "Sec-Fetch-Site: same-origin",
            "-H",
            &format!("Origin: {base}"),
        ],
    );
    assert_eq!(code, 200, "{}", text(&body));
    let (code, body) = curl(&format!("{base}/profile_start?pid={pid}"), &[]);
    assert_eq!(code, 200, "{}", text(&body));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_sites_page_in_a_browser_starts_no_session_and_no_peek() {
    require_root();
    let (daemon, base) = daemon_over_http().await;
    let mut client = daemon.client().await;
    let sessions = |reply: v1::ListSessionsReply| reply.sessions.len();
    for browser in [Browser::Chromium, Browser::Firefox] {
        // A process of root's, as in the attack found.
        let workload = Workload::start("split", &[]);
        let pid = workload.pid();
        let seen = drive_browser(
            browser,
            "crossSite",
            serde_json::json!({ "daemon": base, "pid": pid }),
        )
        .await;
        // Every request reached the daemon; those the browser let the page
        // see were refused (the others it blocked itself, as the daemon's
        // Cross-Origin-Resource-Policy and frame-ancestors say).
        let requests = seen["daemonRequests"].as_array().expect("the requests");
        assert!(requests.len() >= 6, "{browser:?}: {requests:?}");
        for answer in seen["daemonAnswers"].as_array().expect("the answers") {
            assert_eq!(answer[1], 403, "{browser:?}: {answer}");
        }
        let open = client
            .list_sessions(v1::ListSessionsRequest::default())
            .await
            .expect("ListSessions")
            .into_inner();
        assert_eq!(sessions(open), 0, "{browser:?} opened a session");
        assert!(
            peeks_of(&mut client, pid).await.is_empty(),
            "{browser:?} made a peek at {pid}"
        );

        // The same address without a browser's headers would have started one.
        let (code, body) = curl(&format!("{base}/profile_start?pid={pid}"), &[]);
        assert_eq!(code, 200, "{}", text(&body));
        let open = client
            .list_sessions(v1::ListSessionsRequest::default())
            .await
            .expect("ListSessions")
            .into_inner();
        assert_eq!(sessions(open), 1);
        let (code, body) = curl(&format!("{base}/profile_stop"), &[]);
        assert_eq!(code, 200, "{}", text(&body));
    }
}
