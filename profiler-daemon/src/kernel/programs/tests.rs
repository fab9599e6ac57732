use std::time::Duration;

use super::*;

fn settings(frequency_hz: u32) -> ProgramSettings {
    ProgramSettings {
        frequency_hz,
        drain_interval: Duration::from_secs(1),
        max_stacks: 0,
        max_sample_keys: 0,
        peek_signal: 10,
        peek_frequency_hz: 0,
        stack_copy_pages: 4,
        stack_copy_buffer: 0,
        alloc_stack_copy_buffer: 0,
        offcpu_max_pending: 1024,
    }
}

#[test]
fn finds_tracepoint_field_offsets() {
    let format = "name: signal_generate\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int sig;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:char comm[16];\toffset:20;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t pid;\toffset:36;\tsize:4;\tsigned:1;\n";
    assert_eq!(groups::field_offset(format, "sig"), Some(8));
    assert_eq!(groups::field_offset(format, "comm"), Some(20));
    assert_eq!(groups::field_offset(format, "pid"), Some(36));
    assert_eq!(groups::field_offset(format, "group"), None);
    assert_eq!(groups::field_offset(format, "common_type"), Some(0));
}

#[test]
fn map_sizes_grow_with_rate_and_stay_bounded() {
    let low = MapSizes::for_settings(&settings(49), 2);
    assert_eq!(
        low,
        MapSizes {
            stacks: 1024,
            sample_keys: 1024,
            stack_copies: 1 << 20,
            alloc_stack_copies: 1 << 23,
        }
    );
    let high = MapSizes::for_settings(&settings(1000), 2);
    assert_eq!(
        high,
        MapSizes {
            stacks: 8192,
            sample_keys: 4096,
            stack_copies: 1 << 23,
            alloc_stack_copies: 1 << 23,
        }
    );
    let huge = MapSizes::for_settings(&settings(1000), 512);
    assert_eq!(huge.stacks, 1 << 16);
}

#[test]
fn explicit_map_sizes_win() {
    let mut settings = settings(49);
    settings.max_stacks = 4096;
    settings.alloc_stack_copy_buffer = 1 << 20;
    let sizes = MapSizes::for_settings(&settings, 2);
    assert_eq!(sizes.stacks, 4096);
    assert_eq!(sizes.alloc_stack_copies, 1 << 20);
}

#[test]
fn the_allocation_ring_holds_its_records_whatever_the_cpus() {
    // 16 KiB copies: 478 records of 17,544 bytes, rounded down.
    assert_eq!(stack_copy_record_bytes(4), 17_544);
    let sizes = MapSizes::for_settings(&settings(49), 64);
    assert_eq!(sizes.alloc_stack_copies, 1 << 23);
    assert_eq!((1 << 23) / stack_copy_record_bytes(4), 478);
    // Smaller copies, a smaller ring.
    let mut one_page = settings(49);
    one_page.stack_copy_pages = 1;
    assert_eq!(
        MapSizes::for_settings(&one_page, 2).alloc_stack_copies,
        1 << 21
    );
}

#[test]
fn the_object_has_every_name_the_daemon_looks_up() {
    let missing = super::super::missing_names(EBPF_OBJECT, names::ALL);
    assert!(missing.is_empty(), "the eBPF object has no {missing:?}");
}

#[test]
fn names_not_among_the_objects_maps_programs_or_globals_are_missing() {
    // The license's section, a helper in `.text`, a name nowhere.
    let names = ["LICENSE", "memcpy", "NO_SUCH_MAP", names::CONTROL];
    assert_eq!(
        super::super::missing_names(EBPF_OBJECT, &names),
        ["LICENSE", "memcpy", "NO_SUCH_MAP"]
    );
}
