use super::super::test_support::{Builder, Random, frame, location};
use super::*;
use crate::profile::{Format, GroupBy, Profile, ReportOptions, SortedBy, Stacks};

/// A profile of many stacks over several threads and processes, whose
/// later stacks use locations the earlier ones do not (some of them
/// sorting first); with kernel runs, inlined frames, a location without
/// frames, one source line at two addresses and empty stacks.
fn shaken_profile() -> Profile {
    let mut random = Random::new(0x5eed);
    let mut b = Builder::new();
    let threads = [
        0,
        b.thread(1230, 1236, "io", "server"),
        b.thread(77, 77, "cron", "cron"),
        b.thread(78, 79, "w", "cron"),
    ];
    let mut sites = Vec::new();
    for name in ["main", "k:sys_read", "work", "k:vfs_read", "zlast"] {
        sites.push(b.named(name));
    }
    for stack in 0..400 {
        if stack % 80 == 79 {
            // Another site, sorting before or after the others.
            let late = match sites.len() % 3 {
                0 => b.deflate_inlining_fill_window(Some("a.c"), sites.len() as u32),
                1 => b.location(location(
                    LocationKind::User,
                    "/usr/bin/app",
                    0x1000 + sites.len() as u64,
                    vec![frame("work", Some("app.c"), 10, false)],
                )),
                _ => b.location(location(LocationKind::User, "/opt/aaa", 0x10, vec![])),
            };
            sites.push(late);
            sites.push(b.named(&format!("k:late{stack}")));
        }
        let length = random.below(9);
        let locations = (0..length)
            .map(|_| sites[random.below(sites.len())])
            .collect();
        let thread = threads[random.below(threads.len())];
        b.sample(thread, locations, 1 + random.below(20) as u64);
    }
    b.build()
}

/// A store's stacks: an unused stack (the next one reversed) before
/// each of the profile's, so that a profile stack's id in the store is
/// not its index; and the profile as the store reads it for an index:
/// samples of store stack ids, no stacks or locations.
fn store_of(profile: &Profile) -> (Stacks, Profile) {
    let mut stacks = Stacks::default();
    let mut ids = Vec::new();
    for stack in profile.stacks.iter() {
        stacks.push(stack.iter().rev().copied());
        ids.push(stacks.push(stack.iter().copied()));
    }
    let mut by_ids = profile.clone();
    by_ids.stacks = Stacks::default();
    by_ids.locations.clear();
    for sample in &mut by_ids.samples {
        sample.stack = ids[sample.stack as usize];
    }
    (stacks, by_ids)
}

/// An index of the store's stacks, fed a few at a time.
fn index_of(profile: &Profile, stacks: &Stacks, key: StackIndexKey) -> StackIndex {
    let mut index = StackIndex::new(key);
    let all = stacks.len();
    for fed in [all / 5, all / 2, all / 2, all - 3, all] {
        index
            .extend(
                0,
                fed,
                |id| stacks.get(id).unwrap_or_default(),
                |id| &profile.locations[id as usize],
            )
            .expect("indexes");
    }
    index
}

/// Whether every report of `options` made from the index is the
/// report of the profile; how many were compared.
fn compare_every_report(
    base: &ReportOptions,
    formats: &[Format],
    hide_kernel_addresses: bool,
) -> usize {
    let profile = shaken_profile();
    let (stacks, by_ids) = store_of(&profile);
    let mut shown = profile.clone();
    if hide_kernel_addresses {
        shown.hide_kernel_addresses();
    }
    let mut compared = 0;
    for (kernel, combine) in [(true, true), (false, true), (true, false), (false, false)] {
        for &format in formats {
            let options = ReportOptions {
                format,
                kernel,
                combine,
                ..base.clone()
            };
            for groupby in [
                GroupBy::None,
                GroupBy::Thread,
                GroupBy::Process,
                GroupBy::Auto,
            ] {
                let options = ReportOptions {
                    groupby,
                    ..options.clone()
                };
                let Some(key) = StackIndexKey::of(&options, hide_kernel_addresses) else {
                    continue;
                };
                let index = index_of(&profile, &stacks, key);
                assert_eq!(index.len(), stacks.len());
                let expected = super::super::render(&shown, &options).expect("renders");
                let indexed =
                    super::super::render_indexed(&by_ids, &options, &index).expect("renders");
                assert!(
                    expected == indexed,
                    "{options:?} {key:?}\n{}\n---\n{}",
                    String::from_utf8_lossy(&expected),
                    String::from_utf8_lossy(&indexed)
                );
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn trees_from_an_index_fed_bit_by_bit_are_the_trees_of_the_profile() {
    let mut compared = 0;
    for hide_kernel_addresses in [false, true] {
        for sortedby in [SortedBy::FileFuncLine, SortedBy::Count, SortedBy::Overhead] {
            for (mincount, maxdepth, maxlines) in
                [(0, None, 10_000), (3, Some(3), 10_000), (0, None, 25)]
            {
                let options = ReportOptions {
                    sortedby,
                    mincount,
                    maxdepth,
                    maxlines,
                    ..ReportOptions::default()
                };
                compared += compare_every_report(
                    &options,
                    &[Format::Tree, Format::Flat],
                    hide_kernel_addresses,
                );
            }
        }
    }
    // Trees and flat tables, every grouping.
    assert_eq!(compared, 2 * 3 * 3 * 4 * (4 + 4));
}

#[test]
fn folded_reports_from_an_index_fed_bit_by_bit_are_those_of_the_profile() {
    // Speedscope names each frame's source file, which the index does not
    // hold: it is made from the profile.
    let formats = [Format::Folded, Format::Flamegraph, Format::DrawnFolded];
    let mut compared = 0;
    for hide_kernel_addresses in [false, true] {
        for mincount in [0, 5] {
            let options = ReportOptions {
                mincount,
                ..ReportOptions::default()
            };
            compared += compare_every_report(&options, &formats, hide_kernel_addresses);
        }
    }
    assert_eq!(compared, 2 * 2 * 4 * 3 * 4);
    // A depth cut is not what the index holds: the profile's own.
    let cut = ReportOptions {
        maxdepth: Some(2),
        ..ReportOptions::default()
    };
    assert_eq!(compare_every_report(&cut, &formats, false), 0);
}

#[test]
fn an_index_follows_a_compaction_that_keeps_the_order_of_stacks() {
    const GONE: u32 = u32::MAX;
    let profile = shaken_profile();
    let (stacks, by_ids) = store_of(&profile);
    // Every third stack of the store is gone, and the samples of those.
    let mut renumbered = vec![GONE; stacks.len()];
    let mut kept = Stacks::default();
    for (old, new) in renumbered.iter_mut().enumerate() {
        if old % 3 != 1 {
            *new = kept.push(stacks.get(old as u32).unwrap_or_default().iter().copied());
        }
    }
    let locations: Vec<u32> = (0..profile.locations.len() as u32).collect();
    let mut after = by_ids.clone();
    after
        .samples
        .retain(|sample| renumbered[sample.stack as usize] != GONE);
    for sample in &mut after.samples {
        sample.stack = renumbered[sample.stack as usize];
    }
    // The same window read with its stacks, as reports are checked.
    let mut with_stacks = after.clone();
    with_stacks.locations = profile.locations.clone();
    let mut used: Vec<u32> = after.samples.iter().map(|sample| sample.stack).collect();
    used.sort_unstable();
    used.dedup();
    for &id in &used {
        with_stacks
            .stacks
            .push(kept.get(id).unwrap_or_default().iter().copied());
    }
    for sample in &mut with_stacks.samples {
        sample.stack = used.binary_search(&sample.stack).unwrap_or_default() as u32;
    }
    let mut compared = 0;
    for format in [Format::Tree, Format::Flat, Format::Folded] {
        for (kernel, combine) in [(true, true), (false, true), (false, false)] {
            let options = ReportOptions {
                format,
                kernel,
                combine,
                groupby: GroupBy::Process,
                ..ReportOptions::default()
            };
            let key = StackIndexKey::of(&options, false).expect("indexed");
            let mut index = index_of(&profile, &stacks, key);
            assert!(index.renumber((0, 1), &renumbered, &locations, GONE));
            assert_eq!((index.generation(), index.len()), (1, kept.len()));
            let expected = super::super::render(&with_stacks, &options).expect("renders");
            let indexed = super::super::render_indexed(&after, &options, &index).expect("renders");
            assert!(expected == indexed, "{options:?}");
            compared += 1;
            // Not of the generation it follows: left as it was.
            assert!(!index.renumber((0, 2), &renumbered, &locations, GONE));
            assert_eq!(index.generation(), 1);
        }
    }
    assert_eq!(compared, 9);
}

#[test]
fn a_new_generation_indexes_anew_and_stacks_past_the_index_are_refused() {
    let profile = shaken_profile();
    let (stacks, by_ids) = store_of(&profile);
    let options = ReportOptions::default();
    let key = StackIndexKey::of(&options, false).expect("a tree is indexed");
    let expected = super::super::render(&profile, &options).expect("renders");
    // Another generation's stacks first: the profile's reversed.
    let mut reversed = Stacks::default();
    for stack in (0..stacks.len()).rev() {
        reversed.push(stacks.get(stack as u32).unwrap_or_default().iter().copied());
    }
    let mut index = index_of(&profile, &reversed, key);
    let fresh = |id: u32| stacks.get(id).unwrap_or_default();
    let location = |id: u32| &profile.locations[id as usize];
    index.extend(1, 10, fresh, location).expect("indexes");
    assert_eq!((index.generation(), index.len()), (1, 10));
    // Most samples' stacks are past what it holds.
    let short = super::super::render_indexed(&by_ids, &options, &index);
    assert_eq!(
        short.map_err(|err| err.to_string()).err().as_deref(),
        Some("inconsistent profile: sample 5 refers to stack 11 of 10")
    );
    index
        .extend(1, stacks.len(), fresh, location)
        .expect("indexes");
    let indexed = super::super::render_indexed(&by_ids, &options, &index);
    assert!(indexed.expect("renders") == expected);
    // A profile with stacks of its own is not one of the index's.
    let own = super::super::render_indexed(&profile, &options, &index);
    assert!(own.expect("renders") == expected);
}
