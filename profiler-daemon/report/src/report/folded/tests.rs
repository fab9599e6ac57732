//! The folded report against hand-made profiles, and against a plain
//! reference (stacks joined as text, sorted bytewise) on random ones.

use super::super::test_support::{Builder, Random, frame, location, profile};
use super::*;
use crate::profile::{Format, LossCause};

fn folded(profile: &Profile, options: ReportOptions) -> String {
    render(
        profile,
        &ReportOptions {
            format: Format::Folded,
            ..options
        },
        None,
    )
    .expect("renders")
}

#[test]
fn one_sorted_line_per_stack_and_nothing_else() {
    let mut p = profile(&[(&["main", "b"], 25), (&["main", "a"], 75), (&["aux"], 1)]);
    p.warnings.push("stacks truncated".to_owned());
    p.lost.push((LossCause::StackCollision, 4));
    assert_eq!(
        folded(&p, ReportOptions::default()),
        "aux 1\nmain;a 75\nmain;b 25\n"
    );
}

#[test]
fn names_are_escaped_but_keep_their_spaces() {
    let mut b = Builder::new();
    let odd = b.location(location(
        LocationKind::User,
        "/usr/bin/app",
        0x10,
        vec![frame(
            "operator() [with T = a;b]\nline",
            Some("x.cc"),
            1,
            false,
        )],
    ));
    let empty = b.location(location(
        LocationKind::User,
        "/usr/bin/app",
        0x20,
        vec![frame("", None, 0, false)],
    ));
    b.sample(0, vec![odd, empty], 2);
    let p = b.build();
    assert_eq!(
        folded(&p, ReportOptions::default()),
        "operator() [with T = a:b] line;[unknown] 2\n"
    );
}

#[test]
fn kernel_and_inlined_frames_are_suffixed() {
    let mut b = Builder::new();
    let main = b.named("main");
    let both = b.deflate_inlining_fill_window(None, 0);
    let sys_write = b.named("k:sys_write");
    let ksys_write = b.named("k:ksys_write");
    b.sample(0, vec![main, both, sys_write, ksys_write], 4);
    b.sample(0, vec![main, sys_write], 1);
    let p = b.build();
    assert_eq!(
        folded(&p, ReportOptions::default()),
        "main;deflate;fill_window_[i];sys_write_[k];ksys_write_[k] 4\n\
         main;sys_write_[k] 1\n"
    );
    let options = ReportOptions {
        kernel: false,
        ..ReportOptions::default()
    };
    assert_eq!(
        folded(&p, options),
        "main;[kernel] 1\nmain;deflate;fill_window_[i];[kernel] 4\n"
    );
}

#[test]
fn maxdepth_merges_then_mincount_filters() {
    let p = profile(&[
        (&["main", "a", "x"], 5),
        (&["main", "a", "y"], 3),
        (&["main", "b"], 2),
    ]);
    let options = ReportOptions {
        maxdepth: Some(2),
        mincount: 6,
        ..ReportOptions::default()
    };
    assert_eq!(folded(&p, options), "main;a 8\n");
    let options = ReportOptions {
        maxdepth: Some(0),
        ..ReportOptions::default()
    };
    assert_eq!(folded(&p, options), "main 10\n");
    let options = ReportOptions {
        mincount: 3,
        ..ReportOptions::default()
    };
    assert_eq!(folded(&p, options), "main;a;x 5\nmain;a;y 3\n");
}

#[test]
fn groupby_prepends_process_and_thread_frames() {
    let mut b = Builder::new();
    let io = b.thread(1230, 1235, "io;loop", "server");
    b.stacks(0, &[(&["main", "work"], 3)]);
    b.stacks(io, &[(&["main", "poll"], 2)]);
    let p = b.build();
    let options = ReportOptions {
        groupby: GroupBy::Process,
        maxdepth: Some(1),
        ..ReportOptions::default()
    };
    assert_eq!(folded(&p, options), "server-1230;main 5\n");
    let options = ReportOptions {
        groupby: GroupBy::Thread,
        ..ReportOptions::default()
    };
    assert_eq!(
        folded(&p, options),
        "server-1230;io:loop-1235;main;poll 2\n\
         server-1230;worker-1234;main;work 3\n"
    );
}

/// Whole-machine folded lines start with their command, as perf's
/// stackcollapse does, so that one program's stacks do not merge into
/// another's; a profile of one command's processes needs none.
#[test]
fn by_default_folded_lines_start_with_their_command_when_there_are_several() {
    let mut b = Builder::new();
    let other = b.thread(77, 77, "db", "db");
    b.stacks(0, &[(&["main", "work"], 3)]);
    b.stacks(other, &[(&["main", "work"], 2)]);
    let p = b.build();
    assert_eq!(
        folded(&p, ReportOptions::default()),
        "db;main;work 2\nserver;main;work 3\n"
    );
    let speedscope = String::from_utf8(
        crate::report::render(
            &p,
            &ReportOptions {
                format: crate::profile::Format::Speedscope,
                ..ReportOptions::default()
            },
        )
        .expect("renders"),
    )
    .expect("UTF-8");
    assert!(speedscope.contains(r#"{"name":"server"}"#), "{speedscope}");
    // One command: no root added; `--groupby none` asks for none either.
    let mut b = Builder::new();
    let io = b.thread(1230, 1235, "io", "server");
    b.stacks(0, &[(&["main", "work"], 3)]);
    b.stacks(io, &[(&["main", "work"], 2)]);
    assert_eq!(
        folded(&b.build(), ReportOptions::default()),
        "main;work 5\n"
    );
    let options = ReportOptions {
        groupby: GroupBy::None,
        ..ReportOptions::default()
    };
    assert_eq!(folded(&p, options), "main;work 5\n");
}

#[test]
fn empty_stacks_and_profiles() {
    let p = profile(&[(&[], 2)]);
    assert_eq!(folded(&p, ReportOptions::default()), "[unknown] 2\n");
    assert_eq!(folded(&profile(&[]), ReportOptions::default()), "");
}

/// The folded report as the joined lines themselves would give it.
fn reference(profile: &Profile, options: &ReportOptions) -> String {
    let expansion = Expansion::new(profile, options.kernel).expect("valid");
    let depth = options.maxdepth.map_or(usize::MAX, |d| (d as usize).max(1));
    let mut lines = std::collections::BTreeMap::<String, u64>::new();
    for sample in expansion.samples.iter() {
        let mut names = group_frames(expansion.thread(sample), options.groupby);
        let frames = expansion.frames_of(sample.stack).take(depth);
        names.extend(frames.map(|frame| frame_name(expansion.frames[frame as usize], true)));
        *lines.entry(names.join(";")).or_default() += sample.count;
    }
    lines
        .into_iter()
        .filter(|&(_, count)| count >= options.mincount)
        .map(|(line, count)| format!("{line} {count}\n"))
        .collect()
}

#[test]
fn lines_sort_bytewise_whatever_the_names() {
    // Names that are prefixes of each other, with bytes below and above
    // `;`, and names that clean to the same text.
    let names = [
        "a", "a-", "a:", "a;b", "a:b", "ab", "a b", "", "a\nb", "b", "a0", "a_[i]", "~",
    ];
    let mut random = Random::new(0x2545_f491_4f6c_dd1d_u64);
    let mut next = |below: usize| random.below(below);
    let mut b = Builder::new();
    let threads = [
        0,
        b.thread(1230, 1235, "a;b", "server"),
        b.thread(7, 8, "a:b", "a-"),
        b.thread(7, 9, "", "a-"),
        b.thread(70, 71, "x", "a"),
    ];
    let mut sites = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let kind = if index % 4 == 3 {
            LocationKind::Kernel
        } else {
            LocationKind::User
        };
        let mut frames = vec![frame(name, None, 0, false)];
        if index % 5 == 1 {
            frames.push(frame(names[(index + 3) % names.len()], None, 0, true));
        }
        sites.push(b.location(location(kind, "/usr/bin/app", index as u64, frames)));
    }
    for _ in 0..400 {
        let length = next(6);
        let stack = (0..length).map(|_| sites[next(sites.len())]).collect();
        b.sample(threads[next(threads.len())], stack, 1 + next(3) as u64);
    }
    let p = b.build();
    for groupby in [GroupBy::None, GroupBy::Process, GroupBy::Thread] {
        for (maxdepth, mincount, kernel) in [(None, 0, true), (Some(2), 3, false)] {
            let options = ReportOptions {
                groupby,
                maxdepth,
                mincount,
                kernel,
                ..ReportOptions::default()
            };
            assert_eq!(folded(&p, options.clone()), reference(&p, &options));
        }
    }
}

#[test]
fn groups_of_many_lines_interleaved_by_rank_keep_every_sample() {
    // Two processes (one of two threads, as a process that execs keeps its
    // thread under another name) whose samples come in runs, each process
    // with more lines than are sorted by comparison, their stacks' ranks
    // interleaved: every line has all of its samples.
    let mut random = Random::new(0x517c_c1b7_2722_0a95);
    let mut b = Builder::new();
    let threads = [
        0,
        b.thread(1230, 1230, "exec-b", "exec-b"),
        b.thread(1230, 1231, "helper", "exec-b"),
        b.thread(77, 77, "other", "other"),
    ];
    let names: Vec<String> = (0..40).map(|index| format!("f{index:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut stacks = Vec::new();
    for _ in 0..3000 {
        let length = 1 + random.below(5);
        let stack: Vec<&str> = (0..length)
            .map(|_| names[random.below(names.len())])
            .collect();
        stacks.push(stack);
    }
    for (index, stack) in stacks.iter().enumerate() {
        b.stacks(threads[index % threads.len()], &[(stack, 1)]);
    }
    let mut p = b.build();
    let stack_count = p.stacks.len() as u32;
    for _ in 0..20_000 {
        let mut sample = p.samples[random.below(p.samples.len())];
        sample.thread = threads[random.below(threads.len())];
        sample.stack = random.below(stack_count as usize) as u32;
        p.samples.push(sample);
    }
    for groupby in [GroupBy::Process, GroupBy::Thread] {
        for mincount in [0, 4] {
            let options = ReportOptions {
                groupby,
                mincount,
                ..ReportOptions::default()
            };
            assert_eq!(folded(&p, options.clone()), reference(&p, &options));
        }
    }
}
