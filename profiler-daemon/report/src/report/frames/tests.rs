//! Stack expansion: markers, dangling indexes, interning, and the lines
//! tree and flat reports see.

use super::super::test_support::{Builder, frame, hot_at, location};
use super::*;
use crate::profile::Stacks;

fn texts(expansion: &Expansion<'_>, sample: usize, combine: bool) -> Vec<String> {
    expansion
        .frames_of(expansion.samples[sample].stack)
        .map(|frame| LineKey::new(expansion.frames[frame as usize], combine).text())
        .collect()
}

#[test]
fn kernel_runs_collapse_into_one_marker_each() {
    let mut b = Builder::new();
    b.stacks(
        0,
        &[(&["main", "k:sys_read", "k:vfs_read", "cb", "k:irq"], 1)],
    );
    let p = b.build();
    let samples = Expansion::new(&p, false).expect("valid");
    assert_eq!(
        texts(&samples, 0, true),
        ["app.c:10; main", "[kernel]", "app.c:10; cb", "[kernel]"]
    );
    let samples = Expansion::new(&p, true).expect("valid");
    assert_eq!(
        texts(&samples, 0, true),
        [
            "app.c:10; main",
            "[kernel]:?; sys_read",
            "[kernel]:?; vfs_read",
            "app.c:10; cb",
            "[kernel]:?; irq"
        ]
    );
}

#[test]
fn empty_and_all_kernel_stacks_get_one_stand_in() {
    let mut b = Builder::new();
    b.stacks(0, &[(&[], 2), (&["k:a", "k:b"], 3)]);
    let p = b.build();
    let samples = Expansion::new(&p, false).expect("valid");
    assert_eq!(texts(&samples, 0, true), ["[unknown]"]);
    assert_eq!(texts(&samples, 1, true), ["[kernel]"]);
}

#[test]
fn the_first_sample_with_a_dangling_index_is_reported() {
    let error = |p: &Profile| match Expansion::new(p, true) {
        Err(error) => error.to_string(),
        Ok(_) => "no error".to_owned(),
    };
    let mut b = Builder::new();
    b.stacks(0, &[(&["main"], 1), (&["a"], 1), (&["b"], 1), (&["c"], 0)]);
    let valid = b.build();
    let mut p = valid.clone();
    p.stacks = Stacks::default();
    for locations in [vec![0], vec![1, 9], vec![2, 8], vec![5]] {
        p.stacks.push(locations);
    }
    p.samples[2].thread = 4;
    assert_eq!(
        error(&p),
        "inconsistent profile: sample 1 refers to location 9 of 4"
    );
    p.samples[1].stack = 0;
    assert_eq!(
        error(&p),
        "inconsistent profile: sample 2 refers to thread 4 of 1"
    );
    // Samples with a count of 0 are not looked at.
    let mut p = valid;
    p.samples[3].stack = 40;
    assert!(Expansion::new(&p, true).is_ok());
    p.samples[2].stack = 40;
    assert_eq!(
        error(&p),
        "inconsistent profile: sample 2 refers to stack 40 of 4"
    );
}

#[test]
fn zero_count_samples_are_dropped() {
    let mut b = Builder::new();
    b.stacks(0, &[(&["a"], 0), (&["b"], 1)]);
    let p = b.build();
    let samples = Expansion::new(&p, true).expect("valid");
    assert_eq!(samples.samples.len(), 1);
    assert_eq!(texts(&samples, 0, true), ["app.c:10; b"]);
}

#[test]
fn a_profile_using_every_stack_lends_its_samples() {
    let mut b = Builder::new();
    b.stacks(0, &[(&["a"], 2), (&["b"], 3), (&["a"], 4)]);
    let p = b.build();
    let expansion = Expansion::new(&p, true).expect("valid");
    assert!(matches!(expansion.samples, Cow::Borrowed(_)));
    assert_eq!(*expansion.samples, *p.samples);
    let counts: Vec<u64> = (0..p.stacks.len() as StackId)
        .map(|stack| expansion.stack_counts[stack as usize])
        .collect();
    let mut expected = vec![0; p.stacks.len()];
    for sample in &p.samples {
        expected[sample.stack as usize] += sample.count;
    }
    assert_eq!(counts, expected);

    // A stack no sample uses: the others are renumbered, the samples
    // copied.
    let mut shifted = Profile {
        stacks: Stacks::default(),
        ..p.clone()
    };
    shifted.stacks.push(vec![0]);
    for stack in p.stacks.iter() {
        shifted.stacks.push(stack.to_vec());
    }
    shifted
        .samples
        .iter_mut()
        .for_each(|sample| sample.stack += 1);
    let expansion = Expansion::new(&shifted, true).expect("valid");
    assert!(matches!(expansion.samples, Cow::Owned(_)));
    let stacks: Vec<StackId> = expansion.samples.iter().map(|s| s.stack).collect();
    let original: Vec<StackId> = p.samples.iter().map(|s| s.stack).collect();
    assert_eq!(stacks, original, "renumbered past the unused stack");
}

#[test]
fn frames_without_file_use_module_basename_and_address_when_not_combined() {
    let mut b = Builder::new();
    let write = b.location(location(
        LocationKind::User,
        "/usr/lib/libc.so.6",
        0x1a2b,
        vec![frame("__libc_write", None, 0, false)],
    ));
    let empty = b.location(location(LocationKind::User, "/opt/x", 0x10, vec![]));
    b.sample(0, vec![write, empty], 1);
    let p = b.build();
    let samples = Expansion::new(&p, true).expect("valid");
    assert_eq!(
        texts(&samples, 0, true),
        ["libc.so.6:?; __libc_write", "x:?; [unknown]"]
    );
    assert_eq!(
        texts(&samples, 0, false),
        ["libc.so.6:?; __libc_write @0x1a2b", "x:?; [unknown] @0x10"]
    );
}

#[test]
fn sites_frames_and_stacks_are_interned_once() {
    let mut b = Builder::new();
    let other = b.thread(1230, 1235, "io", "server");
    let both = b.deflate_inlining_fill_window(None, 0);
    b.stacks(0, &[(&["main", "a", "main"], 2), (&["main", "k:x"], 1)]);
    b.stacks(other, &[(&["main", "a", "main"], 5)]);
    let main = b.named("main");
    b.sample(other, vec![main, both], 1);
    let p = b.build();
    let expansion = Expansion::new(&p, false).expect("valid");
    // main, a, [kernel] and libz's location.
    assert_eq!(expansion.sites.len(), 4);
    assert_eq!(expansion.frames.len(), 5);
    assert_eq!(expansion.stack_count(), 3);
    let stacks: Vec<StackId> = expansion.samples.iter().map(|s| s.stack).collect();
    assert_eq!(stacks, [0, 1, 0, 2]);
    assert_eq!(expansion.sites_of(0), [0, 1, 0]);
    assert_eq!(expansion.frames_of(2).collect::<Vec<_>>(), [0, 3, 4]);

    // Lines are numbered in key order: the marker (file "") <
    // app.c:10; a < app.c:10; main < deflate.c < libz.so.1.
    let lines = Lines::new(&expansion, true).expect("valid");
    let texts: Vec<String> = lines.keys().iter().map(LineKey::text).collect();
    assert_eq!(
        texts,
        [
            "[kernel]",
            "app.c:10; a",
            "app.c:10; main",
            "deflate.c:100; deflate",
            "libz.so.1:?; fill_window"
        ]
    );
    let stacks = lines.of_stacks(&expansion).expect("valid");
    assert_eq!(stacks.get(0), [2, 1, 2]);
    assert_eq!(stacks.get(1), [2, 0]);
    assert_eq!(stacks.get(2), [2, 3, 4]);
    assert_eq!(lines.of_site(&expansion, 3), [3, 4]);
}

#[test]
fn combine_merges_frames_of_one_source_line() {
    let mut b = Builder::new();
    let (first, second) = (hot_at(&mut b, 0x10), hot_at(&mut b, 0x20));
    b.sample(0, vec![first], 1);
    b.sample(0, vec![second], 1);
    let p = b.build();
    let expansion = Expansion::new(&p, true).expect("valid");
    let combined = Lines::new(&expansion, true).expect("valid");
    assert_eq!(combined.keys().len(), 1);
    assert_eq!(
        combined.of_site(&expansion, 0),
        combined.of_site(&expansion, 1)
    );
    let apart = Lines::new(&expansion, false).expect("valid");
    assert_eq!(apart.keys().len(), 2);
    assert_eq!(
        (apart.of_site(&expansion, 0), apart.of_site(&expansion, 1)),
        (&[0][..], &[1][..])
    );
}
