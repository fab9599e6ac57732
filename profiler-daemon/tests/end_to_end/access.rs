//! Who may ask: an unprivileged caller may profile and peek its own
//! processes, and gets PERMISSION_DENIED for anyone else's.

use crate::support::{Daemon, PEEK_THREADS, User, Workload, wait_for_threads};

#[tokio::test(flavor = "multi_thread")]
async fn a_user_profiles_its_own_processes_only() {
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let own = nobody.start("peek_threads", &[]);
    let roots = Workload::start("peek_threads", &[]);
    // Both at work: nobody's runs as nobody once setpriv has exec'd it.
    wait_for_threads(own.pid(), &PEEK_THREADS).await;
    wait_for_threads(roots.pid(), &PEEK_THREADS).await;

    let profile = |pid: Option<u32>| {
        let mut args: Vec<String> = ["profile", "--duration", "1s", "--format", "flat"]
            .map(String::from)
            .to_vec();
        if let Some(pid) = pid {
            args.extend(["--pid".to_owned(), pid.to_string()]);
        }
        args
    };
    let as_nobody = |args: Vec<String>| {
        let (nobody, socket) = (&nobody, daemon.socket.clone());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nobody.profilerctl(&socket, &args).await
        }
    };

    let mine = as_nobody(profile(Some(own.pid()))).await;
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
    .await;
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
        let denied = as_nobody(args.clone()).await;
        let error = String::from_utf8_lossy(&denied.stderr);
        assert!(!denied.status.success(), "{args:?} was allowed");
        assert!(
            error.contains(expected) && error.contains("PermissionDenied"),
            "{args:?}: {error}"
        );
    }
}
