//! A client no one in this project wrote: Python's grpcio discovers the API
//! by server reflection, checks health, and fetches a pprof profile that
//! `go tool pprof` reads.

use std::process::Command;

use crate::support::{Daemon, Workload};

#[tokio::test(flavor = "multi_thread")]
async fn python_grpcio_finds_the_api_by_reflection_and_profiles() {
    let python = std::env::var("PROFILERD_TEST_PYTHON").expect(
        "PROFILERD_TEST_PYTHON names a Python with grpcio, grpcio-reflection and \
         grpcio-health-checking: run the tests with `cargo xtask test`, which sets it up",
    );
    let daemon = Daemon::start().await;
    let workload = Workload::start_as("peek_threads", "peek-python", &[]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let profile = dir.path().join("cpu.pb.gz");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/reflection_client.py"
    );

    let output = tokio::task::spawn_blocking({
        let (socket, profile, pid) = (daemon.socket.clone(), profile.clone(), workload.pid());
        move || {
            Command::new(python)
                .arg(script)
                .arg(socket)
                .arg(pid.to_string())
                .arg(profile)
                .output()
                .expect("python runs")
        }
    })
    .await
    .expect("the client finishes");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    let services = printed
        .lines()
        .find_map(|line| line.strip_prefix("services: "))
        .unwrap_or_else(|| panic!("the client lists services:\n{printed}"));
    for service in [
        "profilerd.v1.Profiler",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            services.split(' ').any(|s| s == service),
            "{service}: {printed}"
        );
    }
    assert!(printed.contains("health: SERVING"), "{printed}");

    let top_text = crate::support::go_pprof_top(&std::fs::read(&profile).expect("the profile"));
    for function in ["spin_alpha", "spin_beta"] {
        assert!(top_text.contains(function), "{function} in:\n{top_text}");
    }
}
