//! A daemon that cannot sample says which requirement is missing.

use std::{os::unix::fs::PermissionsExt as _, process::Command};

#[test]
fn without_privileges_the_daemon_says_to_run_as_root() {
    crate::support::require_root();
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
        .expect("the directory is opened to everyone");
    // A copy the unprivileged user can surely execute, wherever the build is.
    let daemon = dir.path().join("profilerd");
    crate::support::copy_program(env!("CARGO_BIN_EXE_profilerd").as_ref(), &daemon);
    let output = Command::new("setpriv")
        .args(crate::support::NOBODY)
        .arg(&daemon)
        .arg("--socket")
        .arg(dir.path().join("profilerd.sock"))
        .output()
        .expect("setpriv (util-linux) runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "an unprivileged daemon started:\n{stderr}"
    );
    assert!(
        stderr.contains("lacks the privileges to load BPF programs: run it as root"),
        "the error does not name the missing privilege:\n{stderr}"
    );
    assert!(
        !dir.path().join("profilerd.sock").exists(),
        "the socket was left behind"
    );
}

/// Runs the daemon with a configuration file holding `text`; its exit code
/// and standard error.
fn run_with_config(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("profilerd.toml");
    std::fs::write(&config, text).expect("the file is written");
    let output = Command::new(env!("CARGO_BIN_EXE_profilerd"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("profilerd runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_configuration_names_the_key() {
    let (code, stderr) = run_with_config("frequency_hz = 5000\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("frequency_hz") && stderr.contains("1-1000"),
        "{stderr}"
    );

    let (code, stderr) = run_with_config("frequency = 99\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unknown field `frequency`"), "{stderr}");
}
