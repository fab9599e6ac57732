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
//! It must not read the store or know about windows, samples or threads:
//! the service feeds it, and the formats read it.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::ReportError;
use super::folded::frame_name;
use super::frames::{FrameView, KERNEL_MARKER, LineKey, Site, UNKNOWN_MARKER, small_id};
use super::sequences::{Gathered, Sequences, sort_by_sequence};
use crate::profile::{Format, Location, LocationKind, ReportOptions};

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
}

impl StackIndexKey {
    /// The index a report with `options` can be made from, if any.
    pub fn of(options: &ReportOptions, hide_kernel_addresses: bool) -> Option<Self> {
        let (words, combine) = match options.format {
            Format::Tree => (IndexedWords::TreeLines, options.combine),
            Format::Flat => (IndexedWords::TreeLines, options.combine),
            // The index holds whole stacks.
            Format::Folded | Format::Flamegraph | Format::Speedscope | Format::DrawnFolded
                if options.maxdepth.is_none() =>
            {
                (IndexedWords::FoldedTokens, false)
            }
            _ => return None,
        };
        Some(Self {
            words,
            kernel: options.kernel,
            combine,
            hide_kernel_addresses,
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
    items.resize(held + shift, T::default());
    let mut block_end = held;
    for (place, item) in inserts.rev() {
        items.copy_within(place..block_end, place + shift);
        shift -= 1;
        items[place + shift] = item;
        block_end = place;
    }
}

/// The distinct words: numbered as they come (their id), and in the
/// report's order (their rank, what the stacks hold).
#[derive(Default)]
struct WordTable {
    words: Vec<Word>,
    ids: HashMap<Word, u32>,
    /// Folded tokens: the id of the token of the same name as the last
    /// frame, by id (the tokens of locations are those followed by a `;`).
    last: Vec<u32>,
    /// Folded tokens: the name a token is of (the id of its token followed
    /// by a `;`), by id.
    names: Vec<u32>,
    /// Word ids in rank order.
    by_rank: Vec<u32>,
    /// The text of each word, by rank: ` file:line; function` and a line
    /// break for tree lines, the token itself for folded tokens.
    texts: Vec<String>,
    /// The names of folded tokens, by rank.
    rank_names: Vec<u32>,
    /// The word ids of each location's frames, once asked: a range of
    /// `location_words`, `None` before.
    locations: Vec<Option<(u32, u32)>>,
    location_words: Vec<u32>,
    kernel_marker: Option<u32>,
    unknown_marker: Option<u32>,
}

/// A tree line or a folded token, owning its text; ordered as the report
/// orders them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Word {
    Line(OwnedLineKey),
    Token(String),
}

/// A [`LineKey`] that owns its names, in the same order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct OwnedLineKey {
    file: Arc<str>,
    function: Arc<str>,
    line: u32,
    address: Option<(Arc<str>, u64)>,
    marker: bool,
}

impl OwnedLineKey {
    fn of(key: LineKey<'_>) -> Self {
        Self {
            file: key.file.into(),
            function: key.function.into(),
            line: key.line,
            address: key
                .address
                .map(|(module, address)| (module.into(), address)),
            marker: key.marker,
        }
    }

    fn key(&self) -> LineKey<'_> {
        LineKey {
            file: &self.file,
            function: &self.function,
            line: self.line,
            address: self
                .address
                .as_ref()
                .map(|(module, address)| (&**module, *address)),
            marker: self.marker,
        }
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

impl WordTable {
    /// The ids of a location's words, found once.
    fn of_location(
        &mut self,
        id: u32,
        location: &Location,
        key: StackIndexKey,
    ) -> Result<&[u32], ReportError> {
        if self.locations.len() <= id as usize {
            self.locations.resize(id as usize + 1, None);
        }
        let (start, end) = match self.locations[id as usize] {
            Some(range) => range,
            None => {
                let start = small_id(self.location_words.len(), "words")?;
                let hide = key.hide_kernel_addresses && location.kind == LocationKind::Kernel;
                for mut frame in Site::Location(location).frames() {
                    if hide {
                        frame.address = 0;
                    }
                    let word = self.of_frame(frame, key)?;
                    self.location_words.push(word);
                }
                let range = (start, small_id(self.location_words.len(), "words")?);
                self.locations[id as usize] = Some(range);
                range
            }
        };
        Ok(&self.location_words[start as usize..end as usize])
    }

    fn marker(&mut self, name: &'static str, key: StackIndexKey) -> Result<u32, ReportError> {
        let known = match name {
            KERNEL_MARKER => self.kernel_marker,
            _ => self.unknown_marker,
        };
        if let Some(id) = known {
            return Ok(id);
        }
        // A marker has one frame.
        let mut id = None;
        for frame in Site::Marker(name).frames() {
            id = Some(self.of_frame(frame, key)?);
        }
        let id = id.ok_or_else(|| ReportError::InvalidProfile(format!("no frame for {name}")))?;
        match name {
            KERNEL_MARKER => self.kernel_marker = Some(id),
            _ => self.unknown_marker = Some(id),
        }
        Ok(id)
    }

    /// The word of a frame; for folded tokens, the token followed by a
    /// `;` (see [`WordTable::last`]).
    fn of_frame(&mut self, frame: FrameView<'_>, key: StackIndexKey) -> Result<u32, ReportError> {
        match key.words {
            IndexedWords::TreeLines => {
                let line = LineKey::new(frame, key.combine);
                self.intern(Word::Line(OwnedLineKey::of(line)))
            }
            IndexedWords::FoldedTokens => {
                let name = frame_name(frame);
                let followed = self.intern(Word::Token(format!("{name};")))?;
                let last = self.intern(Word::Token(name))?;
                for token in [followed, last] {
                    self.last[token as usize] = last;
                    self.names[token as usize] = followed;
                }
                Ok(followed)
            }
        }
    }

    fn intern(&mut self, word: Word) -> Result<u32, ReportError> {
        if let Some(&id) = self.ids.get(&word) {
            return Ok(id);
        }
        let id = small_id(self.words.len(), "words")?;
        self.words.push(word.clone());
        self.ids.insert(word, id);
        self.last.push(id);
        self.names.push(id);
        Ok(id)
    }

    /// Ranks the words anew, the ones added since the last ranking sorted
    /// and merged among the ranked ones (whose texts are kept); returns
    /// each old rank's new one.
    fn rank(&mut self, words: IndexedWords) -> Vec<u32> {
        let all = &self.words;
        let ranked = self.by_rank.len();
        // Ids fit: `intern` numbered them.
        let mut added: Vec<u32> = (ranked as u32..all.len() as u32).collect();
        added.sort_unstable_by(|&a, &b| all[a as usize].cmp(&all[b as usize]));
        let old = std::mem::take(&mut self.by_rank);
        let old_texts = std::mem::take(&mut self.texts);
        let mut new_rank_of_old = Vec::with_capacity(ranked);
        let mut by_rank = Vec::with_capacity(all.len());
        let mut texts = Vec::with_capacity(all.len());
        let text = |id: u32| match &all[id as usize] {
            Word::Line(line) => format!(" {}\n", line.key().text()),
            Word::Token(token) => token.clone(),
        };
        let mut added = added.into_iter().peekable();
        for (&id, old_text) in old.iter().zip(old_texts) {
            // Words are distinct: each added one sorts before or after.
            while let Some(new) = added.next_if(|&new| all[new as usize] < all[id as usize]) {
                by_rank.push(new);
                texts.push(text(new));
            }
            // Ranks fit: below the number of words.
            new_rank_of_old.push(by_rank.len() as u32);
            by_rank.push(id);
            texts.push(old_text);
        }
        for new in added {
            by_rank.push(new);
            texts.push(text(new));
        }
        self.rank_names = match words {
            IndexedWords::TreeLines => Vec::new(),
            IndexedWords::FoldedTokens => {
                by_rank.iter().map(|&id| self.names[id as usize]).collect()
            }
        };
        (self.by_rank, self.texts) = (by_rank, texts);
        new_rank_of_old
    }

    /// The rank of each word id.
    fn rank_of_ids(&self) -> Vec<u32> {
        let mut rank_of = vec![0; self.by_rank.len()];
        for (rank, &id) in (0..).zip(&self.by_rank) {
            rank_of[id as usize] = rank;
        }
        rank_of
    }
}

#[cfg(test)]
mod tests;
