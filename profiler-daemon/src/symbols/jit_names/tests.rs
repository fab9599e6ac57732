use std::{io::Write as _, sync::Arc, time::Duration};

use super::{
    process::ProcessNames,
    steps::{Format, NamesFile, Outcome, Step, perform},
    *,
};

/// A perf map in a temporary file, written as a JIT would.
struct MapFile(std::fs::File);

impl MapFile {
    fn new(text: &str) -> Self {
        let mut file = tempfile::tempfile().expect("a temporary file");
        file.write_all(text.as_bytes()).expect("written");
        Self(file)
    }

    fn append(&mut self, text: &str) {
        self.0.write_all(text.as_bytes()).expect("written");
    }

    fn handle(&self) -> NamesFile {
        NamesFile {
            file: Arc::new(self.0.try_clone().expect("the file is shared")),
            format: Format::PerfMap,
        }
    }
}

/// Takes the process's steps until it has none at `now`, opening `map`;
/// returns the steps taken, by kind.
fn settle(process: &mut ProcessNames, map: &MapFile, now: Instant) -> Vec<&'static str> {
    let mut taken = Vec::new();
    let mut buffer = Vec::new();
    while let Some(step) = process.next_step(now) {
        let outcome = match step {
            Step::Open => {
                taken.push("open");
                let size = map.0.metadata().expect("stat").len();
                Outcome::Opened(Ok((map.handle(), size)))
            }
            step => {
                taken.push(match step {
                    Step::Tail { .. } => "tail",
                    _ => "scan",
                });
                perform(0, step, &mut buffer)
            }
        };
        match outcome {
            Outcome::Opened(opened) => process.opened(opened, now),
            Outcome::Tail(read) => process.tail_read(read.expect("read"), now),
            Outcome::Scanned(read) => process.scanned(read.expect("read"), now),
        }
        assert!(taken.len() < 100, "the steps end: {taken:?}");
    }
    taken
}

fn name(process: &mut ProcessNames, address: u64) -> Option<String> {
    process
        .lookup(address, Instant::now())
        .map(|name| name.to_string())
}

#[test]
fn names_the_code_samples_fell_in_and_only_that() {
    let map = MapFile::new("1000 40 JS:*hot\n2000 10 LazyCompile:cold\n3000 10 never\n");
    let now = Instant::now();
    let mut process = ProcessNames::new(now);
    process.want(0x1004, now);
    process.want(0x2008, now);
    process.want(0x9000, now);
    assert_eq!(settle(&mut process, &map, now), ["open", "tail"]);
    assert_eq!(name(&mut process, 0x103f).as_deref(), Some("JS:*hot"));
    assert_eq!(
        name(&mut process, 0x2000).as_deref(),
        Some("LazyCompile:cold")
    );
    assert_eq!(name(&mut process, 0x1040), None);
    // Code no sample fell in is not held.
    assert_eq!(name(&mut process, 0x3000), None);
    assert_eq!(process.names_held(), 2);
    assert!(process.settled(now));
}

#[test]
fn new_code_is_found_in_the_lines_added_and_old_code_by_a_scan() {
    let mut map = MapFile::new("1000 10 first\n2000 10 second\n");
    let start = Instant::now();
    let mut process = ProcessNames::new(start);
    process.want(0x1004, start);
    settle(&mut process, &map, start);
    // New code, written after the last read: the lines added name it.
    map.append("4000 10 added\n");
    let later = start + Duration::from_millis(300);
    process.want(0x4004, later);
    assert_eq!(settle(&mut process, &map, later), ["tail"]);
    assert_eq!(name(&mut process, 0x4004).as_deref(), Some("added"));
    // Code written before the last read, first sampled now: a scan of the
    // lines before names it.
    let later = later + Duration::from_millis(300);
    process.want(0x2004, later);
    assert!(!process.settled(later), "a quick scan is waited for");
    assert_eq!(settle(&mut process, &map, later), ["tail", "scan"]);
    assert_eq!(name(&mut process, 0x2004).as_deref(), Some("second"));
    // Another scan waits for its interval, and is not waited for.
    let soon = later + Duration::from_millis(300);
    process.want(0x7000, soon);
    assert_eq!(settle(&mut process, &map, soon), ["tail"]);
    assert!(process.settled(soon));
    let after = soon + Duration::from_secs(2);
    assert_eq!(settle(&mut process, &map, after), ["tail", "scan"]);
    // Known to be missing: not scanned for again.
    process.want(0x7000, after + Duration::from_secs(5));
    assert_eq!(
        settle(&mut process, &map, after + Duration::from_secs(5)),
        ["tail"]
    );
}

#[test]
fn code_compiled_again_at_the_same_address_takes_the_later_name() {
    let mut map = MapFile::new("1000 20 old\n");
    let start = Instant::now();
    let mut process = ProcessNames::new(start);
    process.want(0x1004, start);
    settle(&mut process, &map, start);
    map.append("1000 10 new\n5000 10 other\n");
    let later = start + Duration::from_millis(300);
    // Any new address makes the lines added be read; they replace the
    // name of the code they cover.
    process.want(0x5004, later);
    settle(&mut process, &map, later);
    assert_eq!(name(&mut process, 0x1004).as_deref(), Some("new"));
    assert_eq!(name(&mut process, 0x1018), None, "the old code is gone");
}

#[test]
fn a_refused_file_ends_the_waiting_and_a_missing_one_is_looked_for_again() {
    let start = Instant::now();
    let mut process = ProcessNames::new(start);
    process.want(0x1004, start);
    process.opened(
        Err(crate::symbols::process_files::Refused::NotRegular("FIFO")),
        start,
    );
    assert!(process.settled(start));
    assert!(!process.has_work(start + Duration::from_secs(10)));

    let mut absent = ProcessNames::new(start);
    absent.want(0x1004, start);
    absent.opened(Err(crate::symbols::process_files::Refused::Missing), start);
    assert!(absent.settled(start));
    assert!(!absent.has_work(start + Duration::from_millis(500)));
    let map = MapFile::new("1000 10 late\n");
    let later = start + Duration::from_secs(2);
    assert_eq!(settle(&mut absent, &map, later), ["open", "tail"]);
    assert_eq!(name(&mut absent, 0x1004).as_deref(), Some("late"));
}

#[test]
fn the_names_held_stay_within_the_limit_least_recently_used_first() {
    let mut lines = String::new();
    for function in 0..200u64 {
        lines.push_str(&format!(
            "{:x} 10 function_{function}_{}\n",
            0x1000 + function * 0x10,
            "x".repeat(200)
        ));
    }
    let map = MapFile::new(&lines);
    let start = Instant::now();
    let mut state = State {
        limit: 16 << 10,
        ..State::default()
    };
    for function in 0..200u64 {
        state.want(
            1,
            0x1000 + function * 0x10,
            start + Duration::from_millis(function),
        );
    }
    let process = state.processes.get_mut(&1).expect("known");
    settle(process, &map, start);
    state.enforce_limit();
    let stats_bytes = state.bytes;
    assert!(stats_bytes <= 16 << 10, "{stats_bytes} bytes held");
    assert!(state.stats.names_evicted > 0);
    let process = state.processes.get_mut(&1).expect("known");
    // The most recently used are kept.
    assert!(name(process, 0x1000 + 199 * 0x10).is_some());
    assert!(name(process, 0x1000).is_none());
}

/// The reader thread, on this process's own perf map (the only test that
/// uses it: the tests share the process).
#[test]
fn the_reader_names_this_processs_jit_code_and_refuses_a_fifo() {
    use crate::symbols::processes::{NormalizedBatch, NormalizedSample};
    let pid = std::process::id();
    let path = std::path::PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let batch_at = |address: u64| NormalizedBatch {
        start: std::time::SystemTime::now(),
        end: std::time::SystemTime::now(),
        samples: vec![NormalizedSample::of_test(
            pid,
            vec![UserAddress::Anonymous {
                name: "[anon]".into(),
                offset: 4,
                address,
            }],
        )],
        counters: Default::default(),
    };
    let (names, reader) = JitNames::start(1 << 20).expect("the reader starts");

    std::fs::write(&path, "1000 10 first\n").expect("written");
    let mut batch = batch_at(0x1004);
    names.want(&batch);
    names.settle(&batch, Duration::from_secs(10));
    names.name_batch(&mut batch);
    assert!(
        matches!(&batch.samples[0].user[0], UserAddress::Jit { function, .. } if &**function == "first"),
        "{:?}",
        batch.samples[0].user
    );

    // Another process would be refused a FIFO: this one's state is
    // forgotten first (as after a minute unasked).
    lock(&names.shared.state).processes.clear();
    std::fs::remove_file(&path).expect("removed");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("a FIFO");
    let mut batch = batch_at(0x1004);
    let asked = Instant::now();
    names.want(&batch);
    names.settle(&batch, Duration::from_secs(10));
    assert!(asked.elapsed() < Duration::from_secs(5), "not held up");
    names.name_batch(&mut batch);
    assert!(matches!(
        batch.samples[0].user[0],
        UserAddress::Anonymous { .. }
    ));
    assert_eq!(names.stats().refused.get("not_a_regular_file"), Some(&1));
    std::fs::remove_file(&path).expect("removed");

    // A jitdump file the process maps is read (rather than its perf map),
    // and only while it is the very file mapped.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dump = dir.path().join(format!("jit-{pid}.dump"));
    let mut bytes = super::jitdump::tests::header();
    bytes.extend(super::jitdump::tests::code_load(
        0x1000,
        0x10,
        b"from_jitdump",
    ));
    std::fs::write(&dump, &bytes).expect("written");
    std::fs::write(&path, "1000 10 from_perf_map\n").expect("written");
    let mapped = std::fs::File::open(&dump).expect("opened");
    // SAFETY: a fresh private read-only mapping of a file of ours, unmapped
    // below before the file is dropped; nothing reads through it.
    let mapping = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            bytes.len(),
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::PRIVATE,
            &mapped,
            0,
        )
    }
    .expect("mapped");
    let named = |names: &JitNames| {
        lock(&names.shared.state).processes.clear();
        let mut batch = batch_at(0x1004);
        names.want(&batch);
        names.settle(&batch, Duration::from_secs(10));
        names.name_batch(&mut batch);
        match &batch.samples[0].user[0] {
            UserAddress::Jit { function, .. } => Some(function.to_string()),
            _ => None,
        }
    };
    assert_eq!(named(&names).as_deref(), Some("from_jitdump"));
    // Another file put in its place is not the one mapped (which is
    // deleted now): the perf map is read instead.
    let other = dir.path().join("other");
    let mut replaced = super::jitdump::tests::header();
    replaced.extend(super::jitdump::tests::code_load(0x1000, 0x10, b"replaced"));
    std::fs::write(&other, &replaced).expect("written");
    std::fs::rename(&other, &dump).expect("replaced");
    assert_eq!(named(&names).as_deref(), Some("from_perf_map"));
    // SAFETY: the mapping made above, of its length, used by nothing.
    unsafe { rustix::mm::munmap(mapping, bytes.len()) }.expect("unmapped");
    std::fs::remove_file(&path).expect("removed");
    names.stop();
    reader.join().expect("the reader ends");
}
