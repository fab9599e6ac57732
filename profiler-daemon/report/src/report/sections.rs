//! The sections of a tree or flat report: the samples of each process or
//! thread (`groupby`), their order (most samples first) and titles, and
//! which of them a report within `maxsections` shows. Also which threads
//! such a report needs read per stack ([`threads_shown`]), so that the
//! store need not read the stacks of the sections it leaves out.
//!
//! It must not write a section's body (see `tree` and `flat`).

use std::{cmp::Reverse, collections::BTreeMap, fmt::Write as _};

use super::{
    ReportError, ThreadSection,
    frames::{self, Expansion, StackSample},
    utilization,
};
use crate::profile::{
    Format, GroupBy, Profile, ProfileMode, ReportOptions, ThreadInfo, ThreadState,
};

/// The samples one block of a tree or flat report is made of.
pub(super) struct Section {
    /// The header line of a `groupby` section; `None` for the whole profile.
    pub title: Option<String>,
    /// Indexes into [`Expansion::samples`], in profile order.
    pub samples: Vec<u32>,
    /// Sum of the samples' counts.
    pub total: u64,
}

/// A report's sections: those it shows, in print order, and what
/// `maxsections` left out.
pub(super) struct Sections {
    pub shown: Vec<Section>,
    pub left_out: Option<SectionsLeftOut>,
}

impl Sections {
    fn all(shown: Vec<Section>) -> Self {
        Self {
            shown,
            left_out: None,
        }
    }
}

/// The sections of fewest samples that `maxsections` left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SectionsLeftOut {
    /// Sections left out, of `of` in all.
    pub sections: u64,
    pub of: u64,
    /// Their samples (bytes, in an allocation profile).
    pub total: u64,
    pub maxsections: u64,
}

impl SectionsLeftOut {
    /// The `# ` comment at the top of the report; `unit` is what the counts
    /// count.
    pub fn write_comment(&self, out: &mut String, unit: &str) -> Result<(), ReportError> {
        writeln!(
            out,
            "# {} of {} sections shown, those of most {unit} {}",
            self.of - self.sections,
            self.of,
            self.how_to_see_all()
        )?;
        Ok(())
    }

    /// The line after the last section shown, counting the others.
    pub fn write_line(&self, out: &mut String, unit: &str) -> Result<(), ReportError> {
        let sections = if self.sections == 1 {
            "section"
        } else {
            "sections"
        };
        writeln!(
            out,
            "{} more {sections} ({} {unit} in all) not shown {}\n",
            self.sections,
            self.total,
            self.how_to_see_all()
        )?;
        Ok(())
    }

    fn how_to_see_all(&self) -> String {
        format!(
            "(maxsections {}; maxsections 0 shows every section)",
            self.maxsections
        )
    }
}

/// Who a section is about, in the order sections with equal totals appear.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SectionKey<'a> {
    Thread {
        pid: u32,
        tid: u32,
        thread_name: &'a str,
        process_name: &'a str,
    },
    Process {
        pid: u32,
        process_name: &'a str,
    },
}

impl<'a> SectionKey<'a> {
    /// The section of `thread` when grouped by `groupby` (thread or process).
    fn of(thread: &'a ThreadInfo, groupby: GroupBy) -> Self {
        match groupby {
            GroupBy::Thread => SectionKey::Thread {
                pid: thread.pid,
                tid: thread.tid,
                thread_name: &thread.thread_name,
                process_name: &thread.process_name,
            },
            GroupBy::Auto | GroupBy::None | GroupBy::Process => SectionKey::Process {
                pid: thread.pid,
                process_name: &thread.process_name,
            },
        }
    }

    fn title(self) -> String {
        match self {
            SectionKey::Thread {
                pid,
                tid,
                thread_name,
                process_name,
            } => format!("Thread {tid} {thread_name:?} of process {pid} {process_name:?}"),
            SectionKey::Process { pid, process_name } => {
                format!("Process {pid} {process_name:?}")
            }
        }
    }
}

/// What `groupby` groups by among threads with samples of these `pids`:
/// `Auto` is per process when there is more than one.
fn grouping(groupby: GroupBy, mut pids: impl Iterator<Item = u32>) -> GroupBy {
    match groupby {
        GroupBy::Auto => {
            let first = pids.next();
            match pids.any(|pid| Some(pid) != first) {
                true => GroupBy::Process,
                false => GroupBy::None,
            }
        }
        groupby => groupby,
    }
}

/// The sections threads make, grouped by thread or process.
struct Ranking<'a> {
    /// For each thread, its section's place in print order (`None`: no
    /// samples).
    place_of_thread: Vec<Option<usize>>,
    /// The sections in print order: most samples first, then by key.
    sections: Vec<(SectionKey<'a>, u64)>,
}

impl<'a> Ranking<'a> {
    /// `threads`: each thread with its samples' total, `None` for a thread
    /// without samples. The one order of sections, whoever asks.
    fn new(threads: &[(&'a ThreadInfo, Option<u64>)], groupby: GroupBy) -> Self {
        let mut numbers: BTreeMap<SectionKey<'a>, usize> = BTreeMap::new();
        let mut totals: Vec<u64> = Vec::new();
        let mut number_of_thread = vec![None; threads.len()];
        for (&(thread, total), number_of) in threads.iter().zip(&mut number_of_thread) {
            let Some(total) = total else { continue };
            let next = numbers.len();
            let number = *numbers
                .entry(SectionKey::of(thread, groupby))
                .or_insert(next);
            if number == totals.len() {
                totals.push(0);
            }
            totals[number] = totals[number].saturating_add(total);
            *number_of = Some(number);
        }
        // The map is ordered by key; the stable sort keeps that among ties.
        let mut sections: Vec<(SectionKey<'a>, usize)> = numbers.into_iter().collect();
        sections.sort_by_key(|&(_, number)| Reverse(totals[number]));
        let mut place_of_number = vec![0; sections.len()];
        for (place, &(_, number)) in sections.iter().enumerate() {
            place_of_number[number] = place;
        }
        Self {
            place_of_thread: number_of_thread
                .into_iter()
                .map(|number| number.map(|number| place_of_number[number]))
                .collect(),
            sections: sections
                .into_iter()
                .map(|(key, number)| (key, totals[number]))
                .collect(),
        }
    }

    /// How many sections `maxsections` shows (0: all).
    fn shown(&self, maxsections: u64) -> usize {
        match usize::try_from(maxsections) {
            Ok(0) | Err(_) => self.sections.len(),
            Ok(max) => self.sections.len().min(max),
        }
    }

    /// What showing the first `shown` sections leaves out.
    fn left_out(&self, shown: usize, maxsections: u64) -> Option<SectionsLeftOut> {
        let left_out = &self.sections[shown..];
        (!left_out.is_empty()).then(|| SectionsLeftOut {
            sections: left_out.len() as u64,
            of: self.sections.len() as u64,
            total: left_out
                .iter()
                .fold(0_u64, |sum, &(_, total)| sum.saturating_add(total)),
            maxsections,
        })
    }

    /// Refuses a thread not read per stack in one of the first `shown`
    /// sections: its section would be short of its samples.
    fn refuse_unread_shown(&self, profile: &Profile, shown: usize) -> Result<(), ReportError> {
        for unread in &profile.unread {
            if self.place_of_thread[unread.thread as usize].is_some_and(|place| place < shown) {
                return Err(ReportError::InvalidProfile(format!(
                    "thread {} is in a section shown but was not read per stack",
                    unread.thread
                )));
            }
        }
        Ok(())
    }
}

/// Adds the samples of the threads `profile` did not read per stack to
/// their threads' totals.
fn add_unread(profile: &Profile, thread_totals: &mut [Option<u64>]) -> Result<(), ReportError> {
    for unread in &profile.unread {
        let total = thread_totals
            .get_mut(unread.thread as usize)
            .ok_or_else(|| ReportError::InvalidProfile(format!("no thread {}", unread.thread)))?
            .get_or_insert(0);
        *total = total.saturating_add(unread.count);
    }
    Ok(())
}

fn refuse_unread_in_one_section(profile: &Profile) -> Result<(), ReportError> {
    match profile.unread.is_empty() {
        true => Ok(()),
        false => Err(ReportError::InvalidProfile(
            "threads not read per stack cannot be drawn in one section".to_owned(),
        )),
    }
}

/// The sections a flame graph's lines grouped by process or thread draw
/// within `maxsections` (see [`may_leave_out_sections`]): per thread of
/// the profile, whether its section is drawn on its own, and what is left
/// out (the sections of fewest samples, their stacks merged under one
/// frame). `None` when every section is drawn on its own.
pub(super) fn drawn_sections(
    profile: &Profile,
    samples: &[StackSample],
    options: &ReportOptions,
) -> Result<Option<(Vec<bool>, SectionsLeftOut)>, ReportError> {
    if !may_leave_out_sections(options) || options.format != Format::DrawnFolded {
        refuse_unread_in_one_section(profile)?;
        return Ok(None);
    }
    let mut thread_totals: Vec<Option<u64>> = vec![None; profile.threads.len()];
    for sample in samples {
        let total = thread_totals[sample.thread as usize].get_or_insert(0);
        *total = total.saturating_add(sample.count);
    }
    add_unread(profile, &mut thread_totals)?;
    let threads: Vec<(&ThreadInfo, Option<u64>)> =
        profile.threads.iter().zip(thread_totals).collect();
    let ranking = Ranking::new(&threads, options.groupby);
    let shown = ranking.shown(options.maxsections);
    ranking.refuse_unread_shown(profile, shown)?;
    let Some(left_out) = ranking.left_out(shown, options.maxsections) else {
        return Ok(None);
    };
    let drawn = (ranking.place_of_thread.iter())
        .map(|place| place.is_some_and(|place| place < shown))
        .collect();
    Ok(Some((drawn, left_out)))
}

/// Whether a report made as `options` ask may leave sections out: a tree
/// or flat report with a `maxsections`, or the lines a flame graph draws
/// (`Format::DrawnFolded`) grouped by process or thread with one: a flame
/// graph of a thousand short-lived processes draws the `maxsections` of
/// most samples and the others' stacks merged under one frame (see
/// [`drawn_sections`]).
pub fn may_leave_out_sections(options: &ReportOptions) -> bool {
    options.maxsections > 0
        && match options.format {
            Format::Tree | Format::Flat => true,
            // Drawn lines have group frames only when asked for.
            Format::DrawnFolded => matches!(options.groupby, GroupBy::Process | GroupBy::Thread),
            _ => false,
        }
}

/// Which of `threads` (each with its CPU samples) a tree or flat report
/// made as `options` ask reads per stack: those of the sections it shows
/// within `maxsections`. `None` when it would read them all: not such a
/// report, ungrouped, or no more sections than it shows.
pub fn threads_shown(options: &ReportOptions, threads: &[(&ThreadInfo, u64)]) -> Option<Vec<bool>> {
    if !may_leave_out_sections(options) {
        return None;
    }
    let threads: Vec<(&ThreadInfo, Option<u64>)> = threads
        .iter()
        .map(|&(thread, total)| (thread, Some(total)))
        .collect();
    let groupby = grouping(
        options.groupby,
        threads.iter().map(|(thread, _)| thread.pid),
    );
    if groupby == GroupBy::None {
        return None;
    }
    let ranking = Ranking::new(&threads, groupby);
    let shown = ranking.shown(options.maxsections);
    (shown < ranking.sections.len()).then(|| {
        let places = ranking.place_of_thread.iter();
        places
            .map(|place| place.is_some_and(|place| place < shown))
            .collect()
    })
}

/// Splits the samples as `options.groupby` asks: one untitled section for
/// `GroupBy::None` (even without samples), otherwise one titled section per
/// thread or process, by total descending, then pid, tid and names, the
/// first `maxsections` of them shown; `GroupBy::Auto` is per process when
/// there is more than one. The threads the profile did not read per stack
/// count in their sections' totals, and must be in sections left out.
pub(super) fn sections(
    profile: &Profile,
    expansion: &Expansion<'_>,
    options: &ReportOptions,
) -> Result<Sections, ReportError> {
    let samples = &expansion.samples;
    let sample_count = frames::small_id(samples.len(), "samples")?;
    // Each thread's samples (there are far fewer threads than samples).
    let mut thread_entries = vec![0_usize; profile.threads.len()];
    let mut thread_totals: Vec<Option<u64>> = vec![None; profile.threads.len()];
    for sample in samples.iter() {
        let thread = sample.thread as usize;
        thread_entries[thread] += 1;
        let total = thread_totals[thread].get_or_insert(0);
        *total = total.saturating_add(sample.count);
    }
    add_unread(profile, &mut thread_totals)?;
    let threads: Vec<(&ThreadInfo, Option<u64>)> =
        profile.threads.iter().zip(thread_totals).collect();
    let present = threads.iter().filter(|(_, total)| total.is_some());
    let groupby = grouping(options.groupby, present.map(|(thread, _)| thread.pid));
    if groupby == GroupBy::None {
        refuse_unread_in_one_section(profile)?;
        let all: Vec<u32> = (0..sample_count).collect();
        return Ok(Sections::all(vec![Section {
            title: None,
            total: total(samples, &all),
            samples: all,
        }]));
    }
    let ranking = Ranking::new(&threads, groupby);
    let shown = ranking.shown(options.maxsections);
    ranking.refuse_unread_shown(profile, shown)?;
    // Each sample to its thread's section, in profile order.
    let mut section_samples: Vec<Vec<u32>> = vec![Vec::new(); shown];
    for (&place, &entries) in ranking.place_of_thread.iter().zip(&thread_entries) {
        if let Some(section) = place.and_then(|place| section_samples.get_mut(place)) {
            section.reserve(entries);
        }
    }
    for (index, sample) in (0..sample_count).zip(samples.iter()) {
        let place = ranking.place_of_thread[sample.thread as usize];
        if let Some(section) = place.and_then(|place| section_samples.get_mut(place)) {
            section.push(index);
        }
    }
    let left_out = ranking.left_out(shown, options.maxsections);
    let ticks = profile.ticks_per_cpu();
    let shown = ranking.sections[..shown]
        .iter()
        .zip(section_samples)
        .map(|(&(key, total), samples)| {
            let who = key.title();
            let title = if profile.mode.is_memory() {
                format!(
                    "{who}  {}",
                    memory_total(profile, &expansion.samples, &samples)
                )
            } else if profile.mode == ProfileMode::Cpu {
                format!(
                    "{who}  Total snapshots: {total}. Utilization: {}",
                    utilization(total, ticks)
                )
            } else {
                let spent = time_by_state(profile, &expansion.samples, &samples);
                format!("{who}  Total snapshots: {total}. {spent}")
            };
            Section {
                title: Some(title),
                samples,
                total,
            }
        })
        .collect();
    Ok(Sections { shown, left_out })
}

/// The sections `titled` asks for, each with its thread's samples.
pub(super) fn thread_sections(
    profile: &Profile,
    expansion: &Expansion<'_>,
    titled: &[ThreadSection],
) -> Result<Sections, ReportError> {
    let mut by_thread: Vec<Vec<u32>> = vec![Vec::new(); profile.threads.len()];
    for (index, sample) in expansion.samples.iter().enumerate() {
        by_thread[sample.thread as usize].push(frames::small_id(index, "samples")?);
    }
    let shown = titled
        .iter()
        .map(|section| {
            let samples = by_thread
                .get(section.thread as usize)
                .ok_or_else(|| {
                    ReportError::InvalidProfile(format!("no thread {}", section.thread))
                })?
                .clone();
            Ok(Section {
                title: Some(section.title.clone()),
                total: total(&expansion.samples, &samples),
                samples,
            })
        })
        .collect::<Result<_, ReportError>>()?;
    Ok(Sections::all(shown))
}

/// How the time of `samples[indexes]` was spent, for a section's title in
/// a profile with off-CPU time: on CPU, asleep, blocked, in the run queue,
/// and all of it against the window (1 for a thread seen all the time).
fn time_by_state(profile: &Profile, samples: &[StackSample], indexes: &[u32]) -> String {
    let mut nanos = [0_u64; 4];
    for &index in indexes {
        let sample = &samples[index as usize];
        if let Some(spent) = nanos.get_mut(sample.state as usize) {
            *spent = spent.saturating_add(sample.weight);
        }
    }
    let seconds = nanos.map(|nanos| nanos as f64 / 1e9);
    let wall: f64 = seconds.iter().sum();
    let elapsed = profile.duration_secs();
    let share = if elapsed > 0.0 {
        format!("{:.0}%", wall / elapsed * 100.0)
    } else {
        "n/a".to_owned()
    };
    format!(
        "cpu {:.2} s, S {:.2} s, D {:.2} s, run queue {:.2} s; wall {wall:.2} s, {share} of the \
         window",
        seconds[ThreadState::Cpu as usize],
        seconds[ThreadState::Sleeping as usize],
        seconds[ThreadState::Blocked as usize],
        seconds[ThreadState::RunQueue as usize],
    )
}

/// Sum of the counts of `samples[indexes]`.
fn total(samples: &[StackSample], indexes: &[u32]) -> u64 {
    indexes.iter().fold(0, |sum, &index| {
        sum.saturating_add(samples[index as usize].count)
    })
}

/// The bytes and objects of `samples[indexes]` in an allocation profile,
/// for a section's title or the summary line.
pub(super) fn memory_total(profile: &Profile, samples: &[StackSample], indexes: &[u32]) -> String {
    let (bytes, objects) = indexes
        .iter()
        .fold((0_u64, 0_u64), |(bytes, objects), &index| {
            let sample = &samples[index as usize];
            (
                bytes.saturating_add(sample.count),
                objects.saturating_add(sample.weight),
            )
        });
    let what = match profile.mode {
        ProfileMode::Held => "Still held",
        _ => "Allocated",
    };
    format!(
        "{what}: {} in {objects} objects (estimated)",
        super::bytes_with_count(bytes)
    )
}

#[cfg(test)]
mod tests;
