//! The stacks a store holds as a report's words (the tree's lines, or the
//! folded report's tokens), and those stacks in one lexicographic order,
//! kept from report to report: what lets tree, folded, flame graph,
//! speedscope and (whole-machine) flat reports skip expanding, numbering
//! and sorting the stacks of their window, work that grows with the
//! window's stacks and their frames.
//!
//! An index is fed the store's stacks by their ids, which keep meaning the
//! same stacks for one generation of the store's tables, and extended with
//! the stacks added since it was last fed: their words are found (each
//! location's once), sorted among themselves and merged into the order. A
//! new generation starts the index anew. Words are numbered in the order
//! the report numbers them ([`LineKey`] order for the tree, string order for
//! folded tokens), so that a report made from the index is the report made
//! from the profile, byte for byte; a word unseen before renumbers the words
//! after it.
//!
//! The words themselves (interned, ranked, their texts) are `words`'s.
//!
//! It must not read the store or know about windows, samples or threads:
//! the service feeds it, and the formats read it.

use super::ReportError;
use super::frames::{KERNEL_MARKER, LineKey, UNKNOWN_MARKER, small_id};
use super::sequences::{Gathered, Sequences, grow_closely, sort_by_sequence};
use crate::profile::{Format, Location, LocationKind, ReportOptions};
use words::{Word, WordTable};

/// The formats an index serves, by what a frame is to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexedWords {
    /// Tree lines (frames told apart by file, function, line, module and
    /// address): tree reports and flat ones.
    TreeLines,
    /// Folded tokens (a frame's name, with or without its `;`): folded,
    /// flame graph and speedscope reports.
    FoldedTokens,
}

/// The reports an index's words are those of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StackIndexKey {
    pub words: IndexedWords,
    /// Kernel frames shown, rather than one `[kernel]` per run of them.
    pub kernel: bool,
    /// Tree lines of one source line merged, rather than told apart by
    /// address (false for folded tokens, which have no address).
    pub combine: bool,
    /// Kernel addresses shown as 0, as to an asker who may not read them.
    pub hide_kernel_addresses: bool,
    /// Folded tokens: Python frames with their file and line.
    pub python_lines: bool,
}

impl StackIndexKey {
    /// The index a report with `options` can be made from, if any.
    pub fn of(options: &ReportOptions, hide_kernel_addresses: bool) -> Option<Self> {
        if !options.interpreter {
            // Its stacks are not the store's.
            return None;
        }
        let (words, combine, python_lines) = match options.format {
            Format::Tree => (IndexedWords::TreeLines, options.combine, false),
            Format::Flat if !options.functions => (IndexedWords::TreeLines, options.combine, false),
            // The index holds whole stacks.
            // Speedscope names each frame's file, which the index's words
            // do not hold.
            Format::Folded | Format::Flamegraph | Format::DrawnFolded
                if options.maxdepth.is_none() =>
            {
                (IndexedWords::FoldedTokens, false, options.python_lines)
            }
            _ => return None,
        };
        Some(Self {
            words,
            kernel: options.kernel,
            combine,
            hide_kernel_addresses,
            python_lines,
        })
    }
}

/// The words of a store's stacks and their order (see the module doc).
pub struct StackIndex {
    key: StackIndexKey,
    /// The store's generation the stack and location ids are of.
    generation: u64,
    words: WordTable,
    /// The words of each stack (numbered by rank) in the stacks' order: the
    /// words of the stack at place `p` of `order` are `laid.get(p)`, so
    /// that walking stacks in order reads memory in order.
    laid: Sequences,
    /// Stack ids in lexicographic order of their words.
    order: Vec<u32>,
    /// Whether the stack at each place of `order` has the words of the one
    /// before it.
    tied: Vec<bool>,
    /// The rank of each stack, by stack id: the first place in `order` of a
    /// stack with its words. Ranks are in the order of the words, and equal
    /// for equal words (so that reports merge them), not consecutive.
    ranks: Vec<u32>,
}

/// The first of the sequences `places` of `laid` (sorted) that sorts after
/// `words`, or the end of `places`.
fn first_after(laid: &Sequences, places: std::ops::Range<usize>, words: &[u32]) -> usize {
    let (mut low, mut high) = (places.start, places.end);
    while low < high {
        let middle = low + (high - low) / 2;
        // Places are below the number of stacks, which fits 32 bits.
        if laid.get(middle as u32) <= words {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low
}

/// Puts `inserts` (ascending places, each before the item now at that
/// place) among `items` in place, as [`Sequences::insert`] does.
fn insert_in_place<T: Copy + Default>(
    items: &mut Vec<T>,
    inserts: impl DoubleEndedIterator<Item = (usize, T)> + ExactSizeIterator,
) {
    let held = items.len();
    let mut shift = inserts.len();
    grow_closely(items, held + shift);
    items.resize(held + shift, T::default());
    let mut block_end = held;
    for (place, item) in inserts.rev() {
        items.copy_within(place..block_end, place + shift);
        shift -= 1;
        items[place + shift] = item;
        block_end = place;
    }
}

/// The texts of folded tokens by rank, and the name each is of.
#[derive(Clone, Copy)]
pub(super) struct TokenTexts<'a> {
    pub texts: &'a [String],
    /// Tokens of one name (with and without the `;`) have the same, below
    /// the number of texts.
    pub names: &'a [u32],
}

/// The stacks of a report in lexicographic order of their words, by rank
/// (stacks of equal words have one rank): sorted for the report (ranks
/// `0..len()`, one per distinct stack), or kept in an index (some ranks
/// below `len()` unused).
pub(super) enum Ranked<'s> {
    Sorted(Sequences),
    Index(&'s StackIndex),
}

impl Ranked<'_> {
    pub fn get(&self, rank: u32) -> &[u32] {
        match self {
            Ranked::Sorted(stacks) => stacks.get(rank),
            Ranked::Index(index) => index.words_at(rank),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Ranked::Sorted(stacks) => stacks.len(),
            Ranked::Index(index) => index.order.len(),
        }
    }
}

impl StackIndex {
    pub fn new(key: StackIndexKey) -> Self {
        Self {
            key,
            generation: 0,
            words: WordTable::default(),
            laid: Sequences::with_capacity(0, 0),
            order: Vec::new(),
            tied: Vec::new(),
            ranks: Vec::new(),
        }
    }

    pub fn key(&self) -> StackIndexKey {
        self.key
    }

    /// The store generation its stack ids are of.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Stacks indexed: ids `0..len()`.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct words of the stacks indexed.
    pub fn word_count(&self) -> usize {
        self.words.words.len()
    }

    /// Bytes held, roughly: what the index adds to the daemon's memory.
    pub fn bytes(&self) -> usize {
        let words = &self.words;
        let ids = self.order.capacity()
            + self.ranks.capacity()
            + self.tied.capacity() / size_of::<u32>()
            + words.location_words.capacity()
            + words.last.capacity()
            + words.names.capacity()
            + words.by_rank.capacity()
            + words.rank_names.capacity();
        self.laid.bytes()
            + ids * size_of::<u32>()
            + words.words.capacity() * (2 * size_of::<Word>() + 64)
            + words.texts.iter().map(String::capacity).sum::<usize>()
            + words.locations.capacity() * size_of::<Option<(u32, u32)>>()
    }

    /// Indexes the stacks `len()..stacks` of a store at `generation`, or
    /// all `0..stacks` anew when the index is of another generation.
    /// `stack(id)` gives a stack's location ids, root first, and
    /// `location(id)` a location.
    pub fn extend<'s>(
        &mut self,
        generation: u64,
        stacks: usize,
        stack: impl Fn(u32) -> &'s [u32],
        location: impl Fn(u32) -> &'s Location,
    ) -> Result<(), ReportError> {
        if generation != self.generation {
            *self = Self::new(self.key);
            self.generation = generation;
        }
        let first = self.len();
        if stacks <= first {
            return Ok(());
        }
        let key = self.key;
        let words_before = self.words.words.len();
        // The new stacks' words by id, then by rank once all are known.
        let mut added = Sequences::with_capacity(stacks - first, 0);
        for id in first..stacks {
            let mut in_kernel_run = false;
            for &location_id in stack(small_id(id, "stacks")?) {
                let location = location(location_id);
                if !key.kernel && location.kind == LocationKind::Kernel {
                    if !in_kernel_run {
                        added.push(self.words.marker(KERNEL_MARKER, key)?);
                        in_kernel_run = true;
                    }
                    continue;
                }
                in_kernel_run = false;
                added.extend_from_slice(self.words.of_location(location_id, location, key)?);
            }
            if added.current().is_empty() {
                added.push(self.words.marker(UNKNOWN_MARKER, key)?);
            }
            if key.words == IndexedWords::FoldedTokens
                && let Some(&followed) = added.current().last()
            {
                added.set_last(self.words.last[followed as usize]);
            }
            added.finish()?;
        }
        if self.words.words.len() > words_before {
            // Stacks held so far keep their order: ranks keep theirs.
            let renumbered = self.words.rank(key.words);
            let moved = (0..).zip(&renumbered).any(|(old, &new)| old != new);
            if first > 0 && moved {
                self.laid.map_values(|rank| renumbered[rank as usize]);
            }
        }
        let rank_of = self.words.rank_of_ids();
        added.map_values(|id| rank_of[id as usize]);
        self.merge_into_order(&added, first)
    }

    /// Sorts the stacks `added` (the words of stacks `first..`, by id)
    /// among themselves, puts them in the order and ranks every stack.
    /// Only the new stacks' words are compared (with those they are put
    /// between); the held ones move up in place, in blocks.
    fn merge_into_order(&mut self, added: &Sequences, first: usize) -> Result<(), ReportError> {
        // Fewer than the stacks, whose ids are 32-bit.
        let mut new: Vec<u32> = (0..added.len() as u32).collect();
        sort_by_sequence(&mut new, self.words.words.len(), |id| added.get(id));
        let held = self.order.len();
        let mut places = Vec::with_capacity(new.len());
        let mut next = 0;
        let mut before: Option<&[u32]> = None;
        for &id in &new {
            // After the stacks of equal words: the held stack after a new
            // one has other words, and a held stack's tie to the one before
            // it holds (no new stack comes between equal ones).
            let words = added.get(id);
            let place = first_after(&self.laid, next..held, words);
            if place > next || before.is_none() {
                before = place.checked_sub(1).map(|last| self.laid.get(last as u32));
            }
            next = place;
            let id = small_id(first + id as usize, "stacks")?;
            places.push((place, words, id, before == Some(words)));
            before = Some(words);
        }
        let inserts: Vec<(usize, &[u32])> =
            places.iter().map(|&(p, words, ..)| (p, words)).collect();
        self.laid.insert(&inserts);
        insert_in_place(&mut self.order, places.iter().map(|&(p, _, id, _)| (p, id)));
        insert_in_place(
            &mut self.tied,
            places.iter().map(|&(p, .., tied)| (p, tied)),
        );
        self.rank_stacks();
        Ok(())
    }

    /// Ranks every stack by its place in the order.
    fn rank_stacks(&mut self) {
        grow_closely(&mut self.ranks, self.order.len());
        self.ranks.resize(self.order.len(), 0);
        let mut first = 0;
        for (place, (&id, &tied)) in (0..).zip(self.order.iter().zip(&self.tied)) {
            if !tied {
                first = place;
            }
            self.ranks[id as usize] = first;
        }
    }

    /// Follows a compaction of the store from generation `from` to `to`
    /// that gave the stacks it kept new ids in their old order: `stacks`
    /// and `locations` hold each old id's new one, or `gone`. The index
    /// keeps the words and order of the stacks kept, with no sorting.
    /// Returns false, changing nothing, when the index is not of `from`,
    /// when the ids were not kept in order, or when most of its stacks or
    /// words are gone (then `extend` indexing anew costs less, and frees
    /// the words no stack uses any more).
    pub fn renumber(
        &mut self,
        (from, to): (u64, u64),
        stacks: &[u32],
        locations: &[u32],
        gone: u32,
    ) -> bool {
        if self.generation != from || stacks.len() < self.len() {
            return false;
        }
        // The new ids must be the kept stacks' old ones, in order.
        let mut kept = 0;
        for &new in &stacks[..self.len()] {
            if new == gone {
                continue;
            }
            if new as usize != kept {
                return false;
            }
            kept += 1;
        }
        let mut words_used = vec![false; self.words.words.len()];
        let mut order = Vec::with_capacity(kept);
        let mut tied = Vec::with_capacity(kept);
        let mut laid = Sequences::with_capacity(kept, self.laid.value_count());
        let mut after_gone = false;
        for (place, (&old, &was_tied)) in (0..).zip(self.order.iter().zip(&self.tied)) {
            let new = stacks[old as usize];
            if new == gone {
                after_gone = true;
                continue;
            }
            let words = self.laid.get(place);
            for &rank in words {
                words_used[rank as usize] = true;
            }
            // A stack's tie to the one before it holds unless that one is
            // gone: then it is to the stack now before it, if equal.
            let now_tied = match after_gone {
                false => was_tied,
                true => laid
                    .len()
                    .checked_sub(1)
                    .is_some_and(|before| laid.get(before as u32) == words),
            };
            order.push(new);
            tied.push(now_tied);
            laid.extend_from_slice(words);
            if laid.finish().is_err() {
                return false;
            }
            after_gone = false;
        }
        let words_kept = words_used.iter().filter(|&&used| used).count();
        if 2 * kept < self.len() || 2 * words_kept < words_used.len() {
            return false;
        }
        let mut cached = Vec::new();
        for (old, range) in self.words.locations.iter().enumerate() {
            if let (Some(range), Some(&new)) = (range, locations.get(old))
                && new != gone
            {
                if cached.len() <= new as usize {
                    cached.resize(new as usize + 1, None);
                }
                cached[new as usize] = Some(*range);
            }
        }
        self.words.locations = cached;
        (self.laid, self.order, self.tied) = (laid, order, tied);
        self.rank_stacks();
        self.generation = to;
        true
    }

    /// The rank of each stack, by stack id.
    pub(super) fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The words (by rank) of the stacks of `rank`, root first.
    pub(super) fn words_at(&self, rank: u32) -> &[u32] {
        self.laid.get(rank)
    }

    /// The words of the stacks of `ranks` copied into `into` (see
    /// [`Sequences::gather`]): for a walk that skips through the index's
    /// stacks, as one section's do.
    pub(super) fn gather_words(&self, ranks: impl IntoIterator<Item = u32>, into: &mut Gathered) {
        self.laid.gather(ranks, into);
    }

    /// The key of each tree line, by rank (none for folded tokens).
    pub(super) fn line_keys(&self) -> Vec<LineKey<'_>> {
        let words = &self.words;
        let key = |&id: &u32| match &words.words[id as usize] {
            Word::Line(line) => Some(line.key()),
            Word::Token(_) => None,
        };
        words.by_rank.iter().filter_map(key).collect()
    }

    /// The tree's text of each line, by rank.
    pub(super) fn texts(&self) -> &[String] {
        &self.words.texts
    }

    /// The folded tokens' texts and names, by rank.
    pub(super) fn tokens(&self) -> TokenTexts<'_> {
        TokenTexts {
            texts: &self.words.texts,
            names: &self.words.rank_names,
        }
    }
}

mod words;

#[cfg(test)]
mod tests;
