//! Who may ask: an unprivileged caller may profile and peek its own
//! processes, and gets PERMISSION_DENIED for anyone else's.

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

use crate::support::{Daemon, NOBODY, Workload, build_workload};

/// Copies `binary` where `nobody` can run it.
fn runnable_by_nobody(binary: &Path, dir: &Path) -> std::path::PathBuf {
    let copy = dir.join(binary.file_name().expect("a file name"));
    std::fs::copy(binary, &copy).expect("the binary is copied");
    copy
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_profiles_its_own_processes_only() {
    let daemon = Daemon::start().await;
    // The socket's directory must be reachable by others; the socket
    // itself is open to everyone (the daemon checks each request).
    let socket_dir = daemon.socket.parent().expect("a directory").to_owned();
    std::fs::set_permissions(&socket_dir, std::fs::Permissions::from_mode(0o755))
        .expect("the directory is opened");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("the directory is opened");
    let profilerctl = runnable_by_nobody(Path::new(env!("CARGO_BIN_EXE_profilerctl")), dir.path());
    let workload = runnable_by_nobody(&build_workload("peek_threads"), dir.path());

    let own = Workload::start_as_nobody(&workload, &[]);
    let roots = Workload::start("peek_threads", &[]);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let as_nobody = |args: Vec<String>| {
        let (profilerctl, socket) = (profilerctl.clone(), daemon.socket.clone());
        tokio::task::spawn_blocking(move || {
            Command::new("setpriv")
                .args(NOBODY)
                .arg(profilerctl)
                .arg("--socket")
                .arg(socket)
                .args(args)
                .output()
                .expect("setpriv runs profilerctl")
        })
    };
    let profile = |pid: Option<u32>| {
        let mut args: Vec<String> = ["profile", "--duration", "1s", "--format", "flat"]
            .map(String::from)
            .to_vec();
        if let Some(pid) = pid {
            args.extend(["--pid".to_owned(), pid.to_string()]);
        }
        args
    };

    let mine = as_nobody(profile(Some(own.pid()))).await.expect("finishes");
    let text = String::from_utf8_lossy(&mine.stdout);
    assert!(
        mine.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&mine.stderr),
        daemon.log()
    );
    assert!(text.contains("spin_alpha"), "{text}");

    // A uid selector of its own uid is enough, and selects only its own.
    let by_uid = as_nobody(
        [
            "profile",
            "--duration",
            "1s",
            "--format",
            "flat",
            "--groupby",
            "process",
            "--uid",
            "65534",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await
    .expect("finishes");
    let text = String::from_utf8_lossy(&by_uid.stdout);
    assert!(
        by_uid.status.success(),
        "{}",
        String::from_utf8_lossy(&by_uid.stderr)
    );
    assert!(text.contains(&format!("Process {} ", own.pid())), "{text}");
    assert!(
        !text.contains(&format!("Process {} ", roots.pid())),
        "{text}"
    );

    for (args, expected) in [
        (profile(Some(roots.pid())), "does not run as user 65534"),
        (profile(None), "must name them"),
        (
            vec!["peek".to_owned(), roots.pid().to_string()],
            "does not run as user 65534",
        ),
    ] {
        let denied = as_nobody(args.clone()).await.expect("finishes");
        let error = String::from_utf8_lossy(&denied.stderr);
        assert!(!denied.status.success(), "{args:?} was allowed");
        assert!(
            error.contains(expected) && error.contains("PermissionDenied"),
            "{args:?}: {error}"
        );
    }
}
