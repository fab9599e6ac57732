use std::time::UNIX_EPOCH;

use profiler_common::COUNTER_COUNT;

use super::{retention::MAX_COARSENING, *};
use crate::{
    profile::{Frame, Location, LocationKind, LossCause, Profile, ProfileMode},
    symbols::symbolizer::SymbolizedSample,
};

fn location(name: &str) -> Arc<SymbolizedLocation> {
    // One address per name.
    let address = {
        use std::hash::{DefaultHasher, Hash as _, Hasher as _};
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        hasher.finish()
    };
    Arc::new(SymbolizedLocation {
        key: LocationKey::Kernel(address),
        location: Location {
            kind: LocationKind::Kernel,
            module: Arc::from("[kernel]"),
            address: 0,
            frames: vec![Frame {
                function: Arc::from(name),
                file: None,
                line: 0,
                inlined: false,
            }]
            .into(),
        },
    })
}

fn thread(pid: u32, tid: u32, name: &str) -> ThreadInfo {
    ThreadInfo {
        pid,
        tid,
        thread_name: Arc::from(name),
        process_name: Arc::from(name),
        uid: 0,
        gid: 0,
        protected: false,
        cgroup: Arc::from("/"),
    }
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn batch(start: u64, samples: &[(u32, &[&str], u64)]) -> SymbolizedBatch {
    SymbolizedBatch {
        start: at(start),
        end: at(start + 1),
        samples: samples
            .iter()
            .map(|&(pid, stack, count)| SymbolizedSample {
                thread: thread(pid, pid, &format!("p{pid}")),
                kind: SampleKind::CpuClock,
                stack: stack.iter().map(|name| location(name)).collect(),
                count,
                weight: count * 10,
                allocation_id: 0,
                times_ns: Vec::new(),
            })
            .collect(),
        counters: [0; COUNTER_COUNT as usize],
    }
}

/// A store of 1 s buckets, as the batches below are.
fn store(retention_secs: u64, memory_limit: u64) -> Store {
    Store::new(StoreSettings {
        retention: Duration::from_secs(retention_secs),
        resolution: Duration::from_secs(1),
        memory_limit,
    })
}

fn query(start: u64, end: u64, selector: Selector) -> Query {
    Query {
        start: at(start),
        end: at(end),
        selector,
        access: SampleAccess::All,
        mode: crate::profile::ProfileMode::Cpu,
        frequency_hz: 100,
    }
}

fn counts_by_leaf(profile: &Profile) -> Vec<(String, u64)> {
    let mut counts: Vec<_> = profile
        .samples
        .iter()
        .map(|sample| {
            let stack = profile.stacks.get(sample.stack).unwrap();
            let leaf = &profile.locations[*stack.last().unwrap() as usize];
            (leaf.frames[0].function.to_string(), sample.count)
        })
        .collect();
    counts.sort();
    counts
}

#[test]
fn windows_select_whole_buckets_and_aggregate() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3)]));
    store.insert_and_compact(batch(1, &[(1, &["main", "a"], 2), (1, &["main", "b"], 1)]));
    store.insert_and_compact(batch(2, &[(1, &["main", "b"], 7)]));
    let all = store.profile(&query(0, 3, Selector::default()));
    assert_eq!(counts_by_leaf(&all), [("a".into(), 5), ("b".into(), 8)]);
    assert_eq!(all.samples.iter().map(|s| s.weight).sum::<u64>(), 130);
    let middle = store.profile(&query(1, 2, Selector::default()));
    assert_eq!(counts_by_leaf(&middle), [("a".into(), 2), ("b".into(), 1)]);
    assert!(middle.warnings.is_empty());
}

#[test]
fn waits_are_kept_in_nanoseconds_and_reported_by_mode() {
    let mut store = store(600, 1 << 30);
    let mut second = batch(1, &[(1, &["main", "spin"], 3)]);
    let wait = |stack: &[&str], kind, nanos| SymbolizedSample {
        thread: thread(1, 1, "p1"),
        kind,
        stack: stack.iter().map(|name| location(name)).collect(),
        count: 1,
        weight: nanos,
        allocation_id: 0,
        times_ns: Vec::new(),
    };
    // As the symbolizer hands them over: the wait's marker at the leaf.
    second.samples.push(wait(
        &["main", "read", "[off-cpu: S]"],
        SampleKind::OffCpuSleeping,
        44_000_000,
    ));
    second.samples.push(wait(
        &["main", "read", "[runqueue]"],
        SampleKind::RunQueue,
        4_000_000,
    ));
    store.insert_and_compact(batch(0, &[(1, &["main", "spin"], 2)]));
    store.insert_and_compact(second);
    // The same wait credited again in the next drain adds up.
    let mut third = batch(2, &[]);
    third.samples.push(wait(
        &["main", "read", "[off-cpu: S]"],
        SampleKind::OffCpuSleeping,
        6_000_000,
    ));
    store.insert_and_compact(third);
    let by_mode = |store: &Store, mode| {
        let profile = store.profile(&Query {
            mode,
            ..query(0, 3, Selector::default())
        });
        let mut samples: Vec<_> = profile
            .samples
            .iter()
            .map(|sample| (sample.state, sample.count, sample.weight))
            .collect();
        samples.sort();
        samples
    };
    // At 100 Hz a sample stands for 10 ms: 50 ms asleep make 5.
    assert_eq!(
        by_mode(&store, ProfileMode::Cpu),
        [(ThreadState::Cpu, 5, 50)]
    );
    assert_eq!(
        by_mode(&store, ProfileMode::OffCpu),
        [
            (ThreadState::Sleeping, 5, 50_000_000),
            (ThreadState::RunQueue, 0, 4_000_000)
        ]
    );
    assert_eq!(by_mode(&store, ProfileMode::Wall).len(), 3);
    // Merged buckets keep the waits.
    store.compact(at(3));
    assert_eq!(
        by_mode(&store, ProfileMode::OffCpu)[0],
        (ThreadState::Sleeping, 5, 50_000_000)
    );
}

#[test]
fn selectors_filter_threads() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["x"], 1), (2, &["y"], 2), (3, &["z"], 4)]));
    let by_pid = Selector {
        pids: vec![2, 3],
        ..Selector::default()
    };
    assert_eq!(
        counts_by_leaf(&store.profile(&query(0, 1, by_pid))),
        [("y".into(), 2), ("z".into(), 4)]
    );
    let by_comm = Selector {
        comms: vec!["p3".into()],
        ..Selector::default()
    };
    assert_eq!(
        counts_by_leaf(&store.profile(&query(0, 1, by_comm))),
        [("z".into(), 4)]
    );
    let nothing = Selector {
        pids: vec![1],
        tids: vec![2],
        ..Selector::default()
    };
    assert!(store.profile(&query(0, 1, nothing)).samples.is_empty());
}

#[test]
fn selectors_by_pattern_uid_and_cgroup() {
    let thread = ThreadInfo {
        uid: 33,
        gid: 33,
        protected: false,
        cgroup: Arc::from("/system.slice/nginx.service"),
        ..thread(7, 8, "nginx-worker")
    };
    let matches = |selector: Selector| selector.matches(&thread);
    let pattern = |text: &str| Some(CommPattern(regex::Regex::new(text).unwrap()));
    assert!(matches(Selector {
        comm_pattern: pattern("^nginx"),
        ..Selector::default()
    }));
    assert!(!matches(Selector {
        comm_pattern: pattern("^apache"),
        ..Selector::default()
    }));
    assert!(matches(Selector {
        uids: vec![0, 33],
        cgroups: vec!["/system.slice".into()],
        ..Selector::default()
    }));
    assert!(!matches(Selector {
        uids: vec![0],
        ..Selector::default()
    }));
    assert!(!matches(Selector {
        cgroups: vec!["/user.slice".into()],
        ..Selector::default()
    }));
}

#[test]
fn retention_expires_old_buckets_and_says_so() {
    let mut store = store(10, 1 << 30);
    for second in 0..30 {
        store.insert_and_compact(batch(second, &[(1, &["main"], 1)]));
    }
    assert_eq!(store.stats().buckets, 11);
    let profile = store.profile(&query(0, 30, Selector::default()));
    assert_eq!(profile.total_samples(), 11);
    assert_eq!(profile.warnings.len(), 1, "{:?}", profile.warnings);
    assert!(profile.warnings[0].contains("no longer held"));
    let before_start = store.profile(&Query {
        start: at(0) - Duration::from_secs(5),
        ..query(0, 30, Selector::default())
    });
    assert!(before_start.warnings[0].contains("no longer held"));
}

#[test]
fn a_window_from_before_the_start_says_so() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(10, &[(1, &["main"], 1)]));
    let profile = store.profile(&query(0, 11, Selector::default()));
    assert_eq!(profile.total_samples(), 1);
    assert!(
        profile.warnings[0].contains("before the daemon started sampling"),
        "{:?}",
        profile.warnings
    );
}

#[test]
fn memory_ceiling_holds_and_counts_what_it_drops() {
    let mut store = store(3600, 64 * 1024);
    for second in 0..200 {
        let names: Vec<String> = (0..20).map(|i| format!("f{second}_{i}")).collect();
        let stack: Vec<&str> = names.iter().map(String::as_str).collect();
        store.insert_and_compact(batch(second, &[(second as u32, &stack, 1)]));
        assert!(store.memory_bytes() <= 64 * 1024 || store.stats().buckets == 1);
    }
    let stats = store.stats();
    assert!(stats.buckets_evicted_for_memory > 0);
    assert!(stats.buckets < 200);
    let profile = store.profile(&query(0, 200, Selector::default()));
    assert!(
        profile
            .lost
            .iter()
            .any(|&(cause, count)| cause == LossCause::MemoryCeiling && count > 0)
    );
    // Compaction kept the tables in step with the buckets.
    assert!(stats.distinct_stacks <= stats.buckets + 16);
}

#[test]
fn the_ceiling_drops_no_more_history_than_it_must() {
    // Every second with stacks of its own: the tables are most of the
    // store, and a dropped bucket frees its share only once they are
    // compacted.
    let insert = |store: &mut Store, second: u64| {
        let names: Vec<Vec<String>> = (0..10)
            .map(|stack| (0..10).map(|i| format!("g{second}_{stack}_{i}")).collect())
            .collect();
        let stacks: Vec<Vec<&str>> = names
            .iter()
            .map(|stack| stack.iter().map(String::as_str).collect())
            .collect();
        let samples: Vec<(u32, &[&str], u64)> =
            stacks.iter().map(|stack| (1, &stack[..], 1)).collect();
        store.insert_and_compact(batch(second, &samples));
    };
    let mut store = store(3600, 1 << 30);
    for second in 0..30 {
        insert(&mut store, second);
    }
    // Room for the 30 seconds so far.
    let limit = store.memory_bytes();
    store.settings.memory_limit = limit;
    for second in 30..150 {
        insert(&mut store, second);
        let held = store.memory_bytes();
        assert!(held <= limit, "{held} over {limit} at {second}");
        // A margin under the ceiling, not most of the history.
        assert!(
            held >= limit / 4 * 3,
            "{held} of {limit} at {second}: {:?}",
            store.stats()
        );
    }
    let stats = store.stats();
    assert!(stats.buckets_evicted_for_memory > 0, "{stats:?}");
    let profile = store.profile(&query(0, 150, Selector::default()));
    let seconds_held = profile.total_samples() / 10;
    assert!(seconds_held >= 20, "{seconds_held} s of 30 held: {stats:?}");
}

#[test]
fn compaction_preserves_profiles() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3), (2, &["main", "b"], 1)]));
    store.insert_and_compact(batch(1, &[(1, &["main", "b"], 2)]));
    let before = counts_by_leaf(&store.profile(&query(0, 2, Selector::default())));
    store.compact(at(2));
    let after = counts_by_leaf(&store.profile(&query(0, 2, Selector::default())));
    assert_eq!(before, after);
}

/// A compaction planned under the read lock is put in place only if no
/// batch came meanwhile: a batch may use again a stack the plan left out.
#[test]
fn a_compaction_planned_before_a_batch_is_dropped() {
    let mut store = store(3, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["main", "old"], 3)]));
    for second in 1..8 {
        store.insert_and_compact(batch(second, &[(1, &["main", "new"], 1)]));
    }
    let later = SystemTime::now() + Duration::from_secs(61);
    assert!(store.compaction_due(later), "the first bucket expired");
    let stale = store.plan_compaction();
    // The stack the plan leaves out comes back.
    store.insert_and_compact(batch(8, &[(1, &["main", "old"], 2)]));
    let before = counts_by_leaf(&store.profile(&query(0, 9, Selector::default())));
    assert!(!store.apply_compaction(stale, later));
    assert_eq!(store.generation(), 0);
    assert!(store.compaction_due(later));
    let plan = store.plan_compaction();
    assert!(store.apply_compaction(plan, later));
    assert_eq!(store.generation(), 1);
    assert!(!store.compaction_due(later), "done");
    let after = counts_by_leaf(&store.profile(&query(0, 9, Selector::default())));
    assert_eq!(before, after);
    assert!(after.contains(&("old".to_owned(), 2)), "{after:?}");
}

#[test]
fn complete_spans_are_merged_at_the_resolution() {
    let mut store = Store::new(StoreSettings {
        retention: Duration::from_secs(3600),
        resolution: Duration::from_secs(10),
        memory_limit: 1 << 30,
    });
    let hold = store.holds().hold(at(5));
    for second in 0..25 {
        let leaf = if second < 10 { "a" } else { "b" };
        store.insert_and_compact(batch(second, &[(1, &["main", leaf], 2), (2, &["main"], 1)]));
    }
    assert_eq!(store.stats().buckets, 25, "an open window holds them");
    drop(hold);
    store.insert_and_compact(batch(25, &[(1, &["main", "b"], 2), (2, &["main"], 1)]));
    // Spans [0, 10) and [10, 20) are complete: one bucket each.
    let stats = store.stats();
    assert_eq!(stats.buckets, 2 + 6, "{stats:?}");
    assert_eq!(stats.coarsest_bucket, Duration::from_secs(10));
    assert_eq!(stats.buckets_coarsened_for_memory, 0);
    let all = store.profile(&query(0, 26, Selector::default()));
    assert_eq!(
        counts_by_leaf(&all),
        [("a".into(), 20), ("b".into(), 32), ("main".into(), 26)]
    );
    assert_eq!(all.samples.iter().map(|s| s.weight).sum::<u64>(), 780);
    // Past windows are whole buckets now: the second span, not a part.
    let part = store.profile(&query(12, 14, Selector::default()));
    assert!(part.samples.is_empty(), "{:?}", counts_by_leaf(&part));
    let second_span = store.profile(&query(10, 20, Selector::default()));
    assert_eq!(
        counts_by_leaf(&second_span),
        [("b".into(), 20), ("main".into(), 10)]
    );
}

#[test]
fn at_the_ceiling_an_insert_drops_buckets_and_leaves_the_compaction_to_its_caller() {
    // Under the write lock, an insert must not rebuild the tables (tens of
    // milliseconds of a busy window's stacks, every report waiting): it
    // drops the oldest buckets and asks for a compaction at once.
    let mut store = store(3600, 1 << 30);
    let stack_of =
        |second: u64| -> Vec<String> { (0..10).map(|i| format!("h{second}_{i}")).collect() };
    for second in 0..30 {
        let names = stack_of(second);
        let stack: Vec<&str> = names.iter().map(String::as_str).collect();
        store.insert_and_compact(batch(second, &[(1, &stack, 1)]));
    }
    // A quarter less than the 30 seconds hold: more than coarsening frees.
    store.settings.memory_limit = store.memory_bytes() / 4 * 3;
    let now = SystemTime::now();
    let generation = store.generation();
    let names = stack_of(30);
    let stack: Vec<&str> = names.iter().map(String::as_str).collect();
    store.insert(batch(30, &[(1, &stack, 1)]));
    assert_eq!(store.generation(), generation, "the insert compacted");
    assert!(store.stats().buckets_evicted_for_memory > 0);
    assert!(store.compaction_due(now), "a compaction is due at once");
    store.compact_when_due(now);
    assert_eq!(store.generation(), generation + 1);
    assert!(store.memory_bytes() <= store.settings.memory_limit);
    assert!(!store.compaction_due(now));
}

#[test]
fn the_ceiling_coarsens_before_it_drops() {
    let threads: Vec<(u32, &[&str], u64)> = (0..200)
        .map(|pid| (pid, &["main", "work"][..], 1))
        .collect();
    let mut store = store(3600, 1 << 30);
    store.insert_and_compact(batch(0, &threads));
    let first = store.memory_bytes();
    store.insert_and_compact(batch(1, &threads));
    let one_bucket = store.memory_bytes() - first;
    // Room for 70 buckets of these, not 100: merging the older half (up
    // to 6 into one) keeps them all.
    store.settings.memory_limit = first + one_bucket * 70;
    for second in 2..100 {
        store.insert_and_compact(batch(second, &threads));
        assert!(store.memory_bytes() <= store.settings.memory_limit);
    }
    let stats = store.stats();
    assert!(stats.buckets_coarsened_for_memory > 0, "{stats:?}");
    assert_eq!(stats.buckets_evicted_for_memory, 0, "{stats:?}");
    assert!(stats.coarsest_bucket > Duration::from_secs(1));
    assert!(stats.coarsest_bucket <= Duration::from_secs(u64::from(MAX_COARSENING)));
    let all = store.profile(&query(0, 100, Selector::default()));
    assert_eq!(all.total_samples(), 200 * 100);
    assert!(all.lost.is_empty(), "{:?}", all.lost);
    // Merging buckets frees no stack: nothing was compacted for it.
    assert_eq!(store.generation(), 0, "no bucket dropped, no compaction");
}

/// A stack index follows the store through a compaction (its stacks kept
/// in order, renumbered), and makes the same reports as the store's own
/// profile before and after; one that missed a compaction starts anew.
#[test]
fn a_stack_index_follows_a_compaction() {
    use crate::profile::{Format, GroupBy, ReportOptions};
    use crate::report::{self, StackIndex, StackIndexKey};

    let mut store = store(600, 1 << 30);
    let names = ["main", "a", "b", "c", "d", "e"];
    let stack_of = |second: u64, variant: u64| -> Vec<&str> {
        let mut stack = vec!["main"];
        let mut value = second * 7 + variant * 3;
        for _ in 0..(1 + (second + variant) % 4) {
            stack.push(names[1 + (value % 5) as usize]);
            value /= 5;
        }
        stack
    };
    let insert = |store: &mut Store, second: u64| {
        let stacks: Vec<Vec<&str>> = (0..3).map(|variant| stack_of(second, variant)).collect();
        let samples: Vec<(u32, &[&str], u64)> = (0u32..)
            .zip(&stacks)
            .map(|(pid, stack)| (1 + pid % 2, stack.as_slice(), 1 + second % 3))
            .collect();
        store.insert_and_compact(batch(second, &samples));
    };
    for second in 0..20 {
        insert(&mut store, second);
    }
    let extend = crate::service::stack_indexes::extend_index;
    let formats = [Format::Tree, Format::Folded];
    // The test's locations are kernel ones: shown, not one marker.
    let keys = formats.map(|format| {
        let options = ReportOptions {
            format,
            kernel: true,
            ..ReportOptions::default()
        };
        StackIndexKey::of(&options, false).expect("indexed")
    });
    let mut indexes = keys.map(StackIndex::new);
    let check = |store: &Store, indexes: &[StackIndex]| {
        let window = query(0, 40, Selector::default());
        let (profile, by_ids) = (
            store.profile(&window),
            store.profile_of_store_stacks(&window, SumBy::ThreadAndStack),
        );
        let summed_by_ids = store.profile_of_store_stacks(&window, SumBy::Stack);
        for (format, index) in formats.iter().zip(indexes) {
            for groupby in [GroupBy::None, GroupBy::Process] {
                let options = ReportOptions {
                    format: *format,
                    groupby,
                    kernel: true,
                    ..ReportOptions::default()
                };
                let expected = report::render(&profile, &options).expect("renders");
                let indexed = report::render_indexed(&by_ids, &options, index).expect("renders");
                assert!(expected == indexed, "{format:?} by {groupby:?}");
                if !report::shows_threads(&options) {
                    let indexed = report::render_indexed(&summed_by_ids, &options, index);
                    let indexed = indexed.expect("renders");
                    assert!(
                        expected == indexed,
                        "{format:?} by {groupby:?}, summed per stack"
                    );
                }
            }
        }
    };
    for index in &mut indexes {
        extend(&store, index);
    }
    check(&store, &indexes);

    // The first buckets go, and with them some stacks.
    let before = store.stack_count();
    let old: Vec<Vec<u32>> = (0..before as u32)
        .map(|id| store.stack_locations(id).to_vec())
        .collect();
    let old_locations: Vec<Location> = (0..)
        .map_while(|id| {
            let used = old.iter().any(|stack| stack.contains(&id));
            used.then(|| store.location(id).clone())
        })
        .collect();
    for _ in 0..3 {
        store.pop_oldest();
    }
    store.compact(at(20));
    let renumbering = last_renumbering(&store);
    let kept: Vec<u32> = renumbering
        .stacks
        .iter()
        .copied()
        .filter(|&new| new != GONE)
        .collect();
    assert!(kept.len() < before, "some stacks are gone");
    assert_eq!(kept, (0..kept.len() as u32).collect::<Vec<_>>(), "in order");
    for (old_id, &new) in renumbering.stacks.iter().enumerate() {
        if new == GONE {
            continue;
        }
        let locations = |stack: &[u32], table: &dyn Fn(u32) -> Location| -> Vec<Location> {
            stack.iter().map(|&id| table(id)).collect()
        };
        assert_eq!(
            locations(&old[old_id], &|id| old_locations[id as usize].clone()),
            locations(store.stack_locations(new), &|id| store.location(id).clone()),
        );
    }

    // One index follows the compaction; one that missed it starts anew.
    let mut missed = StackIndex::new(keys[0]);
    missed
        .extend(
            7,
            3,
            |id| &old[id as usize],
            |id| &old_locations[id as usize],
        )
        .expect("indexes");
    for second in 20..30 {
        insert(&mut store, second);
    }
    let renumbering = last_renumbering(&store);
    let followed = indexes[0].renumber(
        (renumbering.from, store.generation()),
        &renumbering.stacks,
        &renumbering.locations,
        GONE,
    );
    assert!(followed, "the index follows the compaction");
    assert!(!missed.renumber(
        (renumbering.from, store.generation()),
        &renumbering.stacks,
        &renumbering.locations,
        GONE,
    ));
    for index in &mut indexes {
        extend(&store, index);
    }
    extend(&store, &mut missed);
    check(&store, &indexes);
    check(
        &store,
        &[missed, StackIndex::new(keys[1])].map(|mut index| {
            extend(&store, &mut index);
            index
        }),
    );

    // At the memory ceiling a drain compacts twice: an index of the
    // generation before both follows each step.
    let generation = store.generation();
    let mut followers = keys.map(StackIndex::new);
    for index in &mut followers {
        extend(&store, index);
    }
    for _ in 0..2 {
        store.pop_oldest();
        store.compact(at(31));
    }
    let steps: Vec<_> = store
        .renumberings_from(generation)
        .expect("both compactions kept")
        .collect();
    assert_eq!(steps.len(), 2);
    for step in steps {
        for index in &mut indexes {
            let generations = (step.from, step.to());
            assert!(index.renumber(generations, &step.stacks, &step.locations, GONE));
        }
    }
    assert!(store.renumberings_from(generation + 7).is_none());
    for index in indexes.iter_mut().chain(&mut followers) {
        extend(&store, index);
        assert_eq!(index.generation(), store.generation());
    }
    check(&store, &indexes);
    check(&store, &followers);
}

/// A window read as per-stack sums has the samples, processes and threads
/// of the window read per thread, in fewer samples, and makes the same
/// report in every format that shows no threads, whatever the selection.
#[test]
fn per_stack_sums_make_the_reports_that_show_no_threads() {
    use crate::profile::{Format, GroupBy, ReportOptions};
    use crate::report;
    use crate::service::answers::Summary;

    let mut store = store(600, 1 << 30);
    let paths: [&[&str]; 4] = [
        &["main", "a", "b"],
        &["main", "a", "c"],
        &["main", "d"],
        &["main", "a", "b", "e"],
    ];
    for second in 0..30_u64 {
        let samples: Vec<(u32, &[&str], u64)> = (0..6_u64)
            .map(|n| {
                let pid = 1 + ((second + n) % 5) as u32;
                (pid, paths[((second * 3 + n) % 4) as usize], 1 + n % 3)
            })
            .collect();
        store.insert_and_compact(batch(second, &samples));
    }
    let selections = [
        Selector::default(),
        Selector {
            pids: vec![2, 4, 5],
            ..Selector::default()
        },
    ];
    for selector in selections {
        let window = query(0, 40, selector);
        let per_thread = store.profile(&window);
        let per_stack = store.profile_summed(&window, SumBy::Stack);
        assert!(per_stack.samples.len() < per_thread.samples.len());
        assert_eq!(per_stack.samples.len(), per_stack.stacks.len());
        assert_eq!(Summary::of(&per_stack), Summary::of(&per_thread));
        for format in Format::ALL {
            for groupby in [GroupBy::Auto, GroupBy::None, GroupBy::Thread] {
                let options = ReportOptions {
                    format,
                    groupby,
                    kernel: true,
                    ..ReportOptions::default()
                };
                if report::shows_threads(&options) {
                    continue;
                }
                // (pstats refuses both alike: they hold no Python frame.)
                let rendered =
                    |profile| report::render(profile, &options).map_err(|e| e.to_string());
                let (expected, summed) = (rendered(&per_thread), rendered(&per_stack));
                assert!(expected == summed, "{format:?} by {groupby:?}");
            }
        }
    }
    // Off-CPU and wall-clock windows are read per thread.
    let wall = Query {
        mode: ProfileMode::Wall,
        ..query(0, 40, Selector::default())
    };
    assert_eq!(
        store.profile_summed(&wall, SumBy::Stack).samples.len(),
        store.profile(&wall).samples.len()
    );
}

#[test]
fn held_sums_follow_the_buckets_and_make_per_stack_windows() {
    // Retention and resolution merges change the buckets held; at a low
    // ceiling, so do coarsening, evictions and compactions.
    held_sums_follow_the_buckets(1 << 30);
    held_sums_follow_the_buckets(24 * 1024);
}

fn held_sums_follow_the_buckets(memory_limit: u64) {
    let mut store = Store::new(StoreSettings {
        retention: Duration::from_secs(40),
        resolution: Duration::from_secs(3),
        memory_limit,
    });
    let held_as_recounted = |store: &Store| {
        let trimmed = |sums: &[u64]| {
            let end = sums.iter().rposition(|&n| n > 0).map_or(0, |last| last + 1);
            sums[..end].to_vec()
        };
        let (held, recounted) = (&store.held, held::HeldSums::of(&store.buckets));
        (trimmed(&held.stacks) == trimmed(&recounted.stacks))
            && (trimmed(&held.threads) == trimmed(&recounted.threads))
    };
    for second in 0..120_u64 {
        let names: Vec<String> = (0..12).map(|i| format!("f{}_{i}", second % 17)).collect();
        let samples: Vec<(u32, Vec<&str>, u64)> = (0..5_usize)
            .map(|n| {
                let pid = 1 + ((second as usize + n) % 7) as u32;
                let depth = 2 + (second as usize * 5 + n) % 10;
                let stack = names[..depth].iter().map(String::as_str).collect();
                (pid, stack, 1 + (n as u64) % 3)
            })
            .collect();
        let samples: Vec<(u32, &[&str], u64)> = samples
            .iter()
            .map(|(pid, stack, count)| (*pid, stack.as_slice(), *count))
            .collect();
        store.insert_and_compact(batch(second, &samples));
        assert!(held_as_recounted(&store), "after second {second}");
        // Whole windows and most of them, from the held sums, against the
        // samples of each (thread, stack) added up.
        for (start, end) in [(0, second + 1), (second.saturating_sub(30), second + 1)] {
            let window = query(start, end, Selector::default());
            let summed = store.profile_summed(&window, SumBy::Stack);
            let per_thread = store.profile(&window);
            assert_eq!(summed.threads, per_thread.threads, "{start}..{end}");
            let mut per_stack: std::collections::BTreeMap<Vec<String>, (u64, u64)> =
                Default::default();
            for profile in [&summed, &per_thread] {
                for sample in &profile.samples {
                    let stack = profile.stacks.get(sample.stack).expect("a stack");
                    let names = stack
                        .iter()
                        .map(|&location| {
                            profile.locations[location as usize].frames[0]
                                .function
                                .to_string()
                        })
                        .collect();
                    let sums = per_stack.entry(names).or_default();
                    match std::ptr::eq(profile, &summed) {
                        true => sums.0 += sample.count,
                        false => sums.1 += sample.count,
                    }
                }
            }
            assert!(per_stack.values().all(|(a, b)| a == b), "{start}..{end}");
        }
    }
    let stats = store.stats();
    let at_the_ceiling = stats.buckets_evicted_for_memory > 0;
    assert_eq!(at_the_ceiling, memory_limit < 1 << 20, "{stats:?}");
}

/// How the store's last compaction changed its ids.
fn last_renumbering(store: &Store) -> &super::Renumbering {
    let from = store.generation() - 1;
    let mut renumberings = store.renumberings_from(from).expect("a compaction");
    renumberings.next().expect("a compaction")
}

#[test]
fn a_window_read_for_some_threads_counts_the_others() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3), (2, &["main", "b"], 4)]));
    store.insert_and_compact(batch(
        1,
        &[(2, &["main", "b"], 1), (3, &["c"], 2), (4, &["d"], 9)],
    ));
    store.insert_and_compact(batch(2, &[(1, &["main", "b"], 5), (2, &["x"], 6)]));
    let not_four = Selector {
        pids: vec![1, 2, 3],
        ..Selector::default()
    };
    let window = query(0, 3, not_four);
    let full = store.profile(&window);
    let offered = std::cell::RefCell::new(Vec::new());
    let pick = |threads: &[(&ThreadInfo, u64)]| {
        *offered.borrow_mut() = threads.iter().map(|(t, n)| (t.pid, *n)).collect();
        Some(threads.iter().map(|(thread, _)| thread.pid != 2).collect())
    };
    let picked = store.profile_picking_threads(&window, true, &pick, false);
    // Every selected thread with samples is offered, with its samples.
    assert_eq!(*offered.borrow(), [(1, 8), (2, 11), (3, 2)]);
    let pid_of = |profile: &Profile, thread: u32| profile.threads[thread as usize].pid;
    let samples_of = |profile: &Profile, pid: u32| {
        let mine = profile
            .samples
            .iter()
            .filter(|s| pid_of(profile, s.thread) == pid);
        let stacks = mine.map(|s| {
            (
                profile.stacks.get(s.stack).unwrap().len(),
                s.count,
                s.weight,
            )
        });
        stacks.collect::<Vec<_>>()
    };
    for pid in [1, 3] {
        assert_eq!(
            samples_of(&picked, pid),
            samples_of(&full, pid),
            "pid {pid}"
        );
    }
    assert!(samples_of(&picked, 2).is_empty());
    let unread: Vec<_> = picked
        .unread
        .iter()
        .map(|unread| (pid_of(&picked, unread.thread), unread.count, unread.weight))
        .collect();
    // Weighed as its samples read per stack are.
    let weight = samples_of(&full, 2)
        .iter()
        .map(|&(_, _, weight)| weight)
        .sum();
    assert_eq!(unread, [(2, 11, weight)]);
    assert_eq!(picked.total_samples(), full.total_samples());
    assert_eq!(picked.threads.len(), full.threads.len());
    // What the reply says it covers: the same samples, CPU time, threads.
    assert_eq!(
        crate::service::answers::Summary::of(&picked),
        crate::service::answers::Summary::of(&full)
    );
    // Not one stack of the unread thread is copied.
    assert!(picked.stacks.len() < full.stacks.len());
    // `None`: every thread read.
    let all = store.profile_picking_threads(&window, true, &|_| None, false);
    assert_eq!(counts_by_leaf(&all), counts_by_leaf(&full));
    assert!(all.unread.is_empty());
    // A window of one bucket in three: the totals are summed from it, not
    // from the sums of every bucket held.
    let middle = query(1, 2, Selector::default());
    store.profile_picking_threads(&middle, true, &pick, false);
    assert_eq!(*offered.borrow(), [(2, 1), (3, 2), (4, 9)]);
}

#[test]
fn a_window_read_for_some_threads_can_sum_the_others_per_stack() {
    let mut store = store(600, 1 << 30);
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3), (2, &["main", "b"], 4)]));
    store.insert_and_compact(batch(
        1,
        &[
            (2, &["main", "b"], 1),
            (3, &["main", "b"], 2),
            (4, &["d"], 9),
        ],
    ));
    store.insert_and_compact(batch(2, &[(1, &["main", "b"], 5), (3, &["x"], 6)]));
    // Pids 2 and 3 left unread.
    let pick = |threads: &[(&ThreadInfo, u64)]| {
        Some(
            threads
                .iter()
                .map(|(thread, _)| ![2, 3].contains(&thread.pid))
                .collect(),
        )
    };
    let by_leaf = |profile: &Profile, samples: &[crate::profile::Sample]| {
        let mut counts: Vec<(String, u64, u64)> = (samples.iter())
            .map(|sample| {
                let stack = profile.stacks.get(sample.stack).unwrap();
                let leaf = &profile.locations[*stack.last().unwrap() as usize];
                (
                    leaf.frames[0].function.to_string(),
                    sample.count,
                    sample.weight,
                )
            })
            .collect();
        counts.sort();
        counts
    };
    // Every thread over every bucket (from the held sums), a selector (from
    // the buckets), and a window of one bucket in three.
    let not_one = Selector {
        pids: vec![2, 3, 4],
        ..Selector::default()
    };
    let cases = [
        (query(0, 3, Selector::default()), vec![("b", 7), ("x", 6)]),
        (query(0, 3, not_one), vec![("b", 7), ("x", 6)]),
        (query(1, 2, Selector::default()), vec![("b", 3)]),
    ];
    for (window, expected) in cases {
        let picked = store.profile_picking_threads(&window, true, &pick, true);
        // Weighed as the unread threads' samples are.
        let period = picked.unread[0].weight / picked.unread[0].count;
        let expected: Vec<(String, u64, u64)> = (expected.into_iter())
            .map(|(leaf, count)| (leaf.to_owned(), count, count * period))
            .collect();
        assert_eq!(
            by_leaf(&picked, &picked.unread_stacks),
            expected,
            "{window:?}"
        );
        // Named after an unread thread, never in the samples.
        let first = picked.unread[0].thread;
        assert!(
            picked
                .unread_stacks
                .iter()
                .all(|sample| sample.thread == first)
        );
        let unread: u64 = picked.unread.iter().map(|unread| unread.count).sum();
        let summed: u64 = picked.unread_stacks.iter().map(|sample| sample.count).sum();
        assert_eq!(summed, unread, "{window:?}");
        // Not asked for: not summed.
        let counted = store.profile_picking_threads(&window, true, &pick, false);
        assert!(counted.unread_stacks.is_empty());
    }
}

#[test]
fn the_timeline_gives_each_held_bucket_and_its_samples() {
    let mut store = store(600, 1 << 30);
    let whole = query(0, 3, Selector::default());
    assert!(store.timeline(&whole).is_empty());
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3), (2, &["main", "b"], 4)]));
    store.insert_and_compact(batch(1, &[(3, &["c"], 2)]));
    let mut last = batch(2, &[(1, &["main", "b"], 5), (4, &["d"], 9)]);
    // 25 ms asleep: 2.5 periods of 10 ms at 100 Hz, 3 rounded.
    last.samples.push(SymbolizedSample {
        thread: thread(2, 2, "p2"),
        kind: SampleKind::OffCpuSleeping,
        stack: ["main", "read", "[off-cpu: S]"].map(location).to_vec(),
        count: 1,
        weight: 25_000_000,
        allocation_id: 0,
        times_ns: Vec::new(),
    });
    store.insert_and_compact(last);
    let spans = |query: &Query| -> Vec<(SystemTime, SystemTime, u64)> {
        let timeline = store.timeline(query);
        timeline
            .iter()
            .map(|span| (span.start, span.end, span.samples))
            .collect()
    };
    assert_eq!(
        spans(&whole),
        [(at(0), at(1), 7), (at(1), at(2), 2), (at(2), at(3), 14)]
    );
    // The spans hold every sample a whole read counts.
    let everything = store.profile(&whole);
    let held: u64 = spans(&whole).iter().map(|span| span.2).sum();
    assert_eq!(held, everything.total_samples());
    // Of the selected threads only; in the query's mode.
    let second = Selector {
        pids: vec![2],
        ..Selector::default()
    };
    assert_eq!(
        spans(&query(0, 3, second.clone()))
            .iter()
            .map(|span| span.2)
            .collect::<Vec<_>>(),
        [4, 0, 0]
    );
    let off_cpu = Query {
        mode: ProfileMode::OffCpu,
        ..query(0, 3, second.clone())
    };
    let wall = Query {
        mode: ProfileMode::Wall,
        ..query(0, 3, second)
    };
    assert_eq!(
        spans(&off_cpu)
            .iter()
            .map(|span| span.2)
            .collect::<Vec<_>>(),
        [0, 0, 3]
    );
    assert_eq!(
        spans(&wall).iter().map(|span| span.2).collect::<Vec<_>>(),
        [4, 0, 3]
    );
}

/// A window read as per-command sums makes pprof's default report as the
/// window read per thread does, over processes and threads sharing
/// commands and stacks; over one process it is the window read per thread.
#[test]
fn per_command_sums_make_pprof_s_default_report() {
    use crate::profile::{Format, GroupBy, ReportOptions};
    use crate::report::{self, OwnersShown};
    use crate::service::answers::Summary;

    let mut store = store(600, 1 << 30);
    let paths: [&[&str]; 3] = [&["main", "a", "b"], &["main", "c"], &["main", "a", "d"]];
    // (pid, tid, command): two processes of `worker` (one of two
    // threads), one of `db`.
    let threads = [
        (10, 10, "worker"),
        (10, 11, "worker"),
        (20, 20, "worker"),
        (30, 30, "db"),
    ];
    for second in 0..20_u64 {
        let mut batch = batch(second, &[]);
        batch.samples = (0..8_u64)
            .map(|n| {
                let (pid, tid, command) = threads[((second + n) % 4) as usize];
                SymbolizedSample {
                    thread: thread(pid, tid, command),
                    kind: SampleKind::CpuClock,
                    stack: paths[((second * 5 + n) % 3) as usize]
                        .iter()
                        .map(|name| location(name))
                        .collect(),
                    count: 1 + n % 2,
                    weight: (1 + n % 2) * 10,
                    allocation_id: 0,
                    times_ns: Vec::new(),
                }
            })
            .collect();
        store.insert_and_compact(batch);
    }
    let options = ReportOptions {
        format: Format::Pprof,
        groupby: GroupBy::Auto,
        kernel: true,
        ..ReportOptions::default()
    };
    assert_eq!(
        report::owners_shown(&options),
        OwnersShown::CommandsOrThreads
    );
    for pids in [vec![], vec![10, 30], vec![10]] {
        let window = query(
            0,
            40,
            Selector {
                pids: pids.clone(),
                ..Selector::default()
            },
        );
        let per_thread = store.profile(&window);
        let per_command = store.profile_summed(&window, SumBy::CommandAndStack);
        assert_eq!(
            Summary::of(&per_command),
            Summary::of(&per_thread),
            "{pids:?}"
        );
        assert_eq!(per_command.threads, per_thread.threads, "{pids:?}");
        match pids.len() {
            // One process: read per thread.
            1 => assert_eq!(per_command.samples, per_thread.samples),
            // Stacks shared by the threads of a command: fewer samples.
            _ => assert!(
                per_command.samples.len() < per_thread.samples.len(),
                "{pids:?}"
            ),
        }
        let expected = report::render(&per_thread, &options).expect("renders");
        let summed = report::render(&per_command, &options).expect("renders");
        assert!(expected == summed, "{pids:?}");
    }
}

#[test]
fn samples_kept_without_their_stacks_are_counted_by_cause() {
    let marker = |name: &str| {
        let name: Arc<str> = Arc::from(name);
        Arc::new(SymbolizedLocation {
            key: LocationKey::Marker(name.clone()),
            location: Location {
                kind: LocationKind::Marker,
                module: name.clone(),
                address: 0,
                frames: vec![Frame {
                    function: name,
                    file: None,
                    line: 0,
                    inlined: false,
                }]
                .into(),
            },
        })
    };
    let mut store = store(600, 1 << 30);
    // No marker anywhere: nothing lost.
    store.insert_and_compact(batch(0, &[(1, &["main", "a"], 3)]));
    assert!(
        store
            .profile(&query(0, 1, Selector::default()))
            .own_lost
            .is_empty()
    );
    let mut lossy = batch(1, &[(1, &["main", "b"], 2), (2, &["main"], 1)]);
    for (pid, root, count) in [
        (1, crate::profile::RING_FULL_MARKER, 4),
        (2, crate::profile::RING_FULL_MARKER, 5),
        (2, crate::profile::LOST_MARKER, 6),
    ] {
        lossy.samples.push(SymbolizedSample {
            thread: thread(pid, pid, &format!("p{pid}")),
            kind: SampleKind::CpuClock,
            stack: vec![marker(root), location("a")],
            count,
            weight: count * 10,
            allocation_id: 0,
            times_ns: Vec::new(),
        });
    }
    store.insert_and_compact(lossy);
    // A marker that is not a stack's root says nothing.
    store.insert_and_compact(batch(2, &[(1, &["main", crate::profile::LOST_MARKER], 7)]));
    for sum_by in [SumBy::ThreadAndStack, SumBy::Stack, SumBy::CommandAndStack] {
        let profile = store.profile_summed(&query(0, 3, Selector::default()), sum_by);
        assert_eq!(
            profile.own_lost,
            [("stack_copy_ring_full", 9), ("user_stack_lost", 6)],
            "{sum_by:?}"
        );
        let first = store.profile_summed(&query(0, 1, Selector::default()), sum_by);
        assert!(first.own_lost.is_empty(), "{sum_by:?}");
    }
}

impl Store {
    /// An insert as the daemon's pipeline makes it: the compaction the
    /// store asks for (at its ceiling, at once) follows.
    fn insert_and_compact(&mut self, batch: SymbolizedBatch) {
        self.insert(batch);
        self.compact_when_due(SystemTime::now());
    }
}
