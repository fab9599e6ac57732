//! `profilerctl status`'s lines, from made-up replies.

use super::*;

#[test]
fn memory_maps_unknown_before_the_first_drain_are_not_said_unfollowed() {
    assert!(memory_map_records_status(None, 0).contains("not known before the first drain"));
    assert!(memory_map_records_status(None, 3).contains("not followed"));
    assert!(fork_lineages_status(None, 3).contains("not recorded"));
    let python = v1::PythonStatus {
        processes: [("3.13.0".to_owned(), 1), ("3.11.2".to_owned(), 2)].into(),
        refused: [("before_3_11".to_owned(), 1)].into(),
        binaries: 3,
        processes_named: 4,
        processes_limit: 4096,
        code_objects_held: 10,
        code_objects_limit: 32768,
        code_objects_read: 11,
        code_objects_failed: 1,
        frames_unnamed: 2,
        code_objects_bytes: 2048,
        code_objects_bytes_limit: 6 << 20,
        ..Default::default()
    };
    assert_eq!(
        python_status(Some(&python)),
        "3 CPython processes found (3.11.2: 2, 3.13.0: 1); 1 refused (before_3_11: 1); named \
         to the kernel 4 times (at most 4096 at once, 0 refused); code objects: 10 of at most \
         32768 held, 2 KiB of at most 6144 KiB (11 read, 1 unreadable, 0 let go of), 2 frames \
         unnamed"
    );
    assert_eq!(
        python_status(Some(&v1::PythonStatus::default())),
        "no CPython 3.11+ process found"
    );
    let book = v1::ForkLineagesStatus {
        forked: 3,
        forked_limit: 32768,
        forked_evicted: 1,
        exec_left: 2,
        exec_left_limit: 4096,
        exec_left_evicted: 0,
        bytes: 1 << 20,
    };
    assert_eq!(
        fork_lineages_status(Some(&book), 1),
        "fork lineages: 3 forked of at most 32768 (1 let go of), 2 exec'd of at most 4096 \
         (0 let go of), 1.0 MiB"
    );
    let small = v1::ForkLineagesStatus {
        bytes: 3000,
        ..book
    };
    assert!(fork_lineages_status(Some(&small), 1).ends_with(", 3 KiB"));
    let records = v1::MemoryMapRecordsStatus {
        mappings: 7,
        ..Default::default()
    };
    assert!(memory_map_records_status(Some(&records), 0).starts_with("memory maps as made: 7"));
}

#[test]
fn off_cpu_recording_says_what_it_lacks_on_this_kernel() {
    let whole = v1::OffCpuStatus {
        switches: 192,
        ..Default::default()
    };
    assert!(!offcpu_status(Some(&whole)).contains("limited"));
    let limited = v1::OffCpuStatus {
        limitation: "this kernel (6.1.0-57-amd64) cannot verify the off-CPU program that \
                     walks Python frames"
            .to_owned(),
        ..whole
    };
    assert!(
        offcpu_status(Some(&limited)).ends_with(
            "; limited: this kernel (6.1.0-57-amd64) cannot verify the off-CPU program that \
             walks Python frames"
        ),
        "{}",
        offcpu_status(Some(&limited))
    );
    let unavailable = v1::OffCpuStatus {
        unavailable: "the kernel refused it".to_owned(),
        ..Default::default()
    };
    assert_eq!(
        offcpu_status(Some(&unavailable)),
        "unavailable (the kernel refused it)"
    );
}

fn status_reply() -> v1::StatusReply {
    v1::StatusReply {
        version: "0.1.0".into(),
        uptime_ms: 3_723_000,
        cpus: vec![0, 1],
        frequency_hz: 49,
        samples_taken: 1000,
        samples_lost: vec![
            v1::LossCount {
                cause: "counts_map_full".into(),
                count: 0,
            },
            v1::LossCount {
                cause: "stack_map_full".into(),
                count: 3,
            },
        ],
        peek: Some(v1::PeekStatus {
            signal: 10,
            signal_name: "SIGUSR1".into(),
            completed: 5,
            requests: 2,
            ..Default::default()
        }),
        targets_hidden: true,
        ..Default::default()
    }
}

#[test]
fn status_shows_nonzero_counters_one_a_line() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let text = status(&status_reply(), false, now);
    assert!(text.contains("up 1h 2m 3s"), "{text}");
    assert!(text.contains("lost:       stack_map_full=3\n"), "{text}");
    assert!(!text.contains("counts_map_full"), "{text}");
    assert!(
        text.contains("targets:    not shown (root and the admin group only)"),
        "{text}"
    );
    assert!(text.contains("\n                  5 done\n"), "{text}");
    assert!(
        text.contains("\n                  2 peek requests\n"),
        "{text}"
    );
    assert!(!text.contains("failed"), "{text}");
    let verbose = status(&status_reply(), true, now);
    assert!(verbose.contains("counts_map_full=0"), "{verbose}");
    assert!(verbose.contains("      0 failed\n"), "{verbose}");
}

#[test]
fn the_http_line_says_which_source_files_the_web_view_may_show() {
    assert_eq!(http_status(None), "");
    let mut http = v1::HttpStatus {
        listen: "127.0.0.1:6060".into(),
        tls: false,
        source_dirs: Vec::new(),
        max_source_bytes: 8 << 20,
        max_source_reads: 4,
        source_read_timeout_ms: 2000,
    };
    let none = http_status(Some(&http));
    assert!(
        none.starts_with("http:       127.0.0.1:6060 (plaintext on loopback")
            && none.contains("reads no source file (http_source_dirs is empty"),
        "{none}"
    );
    http.source_dirs = vec!["/usr/src/app".into(), "/srv/src".into()];
    let some = http_status(Some(&http));
    assert!(
        some.contains(
            "under http_source_dirs /usr/src/app, /srv/src (regular files every user \
             may read, of 8 MiB at most; 4 at once, 2s each at most)"
        ),
        "{some}"
    );
}
