//! The folded ("collapsed") stacks report read by flamegraph.pl, inferno and
//! speedscope: one `frame;frame;… count` line per distinct stack, root
//! first, lines sorted bytewise.
//!
//! Frames are function names only, with the stackcollapse-perf suffixes:
//! `_[k]` on kernel frames, `_[i]` on inlined ones (markers such as
//! `[kernel]` get none). A `;` in a name becomes `:`, a line break a space;
//! other spaces stay, as the count follows the last space. `groupby`
//! prepends `process-pid` (and `thread-tid`) frames; by default, folded
//! lines and speedscope start with the command when more than one command
//! has samples (as perf's stackcollapse does); `maxdepth` keeps the
//! root-most frames of the stack itself (at least one, group frames not
//! counted) and `mincount` drops lines after the resulting merge.
//!
//! It must print nothing but stack lines: no header, comments or warnings.
//! `combine`, `sortedby` and `noisefloor` do not apply.
//!
//! Lines are never compared nor merged as text: each frame's name (with or
//! without the `;` that follows it) is a token numbered in string order, so
//! that sorting stacks as token sequences sorts their lines bytewise, and
//! stacks with equal tokens are the lines to merge. The text of a line is
//! only written once, into the output.

mod drawn;
mod group_lines;

use rustc_hash::FxHashMap;

use super::frames::{Expansion, FrameView, StackId, StackSample, UNKNOWN_MARKER, small_id};
use super::sections::{self, SectionsLeftOut};
use super::sequences::Sequences;
use super::stack_index::{Ranked, StackIndex, TokenTexts};
use super::{ReportError, digits, parallel, push_decimal, radix};
use crate::profile::{Format, GroupBy, LocationKind, Profile, ReportOptions, ThreadInfo};
use group_lines::{GroupRuns, Line};

pub(super) fn render(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
) -> Result<String, ReportError> {
    render_lines(profile, options, index, None)
}

/// The folded lines a flame graph draws, when frames with less than
/// `min_width` percent of all samples are too narrow to be drawn (as
/// inferno's option of that name): the lines through a frame that narrow
/// merge into their first, so that every frame drawn spans the same samples
/// as in the whole report (see `drawn`).
pub(super) fn render_drawn(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
    min_width: f64,
) -> Result<String, ReportError> {
    render_lines(profile, options, index, Some(min_width))
}

/// The folded lines as frames, what speedscope reads: each distinct frame
/// name numbered in order of first appearance (root first, line by line),
/// each line's frames as those numbers, with its count.
pub(super) struct FrameStacks {
    pub names: Vec<String>,
    pub stacks: Vec<Vec<u32>>,
    pub counts: Vec<u64>,
    /// Per line, the index of its group in `groups`.
    pub line_groups: Vec<u32>,
    /// The groups' frames (process, thread, command), which each of their
    /// lines' stacks start with; one group without frames when the lines
    /// are not grouped.
    pub groups: Vec<Vec<String>>,
}

/// The report's lines as [`FrameStacks`].
pub(super) fn render_frames(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
) -> Result<FrameStacks, ReportError> {
    with_lines(profile, options, index, |folded| Ok(folded.frames()))
}

fn render_lines(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
    narrowest: Option<f64>,
) -> Result<String, ReportError> {
    with_source(profile, options, index, |source| match narrowest {
        None => source.write_lines(|folded| Ok(folded.write())),
        Some(min_width) => source.write_drawn(min_width),
    })
}

/// Calls `write` with the report's lines: their stacks' tokens and order
/// from the index when there is one, whose stacks the profile's samples
/// then refer to (see [`super::render_indexed`]).
fn with_lines<T>(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
    write: impl FnOnce(&Folded<'_>) -> Result<T, ReportError>,
) -> Result<T, ReportError> {
    with_source(profile, options, index, |source| source.write_lines(write))
}

/// Calls `make` with what the report's lines are counted from: their
/// stacks' tokens and order from the index when there is one (as
/// [`with_lines`]).
fn with_source<T>(
    profile: &Profile,
    options: &ReportOptions,
    index: Option<&StackIndex>,
    make: impl FnOnce(&LineSource<'_>) -> Result<T, ReportError>,
) -> Result<T, ReportError> {
    if let Some(index) = index {
        let expansion = Expansion::without_sites(profile, index.len())?;
        let stacks = Ranked::Index(index);
        return make(&LineSource {
            profile,
            expansion: &expansion,
            options,
            stacks: &stacks,
            stack_ranks: index.ranks(),
            tokens: index.tokens(),
        });
    }
    let expansion = Expansion::new(profile, options.kernel)?;
    let tokens = Tokens::new(&expansion, options.python_lines)?;
    // Keeping no frame at all would leave lines without a stack.
    let depth = options
        .maxdepth
        .map_or(usize::MAX, |maxdepth| (maxdepth as usize).max(1));
    // Stacks with equal tokens, that is equal text, merge into one rank.
    let (stacks, stack_ranks) =
        stack_tokens(&expansion, &tokens, depth)?.sorted(tokens.texts.len());
    let stacks = Ranked::Sorted(stacks);
    make(&LineSource {
        profile,
        expansion: &expansion,
        options,
        stacks: &stacks,
        stack_ranks: &stack_ranks,
        tokens: TokenTexts {
            texts: &tokens.texts,
            names: &tokens.names,
        },
    })
}

/// What a report's lines are counted from: the window's samples, the rank
/// of each of their stacks, and the ranked stacks' tokens.
struct LineSource<'a> {
    profile: &'a Profile,
    expansion: &'a Expansion<'a>,
    options: &'a ReportOptions,
    stacks: &'a Ranked<'a>,
    stack_ranks: &'a [u32],
    tokens: TokenTexts<'a>,
}

/// The lines of a report, in output order, and what their text is made of.
struct Folded<'a> {
    /// (group rank, stack rank) and samples, with at least `mincount`.
    lines: &'a [Line],
    groups: &'a Groups,
    stacks: &'a Ranked<'a>,
    tokens: TokenTexts<'a>,
}

impl LineSource<'_> {
    /// Counts the report's lines and calls `write` with them.
    fn write_lines<T>(
        &self,
        write: impl FnOnce(&Folded<'_>) -> Result<T, ReportError>,
    ) -> Result<T, ReportError> {
        let groups = Groups::new(self.profile, self.expansion, self.lines_grouped_by());
        let mut lines = count_lines(self.expansion, &groups, self.stack_ranks, self.stacks.len());
        lines.retain(|&(_, count)| count >= self.options.mincount);
        write(&self.folded(&lines, &groups))
    }

    /// What the lines are grouped by: `groupby`, but for folded lines and
    /// speedscope by default, which start with their command (as perf's
    /// stackcollapse does) when more than one command has samples, so
    /// that one program's stacks do not merge into another's.
    fn lines_grouped_by(&self) -> LinesGroupedBy {
        let by_default = self.options.groupby == GroupBy::Auto
            && matches!(self.options.format, Format::Folded | Format::Speedscope);
        if !by_default {
            return LinesGroupedBy::Option(self.options.groupby);
        }
        let mut commands = self
            .expansion
            .samples
            .iter()
            .map(|sample| &self.expansion.thread(sample).process_name);
        let first = commands.next();
        match commands.any(|command| Some(command) != first) {
            true => LinesGroupedBy::Command,
            false => LinesGroupedBy::Option(GroupBy::None),
        }
    }

    /// The lines a flame graph draws when frames with less than
    /// `min_width` percent of all samples are too narrow to be drawn (see
    /// [`render_drawn`]). A group's lines are drawn apart from the others'
    /// (its frame is the lines' first): with many groups, each group's
    /// lines are counted and drawn on their own, on the report workers,
    /// when which lines are kept (`mincount`) does not change the samples
    /// in all.
    fn write_drawn(&self, min_width: f64) -> Result<String, ReportError> {
        // Inferno's own arithmetic, so that it decides alike.
        let narrowest = |total: u64| min_width / (100.0 / total as f64);
        let groups = Groups::new(
            self.profile,
            self.expansion,
            LinesGroupedBy::Option(self.options.groupby),
        );
        let samples = &self.expansion.samples;
        let rank_bits = radix::bits_below(self.stacks.len() as u64);
        // The sections of fewest samples past `maxsections` are drawn as
        // one, their samples merged per stack under one frame: those read
        // per thread, and those summed per stack only.
        let left_out = sections::drawn_sections(self.profile, samples, self.options)?;
        let mut group_drawn = vec![left_out.is_none(); groups.texts.len()];
        let mut others = None;
        if let Some((threads_drawn, left_out)) = &left_out {
            for sample in samples.iter() {
                if threads_drawn[sample.thread as usize] {
                    group_drawn[groups.thread_ranks[sample.thread as usize] as usize] = true;
                }
            }
            let read = samples.iter().filter(|sample| {
                !group_drawn[groups.thread_ranks[sample.thread as usize] as usize]
            });
            let mut lines = group_lines::lines_of(
                read.chain(&self.expansion.unread_stacks),
                self.stack_ranks,
                rank_bits,
            );
            lines.retain(|&(_, count)| count >= self.options.mincount);
            let groups = Groups {
                texts: vec![left_out_frame(left_out, self.options.groupby) + ";"],
                thread_ranks: Vec::new(),
            };
            others = Some((lines, groups));
        }
        let others_total = others.as_ref().map_or(0, |(lines, _)| {
            lines
                .iter()
                .fold(0_u64, |total, &(_, count)| total.saturating_add(count))
        });
        let draw_others = |narrowest: f64, mut out: String| {
            if let Some((lines, groups)) = &others {
                drawn::write_into(&mut out, &self.folded(lines, groups), narrowest);
            }
            out
        };
        if groups.texts.len() <= 1 || self.options.mincount > 1 {
            let mut lines =
                count_lines(self.expansion, &groups, self.stack_ranks, self.stacks.len());
            lines.retain(|&((group, _), count)| {
                count >= self.options.mincount && group_drawn[group as usize]
            });
            let total = lines.iter().fold(others_total, |total, &(_, count)| {
                total.saturating_add(count)
            });
            let narrowest = narrowest(total);
            let drawn = drawn::write(&self.folded(&lines, &groups), narrowest)?;
            return Ok(draw_others(narrowest, drawn));
        }
        // Every line keeps its samples (each sample has some): they are
        // all the samples, the stacks' counts added up, and those of the
        // sections left out summed per stack only.
        let unread = (self.expansion.unread_stacks.iter())
            .fold(0_u64, |total, sample| total.saturating_add(sample.count));
        let total = (self.expansion.stack_counts.iter())
            .fold(unread, |total, &count| total.saturating_add(count));
        let narrowest = narrowest(total);
        let runs = groups.runs(samples);
        // Group ranks are 32-bit.
        let ranks: Vec<u32> = (0..groups.texts.len() as u32)
            .filter(|&group| group_drawn[group as usize])
            .collect();
        let (drawn, _) = parallel::map_in_order(
            &ranks,
            |&group| runs.samples_in(group),
            || (Vec::new(), Vec::new()),
            |(lines, scratch), &group| {
                lines.clear();
                runs.add_lines(group, samples, self.stack_ranks, rank_bits, lines, scratch);
                lines.retain(|&(_, count)| count >= self.options.mincount);
                let mut out = String::new();
                drawn::write_into(&mut out, &self.folded(lines, &groups), narrowest);
                out
            },
        );
        Ok(draw_others(narrowest, drawn.concat()))
    }

    fn folded<'f>(&'f self, lines: &'f [Line], groups: &'f Groups) -> Folded<'f> {
        Folded {
            lines,
            groups,
            stacks: self.stacks,
            tokens: self.tokens,
        }
    }
}

impl Folded<'_> {
    /// The texts that line `(group, stack)` is made of, `;`s included.
    fn texts_of(&self, (group, stack): (u32, u32)) -> impl Iterator<Item = &str> {
        let stack = self.stacks.get(stack).iter();
        let stack = stack.map(|&token| self.tokens.texts[token as usize].as_str());
        std::iter::once(self.groups.texts[group as usize].as_str()).chain(stack)
    }

    /// The text of every line.
    fn write(&self) -> String {
        let size = self.lines.iter().fold(0, |size, &(line, count)| {
            let text: usize = self.texts_of(line).map(str::len).sum();
            size + text + " ".len() + digits(count) + "\n".len()
        });
        let mut out = String::with_capacity(size);
        for &(line, count) in self.lines {
            self.write_line(&mut out, line, count);
        }
        out
    }

    /// The lines as frame numbers.
    fn frames<'s>(&'s self) -> FrameStacks {
        let mut names: Vec<String> = Vec::new();
        // By text: a group frame may have a function's name.
        let mut numbers: FxHashMap<&'s str, u32> = FxHashMap::default();
        // Per name of the tokens: its number once seen.
        let mut name_numbers: Vec<Option<u32>> = vec![None; self.tokens.texts.len()];
        let mut number = |text: &'s str, names: &mut Vec<String>| -> u32 {
            let text = text.strip_suffix(';').unwrap_or(text);
            if let Some(&number) = numbers.get(text) {
                return number;
            }
            // Fewer names than tokens, whose numbers are 32-bit.
            let number = names.len() as u32;
            names.push(text.to_owned());
            numbers.insert(text, number);
            number
        };
        let mut stacks = Vec::with_capacity(self.lines.len());
        let mut counts = Vec::with_capacity(self.lines.len());
        let mut line_groups = Vec::with_capacity(self.lines.len());
        for &((group, stack), count) in self.lines {
            line_groups.push(group);
            let mut frames = Vec::new();
            for frame in self.groups.texts[group as usize].split_terminator(';') {
                frames.push(number(frame, &mut names));
            }
            for &token in self.stacks.get(stack) {
                let name = self.tokens.names[token as usize] as usize;
                let known = &mut name_numbers[name];
                let frame = match *known {
                    Some(frame) => frame,
                    None => *known.insert(number(&self.tokens.texts[token as usize], &mut names)),
                };
                frames.push(frame);
            }
            stacks.push(frames);
            counts.push(count);
        }
        let groups = self
            .groups
            .texts
            .iter()
            .map(|text| text.split_terminator(';').map(str::to_owned).collect())
            .collect();
        FrameStacks {
            names,
            stacks,
            counts,
            line_groups,
            groups,
        }
    }

    /// The text of line `(group, stack)`, with `count`.
    fn write_line(&self, out: &mut String, line: (u32, u32), count: u64) {
        for text in self.texts_of(line) {
            out.push_str(text);
        }
        out.push(' ');
        push_decimal(out, count);
        out.push('\n');
    }
}

/// A line's text cut into tokens: each frame's name, followed by its `;`
/// except for the last frame. As names hold no `;`, comparing two lines'
/// token sequences, tokens compared as strings, is comparing the lines
/// bytewise. Tokens are numbered in string order, so that comparing
/// numbers compares tokens.
struct Tokens {
    /// The texts of the tokens, in string order.
    texts: Vec<String>,
    /// Per frame of the expansion: its token when another frame follows.
    followed: Vec<u32>,
    /// Per frame of the expansion: its token as the last frame.
    last: Vec<u32>,
    /// Per token: the name it is the text of (with or without its `;`).
    names: Vec<u32>,
}

impl Tokens {
    fn new(expansion: &Expansion<'_>, python_lines: bool) -> Result<Self, ReportError> {
        // The distinct names: name n gives tokens 2n (followed) and 2n + 1
        // (last).
        let mut name_ids: FxHashMap<String, usize> = FxHashMap::default();
        let frame_names: Vec<usize> = expansion
            .frames
            .iter()
            .map(|&frame| {
                let next = name_ids.len();
                *name_ids
                    .entry(frame_name(frame, python_lines))
                    .or_insert(next)
            })
            .collect();
        small_id(2 * name_ids.len(), "frame names")?;
        let mut texts: Vec<(String, usize)> = name_ids
            .into_iter()
            .flat_map(|(text, name)| [(format!("{text};"), 2 * name), (text, 2 * name + 1)])
            .collect();
        texts.sort_unstable();
        let mut numbers = vec![0; texts.len()];
        // Their number was checked to fit.
        for (number, &(_, token)) in texts.iter().enumerate() {
            numbers[token] = number as u32;
        }
        let names = texts.iter().map(|&(_, token)| (token / 2) as u32).collect();
        Ok(Tokens {
            names,
            texts: texts.into_iter().map(|(text, _)| text).collect(),
            followed: frame_names.iter().map(|&name| numbers[2 * name]).collect(),
            last: frame_names
                .iter()
                .map(|&name| numbers[2 * name + 1])
                .collect(),
        })
    }
}

/// The tokens of every stack of the expansion, cut to `depth` frames.
fn stack_tokens(
    expansion: &Expansion<'_>,
    tokens: &Tokens,
    depth: usize,
) -> Result<Sequences, ReportError> {
    let values = expansion.site_count();
    let mut stacks = Sequences::with_capacity(expansion.stack_count(), values + values / 8);
    for stack in 0..expansion.stack_count() {
        // Every frame is followed by another but the last.
        let mut last = None;
        let mut left = depth;
        // Stack ids are 32-bit, so their number fits in one.
        'sites: for &site in expansion.sites_of(stack as StackId) {
            for frame in expansion.site_frames(site) {
                if left == 0 {
                    break 'sites;
                }
                left -= 1;
                stacks.push(tokens.followed[frame as usize]);
                last = Some(frame);
            }
        }
        if let Some(last) = last {
            stacks.set_last(tokens.last[last as usize]);
        }
        stacks.finish()?;
    }
    Ok(stacks)
}

/// The frames `groupby` puts above the stacks of each thread, as text, and
/// their order. A group frame is always followed by another, so comparing
/// two lines of different groups is comparing their groups' texts, `;`
/// included.
struct Groups {
    /// The distinct texts, each frame followed by its `;`, in string order.
    texts: Vec<String>,
    /// Per thread of the profile: the rank of its group's text (0 for
    /// threads not sampled).
    thread_ranks: Vec<u32>,
}

/// What the lines of a report start with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinesGroupedBy {
    /// As the `groupby` option says (`Auto`: nothing).
    Option(GroupBy),
    /// The command of the thread's process.
    Command,
}

impl Groups {
    fn new(profile: &Profile, expansion: &Expansion<'_>, grouped_by: LinesGroupedBy) -> Self {
        let mut ids: FxHashMap<String, usize> = FxHashMap::default();
        let mut thread_groups: Vec<Option<usize>> = vec![None; profile.threads.len()];
        for sample in expansion.samples.iter() {
            let slot = &mut thread_groups[sample.thread as usize];
            if slot.is_none() {
                let thread = expansion.thread(sample);
                let frames = match grouped_by {
                    LinesGroupedBy::Option(groupby) => group_frames(thread, groupby),
                    LinesGroupedBy::Command => vec![clean(&thread.process_name)],
                };
                let text = frames.into_iter().map(|frame| frame + ";").collect();
                let next = ids.len();
                *slot = Some(*ids.entry(text).or_insert(next));
            }
        }
        let mut texts: Vec<(String, usize)> = ids.into_iter().collect();
        texts.sort_unstable();
        let mut ranks = vec![0; texts.len()];
        // No more groups than threads, whose indexes are 32-bit.
        for (rank, &(_, group)) in texts.iter().enumerate() {
            ranks[group] = rank as u32;
        }
        Groups {
            texts: texts.into_iter().map(|(text, _)| text).collect(),
            thread_ranks: thread_groups
                .into_iter()
                .map(|group| group.map_or(0, |group| ranks[group]))
                .collect(),
        }
    }

    /// Where each group's samples are among `samples`.
    fn runs(&self, samples: &[StackSample]) -> GroupRuns {
        GroupRuns::new(samples, self.texts.len(), |sample| {
            self.thread_ranks[sample.thread as usize]
        })
    }
}

/// The samples per line, (group rank, stack rank) -> count, in output
/// order.
fn count_lines(
    expansion: &Expansion<'_>,
    groups: &Groups,
    stack_ranks: &[u32],
    stack_count: usize,
) -> Vec<Line> {
    let samples = &expansion.samples;
    let mut lines: Vec<Line> = Vec::with_capacity(samples.len());
    if groups.texts.len() <= 1 {
        // One group: counting per stack rank beats sorting the samples.
        let mut counts = vec![0u64; stack_count];
        for (&rank, &stack_count) in stack_ranks.iter().zip(&expansion.stack_counts) {
            let count = &mut counts[rank as usize];
            *count = count.saturating_add(stack_count);
        }
        lines.extend(
            (0..)
                .zip(counts)
                .filter(|&(_, count)| count > 0)
                .map(|(rank, count)| ((0, rank), count)),
        );
    } else {
        // A group's lines after another's, each group's sorted apart.
        let runs = groups.runs(samples);
        // Ranks are below the number of stacks.
        let rank_bits = radix::bits_below(stack_count as u64);
        let mut scratch = Vec::new();
        // Group ranks are 32-bit.
        for group in 0..groups.texts.len() as u32 {
            runs.add_lines(
                group,
                samples,
                stack_ranks,
                rank_bits,
                &mut lines,
                &mut scratch,
            );
        }
    }
    lines
}

/// The frames `groupby` puts above every stack of `thread`.
fn group_frames(thread: &ThreadInfo, groupby: GroupBy) -> Vec<String> {
    let process = format!("{}-{}", clean(&thread.process_name), thread.pid);
    match groupby {
        GroupBy::Auto | GroupBy::None => Vec::new(),
        GroupBy::Process => vec![process],
        GroupBy::Thread => vec![
            process,
            format!("{}-{}", clean(&thread.thread_name), thread.tid),
        ],
    }
}

/// The frame a flame graph draws the sections `maxsections` left out
/// under, their samples merged (see [`sections::drawn_sections`]).
fn left_out_frame(left_out: &SectionsLeftOut, groupby: GroupBy) -> String {
    let what = match (groupby, left_out.sections) {
        (GroupBy::Thread, 1) => "thread",
        (GroupBy::Thread, _) => "threads",
        (_, 1) => "process",
        _ => "processes",
    };
    format!(
        "[{} other {what}, merged (maxsections {})]",
        left_out.sections, left_out.maxsections
    )
}

/// A frame's token: its function's name, marked as a kernel or inlined
/// one; a Python frame's with its file and line when `python_lines`.
pub(super) fn frame_name(frame: FrameView<'_>, python_lines: bool) -> String {
    let suffix = match frame.kind {
        LocationKind::Kernel => "_[k]",
        _ if frame.inlined => "_[i]",
        _ => "",
    };
    match frame.file {
        Some(file) if python_lines && frame.kind == LocationKind::Python => {
            format!("{} ({}:{})", clean(frame.function), clean(file), frame.line)
        }
        _ => format!("{}{suffix}", clean(frame.function)),
    }
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
mod tests;
