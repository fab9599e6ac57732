//! Self-metrics in the Prometheus text formats, through GetStatus and the
//! optional HTTP listener: OpenMetrics when the scraper asks for it, else
//! Prometheus' text format 0.0.4, each checked line by line against its
//! format's rules (a small parser here: promtool is not installed).

use std::{io::Read as _, io::Write as _, time::Duration};

use profilerd_client::v1;

use crate::support::Daemon;

/// The value of the sample line that starts with `prefix` (name and labels).
fn value(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(prefix) && line[prefix.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
}

/// GET http://`address`/metrics with a plain HTTP/1.1 request, with
/// `headers` (each `Name: value`); the whole response.
fn scrape(address: &str, headers: &[&str]) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("the metrics listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    let headers: String = headers
        .iter()
        .map(|header| format!("{header}\r\n"))
        .collect();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{headers}\r\n"
    )
    .expect("the request is sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("the response");
    response
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_samples_and_rpcs_by_method_and_code() {
    // A port of its own: the test's pid keeps parallel runs apart.
    let address = format!("127.0.0.1:{}", 20_000 + std::process::id() % 20_000);
    let daemon = Daemon::start_with(&["--metrics-listen", &address]).await;
    let mut client = daemon.client().await;
    // Samples taken, and drained.
    crate::support::eventually(
        "samples and a drain",
        crate::support::PATIENCE,
        async || match daemon.status().await {
            status if status.samples_taken > 0 && status.drains >= 1 => Ok(()),
            status => Err(format!(
                "{} samples, {} drains",
                status.samples_taken, status.drains
            )),
        },
    )
    .await;
    let missing = client
        .get_peek(v1::GetPeekRequest {
            id: "no-such-peek".into(),
        })
        .await
        .expect_err("no such peek");
    assert_eq!(missing.code(), tonic::Code::NotFound);

    let text = client
        .get_status(v1::GetStatusRequest { metrics: true })
        .await
        .expect("GetStatus")
        .into_inner()
        .metrics;
    assert!(value(&text, "profilerd_samples_total") > 0.0, "{text}");
    assert!(value(&text, "profilerd_drains_total") >= 1.0, "{text}");
    assert!(value(&text, "profilerd_store_limit_bytes") > 0.0, "{text}");
    assert_eq!(
        value(
            &text,
            "profilerd_samples_lost_total{cause=\"counts_map_full\"}"
        ),
        0.0
    );
    assert_eq!(
        value(
            &text,
            "profilerd_rpcs_total{method=\"GetPeek\",code=\"NOT_FOUND\"}"
        ),
        1.0,
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    let plain = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus")
        .into_inner();
    assert!(plain.metrics.is_empty(), "metrics only when asked for");

    let scraped = |headers: &'static [&'static str]| {
        let address = address.clone();
        tokio::task::spawn_blocking(move || scrape(&address, headers))
    };
    // Prometheus' own Accept header: OpenMetrics.
    let response = scraped(&[
        "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
         version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    ])
    .await
    .expect("scraped");
    let openmetrics = body_of(&response, "application/openmetrics-text; version=1.0.0");
    check_openmetrics(openmetrics);
    // The GetStatus calls above are counted by now.
    assert!(
        value(
            openmetrics,
            "profilerd_rpcs_total{method=\"GetStatus\",code=\"OK\"}"
        ) >= 2.0,
        "{openmetrics}"
    );
    check_process_and_build(openmetrics);

    // Prometheus told to scrape the 0.0.4 format, and curl (no Accept):
    // 0.0.4.
    for headers in [&["Accept: text/plain;version=0.0.4"][..], &[]] {
        let response = scraped(headers).await.expect("scraped");
        let text = body_of(&response, "text/plain; version=0.0.4");
        check_text_004(text);
        check_process_and_build(text);
        assert!(
            value(
                text,
                "profilerd_rpcs_total{method=\"GetStatus\",code=\"OK\"}"
            ) >= 2.0,
            "{text}"
        );
        assert!(
            text.contains("# TYPE profilerd_samples_total counter\n"),
            "{text}"
        );
    }
}

/// The body of a 200 response whose Content-Type starts with `content_type`.
fn body_of<'a>(response: &'a str, content_type: &str) -> &'a str {
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let got = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then_some(value.trim())
        })
        .unwrap_or_else(|| panic!("no Content-Type: {head}"));
    assert!(got.starts_with(content_type), "{got}, not {content_type}");
    assert!(got.ends_with("charset=utf-8"), "{got}");
    body
}

/// The daemon's own process figures and its build, in either format.
fn check_process_and_build(text: &str) {
    let resident = value(text, "process_resident_memory_bytes");
    assert!(resident > 1e6, "{text}");
    assert!(
        value(text, "process_virtual_memory_bytes") >= resident,
        "{text}"
    );
    assert!(value(text, "process_cpu_seconds_total") > 0.0, "{text}");
    let open = value(text, "process_open_fds");
    assert!(open >= 3.0, "{text}");
    assert!(value(text, "process_max_fds") >= open, "{text}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let started = value(text, "process_start_time_seconds");
    assert!(
        started <= now && started > now - 3600.0,
        "started at {started}, now {now}"
    );
    let build = format!(
        "profilerd_build_info{{version=\"{}\",arch=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    assert_eq!(value(text, &build), 1.0, "{text}");
}

/// A sample line's metric name and the value after its labels.
fn sample_of(line: &str) -> (&str, &str) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let rest = match line[name_end..].starts_with('{') {
        // Our label values hold no `}`.
        true => &line[line.find('}').expect("labels end") + 1..],
        false => &line[name_end..],
    };
    (&line[..name_end], rest.trim())
}

fn is_number(text: &str) -> bool {
    text.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&text)
}

/// Prometheus' text format 0.0.4: no `# EOF` nor `# UNIT`; each family
/// declared once by `# HELP` then `# TYPE` of one name (a counter's ends
/// in `_total`), its samples of that very name, each a number.
fn check_text_004(text: &str) {
    let mut declared = std::collections::HashSet::new();
    let mut family: Option<(&str, &str)> = None;
    let mut help: Option<&str> = None;
    assert!(!text.is_empty());
    for line in text.lines() {
        assert!(
            !line.starts_with("# EOF") && !line.starts_with("# UNIT"),
            "{line}"
        );
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split(' ').next().expect("a name"));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a name and a type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert_eq!(
                help.take(),
                Some(name),
                "no # HELP {name} just before {line}"
            );
            assert!(declared.insert(name), "{name} declared twice");
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
            family = Some((name, kind));
        } else {
            assert!(!line.starts_with('#'), "{line}");
            let (name, value) = sample_of(line);
            let (family, kind) = family.unwrap_or_else(|| panic!("{line} before any # TYPE"));
            match kind {
                "histogram" | "summary" => assert!(name.starts_with(family), "{line}"),
                _ => assert_eq!(name, family, "{line} in the family {family}"),
            }
            assert!(is_number(value), "{line}");
        }
    }
}

/// OpenMetrics: `# EOF` last; a family's `# TYPE` names it (a counter's
/// without `_total`), its samples its name with the type's suffix.
fn check_openmetrics(text: &str) {
    let body = text
        .strip_suffix("# EOF\n")
        .unwrap_or_else(|| panic!("no # EOF last:\n{text}"));
    let mut declared = std::collections::HashSet::new();
    let mut family: Option<(&str, &str)> = None;
    for line in body.lines() {
        assert_ne!(line, "# EOF", "# EOF before the end");
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a name and a type");
            assert!(declared.insert(name), "{name} declared twice");
            if kind == "counter" {
                assert!(!name.ends_with("_total"), "{line}");
            }
            family = Some((name, kind));
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').expect("a name and a unit");
            assert!(name.ends_with(&format!("_{unit}")), "{line}");
        } else if !line.starts_with("# HELP ") {
            let (name, value) = sample_of(line);
            let (family, kind) = family.unwrap_or_else(|| panic!("{line} before any # TYPE"));
            let want = match kind {
                "counter" => format!("{family}_total"),
                "info" => format!("{family}_info"),
                _ => family.to_owned(),
            };
            assert_eq!(name, want, "{line} in the {kind} family {family}");
            assert!(is_number(value), "{line}");
        }
    }
}
