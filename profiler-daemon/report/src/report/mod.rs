//! Reports: pure functions from an aggregated [`Profile`] to the bytes of one
//! output format. Nothing here touches the store, the symbolizer or the
//! kernel, and nothing here aggregates more than a report needs.
//!
//! One submodule per format (`tree`, `flat`, `folded`, `pprof`, `pstats`);
//! `frames` expands stacks into frames for all of them, `sequences` stores
//! and sorts stacks as sequences of ids, `protobuf` encodes pprof samples
//! by hand, `sections` splits tree and flat reports by `groupby` (within
//! `maxsections`), and this module holds the dispatch, the error type and
//! what tree and flat share: the `# ` comment lines, the summary line and
//! the utilization figures.
//!
//! Profiles hold hundreds of distinct locations but millions of frames, so
//! reports are made for speed and memory: sites, frames, lines and names
//! are interned once per report as small integer ids, each distinct stack is
//! expanded once, the formats count and sort ids rather than strings
//! (ordering ids so that comparing them compares what they stand for), the
//! text of an id is made once, and the text formats reserve their output at
//! its exact size before writing it. Output never depends on hash order.
//!
//! Conventions shared by the text formats:
//! - A sample's frames are its locations' frames, root first, a location's
//!   inlined frames outermost first.
//! - With `kernel == false` each run of kernel locations becomes one
//!   `[kernel]` marker; an empty stack is shown as one `[unknown]` frame.
//! - A frame is shown as `file:line; function`. Without a source file the
//!   file is the module's basename and the line `?` (kernel code therefore
//!   reads `[kernel]:?; do_syscall_64`); a marker is shown as its name alone.
//!   With `combine == false` frames are also told apart by module and
//!   address, and tree and flat append ` @0x<address>` to the function.
//! - Samples with a count of 0 are ignored by every format.
//! - Utilization is samples / [`Profile::ticks_per_cpu`] as a rounded
//!   percentage of one CPU (`n/a` when the window has no ticks).

mod budget;
mod callers;
mod diff;
mod flamegraph;
mod flat;
mod folded;
mod frames;
mod functions;
mod gecko;
mod lines;
mod parallel;
mod pprof;
mod pprof_diff;
mod protobuf;
mod pstats;
mod radix;
mod sections;
mod sequences;
mod stack_index;
#[cfg(test)]
pub(crate) mod test_support;
mod top;
mod tree;

use std::fmt::Write as _;

use crate::profile::{Format, GroupBy, Profile, ProfileMode, ReportOptions};
pub use callers::{CallerCount, callers, callers_text};
pub use diff::{FunctionChange, diff, diff_text};
pub use lines::{FileLines, FunctionLines, LineCount, function_lines};
use profilerd_words::bytes_with_count;
use sections::{Section, Sections};
pub use sections::{may_leave_out_sections, threads_shown};
pub use stack_index::{IndexedWords, StackIndex, StackIndexKey};
pub use top::{FunctionRanking, TopFunction, ranked, top};

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The profile refers to a thread, stack or location it does not hold
    /// (or has more than 2³² distinct stacks or frames, far beyond any).
    #[error("inconsistent profile: {0}")]
    InvalidProfile(String),
    /// Writing the text of a report failed.
    #[error("formatting the report failed")]
    Format(#[from] std::fmt::Error),
    /// Gzip-compressing the pprof profile failed.
    #[error("compressing the pprof profile failed: {0}")]
    Compress(#[from] std::io::Error),
    /// Drawing the flame graph failed.
    #[error("drawing the flame graph failed: {0}")]
    Flamegraph(String),
    /// The format cannot hold this profile (what to ask for instead).
    #[error("{0}")]
    Unsupported(String),
}

/// A section of [`render_thread_trees`]: one thread of the profile and the
/// lines that introduce its tree.
#[derive(Clone, Debug)]
pub struct ThreadSection {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// One or more lines, without the final newline.
    pub title: String,
}

/// A tree report in the given sections, in the given order, each with the
/// given title: how a peek shows each thread, those without samples too.
/// `options.groupby` is ignored.
pub fn render_thread_trees(
    profile: &Profile,
    options: &ReportOptions,
    sections: &[ThreadSection],
) -> Result<String, ReportError> {
    tree::render_threads(profile, options, sections)
}

/// Renders `profile` as `options.format` asks. Text formats are UTF-8; pprof
/// is a gzipped profile.proto.
pub fn render(profile: &Profile, options: &ReportOptions) -> Result<Vec<u8>, ReportError> {
    refuse_unread_threads(profile, options)?;
    if !options.interpreter {
        let shown = profile.without_interpreter_frames();
        let options = ReportOptions {
            interpreter: true,
            ..*options
        };
        return render(&shown, &options);
    }
    // An allocation profile holds what was allocated and what is still
    // held: pprof carries both, the other formats the mode's.
    if profile.mode.is_memory()
        && options.format != Format::Pprof
        && profile
            .samples
            .iter()
            .any(|sample| !profile.mode.includes(sample.state))
    {
        let mut only = profile.clone();
        only.samples
            .retain(|sample| profile.mode.includes(sample.state));
        return render(&only, options);
    }
    match options.format {
        Format::Tree => tree::render(profile, options).map(String::into_bytes),
        Format::Flat => flat::render(profile, options).map(String::into_bytes),
        Format::Folded => folded::render(profile, options, None).map(String::into_bytes),
        Format::Pprof => pprof::render(profile, options),
        Format::Flamegraph => flamegraph::svg(profile, options, None),
        Format::Speedscope => flamegraph::speedscope(profile, options, None),
        Format::DrawnFolded => flamegraph::drawn_folded(profile, options, None),
        Format::Pstats => pstats::render(profile),
        Format::Gecko => gecko::render(profile, options),
    }
}

/// Renders a profile read by the store's stack ids
/// (the daemon's `Store::profile_of_store_stacks`) as [`render`] renders
/// the same window read with its stacks: its stacks' words and their order
/// come from `index`, which must be of the store's generation then, hold
/// its stacks, and hide kernel addresses as the profile should be. The
/// formats the index does not serve, and profiles with stacks of their own,
/// are rendered by [`render`].
pub fn render_indexed(
    profile: &Profile,
    options: &ReportOptions,
    index: &StackIndex,
) -> Result<Vec<u8>, ReportError> {
    refuse_unread_threads(profile, options)?;
    let key = index.key();
    let served = !profile.mode.is_memory()
        && profile.stacks.is_empty()
        && profile.locations.is_empty()
        && StackIndexKey::of(options, key.hide_kernel_addresses) == Some(key);
    if !served {
        return render(profile, options);
    }
    match options.format {
        Format::Tree => tree::render_indexed(profile, options, index).map(String::into_bytes),
        Format::Folded => folded::render(profile, options, Some(index)).map(String::into_bytes),
        Format::Flamegraph => flamegraph::svg(profile, options, Some(index)),
        Format::Speedscope => flamegraph::speedscope(profile, options, Some(index)),
        Format::DrawnFolded => flamegraph::drawn_folded(profile, options, Some(index)),
        Format::Flat => flat::render_indexed(profile, options, index).map(String::into_bytes),
        Format::Pprof | Format::Pstats | Format::Gecko => render(profile, options),
    }
}

/// Refuses a profile with threads not read per stack
/// ([`Profile::unread`]) unless `options` ask for a report that may leave
/// their sections out: any other would be short of their samples.
fn refuse_unread_threads(profile: &Profile, options: &ReportOptions) -> Result<(), ReportError> {
    if profile.unread.is_empty() || may_leave_out_sections(options) {
        return Ok(());
    }
    Err(ReportError::InvalidProfile(
        "only a tree or flat report within maxsections can leave threads unread".to_owned(),
    ))
}

/// How a diff of two profiles is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffFormat {
    /// The target minus the base as one gzipped pprof profile.
    Pprof,
    /// A differential flame graph (SVG).
    Flamegraph,
}

/// Renders the difference of `target` from `base`; `options.kernel`,
/// `maxdepth`, `mincount` and `groupby` apply as to the single profiles'
/// reports. With `normalize` the base is scaled to the target's samples.
pub fn render_diff(
    base: &Profile,
    target: &Profile,
    format: DiffFormat,
    options: &ReportOptions,
    normalize: bool,
) -> Result<Vec<u8>, ReportError> {
    match format {
        DiffFormat::Pprof => pprof_diff::render(base, target, options, normalize),
        DiffFormat::Flamegraph => flamegraph::diff_svg(base, target, options, normalize),
    }
}

/// Writes a tree or flat report: the `# ` comments (with what `cut` left
/// out to stay within `maxlines`), `header`, then each
/// section (titled and followed by a blank line when grouped, closed by the
/// summary line when not), its body written by `write_body`, then the
/// `legend` (what the columns mean) with the whole of what the `%` columns
/// are shares of.
fn render_sections(
    profile: &Profile,
    sections: Sections,
    cut: Option<budget::LinesCut>,
    header: &str,
    legend: &str,
    mut write_body: impl FnMut(&mut String, &Section) -> Result<usize, ReportError>,
) -> Result<String, ReportError> {
    let mut out = String::new();
    let unit = counted_unit(profile);
    write_comments(&mut out, profile)?;
    if let Some(left_out) = &sections.left_out {
        left_out.write_comment(&mut out, unit)?;
    }
    if let Some(cut) = &cut {
        cut.write_comment(&mut out, unit)?;
    }
    out.push_str(header);
    let mut grouped = false;
    // Sections whose every line `maxlines` left out: counted, not titled.
    let (mut empty, mut empty_total) = (0_u64, 0_u64);
    for section in sections.shown {
        match &section.title {
            Some(title) => {
                grouped = true;
                let start = out.len();
                writeln!(out, "{title}")?;
                if write_body(&mut out, &section)? == 0 && cut.is_some() {
                    out.truncate(start);
                    empty += 1;
                    empty_total = empty_total.saturating_add(section.total);
                    continue;
                }
                writeln!(out)?;
            }
            None => {
                write_body(&mut out, &section)?;
                write_summary(&mut out, profile, section.total)?;
            }
        }
    }
    if let Some(cut) = cut.filter(|_| empty > 0) {
        let sections = if empty == 1 { "section" } else { "sections" };
        writeln!(
            out,
            "{empty} more {sections} ({empty_total} {unit} in all) with no line shown {}\n",
            cut.how_to_see_all()
        )?;
    }
    if let Some(left_out) = &sections.left_out {
        left_out.write_line(&mut out, unit)?;
    }
    let whole = if grouped { "its section's" } else { "all" };
    if unit == "samples" {
        writeln!(out, "{legend}; %: a share of {whole} samples")?;
    } else {
        let legend = legend.replace("samples", unit);
        writeln!(out, "{legend}; %: a share of {whole} {unit}")?;
    }
    Ok(out)
}

/// Appends `part` as a share of `total` in six characters, e.g. ` 25.6%`.
fn push_percent(out: &mut String, part: u64, total: u64) {
    let tenths = match total {
        0 => 0,
        total => {
            let (part, total) = (u128::from(part), u128::from(total));
            ((part * 1000 + total / 2) / total).min(9999) as u64
        }
    };
    let whole = tenths / 10;
    push_spaces(out, 3_usize.saturating_sub(digits(whole)));
    push_decimal(out, whole);
    out.push('.');
    push_decimal(out, tenths % 10);
    out.push('%');
}

/// The width [`push_percent`] writes.
const PERCENT_WIDTH: usize = 6;

/// Room for what follows a section's body: its blank line or the summary.
const SECTION_END_BYTES: usize = 128;

/// Whose samples a report tells apart: the coarsest sums of a window it
/// can be made from. A report is the same made of a window read per thread
/// and stack as of one read summed this far (each sum standing for its
/// owners by the least of their threads, every thread with samples still
/// listed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnersShown {
    /// Each thread's: tree and flat sections, pprof per thread.
    Threads,
    /// Each process's (its pid and command name): folded stacks, flame
    /// graphs, speedscope and pprof grouped by process.
    Processes,
    /// Each command's (its name) when the samples are of more than one
    /// process, each thread's when they are of one: pprof's default.
    CommandsOrThreads,
    /// Nobody's: the whole machine's samples per stack.
    Nobody,
}

/// Whose samples a report made as `options` ask tells apart (a section, a
/// frame or a label of their own).
pub fn owners_shown(options: &ReportOptions) -> OwnersShown {
    match (options.format, options.groupby) {
        // A timeline is each thread's, whatever the grouping.
        (Format::Gecko, _) => OwnersShown::Threads,
        (_, GroupBy::None) => OwnersShown::Nobody,
        // Functions are keyed by file, whoever ran them.
        (Format::Pstats, _) => OwnersShown::Nobody,
        // `Auto` is per process when there is more than one.
        (Format::Tree | Format::Flat, _) => OwnersShown::Threads,
        (Format::Pprof, GroupBy::Auto) => OwnersShown::CommandsOrThreads,
        (Format::Pprof, GroupBy::Thread) => OwnersShown::Threads,
        (Format::Pprof, GroupBy::Process) => OwnersShown::Processes,
        // Folded lines start with their command when there is more than one.
        (Format::Folded | Format::Speedscope, GroupBy::Auto) => OwnersShown::CommandsOrThreads,
        (Format::Flamegraph | Format::DrawnFolded, GroupBy::Auto) => OwnersShown::Nobody,
        (
            Format::Folded | Format::Flamegraph | Format::Speedscope | Format::DrawnFolded,
            GroupBy::Process,
        ) => OwnersShown::Processes,
        (
            Format::Folded | Format::Flamegraph | Format::Speedscope | Format::DrawnFolded,
            GroupBy::Thread,
        ) => OwnersShown::Threads,
    }
}

/// Whether a report made as `options` ask shows threads or processes: a
/// report that does not is the same made of each stack's samples summed
/// over all threads.
pub fn shows_threads(options: &ReportOptions) -> bool {
    owners_shown(options) != OwnersShown::Nobody
}

/// `samples` as a rounded percentage of one CPU's `ticks`, e.g. `98%`.
fn utilization(samples: u64, ticks: u64) -> String {
    if ticks == 0 {
        return "n/a".to_owned();
    }
    let percent = (samples as f64 / ticks as f64 * 100.0).round();
    format!("{percent}%")
}

/// What the counts of a profile's reports are.
fn counted_unit(profile: &Profile) -> &'static str {
    if profile.mode.is_memory() {
        "bytes"
    } else {
        "samples"
    }
}

/// The closing line of an ungrouped tree or flat report.
fn write_summary(out: &mut String, profile: &Profile, total: u64) -> Result<(), ReportError> {
    if profile.mode.is_memory() {
        let objects = profile.samples.iter().fold(0_u64, |objects, sample| {
            objects.saturating_add(sample.weight)
        });
        let what = match profile.mode {
            ProfileMode::Held => "still held",
            _ => "allocated",
        };
        writeln!(
            out,
            "Total: {} {what} in {objects} objects (estimated)",
            bytes_with_count(total)
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "Total snapshots: {total} ({} of one CPU)",
        utilization(total, profile.ticks_per_cpu())
    )?;
    Ok(())
}

/// The `# ` lines that open tree and flat reports: warnings, then losses
/// (a time profile's are the whole machine's in the window, an allocation
/// profile's its own), then the profile's own samples kept without their
/// stacks (under `[lost…]` frames), by cause.
fn write_comments(out: &mut String, profile: &Profile) -> Result<(), ReportError> {
    for warning in &profile.warnings {
        // A warning must not break out of its comment line.
        let warning = warning.replace(['\n', '\r'], " ");
        writeln!(out, "# warning: {warning}")?;
    }
    for (cause, count) in &profile.lost {
        if *count > 0 {
            let whose = if cause.is_allocation() {
                ""
            } else {
                " machine-wide"
            };
            writeln!(out, "# lost{whose}: {}={count}", cause.name())?;
        }
    }
    for (cause, count) in &profile.own_lost {
        writeln!(
            out,
            "# kept without their stacks, of these samples: {cause}={count}"
        )?;
    }
    Ok(())
}

/// Number of decimal digits of `n` (1 for 0): Julia's `ndigits`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Appends `n` in decimal, as `write!(out, "{n}")` would but faster.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut text = [0u8; 20];
    let mut start = text.len();
    loop {
        start -= 1;
        text[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Pushing the few ASCII digits one by one beats copying them.
    for &digit in &text[start..] {
        out.push(char::from(digit));
    }
}

/// Appends `n` spaces.
fn push_spaces(out: &mut String, n: usize) {
    const SPACES: &str = "                                ";
    if n <= 8 {
        // Usually a few: pushing them one by one beats copying them.
        for _ in 0..n {
            out.push(' ');
        }
        return;
    }
    let mut left = n;
    while left > 0 {
        let chunk = left.min(SPACES.len());
        out.push_str(&SPACES[..chunk]);
        left -= chunk;
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{Builder, profile};
    use super::*;

    use crate::profile::LossCause;

    #[test]
    fn utilization_rounds_and_handles_no_ticks() {
        assert_eq!(utilization(98, 100), "98%");
        assert_eq!(utilization(150, 100), "150%");
        assert_eq!(utilization(2, 3), "67%");
        assert_eq!(utilization(5, 0), "n/a");
        assert_eq!(
            utilization(u64::MAX, 1),
            format!("{}%", u64::MAX as f64 * 100.0)
        );
    }

    #[test]
    fn percents_take_six_characters() {
        let percent = |part, total| {
            let mut out = String::new();
            push_percent(&mut out, part, total);
            assert_eq!(out.len(), PERCENT_WIDTH, "{out:?}");
            out
        };
        assert_eq!(percent(1, 4), " 25.0%");
        assert_eq!(percent(2, 3), " 66.7%");
        assert_eq!(percent(4, 4), "100.0%");
        assert_eq!(percent(0, 4), "  0.0%");
        assert_eq!(percent(1, 2000), "  0.1%");
        assert_eq!(percent(1, 0), "  0.0%");
    }

    #[test]
    fn digits_matches_julia_ndigits() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u64::MAX), 20);
    }

    #[test]
    fn push_decimal_and_push_spaces_match_format() {
        let mut out = String::new();
        for n in [0, 7, 10, 99, 12_345, u64::MAX] {
            push_decimal(&mut out, n);
            push_spaces(&mut out, 1);
        }
        push_spaces(&mut out, 70);
        assert_eq!(out, format!("0 7 10 99 12345 {} {:70}", u64::MAX, ""));
    }

    #[test]
    fn comments_list_warnings_and_nonzero_losses() {
        let mut p = profile(&[]);
        p.warnings = vec!["stacks truncated\nat 127 frames".to_owned()];
        p.lost = vec![(LossCause::CountsMapFull, 0), (LossCause::StackMapFull, 3)];
        let mut out = String::new();
        write_comments(&mut out, &p).expect("writes");
        assert_eq!(
            out,
            "# warning: stacks truncated at 127 frames\n# lost machine-wide: stack_map_full=3\n"
        );
        // An allocation profile's drops are its own.
        p.warnings.clear();
        p.lost = vec![(LossCause::AllocShareFull, 4)];
        out.clear();
        write_comments(&mut out, &p).expect("writes");
        assert_eq!(out, "# lost: alloc_share_full=4\n");
        // The profile's own samples kept without their stacks.
        p.lost.clear();
        p.own_lost = vec![("stack_copy_ring_full", 12)];
        out.clear();
        write_comments(&mut out, &p).expect("writes");
        assert_eq!(
            out,
            "# kept without their stacks, of these samples: stack_copy_ring_full=12\n"
        );
    }

    #[test]
    fn render_rejects_dangling_indexes_without_panicking() {
        let mut b = Builder::new();
        b.stacks(0, &[(&["main"], 1)]);
        let mut p = b.build();
        p.samples[0].stack = 7;
        for format in [Format::Tree, Format::Flat, Format::Folded, Format::Pprof] {
            let options = ReportOptions {
                format,
                ..ReportOptions::default()
            };
            let err = render(&p, &options).expect_err("stack 7 does not exist");
            assert_eq!(
                err.to_string(),
                "inconsistent profile: sample 0 refers to stack 7 of 1"
            );
        }
    }
}
