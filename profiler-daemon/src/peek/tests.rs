use super::snapshot::{Disposition, ProcessSnapshot};
use super::*;

fn process(command: &str, uid: u32, cgroups: &[&str]) -> ProcessSnapshot {
    ProcessSnapshot {
        pid: 1,
        command: command.to_owned(),
        command_line: String::new(),
        owner: crate::profile::Owner {
            uid,
            gid: uid,
            protected: false,
        },
        cgroups: cgroups.iter().map(|c| (*c).to_owned()).collect(),
        cgroup_v2: String::new(),
        disposition: Disposition::Unknown,
        threads: Vec::new(),
        python: Default::default(),
    }
}

#[test]
fn an_empty_allowlist_allows_everything() {
    assert!(Allowlist::default().allows(&process("a", 5, &["/x"])));
}

#[test]
fn every_set_list_must_match() {
    let allow = Allowlist {
        commands: vec!["nginx".into()],
        uids: vec![33],
        cgroups: vec!["/system.slice".into()],
    };
    assert!(allow.allows(&process("nginx", 33, &["/system.slice/nginx.service"])));
    assert!(allow.allows(&process("nginx", 33, &["/system.slice"])));
    assert!(!allow.allows(&process("nginx", 33, &["/system.slicer"])));
    assert!(!allow.allows(&process("nginx", 0, &["/system.slice"])));
    assert!(!allow.allows(&process("bash", 33, &["/system.slice"])));
    let root = Allowlist {
        cgroups: vec!["/".into()],
        ..Allowlist::default()
    };
    assert!(root.allows(&process("x", 1, &["/user.slice"])));
}

#[test]
fn ids_sort_by_time_and_parse_back() {
    let time = humantime::parse_rfc3339("2026-11-21T20:15:12.123Z").unwrap();
    let id = "20261121T201512.123Z-1234-7";
    assert_eq!(parse_id(id), Some((time, 1234)));
    assert_eq!(parse_id("nonsense"), None);
    assert!("20261121T201512.123Z-9-0" < "20261121T201513.001Z-1-1");
}

#[test]
fn each_user_has_its_own_count_a_minute() {
    let mut minute = PerUserMinute::default();
    let start = Instant::now();
    assert!(minute.take(5, 2, start));
    assert!(minute.take(5, 2, start));
    assert!(!minute.take(5, 2, start), "a third in the minute");
    assert!(minute.take(6, 2, start), "another user");
    assert!(
        minute.take(5, 2, start + Duration::from_secs(61)),
        "the next minute"
    );
}

#[test]
fn signal_names() {
    assert_eq!(signal_name(libc::SIGUSR1 as u32), "SIGUSR1");
    assert!(signal_name(34).starts_with("signal 34"));
}
