//! The daemon as a production service: systemd readiness and watchdog
//! notifications, logging to the journal, the systemd unit (it verifies,
//! and its capability set is enough to profile and peek at another user's
//! process), and the Kubernetes DaemonSet (it parses, and grants the
//! unit's capabilities).

use std::{
    collections::BTreeSet,
    ffi::OsStr,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use profilerd_client::v1;
use tokio::net::UnixDatagram;

use crate::support::{self, Daemon, Launch, Workload};

const UNIT: &str = include_str!("../../../deploy/profilerd.service");
const DAEMONSET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/kubernetes/daemonset.yaml"
);

/// The words of every `key=` line of the unit.
fn unit_setting(key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    UNIT.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .flat_map(str::split_whitespace)
        .map(str::to_owned)
        .collect()
}

/// The unit's capabilities, without the `CAP_` prefix, lower case
/// (`bpf`, `sys_ptrace`), as setpriv names them.
fn unit_capabilities() -> BTreeSet<String> {
    let bounding: BTreeSet<String> = unit_setting("CapabilityBoundingSet").into_iter().collect();
    let ambient: BTreeSet<String> = unit_setting("AmbientCapabilities").into_iter().collect();
    assert!(!bounding.is_empty(), "the unit sets CapabilityBoundingSet=");
    assert_eq!(
        bounding, ambient,
        "the unit's ambient capabilities are its bounding set"
    );
    bounding
        .iter()
        .map(|cap| {
            cap.strip_prefix("CAP_")
                .unwrap_or_else(|| panic!("{cap} is not a capability name"))
                .to_ascii_lowercase()
        })
        .collect()
}

/// A capability's number (linux/capability.h), for the ones the unit may name.
fn capability_number(name: &str) -> u32 {
    match name {
        "dac_override" => 1,
        "dac_read_search" => 2,
        "sys_ptrace" => 19,
        "sys_admin" => 21,
        "sys_resource" => 24,
        "syslog" => 34,
        "perfmon" => 38,
        "bpf" => 39,
        "checkpoint_restore" => 40,
        other => panic!("capability {other} is not in the test's table: add its number"),
    }
}

/// One of `/proc/PID/status`'s capability masks (`CapEff`, `CapBnd`...).
fn capability_mask(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a live process");
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    u64::from_str_radix(hex.trim(), 16).expect("a hex mask")
}

/// A datagram socket standing in for systemd's notification socket.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn bind() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("the notification socket binds");
        Self {
            socket,
            path,
            _dir: dir,
        }
    }

    /// The next message, or `None` after `wait`.
    async fn next(&self, wait: Duration) -> Option<String> {
        let mut buffer = vec![0; 4096];
        let received = tokio::time::timeout(wait, self.socket.recv(&mut buffer)).await;
        let length = received.ok()?.expect("the notification socket reads");
        Some(String::from_utf8_lossy(&buffer[..length]).into_owned())
    }

    /// Messages until one holds `line` (returned), failing after `wait`.
    async fn until(&self, line: &str, wait: Duration, daemon: &Daemon) -> String {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(message) if message.lines().any(|got| got == line) => return message,
                Some(_) => {}
                None => panic!("no {line} within {wait:?}:\n{}", daemon.log()),
            }
        }
    }
}

/// Under systemd (NOTIFY_SOCKET, WATCHDOG_USEC), READY=1 arrives with a
/// status line once the API answers, WATCHDOG=1 every half of the watchdog
/// timeout, and STOPPING=1 on SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn tells_systemd_when_ready_alive_and_stopping() {
    let notify = NotifySocket::bind();
    let env: [(&str, &OsStr); 2] = [
        ("NOTIFY_SOCKET", notify.path.as_os_str()),
        ("WATCHDOG_USEC", OsStr::new("2000000")),
    ];
    let daemon = Daemon::launch(
        &[],
        Launch {
            env: &env,
            ..Launch::default()
        },
    )
    .await;

    let ready = notify
        .until("READY=1", Duration::from_secs(20), &daemon)
        .await;
    // Ready means serving: GetStatus answers right away.
    let answered = tokio::time::timeout(Duration::from_secs(2), async {
        let mut client = daemon.client().await;
        client.get_status(v1::GetStatusRequest::default()).await
    })
    .await;
    answered
        .unwrap_or_else(|_| panic!("GetStatus did not answer within 2 s of READY=1"))
        .unwrap_or_else(|status| panic!("GetStatus failed right after READY=1: {status:?}"));
    let status_line = ready
        .lines()
        .find_map(|line| line.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("READY=1 comes with a STATUS= line: {ready:?}"));
    assert!(
        status_line.contains(&daemon.socket.display().to_string()),
        "{status_line}"
    );

    // Keep-alives every second (half of 2 s): at least two in 3 s.
    let started = Instant::now();
    let mut keep_alives = 0;
    while started.elapsed() < Duration::from_secs(3) {
        if let Some(message) = notify.next(Duration::from_millis(200)).await
            && message.lines().any(|line| line == "WATCHDOG=1")
        {
            keep_alives += 1;
        }
    }
    assert!(
        (2..=5).contains(&keep_alives),
        "{keep_alives} WATCHDOG=1 in 3 s, expected about 3"
    );

    let pid = rustix::process::Pid::from_raw(daemon.pid() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM is sent");
    notify
        .until("STOPPING=1", Duration::from_secs(5), &daemon)
        .await;
}

/// Without WATCHDOG_USEC no keep-alive is sent, and without NOTIFY_SOCKET
/// (every other test) nothing is.
#[tokio::test(flavor = "multi_thread")]
async fn sends_no_keep_alives_unless_asked() {
    let notify = NotifySocket::bind();
    let env: [(&str, &OsStr); 1] = [("NOTIFY_SOCKET", notify.path.as_os_str())];
    let daemon = Daemon::launch(
        &[],
        Launch {
            env: &env,
            ..Launch::default()
        },
    )
    .await;
    notify
        .until("READY=1", Duration::from_secs(20), &daemon)
        .await;
    if let Some(message) = notify.next(Duration::from_secs(2)).await {
        panic!("unexpected notification without a watchdog: {message:?}");
    }
}

/// The journal's native protocol: `NAME=value` lines, or `NAME`, a
/// little-endian u64 length and the value for values with newlines.
fn journal_fields(mut datagram: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    while let Some(end) = datagram.iter().position(|&byte| byte == b'\n') {
        let line = &datagram[..end];
        if let Some(equals) = line.iter().position(|&byte| byte == b'=') {
            fields.push((
                String::from_utf8_lossy(&line[..equals]).into_owned(),
                String::from_utf8_lossy(&line[equals + 1..]).into_owned(),
            ));
            datagram = &datagram[end + 1..];
        } else {
            let rest = &datagram[end + 1..];
            let length = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")) as usize;
            let value = &rest[8..8 + length];
            fields.push((
                String::from_utf8_lossy(line).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            ));
            datagram = &rest[8 + length + 1..];
        }
    }
    fields
}

/// With standard error connected to the journal (JOURNAL_STREAM names
/// it), events go to the journal's socket with their fields; the peek
/// report carries the process and the peek id.
#[tokio::test(flavor = "multi_thread")]
async fn logs_to_the_journal_with_fields_under_systemd() {
    let journal = Path::new("/run/systemd/journal/socket");
    if journal.exists() {
        // A real journal: its socket cannot be borrowed. The daemon's
        // standard error must then stay empty of events.
        eprintln!(
            "skipped: {} belongs to a running journald",
            journal.display()
        );
        return;
    }
    // Removes the socket, and the directories this test created for it.
    struct Remove(Vec<&'static Path>);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file("/run/systemd/journal/socket");
            for dir in self.0.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    let mut remove = Remove(Vec::new());
    for dir in ["/run/systemd", "/run/systemd/journal"].map(Path::new) {
        if !dir.exists() {
            std::fs::create_dir(dir).expect("a directory in /run");
            remove.0.push(dir);
        }
    }
    let receiver = UnixDatagram::bind(journal).expect("the journal socket binds");

    // As systemd does: JOURNAL_STREAM is standard error's device:inode.
    let through = [
        "sh",
        "-c",
        r#"JOURNAL_STREAM=$(stat -L -c %d:%i /proc/$$/fd/2) exec "$0" "$@""#,
    ];
    let mut daemon = Daemon::launch(
        &[],
        Launch {
            through: &through,
            ..Launch::default()
        },
    )
    .await;
    daemon.wait_until_serving().await;
    let workload = Workload::start_as("peek_threads", "peek-journal", &[]);
    let pid = workload.pid();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut client = daemon.client().await;
    let report = client
        .peek(v1::PeekRequest { pid })
        .await
        .expect("Peek answers")
        .into_inner();

    let mut events = Vec::new();
    let mut buffer = vec![0; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(5);
    let peek_event = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(received) = tokio::time::timeout(left, receiver.recv(&mut buffer)).await else {
            panic!(
                "no peek report in the journal within 5 s; got {events:#?}\nstderr:\n{}",
                daemon.log()
            );
        };
        let fields = journal_fields(&buffer[..received.expect("the journal socket reads")]);
        let message = fields.iter().find(|(name, _)| name == "MESSAGE");
        if message.is_some_and(|(_, text)| text.starts_with("peek report")) {
            break fields;
        }
        events.push(fields);
    };
    let field = |fields: &[(String, String)], name: &str| {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("no {name} in {fields:#?}"))
    };
    assert_eq!(field(&peek_event, "PROFILERD_PID"), pid.to_string());
    assert_eq!(field(&peek_event, "PROFILERD_PEEK_ID"), report.id);
    assert_eq!(field(&peek_event, "PROFILERD_COMMAND"), "peek-journal");
    assert_eq!(field(&peek_event, "PRIORITY"), "6");
    assert_eq!(field(&peek_event, "SYSLOG_IDENTIFIER"), "profilerd");
    assert!(
        events.iter().any(|fields| {
            fields
                .iter()
                .any(|(key, value)| key == "MESSAGE" && value == "profilerd is serving")
                && fields.iter().any(|(key, _)| key == "PROFILERD_SOCKET")
        }),
        "the start-up event is in the journal with its fields: {events:#?}"
    );
    assert!(
        !daemon.log().contains("profilerd is serving"),
        "events go to the journal, not to standard error:\n{}",
        daemon.log()
    );
}

/// `systemd-analyze verify` accepts the unit, pointed at the built daemon.
#[test]
fn the_unit_verifies() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let unit = dir.path().join("profilerd.service");
    let written = "ExecStart=/usr/local/bin/profilerd ";
    assert!(UNIT.contains(written), "the unit starts {written}...");
    let exec_start = format!("ExecStart={} ", env!("CARGO_BIN_EXE_profilerd"));
    std::fs::write(&unit, UNIT.replace(written, &exec_start)).expect("the unit is written");
    // The man pages Documentation= names come with the Debian package,
    // whose own check verifies the unit as installed.
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze runs (`cargo xtask test` installs Debian's systemd for it)");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{printed}");
    // Unknown keys and bad values are only warned about.
    let about_the_unit: Vec<&str> = printed
        .lines()
        .filter(|line| line.contains("profilerd"))
        .collect();
    assert!(about_the_unit.is_empty(), "{printed}");
}

/// The daemon run as root with exactly the unit's capabilities (bounding,
/// inheritable and ambient sets, as systemd sets them) starts, profiles
/// another user's process with its user and kernel frames named (its
/// binary in a directory only that user may read), and peeks at it on
/// `kill -USR1`, seeing where its sleeping thread waits.
#[tokio::test(flavor = "multi_thread")]
async fn the_units_capabilities_are_enough() {
    let capabilities = unit_capabilities();
    let caps = format!(
        "-all,{}",
        capabilities
            .iter()
            .map(|cap| format!("+{cap}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let (bounding, inheritable, ambient) = (
        format!("--bounding-set={caps}"),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
    );
    let through = [
        "setpriv",
        "--no-new-privs",
        bounding.as_str(),
        inheritable.as_str(),
        ambient.as_str(),
    ];
    let mut daemon = Daemon::launch(
        &[],
        Launch {
            through: &through,
            ..Launch::default()
        },
    )
    .await;
    daemon.wait_until_serving().await;
    let expected = capabilities
        .iter()
        .fold(0u64, |mask, cap| mask | 1 << capability_number(cap));
    assert_eq!(
        capability_mask(daemon.pid(), "CapEff"),
        expected,
        "the daemon runs with exactly the unit's capabilities"
    );
    assert_eq!(capability_mask(daemon.pid(), "CapBnd"), expected);

    // The workloads' binaries, in a directory only `nobody` may enter.
    let private = tempfile::tempdir().expect("a temporary directory");
    for name in ["syscalls", "peek_threads"] {
        support::copy_program(&support::build_workload(name), &private.path().join(name));
        std::os::unix::fs::chown(private.path().join(name), Some(65534), Some(65534))
            .expect("chown");
    }
    std::os::unix::fs::chown(private.path(), Some(65534), Some(65534)).expect("chown");
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    assert_eq!(std::fs::metadata(private.path()).unwrap().uid(), 65534);
    // One workload at a time, so as not to starve other tests of CPU.
    let syscalls = Workload::start_as_nobody(&private.path().join("syscalls"), &[]);
    let mut client = daemon.client().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let reply = support::profile(
        &mut client,
        &[syscalls.pid()],
        Duration::from_secs(2),
        support::options(v1::Format::Folded),
    )
    .await;
    let stacks = support::folded(&reply.report);
    let frames: BTreeSet<&String> = stacks.iter().flat_map(|(frames, _)| frames).collect();
    assert!(
        frames.iter().any(|frame| *frame == "read_zeros"),
        "the user frames are named: {frames:?}\n{}",
        daemon.log()
    );
    assert!(
        frames
            .iter()
            .any(|frame| frame.ends_with("_[k]") && !frame.starts_with("[kernel]")),
        "the kernel frames are named: {frames:?}"
    );

    drop(syscalls);

    let peeked = Workload::start_as_nobody(&private.path().join("peek_threads"), &[]);
    let mut watcher = client
        .watch_peeks(v1::WatchPeeksRequest {})
        .await
        .expect("WatchPeeks answers")
        .into_inner();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = peeked.pid();
    let target = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(target, rustix::process::Signal::USR1).expect("SIGUSR1 is sent");
    let report = crate::support::next_peek_of(&mut watcher, pid, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("no peek report within 5 s:\n{}", daemon.log()));
    assert!(report.text.contains("spin_alpha"), "{}", report.text);
    let sleeper = report
        .threads
        .iter()
        .find(|thread| thread.name == "sleeper")
        .unwrap_or_else(|| panic!("no sleeper thread:\n{}", report.text));
    assert!(
        sleeper.wait_channel.contains("sleep"),
        "the sleeper's wait channel is read: {:?}\n{}",
        sleeper.wait_channel,
        report.text
    );
}

/// The DaemonSet parses as YAML (PyYAML), runs with the host's pids and
/// exactly the unit's capabilities, shares the socket directory with the
/// node, and its ConfigMap holds a valid configuration.
#[test]
fn the_daemonset_matches_the_unit() {
    let python = std::env::var("PROFILERD_TEST_PYTHON").expect(
        "PROFILERD_TEST_PYTHON names a Python with PyYAML: run the tests with \
         `cargo xtask test`, which sets it up",
    );
    let output = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; \
             print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            DAEMONSET,
        ])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{DAEMONSET} does not parse:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents: Vec<serde_json::Value> =
        serde_json::from_slice(&output.stdout).expect("JSON from python");
    let kind = |kind: &str| {
        documents
            .iter()
            .find(|document| document["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {DAEMONSET}"))
    };
    let daemonset = kind("DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let added: BTreeSet<String> = security["capabilities"]["add"]
        .as_array()
        .expect("capabilities are added")
        .iter()
        .map(|cap| cap.as_str().expect("a name").to_ascii_lowercase())
        .collect();
    assert_eq!(
        added,
        unit_capabilities(),
        "the DaemonSet grants the unit's capabilities"
    );
    assert!(container["resources"]["limits"]["memory"].is_string());

    let mounts = container["volumeMounts"].as_array().expect("mounts");
    let host_path_of = |mount_path: &str| {
        let mount = mounts
            .iter()
            .find(|mount| mount["mountPath"] == mount_path)
            .unwrap_or_else(|| panic!("nothing is mounted at {mount_path}"));
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|volume| volume["name"] == mount["name"])
            .expect("the mount's volume");
        volume["hostPath"]["path"].as_str().map(str::to_owned)
    };
    let config = profilerd::daemon::config::Config::default();
    assert_eq!(
        host_path_of(config.socket.parent().unwrap().to_str().unwrap()).as_deref(),
        Some("/run/profilerd"),
        "the socket's directory is the node's"
    );
    assert_eq!(
        host_path_of("/sys/kernel/tracing").as_deref(),
        Some("/sys/kernel/tracing")
    );
    assert_eq!(
        host_path_of("/sys/fs/cgroup").as_deref(),
        Some("/sys/fs/cgroup")
    );
    let pod_logs = profilerd::export::pods::POD_LOG_DIR;
    assert_eq!(
        host_path_of(pod_logs).as_deref(),
        Some(pod_logs),
        "the kubelet's pod directories name pods for push_service_name"
    );

    let file = kind("ConfigMap")["data"]["profilerd.toml"]
        .as_str()
        .expect("the ConfigMap holds profilerd.toml");
    let parsed =
        profilerd::daemon::config::Config::parse(file).expect("the ConfigMap's config parses");
    parsed.validate().expect("the ConfigMap's config is valid");
    assert_eq!(parsed.socket, config.socket);
    assert_eq!(parsed.state_dir, config.state_dir);
}

/// The unit's state and runtime directories are the configuration's
/// defaults, and it starts the daemon on the configuration file that
/// `cargo xtask install` installs.
#[test]
fn the_unit_agrees_with_the_configuration() {
    let config = profilerd::daemon::config::Config::default();
    let state = unit_setting("StateDirectory");
    assert_eq!(
        Path::new("/var/lib").join(&state[0]),
        config.state_dir,
        "StateDirectory= is the default state_dir"
    );
    let runtime = unit_setting("RuntimeDirectory");
    assert_eq!(
        Some(Path::new("/run").join(&runtime[0]).as_path()),
        config.socket.parent(),
        "RuntimeDirectory= holds the default socket"
    );
    let exec_start = unit_setting("ExecStart");
    assert_eq!(
        exec_start,
        [
            "/usr/local/bin/profilerd",
            "--config",
            "/etc/profilerd/profilerd.toml"
        ]
    );
    assert_eq!(unit_setting("Type"), ["notify"]);
    assert!(!unit_setting("WatchdogSec").is_empty());
    // The plaintext loopback HTTP listener asks NETLINK_SOCK_DIAG who
    // opened each connection.
    let families = unit_setting("RestrictAddressFamilies");
    for family in ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"] {
        assert!(
            families.iter().any(|allowed| allowed == family),
            "RestrictAddressFamilies= lacks {family}: {families:?}"
        );
    }
}
