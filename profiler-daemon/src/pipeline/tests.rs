use std::{sync::Arc, time::UNIX_EPOCH};

use profiler_common::SampleKind;

use super::{testing::QueuedSource, *};
use crate::{
    kernel::drain::RawSample,
    store::{Query, SampleAccess, Selector, StoreSettings},
};

/// A sample of this very process at `address` of its code.
fn sample_here(address: u64, kind: SampleKind, count: u64) -> RawSample {
    let pid = std::process::id();
    RawSample {
        pid,
        tid: pid,
        uid: 0,
        gid: 0,
        cgroup: 0,
        thread_name: Arc::from("pipeline-test"),
        kind,
        flags: 0,
        user: Arc::from([address]),
        user_stop: None,
        kernel: Arc::from([]),
        count,
        weight: count * 1_000_000,
        allocation_id: 0,
        times_ns: Vec::new(),
    }
}

fn store() -> Arc<RwLock<Store>> {
    Arc::new(RwLock::new(Store::new(StoreSettings {
        retention: Duration::from_secs(3600),
        resolution: Duration::from_secs(10),
        memory_limit: 64 << 20,
    })))
}

/// Starts a pipeline over `source` (whose own drains are a minute
/// apart) and closes a window, so that it drains once; returns it
/// running, with the window's end.
fn drain_once(
    source: QueuedSource,
    store: &Arc<RwLock<Store>>,
    inbox: Arc<SampleInbox>,
) -> (Pipeline, SystemTime) {
    let pipeline = Pipeline::start_with(
        Box::new(source),
        None,
        None,
        store.clone(),
        Inboxes {
            peeks: inbox,
            ..Inboxes::default()
        },
        DrainIntervals {
            every: Duration::from_secs(60),
            watched: Duration::from_secs(60),
        },
        PipelineBounds::default(),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = runtime.block_on(pipeline.handle().close_window()).unwrap();
    (pipeline, end)
}

#[test]
fn samples_go_from_the_source_to_the_store_named() {
    let here = samples_go_from_the_source_to_the_store_named as *const ();
    let source = QueuedSource::default();
    lock(&source.queue).push_back(vec![sample_here(here as u64, SampleKind::CpuClock, 5)]);
    let (store, inbox) = (store(), Arc::new(SampleInbox::default()));
    let (pipeline, end) = drain_once(source, &store, inbox);

    let profile = crate::read_lock(&store).profile(&Query {
        start: UNIX_EPOCH,
        end,
        selector: Selector::default(),
        access: SampleAccess::All,
        mode: crate::profile::ProfileMode::Cpu,
        frequency_hz: 1000,
    });
    assert_eq!(profile.total_samples(), 5);
    let leaf = &profile.locations[*profile.stacks.get(0).unwrap().last().unwrap() as usize];
    assert!(
        leaf.frames
            .iter()
            .any(|frame| frame.function.contains("samples_go_from_the_source")),
        "the sample is named: {leaf:?}"
    );
    assert_eq!(pipeline.handle().stats().drains, 1);
}

#[test]
fn the_samples_of_a_peek_go_to_its_inbox_not_the_store() {
    let here = the_samples_of_a_peek_go_to_its_inbox_not_the_store as *const ();
    let source = QueuedSource::default();
    lock(&source.queue).push_back(vec![
        sample_here(here as u64, SampleKind::Peek, 2),
        sample_here(here as u64, SampleKind::CpuClock, 1),
    ]);
    let (store, inbox) = (store(), Arc::new(SampleInbox::default()));
    inbox.open(std::process::id());
    let (pipeline, _) = drain_once(source, &store, inbox.clone());
    let peeked = inbox.close(std::process::id());
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].count, 2);
    assert_eq!(crate::read_lock(&store).stats().buckets, 1);
    drop(pipeline);
}

#[test]
fn a_dropped_pipeline_stops_without_waiting_for_its_next_drain() {
    let (store, inbox) = (store(), Arc::new(SampleInbox::default()));
    let (pipeline, _) = drain_once(QueuedSource::default(), &store, inbox);
    let (dropped, done) = mpsc::channel();
    std::thread::spawn(move || {
        drop(pipeline);
        let _ = dropped.send(());
    });
    // Its next drain is a minute away; its threads are told to stop.
    assert!(
        done.recv_timeout(Duration::from_secs(20)).is_ok(),
        "dropping the pipeline waited for its drain schedule"
    );
}
