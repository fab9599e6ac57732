//! The service without root or BPF: a real pipeline over a sample source
//! the tests fill, a store the tests fill directly, targets kept in memory,
//! peek clocks that refuse, and callers of every kind.

use std::{
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant, SystemTime},
};

use profiler_common::{COUNTER_COUNT, SampleKind};

use crate::profile::ProfileMode;

use super::{
    DaemonInfo, PastWindow, ProfileSpec, Service, ServiceError, ServiceParts, TopSpec,
    access::{
        AccessPolicy, Asker,
        testing::{ROOT, user},
    },
    limits::ServiceLimits,
    selection::SelectorSpec,
};
use crate::{
    kernel::{
        families::Families,
        programs::{OptionalProgramError, PeekClocks, SamplingError},
        targets::{MemoryTargetMaps, TargetSet, Targets},
    },
    peek::{PeekSettings, Peeker, Protection},
    pipeline::{DrainIntervals, Inboxes, Pipeline, PipelineBounds, testing::QueuedSource},
    profile::{Format, Frame, GroupBy, Location, LocationKind, ReportOptions, ThreadInfo},
    store::{Store, StoreSettings},
    symbols::symbolizer::{LocationKey, SymbolizedBatch, SymbolizedLocation, SymbolizedSample},
};

/// Peek clocks that never start: these tests peek at nothing.
struct NoClocks;

impl PeekClocks for NoClocks {
    fn mark(&self, _: &[u32]) {}

    fn forget(&self, _: &[u32]) {}

    fn sample(&self, _: u32, _: u32) -> Result<Box<dyn Send>, SamplingError> {
        Err(SamplingError::Missing("peek clocks"))
    }
}

pub(crate) struct Fixture {
    pub(crate) service: Service,
    store: Arc<RwLock<Store>>,
    /// How long the source's next drain takes.
    next_drain_takes: Arc<Mutex<Duration>>,
    pub(crate) _pipeline: Pipeline,
    pub(crate) _state: tempfile::TempDir,
}

pub(crate) fn fixture() -> Fixture {
    let store = Arc::new(RwLock::new(Store::new(StoreSettings {
        retention: Duration::from_secs(3600),
        resolution: Duration::from_secs(1),
        memory_limit: 64 << 20,
    })));
    let inboxes = Inboxes::default();
    let inbox = inboxes.peeks.clone();
    let source = QueuedSource::default();
    let next_drain_takes = source.next_drain_takes.clone();
    let pipeline = Pipeline::start_with(
        Box::new(source),
        None,
        None,
        store.clone(),
        inboxes,
        DrainIntervals {
            every: Duration::from_secs(60),
            watched: Duration::from_secs(60),
        },
        PipelineBounds::default(),
    )
    .expect("the pipeline starts");
    let state = tempfile::tempdir().expect("a temporary directory");
    let peeker = Peeker::new(
        PeekSettings {
            signal: 0,
            duration: Duration::from_millis(100),
            frequency_hz: 100,
            allow: Default::default(),
            max_concurrent: 4,
            directory: state.path().join("peeks"),
            max_reports: 10,
            max_bytes: 1 << 20,
            max_reports_per_user: 5,
            per_user_per_minute: 5,
            memory_limit: 0,
        },
        Arc::new(NoClocks),
        inbox,
        pipeline.handle(),
        Protection {
            active: false,
            reason: "tests".to_owned(),
        },
    );
    let service = Service::new(ServiceParts {
        pipeline: pipeline.handle(),
        store: store.clone(),
        peeker,
        families: Families::new(Err(OptionalProgramError::Missing("follow_forks"))),
        offcpu: crate::kernel::offcpu::OffCpuRecorder::new(Err("tests".to_owned()), 0.0),
        allocations: None,
        access: AccessPolicy::new("profilerd-no-such-group"),
        limits: ServiceLimits {
            max_sessions: 8,
            max_sessions_per_caller: 4,
            max_streams_per_caller: 2,
            max_response_bytes: 64 << 20,
        },
        targets: Targets::new(Box::new(MemoryTargetMaps::default())),
        info: DaemonInfo {
            cpus: vec![0, 1],
            frequency_hz: 100,
            stack_copy_bytes: 0,
            max_profile_duration: Duration::from_secs(60),
            started: Instant::now(),
            peek_signal_off: None,
            http: None,
        },
        budget: None,
        warm_report_indexes: true,
    });
    Fixture {
        service,
        store,
        next_drain_takes,
        _pipeline: pipeline,
        _state: state,
    }
}

/// A thread of `uid` in process `pid`.
fn thread(pid: u32, uid: u32, protected: bool) -> ThreadInfo {
    ThreadInfo {
        pid,
        tid: pid,
        thread_name: Arc::from("app"),
        process_name: Arc::from("app"),
        uid,
        gid: uid,
        protected,
        cgroup: Arc::from("/"),
    }
}

fn location(kind: LocationKind, address: u64, function: &str) -> Arc<SymbolizedLocation> {
    let key = match kind {
        LocationKind::Kernel => LocationKey::Kernel(address),
        _ => LocationKey::Unmapped(address),
    };
    Arc::new(SymbolizedLocation {
        key,
        location: Location {
            kind,
            module: Arc::from(if kind == LocationKind::Kernel {
                "[kernel]"
            } else {
                "/usr/bin/app"
            }),
            address,
            frames: vec![Frame {
                function: Arc::from(function),
                file: None,
                line: 0,
                inlined: false,
            }]
            .into(),
        },
    })
}

/// Stores, `ago` before now, a second of samples: per thread, a stack of
/// `main` and the given function, `count` times.
fn store_samples(
    fixture: &Fixture,
    ago: Duration,
    samples: &[(ThreadInfo, Arc<SymbolizedLocation>, u64)],
) {
    let start = SystemTime::now() - ago;
    let main = location(LocationKind::User, 0x10, "main");
    crate::write_lock(&fixture.store).insert(SymbolizedBatch {
        start,
        end: start + Duration::from_secs(1),
        samples: samples
            .iter()
            .map(|(thread, leaf, count)| SymbolizedSample {
                thread: thread.clone(),
                kind: SampleKind::CpuClock,
                stack: vec![main.clone(), leaf.clone()],
                count: *count,
                weight: count * 10_000_000,
                allocation_id: 0,
                times_ns: Vec::new(),
            })
            .collect(),
        counters: [0; COUNTER_COUNT as usize],
    });
}

fn flat(combine: bool) -> ReportOptions {
    ReportOptions {
        format: Format::Flat,
        combine,
        ..ReportOptions::default()
    }
}

fn last_minute() -> PastWindow {
    PastWindow {
        start: SystemTime::now() - Duration::from_secs(60),
        end: None,
    }
}

fn by_uid(uid: u32) -> SelectorSpec {
    SelectorSpec {
        uids: vec![uid],
        ..SelectorSpec::default()
    }
}

async fn query_text(
    fixture: &Fixture,
    asker: Asker,
    selector: SelectorSpec,
    options: ReportOptions,
) -> String {
    let report = fixture
        .service
        .query(asker, last_minute(), selector, ProfileMode::Cpu, options)
        .await
        .expect("the query is answered");
    String::from_utf8(report.bytes).expect("text")
}

#[tokio::test]
async fn a_user_sees_only_its_own_unprotected_samples() {
    let fixture = fixture();
    store_samples(
        &fixture,
        Duration::from_secs(10),
        &[
            (
                thread(100, 1000, false),
                location(LocationKind::User, 0x20, "mine"),
                3,
            ),
            (
                thread(100, 0, false),
                location(LocationKind::User, 0x30, "roots"),
                4,
            ),
            (
                thread(101, 1000, true),
                location(LocationKind::User, 0x40, "setuid"),
                5,
            ),
        ],
    );
    let text = query_text(&fixture, user(1000), by_uid(1000), flat(true)).await;
    assert!(text.contains(" mine\n"), "{text}");
    assert!(
        !text.contains("roots") && !text.contains("setuid"),
        "{text}"
    );
    // Naming a pid the user does not own is refused while it runs; its
    // past samples would be filtered anyway.
    let everything = query_text(&fixture, ROOT, SelectorSpec::default(), flat(true)).await;
    for function in ["mine", "roots", "setuid"] {
        assert!(everything.contains(function), "{everything}");
    }
    let whole_machine = fixture
        .service
        .query(
            user(1000),
            last_minute(),
            SelectorSpec::default(),
            ProfileMode::Cpu,
            flat(true),
        )
        .await
        .expect_err("a user must name what it asks for");
    assert!(matches!(whole_machine, ServiceError::PermissionDenied(_)));
}

#[tokio::test]
async fn kernel_addresses_are_hidden_from_who_may_not_read_them() {
    let fixture = fixture();
    let kernel = location(LocationKind::Kernel, 0xffff_ffff_8100_1234, "do_syscall_64");
    store_samples(
        &fixture,
        Duration::from_secs(5),
        &[(thread(100, 1000, false), kernel, 2)],
    );
    let as_root = query_text(&fixture, ROOT, by_uid(1000), flat(false)).await;
    assert!(
        as_root.contains("do_syscall_64 @0xffffffff81001234"),
        "{as_root}"
    );
    if user(1000).caller.reads_kernel_addresses() {
        return; // This kernel shows every user its addresses.
    }
    let as_user = query_text(&fixture, user(1000), by_uid(1000), flat(false)).await;
    assert!(as_user.contains("do_syscall_64"), "{as_user}");
    assert!(!as_user.contains("0xffff"), "{as_user}");
}

#[tokio::test]
async fn sessions_are_stopped_by_their_owner_or_by_force() {
    let fixture = fixture();
    let service = &fixture.service;
    let started = service
        .start_session(user(1000), by_uid(1000), ProfileMode::Cpu, false)
        .await
        .expect("a session of its own uid");
    for (asker, force) in [(user(2000), true), (ROOT, false)] {
        let refused = service
            .stop_session(asker, &started.id, force, flat(true))
            .await
            .expect_err("not its session");
        assert!(
            matches!(refused, ServiceError::PermissionDenied(ref message) if message.contains("--force")),
            "{refused}"
        );
    }
    assert_eq!(service.list_sessions(user(2000)).len(), 0);
    assert_eq!(service.list_sessions(ROOT).len(), 1);
    assert_eq!(service.list_sessions(user(1000))[0].0, started.id);
    service
        .stop_session(ROOT, &started.id, true, flat(true))
        .await
        .expect("root stops it by force");
    let gone = service
        .stop_session(user(1000), &started.id, false, flat(true))
        .await
        .expect_err("stopped already");
    assert!(matches!(gone, ServiceError::NotFound(_)), "{gone}");
    let children = service
        .start_session(ROOT, by_uid(0), ProfileMode::Cpu, true)
        .await
        .expect_err("following children names one process");
    assert!(
        matches!(children, ServiceError::InvalidArgument(_)),
        "{children}"
    );
}

#[tokio::test]
async fn a_profile_cut_short_reports_what_it_has_and_says_so() {
    let fixture = Arc::new(fixture());
    let spec = ProfileSpec {
        duration: Duration::from_secs(30),
        selector: SelectorSpec {
            pids: vec![0],
            ..SelectorSpec::default()
        },
        mode: ProfileMode::Cpu,
        options: flat(true),
        cut_token: Some("cut-me".to_owned()),
        frequency_hz: None,
    };
    let profiling = tokio::spawn({
        let fixture = fixture.clone();
        async move { fixture.service.profile(ROOT, spec).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Only the caller that started it can cut it.
    assert!(!fixture.service.cut_profile(user(5), "cut-me").unwrap());
    assert!(fixture.service.cut_profile(ROOT, "cut-me").unwrap());
    let report = tokio::time::timeout(Duration::from_secs(5), profiling)
        .await
        .expect("the profile ends at once")
        .expect("the task ends")
        .expect("it reports");
    assert!(report.summary.cut_short);
    assert!(!fixture.service.cut_profile(ROOT, "cut-me").unwrap());
}

#[tokio::test]
async fn a_profile_whose_window_opens_late_is_as_long_as_asked_and_says_so() {
    let fixture = fixture();
    *crate::lock(&fixture.next_drain_takes) = Duration::from_millis(1500);
    let spec = ProfileSpec {
        duration: Duration::from_secs(1),
        selector: SelectorSpec {
            pids: vec![0],
            ..SelectorSpec::default()
        },
        mode: ProfileMode::Cpu,
        options: flat(true),
        cut_token: None,
        frequency_hz: None,
    };
    let report = fixture
        .service
        .profile(ROOT, spec)
        .await
        .expect("it reports");
    let summary = &report.summary;
    let covered = summary
        .end
        .unwrap()
        .duration_since(summary.start.unwrap())
        .unwrap();
    assert!(covered >= Duration::from_millis(990), "{covered:?}");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.starts_with("the window began 1s")),
        "{:?}",
        summary.warnings
    );
}

#[tokio::test]
async fn bad_requests_are_refused_before_anything_happens() {
    let fixture = fixture();
    let service = &fixture.service;
    let now = SystemTime::now();
    let backwards = PastWindow {
        start: now - Duration::from_secs(10),
        end: Some(now - Duration::from_secs(20)),
    };
    let err = service
        .query(
            ROOT,
            backwards,
            SelectorSpec::default(),
            ProfileMode::Cpu,
            flat(true),
        )
        .await
        .expect_err("a window that ends before it starts");
    assert!(
        err.to_string().contains("must start before it ends") && !err.to_string().contains("nanos"),
        "{err}"
    );
    for duration in [Duration::ZERO, Duration::from_secs(3600)] {
        let err = service
            .profile(
                ROOT,
                ProfileSpec {
                    duration,
                    selector: SelectorSpec::default(),
                    mode: ProfileMode::Cpu,
                    options: flat(true),
                    cut_token: None,
                    frequency_hz: None,
                },
            )
            .await
            .expect_err("out of bounds");
        assert!(matches!(err, ServiceError::InvalidArgument(_)), "{err}");
    }
    let err = service
        .top(
            ROOT,
            TopSpec {
                selector: SelectorSpec::default(),
                interval: Some(Duration::from_millis(5)),
                limit: None,
                kernel: true,
                mode: ProfileMode::Cpu,
            },
        )
        .expect_err("too short an interval");
    assert!(err.to_string().contains("100ms to 1m"), "{err}");
    let err = service
        .callers(ROOT, last_minute(), SelectorSpec::default(), String::new())
        .await
        .expect_err("no function");
    assert!(matches!(err, ServiceError::InvalidArgument(_)), "{err}");
}

#[tokio::test]
async fn targets_are_root_s_to_see_and_to_set() {
    let fixture = fixture();
    let service = &fixture.service;
    let me = std::process::id();
    let set = TargetSet {
        pids: vec![me],
        cgroups: Vec::new(),
    };
    let refused = service
        .set_targets(user(1000), set.clone())
        .expect_err("users may not");
    assert!(matches!(refused, ServiceError::PermissionDenied(_)));
    assert_eq!(service.set_targets(ROOT, set.clone()).unwrap(), set);
    assert_eq!(service.status(ROOT).targets, Some(set));
    assert_eq!(service.status(user(1000)).targets, None);
    let status = service.status(user(1000));
    assert_eq!(status.cpus, [0, 1]);
    assert!(!status.peek.protection.active);
}

#[tokio::test]
async fn diffs_callers_and_top_read_the_same_store() {
    let fixture = fixture();
    let app = thread(100, 0, false);
    store_samples(
        &fixture,
        Duration::from_secs(30),
        &[(
            app.clone(),
            location(LocationKind::User, 0x20, "old_work"),
            8,
        )],
    );
    store_samples(
        &fixture,
        Duration::from_secs(5),
        &[(app, location(LocationKind::User, 0x30, "new_work"), 8)],
    );
    let now = SystemTime::now();
    let diff = fixture
        .service
        .diff(
            ROOT,
            super::DiffSpec {
                base: PastWindow {
                    start: now - Duration::from_secs(40),
                    end: Some(now - Duration::from_secs(20)),
                },
                target: PastWindow {
                    start: now - Duration::from_secs(10),
                    end: None,
                },
                selector: SelectorSpec::default(),
                target_selector: None,
                limit: None,
                drawing: None,
                normalize: false,
                functions: Vec::new(),
            },
        )
        .await
        .expect("a diff");
    assert_eq!((diff.base.samples, diff.target.samples), (8, 8));
    assert!(diff.text.starts_with("base:   "), "{}", diff.text);
    let change = |name: &str| {
        diff.changes
            .iter()
            .find(|change| &*change.function == name)
            .unwrap_or_else(|| panic!("{name} in {:?}", diff.changes))
            .self_change()
    };
    assert!(change("old_work") < -99.0 && change("new_work") > 99.0);

    let callers = fixture
        .service
        .callers(
            ROOT,
            last_minute(),
            SelectorSpec::default(),
            "new_work".to_owned(),
        )
        .await
        .expect("callers");
    assert_eq!(callers.total, 8);
    assert_eq!(&*callers.callers[0].function, "main");

    let mut updates = fixture
        .service
        .top(
            ROOT,
            TopSpec {
                selector: SelectorSpec::default(),
                interval: Some(Duration::from_millis(100)),
                limit: Some(5),
                kernel: true,
                mode: ProfileMode::Cpu,
            },
        )
        .expect("a top stream");
    let first = tokio::time::timeout(Duration::from_secs(5), updates.recv())
        .await
        .expect("an update comes")
        .expect("the stream is open")
        .expect("an update, not an error");
    assert!(first.functions.len() <= 5);
    // The stream slots are bounded per caller: two are open at most.
    let every_process = || TopSpec {
        selector: SelectorSpec::default(),
        interval: None,
        limit: None,
        kernel: true,
        mode: ProfileMode::Cpu,
    };
    let _second = fixture
        .service
        .top(ROOT, every_process())
        .expect("a second stream");
    let third = fixture.service.top(ROOT, every_process());
    assert!(matches!(third, Err(ServiceError::ResourceExhausted(_))));
}

/// Stores 8 samples of `work` in one process and 3 of `rest` in another.
fn store_work_and_rest(fixture: &Fixture) {
    let (app, other) = (thread(100, 0, false), thread(200, 0, false));
    store_samples(
        fixture,
        Duration::from_secs(5),
        &[
            (app, location(LocationKind::User, 0x20, "work"), 8),
            (other, location(LocationKind::User, 0x30, "rest"), 3),
        ],
    );
}

/// The warm indexes are built as the store fills, before any report asks,
/// stay when no report asks, and serve the reports of the whole machine.
#[tokio::test]
async fn warm_indexes_are_built_before_reports_ask() {
    let fixture = fixture();
    let indexes = fixture.service.stack_indexes.clone();
    let empty = indexes.bytes();
    store_work_and_rest(&fixture);
    indexes.keep_current(&fixture.store);
    let warm = indexes.bytes();
    assert!(warm > empty, "the warm indexes took in the stored stacks");
    // Kept however long no report asks.
    indexes.live_at(Instant::now() + super::stack_indexes::STACK_INDEX_IDLE * 2);
    assert_eq!(indexes.bytes(), warm);

    let none = |format| ReportOptions {
        format,
        groupby: GroupBy::None,
        ..ReportOptions::default()
    };
    let tree = query_text(&fixture, ROOT, SelectorSpec::default(), none(Format::Tree)).await;
    assert!(tree.contains("work") && tree.contains("rest"), "{tree}");
    let folded = query_text(
        &fixture,
        ROOT,
        SelectorSpec::default(),
        none(Format::Folded),
    )
    .await;
    assert_eq!(folded, "main;rest 3\nmain;work 8\n");
    // Served by the warm indexes: no other index was made.
    assert_eq!(indexes.bytes(), warm);
}

/// The refresher lets a warm index no report asks for fall further behind
/// the store (an eighth of its stacks) than one asked for (a 64th).
#[test]
fn warm_indexes_nobody_asks_for_are_refreshed_less_often() {
    use super::stack_indexes::{STACK_INDEX_IDLE, STACK_INDEX_IDLE_LAG, STACK_INDEX_LAG};
    let indexes = super::stack_indexes::StackIndexes::warmed();
    let lags = |at: Instant| -> Vec<usize> {
        let mut lags: Vec<usize> = (indexes.live_with_lag(at).into_iter())
            .map(|(_, lag)| lag)
            .collect();
        lags.sort_unstable();
        lags
    };
    let now = Instant::now();
    assert_eq!(lags(now), [STACK_INDEX_IDLE_LAG; 2], "never asked for");
    let tree = ReportOptions {
        format: Format::Tree,
        groupby: GroupBy::None,
        ..ReportOptions::default()
    };
    let key = crate::report::StackIndexKey::of(&tree, false).expect("the tree has an index");
    indexes.get(key, 0).expect("the warm tree index");
    assert_eq!(lags(now), [STACK_INDEX_IDLE_LAG, STACK_INDEX_LAG]);
    let later = now + STACK_INDEX_IDLE * 2;
    assert_eq!(
        lags(later),
        [STACK_INDEX_IDLE_LAG; 2],
        "not asked for since"
    );
}

/// Indexes past their share of the memory budget are let go of, and not
/// built again (reports are made without them) until the store holds half
/// the stacks it held then.
#[tokio::test]
async fn indexes_too_large_for_their_share_are_let_go_of_and_not_built_again() {
    let fixture = fixture();
    store_work_and_rest(&fixture);
    // What the two warm indexes hold once built.
    let unbounded = super::stack_indexes::StackIndexes::warmed();
    unbounded.keep_current(&fixture.store);
    let built = unbounded.bytes();
    let indexes = super::stack_indexes::StackIndexes::warmed().with_limit(built - 1);
    indexes.keep_current(&fixture.store);
    assert_eq!(indexes.bytes(), built);
    // Past the limit: the one asked for least recently goes.
    indexes.keep_current(&fixture.store);
    assert_eq!(indexes.evicted(), 1);
    assert!(indexes.bytes() < built);
    let key = |format| {
        crate::report::StackIndexKey::of(
            &ReportOptions {
                format,
                groupby: GroupBy::None,
                ..ReportOptions::default()
            },
            false,
        )
        .expect("an index")
    };
    let stacks = crate::read_lock(&fixture.store).stack_count();
    let (tree, folded) = (key(Format::Tree), key(Format::Folded));
    assert!(
        indexes.get(tree, stacks).is_none() != indexes.get(folded, stacks).is_none(),
        "the one let go of is not built again, the other is kept"
    );
    let key = if indexes.get(tree, stacks).is_none() {
        tree
    } else {
        folded
    };
    // Once the store holds half as many stacks, it may be.
    assert!(indexes.get(key, stacks / 2).is_some());
}

/// An allocation profile's one process: by pid, or the only match of a
/// name the asker may profile; refusals say what to give instead.
#[test]
fn an_allocation_profile_selects_exactly_one_process() {
    let fixture = fixture();
    let service = &fixture.service;
    let own = std::process::id();
    let pids = |pids: &[u32]| SelectorSpec {
        pids: pids.to_vec(),
        ..SelectorSpec::default()
    };
    assert_eq!(service.one_process(ROOT, pids(&[own])).unwrap(), own);
    let said = |result: Result<u32, ServiceError>| match result {
        Err(err) => err,
        Ok(pid) => panic!("{pid} selected"),
    };
    let none = said(service.one_process(ROOT, SelectorSpec::default()));
    assert!(
        matches!(&none, ServiceError::InvalidArgument(text) if text.contains("pid=P")),
        "{none}"
    );
    let two = said(service.one_process(ROOT, pids(&[own, 1])));
    assert!(two.to_string().contains("2 process ids are given"), "{two}");
    let nothing = said(service.one_process(
        ROOT,
        SelectorSpec {
            comm_regex: "^no such command here$".to_owned(),
            ..SelectorSpec::default()
        },
    ));
    assert!(
        matches!(&nothing, ServiceError::NotFound(text) if text.contains("no running process")),
        "{nothing}"
    );
    // Process 1 is root's: matched by its name, and not nobody's to profile.
    let init = std::fs::read_to_string("/proc/1/comm").expect("/proc/1/comm");
    let by_name = SelectorSpec {
        comms: vec![init.trim_end().to_owned()],
        ..SelectorSpec::default()
    };
    let refused = said(service.one_process(user(65534), by_name.clone()));
    assert!(
        matches!(&refused, ServiceError::PermissionDenied(text) if text.contains("none is one you may profile")),
        "{refused}"
    );
    if let Ok(pid) = service.one_process(ROOT, by_name) {
        assert_eq!(
            std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap(),
            init
        );
    }
}

#[test]
fn allocations_off_says_so() {
    let fixture = fixture();
    let off = fixture
        .service
        .allocations_off()
        .expect("no allocation profiler");
    assert!(
        matches!(&off, ServiceError::FailedPrecondition(text) if text.contains("allocation profiling is off")),
        "{off}"
    );
}
