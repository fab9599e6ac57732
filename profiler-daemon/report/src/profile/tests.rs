use super::*;

#[test]
fn each_sample_kind_has_a_state_and_each_mode_its_states() {
    use profiler_common::SampleKind;
    let table = [
        (SampleKind::CpuClock, ThreadState::Cpu, None),
        (SampleKind::Peek, ThreadState::Cpu, None),
        (SampleKind::PeekInstant, ThreadState::Cpu, None),
        (
            SampleKind::OffCpuSleeping,
            ThreadState::Sleeping,
            Some("[off-cpu: S]"),
        ),
        (
            SampleKind::OffCpuBlocked,
            ThreadState::Blocked,
            Some("[off-cpu: D]"),
        ),
        (
            SampleKind::RunQueue,
            ThreadState::RunQueue,
            Some("[runqueue]"),
        ),
    ];
    for (kind, state, marker) in table {
        assert_eq!(ThreadState::of(kind), state, "{kind:?}");
        assert_eq!(state.leaf_marker(), marker, "{kind:?}");
        assert_eq!(kind.is_off_cpu(), marker.is_some(), "{kind:?}");
        assert_eq!(SampleKind::from_raw(kind as u32), Some(kind));
    }
    assert_eq!(
        ThreadState::of(SampleKind::Allocation),
        ThreadState::Allocated
    );
    assert!(!SampleKind::Allocation.is_off_cpu());
    assert_eq!(SampleKind::from_raw(7), None);
    for state in ThreadState::TIMES {
        let on_cpu = state == ThreadState::Cpu;
        assert_eq!(ProfileMode::Cpu.includes(state), on_cpu);
        assert_eq!(ProfileMode::OffCpu.includes(state), !on_cpu);
        assert!(ProfileMode::Wall.includes(state));
        assert!(state.is_time());
        assert!(!ProfileMode::Allocated.includes(state) && !ProfileMode::Held.includes(state));
    }
    for (mode, state) in [
        (ProfileMode::Allocated, ThreadState::Allocated),
        (ProfileMode::Held, ThreadState::Held),
    ] {
        assert!(mode.is_memory() && !mode.records_off_cpu() && !state.is_time());
        assert!(mode.includes(state));
        for other in [ProfileMode::Cpu, ProfileMode::OffCpu, ProfileMode::Wall] {
            assert!(!other.includes(state), "{other:?} {state:?}");
        }
    }
    assert!(!ProfileMode::Cpu.records_off_cpu());
}

#[test]
fn kernel_addresses_are_hidden_and_their_locations_merged() {
    let frame = |function: &str| Frame {
        function: function.into(),
        file: None,
        line: 0,
        inlined: false,
    };
    let location = |kind, address, function: &str| Location {
        kind,
        module: "m".into(),
        address,
        frames: vec![frame(function)].into(),
    };
    let mut stacks = Stacks::default();
    stacks.push([0, 1]);
    stacks.push([0, 2]);
    let mut profile = Profile {
        start: SystemTime::UNIX_EPOCH,
        end: SystemTime::UNIX_EPOCH,
        frequency_hz: 1,
        period_ns: 1,
        mode: ProfileMode::Cpu,
        threads: Vec::new(),
        locations: vec![
            location(LocationKind::User, 0x10, "main"),
            location(LocationKind::Kernel, 0xffff_ffff_8100_0010, "read"),
            location(LocationKind::Kernel, 0xffff_ffff_8100_0020, "read"),
        ],
        stacks,
        samples: Vec::new(),
        lost: Vec::new(),
        warnings: Vec::new(),
        unread: Vec::new(),
        unread_stacks: Vec::new(),
        own_lost: Vec::new(),
        timeline: Vec::new(),
    };
    profile.hide_kernel_addresses();
    assert_eq!(profile.locations.len(), 2);
    assert_eq!(profile.locations[0].address, 0x10, "user offsets stay");
    assert_eq!(profile.locations[1].address, 0);
    assert_eq!(profile.stacks.get(0), Some(&[0, 1][..]));
    assert_eq!(profile.stacks.get(1), Some(&[0, 1][..]));
}

#[test]
fn stacks_keep_their_locations_and_order() {
    let mut stacks = Stacks::with_capacity(3, 4);
    assert!(stacks.is_empty());
    assert_eq!(stacks.push([3, 1, 4]), 0);
    assert_eq!(stacks.push([]), 1);
    assert_eq!(stacks.push(vec![1]), 2);
    assert_eq!(stacks.len(), 3);
    assert_eq!(stacks.get(0), Some(&[3, 1, 4][..]));
    assert_eq!(stacks.get(1), Some(&[][..]));
    assert_eq!(stacks.get(2), Some(&[1][..]));
    assert_eq!(stacks.get(3), None);
    let all: Vec<&[u32]> = stacks.iter().collect();
    assert_eq!(all, [&[3, 1, 4][..], &[], &[1]]);
}

#[test]
fn every_thread_state_is_listed_at_its_number() {
    for (number, state) in ThreadState::ALL.into_iter().enumerate() {
        assert_eq!(state as usize, number, "{state:?}");
    }
    // A state added to the enum but not to the list fails here.
    assert_eq!(ThreadState::ALL.len(), ThreadState::Held as usize + 1);
}

#[test]
fn unix_nanos_is_signed_and_saturates() {
    use std::time::Duration;
    let epoch = SystemTime::UNIX_EPOCH;
    assert_eq!(unix_nanos(epoch), 0);
    assert_eq!(unix_nanos(epoch + Duration::from_secs(1)), 1_000_000_000);
    assert_eq!(unix_nanos(epoch - Duration::from_nanos(5)), -5);
    let far = Duration::from_secs(u64::from(u32::MAX) * 1000);
    if let Some(after) = epoch.checked_add(far) {
        assert_eq!(unix_nanos(after), i64::MAX);
    }
    if let Some(before) = epoch.checked_sub(far) {
        assert_eq!(unix_nanos(before), -i64::MAX);
    }
}
