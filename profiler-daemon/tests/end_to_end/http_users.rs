//! Plaintext loopback HTTP (and gRPC over plaintext loopback TCP) answers
//! each local user as the Unix socket does: `nobody`, running curl, sees
//! its own processes and is refused root's and the whole machine's with the
//! socket's own words, cannot read the timeline, cannot stop root's
//! session, and cannot take the sessions kept for root.

use std::process::Stdio;

use crate::{
    http::{curl, daemon_over_http},
    support::{User, Workload, error_of},
};

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

/// What curl run as `user` got: the status code and the body.
async fn curl_as(user: &User, url: &str) -> (u16, String) {
    let mut command = user.command("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "60"])
        // The body on stdout, the status on stderr.
        .args(["--write-out", "%{stderr}%{http_code}"])
        .arg(url)
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output().expect("setpriv runs curl"))
        .await
        .expect("curl finishes");
    let stderr = text(&output.stderr);
    let code = stderr
        .trim()
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("curl printed no status: {stderr}"));
    (code, text(&output.stdout))
}

#[tokio::test(flavor = "multi_thread")]
async fn nobody_over_loopback_http_sees_what_it_sees_on_the_socket() {
    let (daemon, base) = daemon_over_http().await;
    let nobody = User::nobody(&daemon);
    let own = nobody.start("split", &[]);
    let roots = Workload::start("split", &[]);

    // Its own process.
    let (code, body) = curl_as(
        &nobody,
        &format!("{base}/profile?duration=1&pprof=false&pid={}", own.pid()),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("; hot"), "{body}");

    // Root's process and the whole machine: refused in the socket's words.
    let root_pid = roots.pid().to_string();
    for (path, args) in [
        (
            format!("/profile?duration=1&pid={root_pid}"),
            vec!["profile", "--pid", &root_pid, "--duration", "1s"],
        ),
        (
            "/profile?duration=1".to_owned(),
            vec!["profile", "--duration", "1s"],
        ),
        (
            format!("/debug/pprof/heap?seconds=1&pid={root_pid}"),
            vec!["allocs", "--pid", &root_pid, "--duration", "1s"],
        ),
    ] {
        let (code, body) = curl_as(&nobody, &format!("{base}{path}")).await;
        assert_eq!(code, 403, "{path}: {body}");
        let refused = body.trim();
        assert!(
            refused.starts_with("permission denied"),
            "{path}: {refused}"
        );
        let over_socket = error_of(&nobody.profilerctl(&daemon.socket, &args).await);
        assert!(
            over_socket.contains(refused),
            "{path}: HTTP said {refused:?}, the socket {over_socket:?}"
        );
    }
    for path in [
        "/api/processes?since=60".to_owned(),
        format!("/api/query?since=60&pid={}", roots.pid()),
        "/api/query?since=60".to_owned(),
    ] {
        let (code, body) = curl_as(&nobody, &format!("{base}{path}")).await;
        assert_eq!(code, 403, "{path}: {body}");
        assert!(body.starts_with("permission denied"), "{path}: {body}");
    }
    // Its own process's past, without root's.
    let (code, body) = curl_as(
        &nobody,
        &format!(
            "{base}/api/processes?since=60&pid={},{}",
            own.pid(),
            roots.pid()
        ),
    )
    .await;
    assert_eq!(code, 403, "{body}");

    // The timeline is root's and the admin group's, as documented.
    let (code, body) = curl_as(&nobody, &format!("{base}/api/timeline")).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("only root and the admin group may read it"),
        "{body}"
    );
    let (code, body) = curl(&format!("{base}/api/timeline"), &[]);
    assert_eq!(code, 200, "root: {}", text(&body));
}

#[tokio::test(flavor = "multi_thread")]
async fn loopback_http_sessions_belong_to_their_user() {
    // Four sessions: one of them kept for root and the admin group.
    let (daemon, base) = crate::http::daemon_over_http_with(&["--max-sessions", "4"]).await;
    let nobody = User::nobody(&daemon);
    let own = nobody.start("split", &[]);
    let start = format!("{base}/profile_start?pid={}", own.pid());

    // nobody fills what users may hold: three, not the fourth.
    for _ in 0..3 {
        let (code, body) = curl_as(&nobody, &start).await;
        assert_eq!(code, 200, "{body}");
    }
    let (code, body) = curl_as(&nobody, &start).await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("kept for root and the admin group"), "{body}");

    // Root still gets one, over HTTP too.
    let (code, body) = curl(&start, &[]);
    let said = text(&body);
    assert_eq!(code, 200, "{said}");
    let roots = said
        .split("/profile_stop?id=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the session's id")
        .to_owned();

    // nobody cannot stop it; its /profile_stop stops its own last.
    let (code, body) = curl_as(&nobody, &format!("{base}/profile_stop?id={roots}")).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("belongs to another caller"), "{body}");
    let (code, body) = curl_as(&nobody, &format!("{base}/profile_stop?pprof=false")).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = curl(&format!("{base}/profile_stop?pprof=false"), &[]);
    assert_eq!(code, 200, "root's own: {}", text(&body));
    let (code, body) = curl(&format!("{base}/profile_stop?id={roots}"), &[]);
    assert_eq!(code, 404, "stopped once: {}", text(&body));
}

/// The gRPC status a unary call over plaintext loopback TCP got, made with
/// curl (HTTP/2 without TLS) as `user`: `method` with `request` as its
/// message.
async fn grpc_as(
    user: Option<&User>,
    port: u16,
    method: &str,
    request: &impl prost::Message,
) -> (u32, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("a temporary directory");
    // curl, run as the user, writes the headers there.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("the directory is opened");
    // A gRPC message: not compressed, its length, its bytes.
    let message = request.encode_to_vec();
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let body = dir.path().join("request");
    std::fs::write(&body, frame).expect("the request is written");
    let headers = dir.path().join("headers");
    let mut command = match user {
        Some(user) => user.command("curl"),
        None => std::process::Command::new("curl"),
    };
    command
        .args(["--silent", "--show-error", "--max-time", "60"])
        .args(["--http2-prior-knowledge", "--output", "/dev/null"])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg("--dump-header")
        .arg(&headers)
        .arg(format!(
            "http://127.0.0.1:{port}/profilerd.v1.Profiler/{method}"
        ))
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output().expect("curl runs"))
        .await
        .expect("curl finishes");
    // grpc-status comes in the headers (an error alone) or the trailers;
    // curl writes both.
    let dumped = std::fs::read_to_string(&headers).unwrap_or_default();
    let field = |name: &str| {
        dumped.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    let status = field("grpc-status")
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no grpc-status: {dumped}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let message = field("grpc-message").unwrap_or_default();
    (status, message)
}

#[tokio::test(flavor = "multi_thread")]
async fn plaintext_loopback_grpc_answers_each_local_user_as_the_socket_does() {
    use profilerd_client::v1;
    let port = crate::remote::free_port();
    let address = format!("127.0.0.1:{port}");
    let daemon = crate::support::Daemon::start_with(&[
        "--tcp-listen",
        &address,
        "--tcp-plaintext-loopback",
        "true",
    ])
    .await;
    let nobody = User::nobody(&daemon);
    let own = nobody.start("split", &[]);
    let window = |pids: Vec<u32>| {
        let end = crate::support::unix_nanos();
        v1::QueryRequest {
            start_unix_nanos: end - 5_000_000_000,
            end_unix_nanos: end,
            selector: Some(v1::Selector {
                pids,
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    // Its own once setpriv has exec'd it; the window held once the daemon
    // has drained.
    own.wait_until_running().await;
    crate::support::eventually("a drain", crate::support::PATIENCE, async || {
        match daemon.status().await.drains {
            0 => Err("no drain yet"),
            _ => Ok(()),
        }
    })
    .await;
    // Its own process: answered.
    let (code, message) = grpc_as(Some(&nobody), port, "Query", &window(vec![own.pid()])).await;
    assert_eq!(code, 0, "{message}");
    // The whole machine: refused, as on the socket (PERMISSION_DENIED).
    let (code, message) = grpc_as(Some(&nobody), port, "Query", &window(Vec::new())).await;
    assert_eq!(code, 7, "{message}");
    assert!(
        message.contains("may%20only%20profile%20its%20own%20processes")
            || message.contains("may only profile its own processes"),
        "{message}"
    );
    // Root sees everything over the same listener.
    let (code, message) = grpc_as(None, port, "Query", &window(Vec::new())).await;
    assert_eq!(code, 0, "{message}");
}
