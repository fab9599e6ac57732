//! The folded ("collapsed") stacks report read by flamegraph.pl, inferno and
//! speedscope: one `frame;frame;… count` line per distinct stack, root
//! first, lines sorted bytewise.
//!
//! Frames are function names only, with the stackcollapse-perf suffixes:
//! `_[k]` on kernel frames, `_[i]` on inlined ones (markers such as
//! `[kernel]` get none). A `;` in a name becomes `:`, a line break a space;
//! other spaces stay, as the count follows the last space. `groupby`
//! prepends `process-pid` (and `thread-tid`) frames; `maxdepth` keeps the
//! root-most frames of the stack itself (at least one, group frames not
//! counted) and `mincount` drops lines after the resulting merge.
//!
//! It must print nothing but stack lines: no header, comments or warnings.
//! `combine`, `sortedby` and `noisefloor` do not apply.

use std::{collections::BTreeMap, fmt::Write as _};

use super::ReportError;
use super::frames::{self, FrameView, UNKNOWN_MARKER};
use crate::profile::{GroupBy, LocationKind, Profile, ReportOptions, ThreadInfo};

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<String, ReportError> {
    let samples = frames::expand(profile, options.kernel)?;
    // Keeping no frame at all would leave lines without a stack.
    let depth = options
        .maxdepth
        .map_or(usize::MAX, |maxdepth| (maxdepth as usize).max(1));
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &samples {
        let mut names = group_frames(sample.thread, options.groupby);
        names.extend(sample.frames().take(depth).map(frame_name));
        let count = stacks.entry(names.join(";")).or_default();
        *count = count.saturating_add(sample.count);
    }
    let mut out = String::new();
    for (stack, count) in stacks {
        if count >= options.mincount {
            writeln!(out, "{stack} {count}")?;
        }
    }
    Ok(out)
}

/// The frames `groupby` puts above every stack of `thread`.
fn group_frames(thread: &ThreadInfo, groupby: GroupBy) -> Vec<String> {
    let process = format!("{}-{}", clean(&thread.process_name), thread.pid);
    match groupby {
        GroupBy::None => Vec::new(),
        GroupBy::Process => vec![process],
        GroupBy::Thread => vec![
            process,
            format!("{}-{}", clean(&thread.thread_name), thread.tid),
        ],
    }
}

fn frame_name(frame: FrameView<'_>) -> String {
    let suffix = match frame.kind {
        LocationKind::Kernel => "_[k]",
        _ if frame.inlined => "_[i]",
        _ => "",
    };
    format!("{}{suffix}", clean(frame.function))
}

/// `name` made safe for one frame of a folded line.
fn clean(name: &str) -> String {
    if name.is_empty() {
        return UNKNOWN_MARKER.to_owned();
    }
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{Builder, frame, location, profile};
    use super::*;
    use crate::profile::{Format, LossCause};

    fn folded(profile: &Profile, options: ReportOptions) -> String {
        render(
            profile,
            &ReportOptions {
                format: Format::Folded,
                ..options
            },
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

    #[test]
    fn empty_stacks_and_profiles() {
        let p = profile(&[(&[], 2)]);
        assert_eq!(folded(&p, ReportOptions::default()), "[unknown] 2\n");
        assert_eq!(folded(&profile(&[]), ReportOptions::default()), "");
    }
}
