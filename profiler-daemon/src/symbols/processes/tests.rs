//! The process table against this test process and children it forks.

use procfs::{FromRead, process::Stat};
use profiler_common::ForkLineage;

use super::*;
use crate::kernel::announcements::Lineage;

#[test]
fn records_this_process_and_normalizes_its_code() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    let here = records_this_process_and_normalizes_its_code as *const () as u64;
    let (frames, complete) = table.normalize(pid, &[here, 0x10]);
    assert!(!complete, "0x10 is mapped by nothing");
    let stack_variable = 0_u64;
    let (data, _) = table.normalize(pid, &[&raw const stack_variable as u64]);
    assert!(
        // A test thread's stack is anonymous memory, the main thread's [stack].
        matches!(&data[0], UserAddress::Special { name, .. } if name.ends_with("] (not code)")),
        "{data:?}"
    );
    match &frames[0] {
        UserAddress::File { binary, offset } => {
            let exe = std::env::current_exe().unwrap();
            assert_eq!(&*binary.path, exe.to_str().unwrap());
            assert!(*offset > 0 && *offset < std::fs::metadata(&exe).unwrap().len());
            assert!(std::fs::metadata(binary.readable_path()).is_ok());
        }
        other => panic!("expected a file-backed address, got {other:?}"),
    }
    assert!(matches!(frames[1], UserAddress::Unmapped { address: 0x10 }));
    assert_eq!(table.stats().processes_seen, 1);
}

#[test]
fn an_exiting_process_keeps_the_mappings_it_was_recorded_with() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut table = ProcessTable::new();
    // Wait until sleep has replaced the forked test binary.
    while !std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.ends_with("sleep")) {
        std::thread::sleep(Duration::from_millis(5));
    }
    table.record(pid).unwrap();
    let code = table.processes[&pid].mappings[0].start;
    child.kill().unwrap();
    // Not reaped yet: a zombie, whose memory map is gone.
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.contains(") Z "))
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    table.record(pid).unwrap();
    let (frames, complete) = table.normalize(pid, &[code]);
    assert!(complete, "{frames:?}");
    child.wait().unwrap();
}

#[test]
fn a_process_gone_unrecorded_adopts_the_mappings_of_its_forking_parent() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    let name = table.processes[&pid].name.clone();
    let here = records_this_process_and_normalizes_its_code as *const () as u64;
    let gone = u32::MAX - 2;
    assert!(!table.adopt_mappings(gone, "another-name", &[here]));
    assert!(!table.adopt_mappings(gone, &name, &[here, 0x10]));
    assert!(table.adopt_mappings(gone, &name, &[here]));
    let (frames, complete) = table.normalize(gone, &[here]);
    assert!(complete, "{frames:?}");
    assert!(matches!(frames[0], UserAddress::File { .. }));
    assert_eq!(table.stats().processes_seen, 2);
    // A recorded process keeps its own mappings.
    assert!(!table.adopt_mappings(pid, &name, &[here]));
}

#[test]
fn a_child_forked_without_exec_takes_its_parents_mappings_and_an_exec_does_not() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    // SAFETY: the child only waits for its signal, then exits: nothing
    // of the (multithreaded) parent's state is touched in it. (It is
    // killed below even when an assertion fails first.)
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: async-signal-safe calls only, in the forked child.
        unsafe {
            libc::pause();
            libc::_exit(0);
        }
    }
    assert!(child > 0, "fork failed");
    struct Reap(i32);
    impl Drop for Reap {
        fn drop(&mut self) {
            // SAFETY: signalling and reaping the child forked above.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, &mut 0, 0);
            }
        }
    }
    let _reap = Reap(child);
    let child = child as u32;
    let execed = std::process::Command::new("sleep")
        .arg("10")
        .spawn()
        .expect("sleep starts");
    // Without the kernel's word: from the child's /proc/PID/stat. The
    // parent, not recorded yet, is recorded for it (laid out as the child).
    assert!(table.adopt_forked(child, Lineage::Unknown));
    assert_eq!(table.processes[&pid].adopted_from, None);
    assert_eq!(table.processes[&child].adopted_from, Some(pid));
    assert!(Arc::ptr_eq(
        &table.processes[&child].mappings,
        &table.processes[&pid].mappings
    ));
    let shared = |table: &ProcessTable, a: u32, b: u32| match (
        &table.processes[&a].unwinder,
        &table.processes[&b].unwinder,
    ) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    assert!(shared(&table, child, pid), "one unwinder for both");
    assert!(!table.adopt_forked(execed.id(), Lineage::Unknown));

    // As the fork tracepoint records them: the parent and its layout.
    let forked_from = |parent: u32| {
        let stat = Stat::from_file(format!("/proc/{parent}/stat")).unwrap();
        Lineage::Forked(ForkLineage {
            parent,
            start_code: stat.startcode,
            end_code: stat.endcode,
            start_stack: stat.startstack,
            ..ForkLineage::default()
        })
    };
    table.processes.remove(&child);
    assert!(table.adopt_forked(child, forked_from(pid)));
    assert!(shared(&table, child, pid));
    // A program of its own, or a parent laid out otherwise (an exec since
    // it was recorded), or not there.
    table.processes.remove(&child);
    assert!(!table.adopt_forked(child, Lineage::OwnProgram));
    let mut elsewhere = forked_from(pid);
    if let Lineage::Forked(lineage) = &mut elsewhere {
        lineage.start_stack += 4096;
    }
    assert!(!table.adopt_forked(child, elsewhere));
    let stranger = u32::MAX - 3;
    if let Lineage::Forked(lineage) = &mut elsewhere {
        lineage.parent = stranger;
    }
    assert!(!table.adopt_forked(child, elsewhere));
    // A parent recorded laid out otherwise (before its own exec) is read
    // again when it is now laid out as its child.
    let mut before_exec = Stat::from_file(format!("/proc/{pid}/stat")).unwrap();
    before_exec.startstack += 4096;
    table.processes.get_mut(&pid).unwrap().image = ImageLayout::of(&before_exec);
    assert!(table.adopt_forked(child, forked_from(pid)));
    assert!(shared(&table, child, pid));
    let adopted = table.stats().adopted;
    assert_eq!((adopted.children, adopted.as_announced), (3, 2));
    let mut execed = execed;
    let _ = execed.kill();
    let _ = execed.wait();
}

#[test]
fn a_child_of_a_parent_that_exec_d_since_takes_the_program_it_was_forked_in() {
    // This process as the parent, recorded, then as if it exec'd another
    // program (its record replaced, the old mappings kept as earlier
    // ones): a child forked before that exec, as the fork record says.
    let mut table = ProcessTable::new();
    let parent = std::process::id();
    table.record(parent).unwrap();
    let forked_in = table.processes[&parent].mappings.clone();
    let stat = Stat::from_file(format!("/proc/{parent}/stat")).unwrap();
    let forked = ForkLineage {
        child: u32::MAX - 5,
        parent,
        start_code: stat.startcode,
        end_code: stat.endcode,
        start_stack: stat.startstack,
    };
    let mut after_exec = stat.clone();
    after_exec.startcode += 1 << 30;
    after_exec.endcode += 1 << 30;
    let record = table.processes.get_mut(&parent).unwrap();
    record.image = ImageLayout::of(&after_exec);
    let moved: Vec<Mapping> = forked_in
        .iter()
        .map(|mapping| Mapping {
            start: mapping.start.saturating_add(1 << 30),
            end: mapping.end.saturating_add(1 << 30),
            ..mapping.clone()
        })
        .collect();
    record
        .earlier
        .insert(0, std::mem::replace(&mut record.mappings, moved.into()));
    record.unwinder = None;

    // Announced before its own exec: it takes the program it was forked in.
    assert!(table.adopt_forked(forked.child, Lineage::Forked(forked)));
    assert!(Arc::ptr_eq(
        &table.processes[&forked.child].mappings,
        &forked_in
    ));
    let here = a_child_of_a_parent_that_exec_d_since_takes_the_program_it_was_forked_in as *const ()
        as u64;
    let (frames, complete) = table.normalize(forked.child, &[here]);
    assert!(
        complete && matches!(frames[0], UserAddress::File { .. }),
        "{frames:?}"
    );

    // Another program at that place in none of them: not adopted.
    let mut elsewhere = forked;
    elsewhere.child -= 1;
    elsewhere.start_code += 1 << 40;
    elsewhere.end_code += 1 << 40;
    assert!(!table.adopt_forked(elsewhere.child, Lineage::Forked(elsewhere)));
}

/// Makes `pid`'s current record look like another program's (its first
/// code mapping moved), as after an exec.
fn as_if_another_program(table: &mut ProcessTable, pid: u32, shift: u64) {
    let record = table.processes.get_mut(&pid).unwrap();
    let mut mappings = record.mappings.to_vec();
    let first = mappings.iter_mut().find(|mapping| mapping.code).unwrap();
    first.start += shift;
    record.mappings = Arc::from(mappings);
}

#[test]
fn earlier_maps_survive_two_records() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    let first = table.processes[&pid].mappings.clone();
    table.processes.get_mut(&pid).unwrap().mappings = Arc::from([]);
    table.record(pid).unwrap();
    table.record(pid).unwrap();
    let record = &table.processes[&pid];
    assert_eq!(
        record.earlier.len(),
        0,
        "neither an empty map nor the same one again is kept"
    );
    as_if_another_program(&mut table, pid, 0x1000);
    table.record(pid).unwrap();
    let record = &table.processes[&pid];
    assert_eq!(record.earlier.len(), 1);
    // Code is mapped as it was (data comes and goes with the test threads).
    let code = |mappings: &[Mapping]| mappings.iter().filter(|mapping| mapping.code).count();
    assert_eq!(code(&record.earlier[0]), code(&first));
    for shift in 2..5 {
        as_if_another_program(&mut table, pid, shift * 0x1000);
        table.record(pid).unwrap();
    }
    assert_eq!(table.processes[&pid].earlier.len(), 4);
    assert_eq!(table.stats().earlier_maps_dropped, 0);
}

#[test]
fn earlier_maps_are_kept_within_their_count_and_mappings() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    let records = EARLIER_MAPS_KEPT + 10;
    for shift in 1..=records as u64 {
        as_if_another_program(&mut table, pid, shift * 0x1000);
        table.record(pid).unwrap();
    }
    let earlier = &table.processes[&pid].earlier;
    let mappings: usize = earlier.iter().map(|map| map.len()).sum();
    let one = earlier[0].len();
    assert!(
        mappings <= EARLIER_MAPPINGS_KEPT,
        "{mappings} mappings kept"
    );
    assert!(
        earlier.len() == EARLIER_MAPS_KEPT || mappings + 2 * one > EARLIER_MAPPINGS_KEPT,
        "as many maps kept as fit: {} of {one} mappings each",
        earlier.len()
    );
    assert_eq!(
        table.stats().earlier_maps_dropped,
        (records - earlier.len()) as u64
    );
}

#[test]
fn unknown_process_gives_unmapped_addresses() {
    let mut table = ProcessTable::new();
    let (frames, complete) = table.normalize(u32::MAX - 1, &[0x1000]);
    assert!(!complete);
    assert!(matches!(
        frames[0],
        UserAddress::Unmapped { address: 0x1000 }
    ));
    assert!(table.record(u32::MAX - 1).is_err());
}

#[test]
fn device_numbers_match_stat() {
    use std::os::unix::fs::MetadataExt as _;
    let exe = std::env::current_exe().unwrap();
    let metadata = std::fs::metadata(&exe).unwrap();
    let dev = metadata.dev();
    let major = ((dev >> 32) & 0xfffff000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffffff00) | (dev & 0xff);
    assert_eq!(device_number((major as i32, minor as i32)), dev);
}

#[test]
fn earlier_maps_go_first_when_the_records_are_over_their_limit() {
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    for shift in 1..=20 {
        as_if_another_program(&mut table, pid, shift * 0x1000);
        table.record(pid).unwrap();
    }
    let with_earlier = table.bytes();
    table.limit = with_earlier - 1;
    table.enforce_limit();
    // The process was sampled just now: its record stays, with its newest
    // earlier map.
    assert_eq!(table.processes[&pid].earlier.len(), 1);
    assert_eq!(table.stats().earlier_maps_dropped, 19);
    assert!(table.bytes() < with_earlier);
}

#[test]
fn a_process_gone_before_procfs_is_recorded_from_the_kernel_s_records() {
    use std::os::unix::fs::MetadataExt as _;
    // A process id no process can have (above the kernel's pid_max limit):
    // procfs never knows it, the records do.
    let pid = 1 << 23;
    let exe = std::env::current_exe().unwrap();
    let metadata = std::fs::metadata(&exe).unwrap();
    let here =
        a_process_gone_before_procfs_is_recorded_from_the_kernel_s_records as *const () as u64;
    // This test's own code, mapped where it is mapped here.
    let own = Process::myself().unwrap().maps().unwrap();
    let code = own
        .iter()
        .find(|map| map.address.0 <= here && here < map.address.1)
        .expect("this code is mapped");
    let mapped = |start, end, file_offset, path: &str, (device, inode)| MappingRecord::Mapped {
        pid,
        time_ns: 0,
        start,
        end,
        file_offset,
        device,
        inode,
        path: path.into(),
    };
    let mut table = ProcessTable::new();
    table.journal.note([
        MappingRecord::Exec {
            pid,
            time_ns: 0,
            command: "gone".into(),
        },
        mapped(
            code.address.0,
            code.address.1,
            code.offset,
            exe.to_str().unwrap(),
            (metadata.dev(), metadata.ino()),
        ),
        mapped(0x1000, 0x2000, 0, "[vdso]", (0, 0)),
        // Not this file, though at its path: not taken for it.
        mapped(
            0x3000,
            0x4000,
            0,
            exe.to_str().unwrap(),
            (metadata.dev(), 1),
        ),
    ]);
    table.record(pid).expect("recorded from the records");
    let (frames, _) = table.normalize(pid, &[here, 0x1100, 0x3100]);
    match &frames[0] {
        UserAddress::File { binary, .. } => {
            assert_eq!(&*binary.path, exe.to_str().unwrap());
        }
        other => panic!("expected a file-backed address, got {other:?}"),
    }
    assert!(
        matches!(&frames[1], UserAddress::Special { name, .. } if &**name == "[vdso]"),
        "{frames:?}"
    );
    assert!(
        !matches!(&frames[2], UserAddress::File { .. }),
        "another inode at the same path is not opened for it: {frames:?}"
    );
    assert_eq!(table.processes[&pid].name.as_ref(), "gone");
    assert!(
        table.record(pid + 1).is_err(),
        "neither procfs nor the records know it"
    );
}

#[test]
fn a_child_gone_with_its_parent_s_early_mappings_has_them_read_again() {
    // The parent recorded while its loader was still at work (here: all
    // but its first mapping left out); its child, gone before its own
    // mappings could be read, finds an address outside them.
    let mut table = ProcessTable::new();
    let pid = std::process::id();
    table.record(pid).unwrap();
    let whole = table.processes[&pid].mappings.len();
    let image = table.processes[&pid].image;
    let parent = table.processes.get_mut(&pid).unwrap();
    parent.mappings = parent.mappings[..1].into();
    let gone = u32::MAX - 3;
    let name = parent.name.clone();
    table.adopt(gone, name.clone(), pid, image);
    assert_eq!(table.processes[&gone].adopted_from, Some(pid));
    // Read just now: not again.
    assert!(!table.read_donor_again(gone));
    assert_eq!(table.processes[&gone].mappings.len(), 1);
    let parent = table.processes.get_mut(&pid).unwrap();
    parent.recorded_at -= READ_AGAIN_AFTER * 2;
    // A grandchild (through the gone child) leads back to the parent too.
    let grandchild = u32::MAX - 4;
    table.adopt(grandchild, name, gone, image);
    assert_eq!(table.processes[&grandchild].adopted_from, Some(pid));
    assert!(table.read_donor_again(grandchild));
    assert_eq!(table.processes[&pid].mappings.len(), whole);
    assert!(Arc::ptr_eq(
        &table.processes[&grandchild].mappings,
        &table.processes[&pid].mappings
    ));
    // A process that read its own is not an adopted one.
    assert!(!table.read_donor_again(pid));
}
