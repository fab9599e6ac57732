//! Reports: pure functions from an aggregated [`Profile`] to the bytes of one
//! output format. Nothing here touches the store, the symbolizer or the
//! kernel, and nothing here aggregates more than a report needs.
//!
//! One submodule per format (`tree`, `flat`, `folded`, `pprof`);
//! `frames` expands stacks into frames for all of them, and this module
//! holds the dispatch, the error type and what tree and flat share: the `# `
//! comment lines, the sections of `groupby` and the utilization figures.
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

mod flat;
mod folded;
mod frames;
mod pprof;
#[cfg(test)]
mod test_support;
mod tree;

use std::{collections::BTreeMap, fmt::Write as _, sync::Arc};

use crate::profile::{Format, GroupBy, Profile, ReportOptions};
use frames::StackSample;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The profile refers to a thread, stack or location it does not hold.
    #[error("inconsistent profile: {0}")]
    InvalidProfile(String),
    /// Writing the text of a report failed.
    #[error("formatting the report failed")]
    Format(#[from] std::fmt::Error),
    /// Gzip-compressing the pprof profile failed.
    #[error("compressing the pprof profile failed: {0}")]
    Compress(#[from] std::io::Error),
}

/// Renders `profile` as `options.format` asks. Text formats are UTF-8; pprof
/// is a gzipped profile.proto.
pub fn render(profile: &Profile, options: &ReportOptions) -> Result<Vec<u8>, ReportError> {
    match options.format {
        Format::Tree => tree::render(profile, options).map(String::into_bytes),
        Format::Flat => flat::render(profile, options).map(String::into_bytes),
        Format::Folded => folded::render(profile, options).map(String::into_bytes),
        Format::Pprof => pprof::render(profile, options),
    }
}

/// Writes a tree or flat report: the `# ` comments, `header`, then each
/// section (titled and followed by a blank line when grouped, closed by the
/// summary line when not), its body written by `write_body`.
fn render_sections(
    profile: &Profile,
    options: &ReportOptions,
    header: &str,
    write_body: impl Fn(&mut String, &Section<'_, '_>, &ReportOptions) -> Result<(), ReportError>,
) -> Result<String, ReportError> {
    let samples = frames::expand(profile, options.kernel)?;
    let mut out = String::new();
    write_comments(&mut out, profile)?;
    out.push_str(header);
    for section in sections(profile, &samples, options.groupby) {
        match &section.title {
            Some(title) => {
                writeln!(out, "{title}")?;
                write_body(&mut out, &section, options)?;
                writeln!(out)?;
            }
            None => {
                write_body(&mut out, &section, options)?;
                write_summary(&mut out, profile, section.total)?;
            }
        }
    }
    Ok(out)
}

/// The samples one block of a tree or flat report is made of.
struct Section<'s, 'a> {
    /// The header line of a `groupby` section; `None` for the whole profile.
    title: Option<String>,
    samples: Vec<&'s StackSample<'a>>,
    /// Sum of the samples' counts.
    total: u64,
}

/// Who a section is about, in the order sections with equal totals appear.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum SectionKey {
    Thread {
        pid: u32,
        tid: u32,
        thread_name: Arc<str>,
        process_name: Arc<str>,
    },
    Process {
        pid: u32,
        process_name: Arc<str>,
    },
}

/// Splits the samples as `groupby` asks: one untitled section for
/// `GroupBy::None` (even without samples), otherwise one titled section per
/// thread or process, by total descending, then pid, tid and names.
fn sections<'s, 'a>(
    profile: &Profile,
    samples: &'s [StackSample<'a>],
    groupby: GroupBy,
) -> Vec<Section<'s, 'a>> {
    let mut groups: BTreeMap<Option<SectionKey>, Vec<&'s StackSample<'a>>> = BTreeMap::new();
    if groupby == GroupBy::None {
        groups.insert(None, Vec::new());
    }
    for sample in samples {
        let thread = sample.thread;
        let key = match groupby {
            GroupBy::None => None,
            GroupBy::Thread => Some(SectionKey::Thread {
                pid: thread.pid,
                tid: thread.tid,
                thread_name: thread.thread_name.clone(),
                process_name: thread.process_name.clone(),
            }),
            GroupBy::Process => Some(SectionKey::Process {
                pid: thread.pid,
                process_name: thread.process_name.clone(),
            }),
        };
        groups.entry(key).or_default().push(sample);
    }
    let mut keyed: Vec<_> = groups
        .into_iter()
        .map(|(key, samples)| (key, total(samples.iter().copied()), samples))
        .collect();
    // The map ordered by key already; the stable sort keeps that among ties.
    keyed.sort_by_key(|&(_, total, _)| std::cmp::Reverse(total));
    let ticks = profile.ticks_per_cpu();
    keyed
        .into_iter()
        .map(|(key, total, samples)| Section {
            title: key.map(|key| {
                let who = match key {
                    SectionKey::Thread {
                        pid,
                        tid,
                        thread_name,
                        process_name,
                    } => format!("Thread {tid} {thread_name:?} of process {pid} {process_name:?}"),
                    SectionKey::Process { pid, process_name } => {
                        format!("Process {pid} {process_name:?}")
                    }
                };
                format!(
                    "{who}  Total snapshots: {total}. Utilization: {}",
                    utilization(total, ticks)
                )
            }),
            samples,
            total,
        })
        .collect()
}

fn total<'s, 'a: 's>(samples: impl Iterator<Item = &'s StackSample<'a>>) -> u64 {
    samples.fold(0, |sum, sample| sum.saturating_add(sample.count))
}

/// `samples` as a rounded percentage of one CPU's `ticks`, e.g. `98%`.
fn utilization(samples: u64, ticks: u64) -> String {
    if ticks == 0 {
        return "n/a".to_owned();
    }
    let percent = (samples as f64 / ticks as f64 * 100.0).round();
    format!("{percent}%")
}

/// The closing line of an ungrouped tree or flat report.
fn write_summary(out: &mut String, profile: &Profile, total: u64) -> Result<(), ReportError> {
    writeln!(
        out,
        "Total snapshots: {total} ({} of one CPU)",
        utilization(total, profile.ticks_per_cpu())
    )?;
    Ok(())
}

/// The `# ` lines that open tree and flat reports: warnings, then losses.
fn write_comments(out: &mut String, profile: &Profile) -> Result<(), ReportError> {
    for warning in &profile.warnings {
        // A warning must not break out of its comment line.
        let warning = warning.replace(['\n', '\r'], " ");
        writeln!(out, "# warning: {warning}")?;
    }
    for (cause, count) in &profile.lost {
        if *count > 0 {
            writeln!(out, "# lost: {}={count}", cause.name())?;
        }
    }
    Ok(())
}

/// Number of decimal digits of `n` (1 for 0): Julia's `ndigits`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
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
    fn digits_matches_julia_ndigits() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u64::MAX), 20);
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
            "# warning: stacks truncated at 127 frames\n# lost: stack_map_full=3\n"
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
