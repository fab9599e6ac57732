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

/// A user holds at most half of the slots that peeks and profiles at a
/// rate of their own share (max_concurrent_peeks): with two, one. Root is
/// not bound so.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_holds_at_most_half_the_slots_of_profiles_at_their_own_rate() {
    let daemon = Daemon::start_with(&["--max-concurrent-peeks", "2"]).await;
    let nobody = User::nobody(&daemon);
    let first = nobody.start("peek_threads", &[]);
    let second = nobody.start("peek_threads", &[]);
    wait_for_threads(first.pid(), &PEEK_THREADS).await;
    wait_for_threads(second.pid(), &PEEK_THREADS).await;
    let rated = |pid: u32, seconds: &str| {
        let (nobody, socket) = (&nobody, daemon.socket.clone());
        let pid = pid.to_string();
        let seconds = seconds.to_owned();
        async move {
            let args = [
                "profile", "-p", &pid, "-F", "199", "-d", &seconds, "-f", "flat",
            ];
            nobody.profilerctl(&socket, &args).await
        }
    };
    // The first holds its slot for 4 s; the second, asked meanwhile, is
    // refused with the bound's name.
    let probe = async {
        for _ in 0..30 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let output = rated(second.pid(), "1").await;
            if !output.status.success() {
                // The slot in use is shown with its bound.
                let status = crate::support::profilerctl(&daemon.socket, &["status"]).await;
                let status = crate::support::stdout_of(&status);
                return Some((crate::support::error_of(&output), status));
            }
        }
        None
    };
    let (held, refused) = tokio::join!(rated(first.pid(), "4"), probe);
    let (refused, status) = refused.expect("a second profile of nobody's was refused");
    assert!(
        status.contains(
            "1 of 2 slots in use (0 peeks, 1 processes profiled at a rate of their own); a \
             user's processes hold at most 1 (max_concurrent_peeks)"
        ),
        "{status}"
    );
    assert!(
        refused.contains("half of max_concurrent_peeks") && refused.contains("user 65534"),
        "{refused}"
    );
    assert!(held.status.success(), "{}", crate::support::error_of(&held));
    // Its slot given back, the second runs; root is not bound per user.
    let output = rated(second.pid(), "1").await;
    assert!(
        output.status.success(),
        "{}",
        crate::support::error_of(&output)
    );
}
