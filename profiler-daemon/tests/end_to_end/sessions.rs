//! Open-ended sessions: StartProfile … StopProfile.

use std::time::Duration;

use profilerd_client::v1;

use crate::support::{folded, options, samples_containing, selector};

#[tokio::test(flavor = "multi_thread")]
async fn a_session_reports_what_ran_between_start_and_stop() {
    let (_daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let started = client
        .start_profile(v1::StartProfileRequest {
            selector: selector(&[workload.pid()]),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .expect("StartProfile")
        .into_inner();
    assert!(!started.session_id.is_empty());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let reply = client
        .stop_profile(v1::StopProfileRequest {
            session_id: started.session_id.clone(),
            options: Some(options(v1::Format::Folded)),
            ..Default::default()
        })
        .await
        .expect("StopProfile")
        .into_inner();
    let summary = reply.summary.clone().expect("a summary");
    assert_eq!(summary.start_unix_nanos, started.start_unix_nanos);
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    assert!((1.4..3.0).contains(&seconds), "window of {seconds}s");
    let by_function = samples_containing(&folded(&reply.report));
    assert!(
        by_function.get("hot").copied().unwrap_or(0) > 100,
        "{by_function:?}"
    );

    let again = client
        .stop_profile(v1::StopProfileRequest {
            session_id: started.session_id,
            options: None,
            ..Default::default()
        })
        .await
        .expect_err("a session stops once");
    assert_eq!(again.code(), tonic::Code::NotFound);
}
