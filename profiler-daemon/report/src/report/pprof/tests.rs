use std::io::Read as _;

use flate2::read::GzDecoder;

use super::super::test_support::{Builder, frame, location, profile};
use super::*;
use crate::profile::{Format, GroupBy, LocationKind};

fn decode(profile: &Profile, kernel: bool) -> pb::Profile {
    decode_grouped(profile, kernel, GroupBy::Auto)
}

fn decode_grouped(profile: &Profile, kernel: bool, groupby: GroupBy) -> pb::Profile {
    let options = ReportOptions {
        format: Format::Pprof,
        kernel,
        groupby,
        ..ReportOptions::default()
    };
    let bytes = crate::report::render(profile, &options).expect("renders");
    assert_eq!(bytes[..2], [0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    GzDecoder::new(&bytes[..])
        .read_to_end(&mut raw)
        .expect("gunzips");
    pb::Profile::decode(&raw[..]).expect("decodes")
}

fn s(p: &pb::Profile, id: i64) -> &str {
    &p.string_table[id as usize]
}

fn find_location(p: &pb::Profile, id: u64) -> &pb::Location {
    p.location
        .iter()
        .find(|l| l.id == id)
        .expect("location exists")
}

fn find_function(p: &pb::Profile, id: u64) -> &pb::Function {
    p.function
        .iter()
        .find(|f| f.id == id)
        .expect("function exists")
}

fn find_mapping(p: &pb::Profile, id: u64) -> &pb::Mapping {
    p.mapping
        .iter()
        .find(|m| m.id == id)
        .expect("mapping exists")
}

/// Each sample's stack as function names, leaf first, and its values.
fn stacks(p: &pb::Profile) -> Vec<(Vec<String>, Vec<i64>)> {
    p.sample
        .iter()
        .map(|sample| {
            let names = sample
                .location_id
                .iter()
                .flat_map(|&id| &find_location(p, id).line)
                .map(|line| s(p, find_function(p, line.function_id).name).to_owned())
                .collect();
            (names, sample.value.clone())
        })
        .collect()
}

#[test]
fn header_fields_describe_cpu_samples() {
    let p = decode(&profile(&[(&["main"], 3)]), true);
    assert_eq!(p.string_table[0], "");
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(&p, t.r#type), s(&p, t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    assert_eq!(s(&p, p.default_sample_type), "cpu");
    let period_type = p.period_type.as_ref().expect("period type");
    assert_eq!(
        (s(&p, period_type.r#type), s(&p, period_type.unit)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.period, 10_000_000);
    assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(p.duration_nanos, 1_000_000_000);
}

#[test]
fn off_cpu_time_has_its_own_values_and_a_state_label() {
    let mut wall = profile(&[(&["main", "spin"], 3), (&["main", "read"], 50)]);
    wall.mode = ProfileMode::Wall;
    wall.samples[0].weight = 30_000_000;
    wall.samples[1].state = ThreadState::Sleeping;
    wall.samples[1].weight = 500_000_000;
    let p = decode(&wall, true);
    let types: Vec<&str> = p.sample_type.iter().map(|t| s(&p, t.r#type)).collect();
    assert_eq!(types, ["samples", "cpu", "off_cpu", "wall"]);
    assert_eq!(s(&p, p.default_sample_type), "wall");
    let values: Vec<Vec<i64>> = p.sample.iter().map(|x| x.value.clone()).collect();
    assert_eq!(
        values,
        [
            vec![3, 30_000_000, 0, 30_000_000],
            vec![50, 0, 500_000_000, 500_000_000]
        ]
    );
    let states: Vec<&str> = p
        .sample
        .iter()
        .map(|sample| {
            let label = sample
                .label
                .iter()
                .find(|label| s(&p, label.key) == "thread_state")
                .expect("a thread_state label");
            s(&p, label.str)
        })
        .collect();
    assert_eq!(states, ["cpu", "S"]);
    wall.mode = ProfileMode::OffCpu;
    assert_eq!(
        s(
            &decode(&wall, true),
            decode(&wall, true).default_sample_type
        ),
        "off_cpu"
    );
}

#[test]
fn samples_carry_values_labels_and_leaf_first_locations() {
    let mut b = Builder::new();
    let io = b.thread(1230, 1235, "io", "server");
    b.stacks(0, &[(&["main", "a"], 75), (&["main", "b"], 25)]);
    b.stacks(io, &[(&["main", "a"], 2)]);
    let p = decode(&b.build(), true);
    assert_eq!(
        stacks(&p),
        [
            (
                vec!["a".to_owned(), "main".to_owned()],
                vec![75, 750_000_000]
            ),
            (
                vec!["b".to_owned(), "main".to_owned()],
                vec![25, 250_000_000]
            ),
            (vec!["a".to_owned(), "main".to_owned()], vec![2, 20_000_000]),
        ]
    );
    // One location per distinct profile location, shared by samples.
    assert_eq!(p.location.len(), 3);
    assert_eq!(p.sample[0].location_id, p.sample[2].location_id);
    let labels: Vec<(&str, String)> = p.sample[2]
        .label
        .iter()
        .map(|l| {
            let value = if l.str != 0 {
                s(&p, l.str).to_owned()
            } else {
                l.num.to_string()
            };
            (s(&p, l.key), value)
        })
        .collect();
    assert_eq!(
        labels,
        [
            ("pid", "1230".to_owned()),
            ("tid", "1235".to_owned()),
            ("thread_name", "io".to_owned()),
            ("comm", "server".to_owned()),
        ]
    );
}

/// Each sample's labels as (key, value) strings.
fn labels(p: &pb::Profile, sample: &pb::Sample) -> Vec<(String, String)> {
    sample
        .label
        .iter()
        .map(|l| {
            let value = if l.str != 0 {
                s(p, l.str).to_owned()
            } else {
                l.num.to_string()
            };
            (s(p, l.key).to_owned(), value)
        })
        .collect()
}

#[test]
fn groupby_process_or_none_merges_the_samples_of_a_stack() {
    let mut b = Builder::new();
    let io = b.thread(1230, 1235, "io", "server");
    let other = b.thread(77, 77, "cron", "cron");
    b.stacks(0, &[(&["main", "a"], 75), (&["main", "b"], 25)]);
    b.stacks(other, &[(&["main", "b"], 4)]);
    b.stacks(io, &[(&["main", "a"], 2)]);
    let profile = b.build();
    let names = |v: &[&str]| v.iter().map(|&n| n.to_owned()).collect::<Vec<_>>();

    // By thread: one sample per thread and stack.
    assert_eq!(
        decode_grouped(&profile, true, GroupBy::Thread).sample.len(),
        4
    );
    // By default, a profile of more than one process is by command,
    // labelled `comm` only (threads and pids only when asked)...
    let by_command = decode(&profile, true);
    assert_eq!(
        stacks(&by_command),
        stacks(&decode_grouped(&profile, true, GroupBy::Process))
    );
    let mut commands: Vec<_> = by_command
        .sample
        .iter()
        .map(|sample| labels(&by_command, sample))
        .collect();
    commands.sort();
    commands.dedup();
    let comm = |name: &str| vec![("comm".to_owned(), name.to_owned())];
    assert_eq!(commands, [comm("cron"), comm("server")]);
    // ...the processes of one command together...
    let mut two_servers = profile.clone();
    two_servers.threads[other as usize].process_name = "server".into();
    let p = decode(&two_servers, true);
    assert_eq!(
        stacks(&p),
        [
            (names(&["a", "main"]), vec![77, 770_000_000]),
            (names(&["b", "main"]), vec![29, 290_000_000]),
        ]
    );
    // ...and one of a single process by thread.
    let mut server = profile.clone();
    server
        .samples
        .retain(|sample| profile.threads[sample.thread as usize].pid == 1230);
    server
        .threads
        .iter_mut()
        .for_each(|thread| thread.pid = 1230);
    assert_eq!(
        decode(&server, true).sample,
        decode_grouped(&server, true, GroupBy::Thread).sample
    );
    assert_eq!(decode(&server, true).sample.len(), 3);

    // By process: the server's two threads' `a` are one sample, labelled
    // with the process only; by process, then stack.
    let p = decode_grouped(&profile, true, GroupBy::Process);
    assert_eq!(
        stacks(&p),
        [
            (names(&["a", "main"]), vec![77, 770_000_000]),
            (names(&["b", "main"]), vec![25, 250_000_000]),
            (names(&["b", "main"]), vec![4, 40_000_000]),
        ]
    );
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        labels(&p, &p.sample[0]),
        [pair("pid", "1230"), pair("comm", "server")]
    );
    assert_eq!(
        labels(&p, &p.sample[2]),
        [pair("pid", "77"), pair("comm", "cron")]
    );
    assert!(!p.string_table.iter().any(|s| s == "tid" || s == "io"));

    // By none: one sample per stack, unlabelled.
    let p = decode_grouped(&profile, true, GroupBy::None);
    assert_eq!(
        stacks(&p),
        [
            (names(&["a", "main"]), vec![77, 770_000_000]),
            (names(&["b", "main"]), vec![29, 290_000_000]),
        ]
    );
    assert!(p.sample.iter().all(|sample| sample.label.is_empty()));
}

#[test]
fn locations_link_to_functions_and_mappings() {
    let mut b = Builder::new();
    let main = b.named("main");
    let inlined = b.deflate_inlining_fill_window(Some("deflate.c"), 1500);
    let bare = b.location(location(
        LocationKind::User,
        "/usr/lib/libz.so.1",
        0x2100,
        vec![frame("deflate", Some("deflate.c"), 120, false)],
    ));
    let write = b.named("k:sys_write");
    b.sample(0, vec![main, inlined, write], 4);
    b.sample(0, vec![main, bare], 1);
    let p = decode(&b.build(), true);

    let leaf_first = &p.sample[0].location_id;
    assert_eq!(leaf_first.len(), 3);
    let kernel = find_location(&p, leaf_first[0]);
    let zlib = find_location(&p, leaf_first[1]);
    assert_eq!(zlib.address, 0x2000);
    // Innermost first: the inlined fill_window, then deflate.
    let lines: Vec<(&str, &str, i64)> = zlib
        .line
        .iter()
        .map(|line| {
            let f = find_function(&p, line.function_id);
            (s(&p, f.name), s(&p, f.filename), line.line)
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("fill_window", "deflate.c", 1500),
            ("deflate", "deflate.c", 100)
        ]
    );
    // deflate at another line of the same file is the same function.
    let other = find_location(&p, p.sample[1].location_id[0]);
    assert_eq!(other.line[0].function_id, zlib.line[1].function_id);
    assert_eq!(other.line[0].line, 120);
    assert_eq!(other.mapping_id, zlib.mapping_id);
    assert_eq!(p.function.len(), 4);

    let libz = find_mapping(&p, zlib.mapping_id);
    assert_eq!(s(&p, libz.filename), "/usr/lib/libz.so.1");
    assert!(libz.has_functions && libz.has_filenames && libz.has_line_numbers);
    assert!(libz.has_inline_frames);
    let kmap = find_mapping(&p, kernel.mapping_id);
    assert_eq!(s(&p, kmap.filename), "[kernel]");
    assert!(kmap.has_functions && !kmap.has_filenames && !kmap.has_line_numbers);
    assert!(!kmap.has_inline_frames);
    let kfunction = find_function(&p, kernel.line[0].function_id);
    assert_eq!(
        (s(&p, kfunction.name), s(&p, kfunction.filename)),
        ("sys_write", "")
    );
    assert_eq!(kfunction.start_line, 0);
    assert_eq!(p.mapping.len(), 3);
}

#[test]
fn kernel_off_makes_one_kernel_location_per_run() {
    let p = profile(&[
        (&["main", "k:sys_read", "k:vfs_read"], 3),
        (&["main", "k:sys_write"], 1),
        (&[], 2),
    ]);
    let decoded = decode(&p, false);
    assert_eq!(
        stacks(&decoded),
        [
            (
                vec!["[kernel]".to_owned(), "main".to_owned()],
                vec![3, 30_000_000]
            ),
            (
                vec!["[kernel]".to_owned(), "main".to_owned()],
                vec![1, 10_000_000]
            ),
            (vec!["[unknown]".to_owned()], vec![2, 20_000_000]),
        ]
    );
    assert_eq!(decoded.sample[0].location_id, decoded.sample[1].location_id);
    assert_eq!(decoded.location.len(), 3);
    let decoded = decode(&p, true);
    assert_eq!(decoded.location.len(), 5);
}

#[test]
fn batches_make_the_bytes_of_the_whole_message() {
    let mut b = Builder::new();
    let other = b.thread(1230, 1235, "io", "server");
    // 2,500 distinct (thread, stack) pairs: more than two batches.
    for i in 0..2500 {
        let name = format!("f{}", i % 1250);
        let stack: [&str; 3] = ["main", &name, "k:sys_read"];
        b.stacks(if i < 1250 { 0 } else { other }, &[(&stack, 1 + i % 4)]);
    }
    let p = b.build();
    let options = ReportOptions {
        format: Format::Pprof,
        ..ReportOptions::default()
    };
    let bytes = crate::report::render(&p, &options).expect("renders");
    let mut raw = Vec::new();
    GzDecoder::new(&bytes[..])
        .read_to_end(&mut raw)
        .expect("gunzips");
    let decoded = pb::Profile::decode(&raw[..]).expect("decodes");
    assert_eq!(decoded.sample.len(), 2500);
    assert_eq!(decoded.encode_to_vec(), raw);
}

#[test]
fn empty_profile_is_still_a_valid_profile() {
    let p = decode(&profile(&[]), true);
    assert!(p.sample.is_empty() && p.location.is_empty());
    assert_eq!(p.string_table[0], "");
    assert_eq!(p.sample_type.len(), 2);
}

#[test]
fn huge_values_saturate() {
    let mut p = profile(&[(&["main"], 1)]);
    p.samples[0].count = u64::MAX;
    p.samples[0].weight = u64::MAX;
    p.period_ns = u64::MAX;
    let decoded = decode(&p, true);
    assert_eq!(decoded.sample[0].value, [i64::MAX, i64::MAX]);
    assert_eq!(decoded.period, i64::MAX);
}
