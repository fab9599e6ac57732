//! The folded lines a flame graph draws. A flame graph leaves out every
//! frame narrower than a fraction of the whole (inferno: 0.01%), and so
//! every frame below it: a window of many small stacks (hundreds of
//! thousands of lines, most of them a few samples) draws a few thousand
//! frames. The samples through a frame that narrow are handed to its
//! parent instead, on a line that ends at the parent where the narrow
//! frame was (one line for a run of them, and for the parent's own samples
//! when they come first); a frame narrow at the first level, which has no
//! parent to end at, becomes one line cut after it. Every frame drawn
//! starts and ends where it did, narrow frames leave the same gaps, and
//! the flame graph is the same, made from far fewer and shorter lines.
//! (Cut lines no longer sort as text where a name continues past a shorter
//! one, `f b` before `f;…`: they must be merged in the order given.)
//!
//! A frame is what inferno merges: the same name at the same depth in
//! consecutive lines. Owns that prefix tree of the lines; it must not
//! decide the lines' order or text (the parent module's).

use super::{Folded, ReportError, digits, push_decimal};

/// A frame drawn: the first line through it, and its depth there (1: the
/// first level).
type NodeAt = (usize, u32);

/// The lines of `folded`, the samples through a frame of fewer than
/// `narrowest` samples on a line ending at its parent (cut after it at the
/// first level).
pub(super) fn write(folded: &Folded<'_>, narrowest: f64) -> Result<String, ReportError> {
    let mut out = String::new();
    write_into(&mut out, folded, narrowest);
    Ok(out)
}

/// Appends the lines of [`write`] to `out`.
///
/// The frames are visited depth first, each a run of consecutive lines
/// with its name at its depth; a frame's samples are a difference of
/// running sums, so that the lines below a narrow frame are never looked
/// at: a window of a million lines, most of them in narrow frames, is
/// written in a few passes over the lines of the frames drawn.
pub(super) fn write_into(out: &mut String, folded: &Folded<'_>, narrowest: f64) {
    let grouped = grouped(folded);
    let groups = folded.groups.texts.len() as u32;
    let names = &folded.tokens.names;
    // The token of `line` at `depth`: a group's rank, or past it a frame's
    // token (numbered in string order, so that within a frame the lines'
    // tokens at the next depth never decrease, the lines ending at the
    // frame first); none past the line's last frame.
    let token = |line: usize, depth: u32| -> Option<u32> {
        let ((group, stack), _) = folded.lines[line];
        let level = depth as usize - 1;
        let level = match grouped {
            true if level == 0 => return Some(group),
            true => level - 1,
            false => level,
        };
        folded
            .stacks
            .get(stack)
            .get(level)
            .map(|&token| groups + token)
    };
    // What inferno merges at a depth: a group, or a frame's name (its
    // tokens with and without the `;` that follows it).
    let name = |line: usize, depth: u32| -> Option<u32> {
        let token = token(line, depth)?;
        Some(match grouped && depth == 1 {
            true => token,
            false => groups + names[(token - groups) as usize],
        })
    };
    // The samples of the lines before each.
    let mut before = Vec::with_capacity(folded.lines.len() + 1);
    before.push(0_u64);
    for &(_, count) in folded.lines {
        let sum = before.last().copied().unwrap_or(0);
        before.push(sum.saturating_add(count));
    }
    let mut lines = Lines {
        out,
        folded,
        skipped: usize::from(!grouped),
        pending: None,
    };
    // The frames whose children are being visited, innermost last: the
    // next line to look at, one past their last, the children's depth, and
    // the frame.
    let mut open: Vec<(usize, usize, u32, Option<NodeAt>)> = vec![(0, folded.lines.len(), 1, None)];
    while let Some(&mut (ref mut next, end, depth, parent)) = open.last_mut() {
        if *next == end {
            open.pop();
            continue;
        }
        let first = *next;
        let Some(frame) = name(first, depth) else {
            // A line ending at the parent: counted as its own samples.
            *next += 1;
            continue;
        };
        // The frame's lines: runs of one token each, while the name holds.
        let mut last = first;
        while last < end && name(last, depth) == Some(frame) {
            let run = token(last, depth);
            last = run_end(last, end, |line| token(line, depth) == run);
        }
        *next = last;
        let node = (first, depth);
        let count = before[last] - before[first];
        if (count as f64) < narrowest {
            // Too narrow to draw, with everything below it.
            lines.add(parent.unwrap_or(node), count);
            continue;
        }
        // The lines ending at a frame come first among the lines through
        // it.
        let own_end = match token(first, depth + 1) {
            None => run_end(first, last, |line| token(line, depth + 1).is_none()),
            Some(_) => first,
        };
        let own = before[own_end] - before[first];
        if own > 0 {
            lines.add(node, own);
        }
        open.push((own_end, last, depth + 1, Some(node)));
    }
    lines.flush();
}

/// The end of the run of lines from `first` (which is in it) to before
/// `end` that `in_run` holds for, when it holds for a first part of them
/// only: found by galloping, so that a short run costs a few looks and a
/// long one a few dozen, never a look at every line.
fn run_end(first: usize, end: usize, in_run: impl Fn(usize) -> bool) -> usize {
    // `low` is in the run; `high` is not, or is `end`.
    let (mut low, mut step) = (first, 1);
    let mut high = loop {
        let probe = low + step;
        if probe >= end {
            break end;
        }
        if !in_run(probe) {
            break probe;
        }
        low = probe;
        step *= 2;
    };
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        match in_run(middle) {
            true => low = middle,
            false => high = middle,
        }
    }
    high
}

/// The lines written, the last one held back while the next may end at
/// the same frame (its samples then added to it).
struct Lines<'a> {
    out: &'a mut String,
    folded: &'a Folded<'a>,
    skipped: usize,
    /// The last line: the frame it ends at and its samples so far.
    pending: Option<(NodeAt, u64)>,
}

impl Lines<'_> {
    /// Adds `count` samples on a line ending at frame `id`.
    fn add(&mut self, id: NodeAt, count: u64) {
        match &mut self.pending {
            Some((last, samples)) if *last == id => *samples = samples.saturating_add(count),
            _ => {
                self.flush();
                self.pending = Some((id, count));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((id, count)) = self.pending.take() {
            write_line(self.out, self.folded, self.skipped, id, count);
        }
    }
}

/// The line of frame `(line, depth)`'s frames, root first, with `count`;
/// `skipped` is 1 when lines have no group level (its empty text is
/// skipped).
fn write_line(
    out: &mut String,
    folded: &Folded<'_>,
    skipped: usize,
    (line, depth): NodeAt,
    count: u64,
) {
    let (line, _) = folded.lines[line];
    for text in folded.texts_of(line).skip(skipped).take(depth as usize) {
        out.push_str(text);
    }
    // The last frame without the `;` that follows it.
    if out.ends_with(';') {
        out.pop();
    }
    out.reserve(" \n".len() + digits(count));
    out.push(' ');
    push_decimal(out, count);
    out.push('\n');
}

/// Whether lines start with group frames (`groupby` process or thread).
fn grouped(folded: &Folded<'_>) -> bool {
    folded.groups.texts.iter().any(|text| !text.is_empty())
}

#[cfg(test)]
mod tests;
