//! The line budget of the text reports (`maxlines`): when a tree or flat
//! report would print more lines than that, the lines of fewest samples
//! are left out, as a higher `mincount` would leave them out, and the
//! report says so in a comment.
//!
//! Owns the choice of that `mincount` and the comment; it must not count
//! lines itself (the tree and flat reports offer the counts of the lines
//! they would print).

use std::{cmp::Reverse, collections::BinaryHeap, fmt::Write as _};

use super::ReportError;

/// What a report left out to stay within its budget: every line of
/// fewer than `mincount` samples, and the lines of exactly `mincount`
/// samples past the first `ties.room` in print order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LinesCut {
    pub mincount: u64,
    pub ties: Ties,
    /// Lines printed, of those the other filters let through.
    pub shown: u64,
    pub lines: u64,
    pub maxlines: u64,
}

impl LinesCut {
    /// Writes the `# ` comment that says what was left out and how to see
    /// it; `unit` is what the counts count.
    pub fn write_comment(&self, out: &mut String, unit: &str) -> Result<(), ReportError> {
        write!(out, "# {} of {} lines shown, ", self.shown, self.lines)?;
        let (count, room) = (self.ties.count, self.ties.room);
        if room > 0 && room == self.shown {
            write!(out, "the first {room} of those of {count} {unit}")?;
        } else if room > 0 {
            write!(
                out,
                "those of more than {count} {unit} and the first {room} of {count}"
            )?;
        } else {
            write!(out, "those of at least {} {unit}", self.mincount)?;
        }
        writeln!(out, " {}", self.how_to_see_all())?;
        Ok(())
    }

    /// `(maxlines N; maxlines 0 shows every line)`.
    pub fn how_to_see_all(&self) -> String {
        format!("(maxlines {}; maxlines 0 shows every line)", self.maxlines)
    }
}

/// Room for the lines of one count at the edge of a budget: some of them
/// fit, the rest do not. The default admits every line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ties {
    count: u64,
    room: u64,
}

impl Ties {
    /// Whether a line of `count` samples (not below the cut's `mincount`)
    /// is shown: every line is, but those of the edge count once their room
    /// is taken. Ask in print order, once per line.
    pub fn admit(&mut self, count: u64) -> bool {
        if count != self.count || self.count == 0 {
            return true;
        }
        let admitted = self.room > 0;
        self.room = self.room.saturating_sub(1);
        admitted
    }
}

/// The biggest counts of the lines a report would print, as they are
/// offered: enough to tell which to leave out.
pub(super) struct LineBudget {
    maxlines: u64,
    /// The `maxlines + 1` biggest counts so far, the smallest on top.
    biggest: BinaryHeap<Reverse<u64>>,
    lines: u64,
}

impl LineBudget {
    /// A budget of `maxlines` lines; `None` for no limit.
    pub fn new(maxlines: u64) -> Option<Self> {
        (maxlines > 0).then(|| Self {
            maxlines,
            biggest: BinaryHeap::new(),
            lines: 0,
        })
    }

    /// Counts a line of `count` samples.
    pub fn offer(&mut self, count: u64) {
        self.count_lines(1);
        self.consider(count);
    }

    /// Counts `lines` lines, whose counts are [`LineBudget::consider`]ed
    /// apart (or need not be: those under the floor).
    pub fn count_lines(&mut self, lines: u64) {
        self.lines = self.lines.saturating_add(lines);
    }

    /// Takes the count of a line already counted into account.
    pub fn consider(&mut self, count: u64) {
        if self.biggest.len() < self.kept() {
            self.biggest.push(Reverse(count));
        } else if self
            .biggest
            .peek()
            .is_some_and(|&Reverse(least)| count > least)
        {
            self.biggest.pop();
            self.biggest.push(Reverse(count));
        }
    }

    /// Adds what `other` was offered, as if it had been offered here: the
    /// lines it counted and the biggest counts it kept (the floor of
    /// either is never above the final cut, so the lines under it that
    /// either left out can be left out).
    pub fn merge(&mut self, other: LineBudget) {
        self.count_lines(other.lines);
        for Reverse(count) in other.biggest {
            self.consider(count);
        }
    }

    /// A count no line left out of the final cut can reach: lines of
    /// fewer samples are never shown, whatever is offered next (0 until
    /// the counts of more lines than the budget were considered).
    pub fn floor(&self) -> u64 {
        let full = self.biggest.len() == self.kept();
        match self.biggest.peek() {
            Some(&Reverse(least)) if full => least,
            _ => 0,
        }
    }

    /// The biggest counts kept: one more than fit.
    fn kept(&self) -> usize {
        usize::try_from(self.maxlines)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    }

    /// What to leave out: nothing when every line fits; else the lines of
    /// fewer samples than the first line that does not fit, and as many of
    /// the lines of its count as do not fit.
    pub fn cut(self) -> Option<LinesCut> {
        if self.lines <= self.maxlines {
            return None;
        }
        let Reverse(edge) = *self.biggest.peek()?;
        let above = self
            .biggest
            .iter()
            .filter(|&&Reverse(count)| count > edge)
            .count() as u64;
        let room = self.maxlines - above;
        let (mincount, ties) = match room {
            0 => (edge.saturating_add(1), Ties::default()),
            room => (edge, Ties { count: edge, room }),
        };
        Some(LinesCut {
            mincount,
            ties,
            // The lines above the edge, and the ties that fill the room.
            shown: self.maxlines,
            lines: self.lines,
            maxlines: self.maxlines,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(maxlines: u64, counts: &[u64]) -> Option<LinesCut> {
        let mut budget = LineBudget::new(maxlines)?;
        for &count in counts {
            budget.offer(count);
        }
        budget.cut()
    }

    #[test]
    fn lines_within_the_budget_are_all_shown() {
        assert_eq!(cut(3, &[5, 1, 9]), None);
        assert_eq!(cut(0, &[5, 1, 9, 4, 4]), None, "0: no limit");
    }

    #[test]
    fn the_lines_of_fewest_samples_are_left_out() {
        let cut = cut(3, &[5, 1, 9, 4, 7, 2]).expect("a cut");
        assert_eq!(
            cut,
            LinesCut {
                mincount: 5,
                ties: Ties::default(),
                shown: 3,
                lines: 6,
                maxlines: 3
            }
        );
        let mut comment = String::new();
        cut.write_comment(&mut comment, "samples").unwrap();
        assert_eq!(
            comment,
            "# 3 of 6 lines shown, those of at least 5 samples (maxlines 3; maxlines 0 shows \
             every line)\n"
        );
    }

    #[test]
    fn ties_at_the_edge_fill_the_room_left_in_print_order() {
        // Three lines of 4 samples compete for the last two places.
        let mut cut = cut(3, &[9, 4, 4, 4, 1]).expect("a cut");
        assert_eq!((cut.mincount, cut.shown), (4, 3));
        let mut comment = String::new();
        cut.write_comment(&mut comment, "bytes").unwrap();
        assert_eq!(
            comment,
            "# 3 of 5 lines shown, those of more than 4 bytes and the first 2 of 4 (maxlines 3; \
             maxlines 0 shows every line)\n"
        );
        let admitted: Vec<bool> = [9, 4, 4, 4]
            .iter()
            .map(|&count| cut.ties.admit(count))
            .collect();
        assert_eq!(admitted, [true, true, true, false]);
        // One deep stack: every line has its 3 samples.
        let cut = super::tests::cut(2, &[3; 10]).expect("a cut");
        assert_eq!((cut.mincount, cut.ties.room, cut.shown), (3, 2, 2));
    }

    #[test]
    fn merged_budgets_cut_as_one_offered_everything() {
        let counts = [5, 1, 9, 3, 3, 7, 2, 8, 3, 6, 4, 4];
        let whole = cut(4, &counts);
        for split in 0..counts.len() {
            let mut first = LineBudget::new(4).expect("a budget");
            let mut second = LineBudget::new(4).expect("a budget");
            counts[..split].iter().for_each(|&count| first.offer(count));
            counts[split..]
                .iter()
                .for_each(|&count| second.offer(count));
            first.merge(second);
            assert_eq!(first.cut(), whole, "split at {split}");
        }
    }

    #[test]
    fn the_floor_never_passes_the_final_cut() {
        let counts = [5, 1, 9, 3, 3, 7, 2, 8, 3, 6];
        let mut budget = LineBudget::new(4).expect("a budget");
        let mut floors = Vec::new();
        for count in counts {
            budget.offer(count);
            floors.push(budget.floor());
        }
        // 0 until more than 4 lines were offered, then the 5th biggest so far.
        assert_eq!(floors, [0, 0, 0, 0, 1, 3, 3, 3, 3, 5]);
        let cut = budget.cut().expect("a cut");
        assert!(floors.iter().all(|&floor| floor <= cut.mincount), "{cut:?}");
    }
}
