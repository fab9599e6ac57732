//! Self-metrics in the Prometheus text format, through GetStatus and the
//! optional HTTP listener.

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

/// GET http://`address`/metrics with a plain HTTP/1.1 request.
fn scrape(address: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("the metrics listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
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

    let response = tokio::task::spawn_blocking(move || scrape(&address))
        .await
        .expect("scraped");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("application/openmetrics-text"),
        "{response}"
    );
    // The GetStatus calls above are counted by now.
    assert!(
        value(
            &response,
            "profilerd_rpcs_total{method=\"GetStatus\",code=\"OK\"}"
        ) >= 2.0,
        "{response}"
    );
}
