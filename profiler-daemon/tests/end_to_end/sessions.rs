//! Open-ended sessions: StartProfile … StopProfile.

use profilerd_client::v1;

use crate::support::{folded, options, samples_containing, selector, unix_nanos};

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
    // Stopped once the workload has been sampled meanwhile.
    crate::support::wait_for_samples(
        &mut client,
        &[workload.pid()],
        started.start_unix_nanos,
        "hot",
        101,
    )
    .await;
    let stopping = unix_nanos();
    let reply = client
        .stop_profile(v1::StopProfileRequest {
            session_id: started.session_id.clone(),
            options: Some(options(v1::Format::Folded)),
            ..Default::default()
        })
        .await
        .expect("StopProfile")
        .into_inner();
    let stopped = unix_nanos();
    let summary = reply.summary.clone().expect("a summary");
    // The window is the session's: from its start to its stop.
    assert_eq!(summary.start_unix_nanos, started.start_unix_nanos);
    assert!(
        (stopping..=stopped).contains(&summary.end_unix_nanos),
        "the window ends at {}, the stop was asked at {stopping} and answered at {stopped}",
        summary.end_unix_nanos
    );
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
