//! Pushing to Grafana Pyroscope: a receiver of the test's own takes
//! `push.v1.PusherService/Push` as Pyroscope does and decodes what comes
//! with the types generated from Pyroscope's push.proto; every window is
//! pushed once, with the labels, headers and profile type Pyroscope needs;
//! retryable errors are retried and counted.

use std::{
    io::Read as _,
    sync::{Arc, Mutex},
};

use axum::{
    body::Bytes,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use profilerd::proto::pyroscope::push::v1::PushRequest;
use profilerd_client::{pprof, v1};
use prost::Message as _;

use crate::{
    remote::free_port,
    support::{Daemon, PATIENCE, Workload, eventually},
};

/// What the receiver took: each request's headers and body.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(HeaderMap, PushRequest)>>>);

/// A Pyroscope stand-in on a loopback port that answers 503 to its first
/// `refuse` requests.
async fn receiver(refuse: usize) -> (String, Received) {
    receiver_on(free_port(), refuse).await
}

/// The same, on `port`.
async fn receiver_on(port: u16, refuse: usize) -> (String, Received) {
    let received = Received::default();
    let answered = Arc::new(Mutex::new(0_usize));
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/push.v1.PusherService/Push",
        post(move |headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            let answered = answered.clone();
            async move {
                let mut answered = answered.lock().unwrap();
                *answered += 1;
                if *answered <= refuse {
                    return (StatusCode::SERVICE_UNAVAILABLE, "try later".to_owned());
                }
                match PushRequest::decode(body) {
                    Ok(request) => {
                        kept.0.lock().unwrap().push((headers, request));
                        (StatusCode::OK, "{}".to_owned())
                    }
                    Err(err) => (StatusCode::BAD_REQUEST, err.to_string()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the receiver listens");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://127.0.0.1:{port}"), received)
}

fn label<'a>(
    series: &'a profilerd::proto::pyroscope::push::v1::RawProfileSeries,
    name: &str,
) -> Option<&'a str> {
    series
        .labels
        .iter()
        .find(|pair| pair.name == name)
        .map(|pair| pair.value.as_str())
}

fn decode_pprof(bytes: &[u8]) -> pprof::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("gzipped");
    pprof::Profile::decode(raw.as_slice()).expect("a profile.proto")
}

/// CPU time of a process so far, in nanoseconds (`/proc/PID/schedstat`).
fn cpu_nanos(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The CPU time pushed for `service`, in nanoseconds, over every request.
fn pushed_cpu_of(received: &Received, service: &str) -> i64 {
    received
        .0
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, request)| request.series.clone())
        .filter(|series| label(series, "service_name") == Some(service))
        .map(|series| {
            decode_pprof(&series.samples[0].raw_profile)
                .sample
                .iter()
                .map(|sample| sample.value[1])
                .sum::<i64>()
        })
        .sum()
}

/// What was pushed of a process is its CPU time up to the last window's
/// end: each window once, the last at most 1 s before `used` was read.
fn assert_pushed_once(pushed: i64, used: i64, context: &str) {
    assert!(
        pushed <= used + used / 20 && pushed >= used - 1_300_000_000,
        "pushed {pushed} ns of CPU, the process used {used} ns; {context}"
    );
}

async fn daemon_pushing_to(url: &str, dir: &std::path::Path) -> Daemon {
    let password = dir.join("password");
    std::fs::write(&password, "s3cret\n").expect("written");
    let config = dir.join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\npush_labels = {{ env = \"test\" }}\n\
             push_service_name = [\"comm\"]\n\n[[push]]\nkind = \"pyroscope\"\nurl = \"{url}\"\n\
             tenant = \"team-a\"\nbasic_auth_user = \"profiler\"\n\
             basic_auth_password_file = \"{}\"\nheaders = {{ \"X-Source\" = \"test\" }}\n",
            password.display()
        ),
    )
    .expect("written");
    Daemon::start_with(&["--config", &config.display().to_string()]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_window_goes_to_pyroscope_once_with_its_labels_and_type() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (url, received) = receiver(0).await;
    let _daemon = daemon_pushing_to(&url, dir.path()).await;
    // A command name of its own: the machine's other processes are pushed
    // too, each under its own.
    let workload = Workload::start_as("split", "pushed-split", &[]);
    // Windows of the workload: four of them pushed.
    eventually("four pushes", PATIENCE, async || {
        match received.0.lock().unwrap().len() {
            pushes if pushes >= 4 => Ok(()),
            pushes => Err(format!("{pushes} pushes")),
        }
    })
    .await;
    let used = cpu_nanos(workload.pid());
    let requests = received.0.lock().unwrap().clone();

    let mut pushed_cpu = 0_i64;
    let mut functions = std::collections::BTreeSet::new();
    for (headers, request) in &requests {
        assert_eq!(headers["content-type"], "application/proto");
        assert_eq!(headers["x-scope-orgid"], "team-a");
        assert_eq!(headers["x-source"], "test");
        // base64("profiler:s3cret")
        assert_eq!(headers["authorization"], "Basic cHJvZmlsZXI6czNjcmV0");
        for series in &request.series {
            assert_eq!(label(series, "__name__"), Some("process_cpu"));
            assert!(label(series, "hostname").is_some_and(|host| !host.is_empty()));
            assert_eq!(label(series, "env"), Some("test"));
            assert_eq!(series.samples.len(), 1);
            if label(series, "service_name") != Some("pushed-split") {
                continue;
            }
            let profile = decode_pprof(&series.samples[0].raw_profile);
            let string = |index: i64| profile.string_table[index as usize].as_str();
            let types: Vec<(&str, &str)> = profile
                .sample_type
                .iter()
                .map(|kind| (string(kind.r#type), string(kind.unit)))
                .collect();
            assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
            let period = profile.period_type.as_ref().expect("a period type");
            assert_eq!(
                (string(period.r#type), string(period.unit)),
                ("cpu", "nanoseconds")
            );
            assert_eq!(profile.period, 1_000_000_000 / 499);
            pushed_cpu += profile
                .sample
                .iter()
                .map(|sample| sample.value[1])
                .sum::<i64>();
            functions.extend(
                profile
                    .function
                    .iter()
                    .map(|function| string(function.name).to_owned()),
            );
        }
    }
    for function in ["main", "common", "hot", "cold", "spin"] {
        assert!(
            functions.contains(function),
            "{function} not pushed: {functions:?}"
        );
    }
    assert_pushed_once(pushed_cpu, used as i64, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_that_is_down_is_retried_and_counted() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (url, received) = receiver(2).await;
    let daemon = daemon_pushing_to(&url, dir.path()).await;
    let _workload = Workload::start("split", &[]);
    let status = eventually("two payloads sent", PATIENCE, async || {
        let status = daemon
            .status()
            .await
            .push
            .first()
            .cloned()
            .expect("the push target in the status");
        if status.sent >= 2 {
            Ok(status)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    assert_eq!(status.name, "pyroscope");
    assert_eq!(status.kind, "pyroscope");
    assert!(status.sent >= 2, "{status:?}");
    assert!(status.last_success_unix_ms > 0, "{status:?}");
    assert_eq!(status.dropped, 0, "{status:?}");
    let failed: u64 = status
        .failures
        .iter()
        .filter(|failure| failure.cause == "http_503")
        .map(|failure| failure.count)
        .sum();
    assert_eq!(failed, 2, "{status:?}");
    // The refused payload was sent again, not lost: the first window came.
    assert!(received.0.lock().unwrap().len() as u64 >= status.sent);
    let metrics = daemon
        .client()
        .await
        .get_status(v1::GetStatusRequest { metrics: true })
        .await
        .expect("GetStatus")
        .into_inner()
        .metrics;
    assert!(
        metrics
            .contains("profilerd_push_failures_total{target=\"pyroscope\",cause=\"http_503\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_applies_push_settings_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("profilerd.toml");
    std::fs::write(&config, "frequency_hz = 499\n").expect("written");
    let daemon = Daemon::start_with(&["--config", &config.display().to_string()]).await;
    let targets = || async {
        daemon
            .client()
            .await
            .get_status(v1::GetStatusRequest::default())
            .await
            .expect("GetStatus")
            .into_inner()
            .push
    };
    assert!(targets().await.is_empty());

    let (url, received) = receiver(0).await;
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\n\n[[push]]\nkind = \"pyroscope\"\n\
             name = \"central\"\nurl = \"{url}\"\n"
        ),
    )
    .expect("written");
    crate::reload::reload(&daemon, "configuration reloaded").await;
    let now = targets().await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].name, "central");
    eventually("a push after the reload", PATIENCE, async || {
        if received.0.lock().unwrap().is_empty() {
            Err("nothing pushed")
        } else {
            Ok(())
        }
    })
    .await;

    // A password file that cannot be read: refused, the target stays.
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\n\n[[push]]\nkind = \"pyroscope\"\n\
             name = \"other\"\nurl = \"{url}\"\nbasic_auth_user = \"u\"\n\
             basic_auth_password_file = \"/nonexistent/password\"\n"
        ),
    )
    .expect("written");
    crate::reload::reload(&daemon, "could not be applied").await;
    assert!(
        daemon.log().contains("/nonexistent/password"),
        "{}",
        daemon.log()
    );
    let now = targets().await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].name, "central");
}

/// An OTLP receiver made of PyPI's opentelemetry-proto and grpcio, which
/// writes each request it takes as a line of JSON to `output`.
fn otlp_receiver(port: u16, output: &std::path::Path, tls: &[&str]) -> KillOnDrop {
    let python = std::env::var("PROFILERD_TEST_PYTHON").expect(
        "PROFILERD_TEST_PYTHON names a Python with grpcio and opentelemetry-proto: run the \
         tests with `cargo xtask test`, which sets it up",
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/otlp_receiver.py"
    );
    let mut child = std::process::Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .arg(output)
        .args(tls)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the OTLP receiver starts");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("its stdout")),
        &mut ready,
    )
    .expect("the receiver says it is ready");
    assert_eq!(ready.trim(), "ready");
    KillOnDrop(child)
}

/// Kills the child when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn otlp_profiles_decode_with_opentelemetrys_own_classes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = dir.path().join("received.jsonl");
    let port = free_port();
    let _receiver = otlp_receiver(port, &output, &[]);
    let config = dir.path().join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\npush_service_name = [\"comm\"]\n\n\
             [[push]]\nkind = \"otlp\"\nurl = \"http://127.0.0.1:{port}\"\ntenant = \"team-a\"\n"
        ),
    )
    .expect("written");
    let _daemon = Daemon::start_with(&["--config", &config.display().to_string()]).await;
    let workload = Workload::start_as("split", "otlp-split", &[]);
    // Windows of the workload: three of them received.
    eventually("three requests", PATIENCE, async || {
        let text = std::fs::read_to_string(&output).unwrap_or_default();
        match text.lines().count() {
            requests if requests >= 3 => Ok(()),
            requests => Err(format!("{requests} requests")),
        }
    })
    .await;
    let used = cpu_nanos(workload.pid()) as i64;
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    let requests: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert!(requests.len() >= 3, "{} requests:\n{text}", requests.len());

    let number = |value: &serde_json::Value| -> i64 {
        value
            .as_str()
            .and_then(|text| text.parse().ok())
            .or_else(|| value.as_i64())
            .unwrap_or(0)
    };
    let mut pushed_cpu = 0;
    let mut chains = std::collections::BTreeSet::new();
    for received in &requests {
        assert_eq!(received["metadata"]["x-scope-orgid"], "team-a");
        let request = &received["request"];
        let dictionary = &request["dictionary"];
        // Entry 0 of every table is the empty value.
        assert_eq!(dictionary["stringTable"][0], "");
        for table in [
            "mappingTable",
            "locationTable",
            "functionTable",
            "linkTable",
            "attributeTable",
            "stackTable",
        ] {
            assert_eq!(dictionary[table][0], serde_json::json!({}), "{table}");
        }
        let string = |index: &serde_json::Value| {
            dictionary["stringTable"][number(index) as usize]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        for resource in request["resourceProfiles"].as_array().expect("resources") {
            let attribute = |key: &str| {
                resource["resource"]["attributes"]
                    .as_array()
                    .and_then(|attributes| attributes.iter().find(|kv| kv["key"] == key))
                    .map(|kv| kv["value"].clone())
                    .unwrap_or_default()
            };
            assert!(
                attribute("host.name")["stringValue"]
                    .as_str()
                    .is_some_and(|host| !host.is_empty())
            );
            if attribute("process.executable.name")["stringValue"] != "otlp-split" {
                continue;
            }
            assert_eq!(
                number(&attribute("process.pid")["intValue"]),
                i64::from(workload.pid())
            );
            assert_eq!(attribute("service.name")["stringValue"], "otlp-split");
            assert!(
                attribute("process.executable.path")["stringValue"]
                    .as_str()
                    .is_some_and(|path| path.ends_with("/otlp-split")),
                "{resource}"
            );
            let profile = &resource["scopeProfiles"][0]["profiles"][0];
            assert_eq!(string(&profile["sampleType"]["typeStrindex"]), "cpu");
            assert_eq!(
                string(&profile["sampleType"]["unitStrindex"]),
                "nanoseconds"
            );
            assert_eq!(number(&profile["period"]), 1_000_000_000 / 499);
            for sample in profile["samples"].as_array().expect("samples") {
                pushed_cpu += number(&sample["values"][0]);
                let thread_id = sample["attributeIndices"]
                    .as_array()
                    .expect("attributes")
                    .iter()
                    .map(|index| &dictionary["attributeTable"][number(index) as usize])
                    .find(|attribute| string(&attribute["keyStrindex"]) == "thread.id")
                    .map(|attribute| number(&attribute["value"]["intValue"]));
                assert_eq!(thread_id, Some(i64::from(workload.pid())));
                // The stack, leaf first; each location's lines innermost first.
                let stack = &dictionary["stackTable"][number(&sample["stackIndex"]) as usize];
                let functions: Vec<String> = stack["locationIndices"]
                    .as_array()
                    .expect("locations")
                    .iter()
                    .flat_map(|location| {
                        dictionary["locationTable"][number(location) as usize]["lines"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .map(|line| {
                        let function =
                            &dictionary["functionTable"][number(&line["functionIndex"]) as usize];
                        string(&function["nameStrindex"])
                    })
                    .collect();
                chains.insert(functions.join(" <- "));
            }
        }
    }
    // The workload's known chains, every frame, leaf first.
    for chain in [
        "spin <- hot_loop <- hot <- common <- main",
        "spin <- cold <- common <- main",
    ] {
        assert!(
            chains.iter().any(|seen| seen.starts_with(chain)),
            "no stack starts {chain:?}: {chains:#?}"
        );
    }
    assert_pushed_once(pushed_cpu, used, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn windows_wait_in_the_queue_and_spool_while_pyroscope_is_down() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_port();
    let config = dir.path().join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\npush_service_name = [\"comm\"]\n\n\
             [[push]]\nkind = \"pyroscope\"\nurl = \"http://127.0.0.1:{port}\"\n\
             queue_bytes = \"16 KiB\"\nspool_bytes = \"16 MiB\"\n"
        ),
    )
    .expect("written");
    let daemon = Daemon::start_with(&["--config", &config.display().to_string()]).await;
    let workload = Workload::start_as("split", "spooled-split", &[]);
    let status = || async {
        daemon
            .client()
            .await
            .get_status(v1::GetStatusRequest::default())
            .await
            .expect("GetStatus")
            .into_inner()
            .push
            .first()
            .cloned()
            .expect("the push target in the status")
    };
    // Down for windows: they wait, queued and (windows of several KiB
    // each; the queue holds a few) the rest on disk.
    let down = eventually(
        "four windows waiting, some on disk",
        PATIENCE,
        async || match status().await {
            down if down.queued + down.spooled >= 4 && down.spooled > 0 => Ok(down),
            down => Err(format!("{down:?}")),
        },
    )
    .await;
    assert_eq!(down.sent, 0, "{down:?}");
    assert!(
        down.failures
            .iter()
            .any(|failure| failure.cause == "connect"),
        "{down:?}"
    );
    let spooled = std::fs::read_dir(daemon.state_dir().join("push-spool/pyroscope"))
        .map(|files| files.count())
        .unwrap_or(0);
    assert_eq!(spooled as u64, down.spooled, "{down:?}");
    // Up again: everything goes, nothing lost or sent twice.
    let (_, received) = receiver_on(port, 0).await;
    let up = eventually(
        "everything waiting is sent",
        PATIENCE,
        async || match status().await {
            up if up.sent >= down.queued + down.spooled && up.queued == 0 && up.spooled == 0 => {
                Ok(up)
            }
            up => Err(format!("{up:?}")),
        },
    )
    .await;
    assert_eq!((up.queued, up.spooled, up.dropped), (0, 0, 0), "{up:?}");
    let used = cpu_nanos(workload.pid()) as i64;
    let pushed = pushed_cpu_of(&received, "spooled-split");
    assert_pushed_once(pushed, used, &format!("{up:?}"));
}

/// A Pyroscope stand-in over TLS that lets in only clients with a
/// certificate of `clients`, and keeps each request's headers and body.
async fn tls_receiver(server_cert: &str, server_key: &str, clients_ca: &str) -> (u16, Received) {
    use tokio_rustls::rustls::{
        self, RootCertStore, ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
        server::WebPkiClientVerifier,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(clients_ca.as_bytes()) {
        roots.add(ca.expect("a CA certificate")).expect("added");
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("a client verifier");
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            CertificateDer::pem_slice_iter(server_cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("a certificate"),
            PrivateKeyDer::from_pem_slice(server_key.as_bytes()).expect("a key"),
        )
        .expect("a server configuration");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let received = Received::default();
    let kept = received.clone();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("the receiver listens");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, kept) = (acceptor.clone(), kept.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move {
                            use http_body_util::BodyExt as _;
                            let headers = request.headers().clone();
                            let body = request.into_body().collect().await?.to_bytes();
                            if let Ok(push) = PushRequest::decode(body) {
                                kept.0.lock().unwrap().push((headers, push));
                            }
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(
                                hyper::body::Bytes::from_static(b"{}"),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (port, received)
}

#[tokio::test(flavor = "multi_thread")]
async fn pushes_over_tls_with_a_client_certificate_and_a_bearer_token() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    };
    let servers = crate::remote::Authority::new("pyroscope test servers");
    let clients = crate::remote::Authority::new("pyroscope test clients");
    let (server_cert, server_key) = servers.issue(&["localhost"]);
    let (client_cert, client_key) = clients.issue(&["profilerd"]);
    let (port, received) = tls_receiver(&server_cert, &server_key, &clients.pem()).await;
    let config = dir.path().join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\n\n[[push]]\nkind = \"pyroscope\"\n\
             url = \"https://localhost:{port}\"\nca_file = \"{}\"\nclient_cert = \"{}\"\n\
             client_key = \"{}\"\nbearer_token_file = \"{}\"\n",
            write("servers.pem", &servers.pem()),
            write("client.pem", &client_cert),
            write("client.key", &client_key),
            write("token", "t0ken\n"),
        ),
    )
    .expect("written");
    let _daemon = Daemon::start_with(&["--config", &config.display().to_string()]).await;
    eventually("a push over TLS", PATIENCE, async || {
        if received.0.lock().unwrap().is_empty() {
            Err("nothing pushed")
        } else {
            Ok(())
        }
    })
    .await;
    let requests = received.0.lock().unwrap().clone();
    let (headers, request) = requests.first().expect("a push over TLS");
    assert_eq!(headers["authorization"], "Bearer t0ken");
    assert!(!request.series.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn otlp_goes_over_tls_to_a_collector_of_the_configured_ca() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    };
    let servers = crate::remote::Authority::new("collector test servers");
    let (server_cert, server_key) = servers.issue(&["localhost"]);
    let (cert, key) = (
        write("server.pem", &server_cert),
        write("server.key", &server_key),
    );
    let output = dir.path().join("received.jsonl");
    let port = free_port();
    let _receiver = otlp_receiver(port, &output, &[&cert, &key]);
    let config = dir.path().join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "frequency_hz = 499\npush_interval = \"1s\"\n\n[[push]]\nkind = \"otlp\"\n\
             url = \"https://localhost:{port}\"\nca_file = \"{}\"\nheaders = {{ \"x-source\" = \"test\" }}\n",
            write("servers.pem", &servers.pem())
        ),
    )
    .expect("written");
    let _daemon = Daemon::start_with(&["--config", &config.display().to_string()]).await;
    let text = eventually(
        "a request over TLS",
        PATIENCE,
        async || match std::fs::read_to_string(&output).unwrap_or_default() {
            text if text.contains('\n') => Ok(text),
            _ => Err("nothing received"),
        },
    )
    .await;
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a request over TLS")).expect("JSON");
    assert_eq!(first["metadata"]["x-source"], "test");
    assert!(
        first["request"]["resourceProfiles"]
            .as_array()
            .is_some_and(|resources| !resources.is_empty())
    );
}
