//! The distinct words of an index's stacks ([`WordTable`]): each tree line
//! or folded token interned once as it comes, each location's words found
//! once, and the words ranked in the report's order, the texts the reports
//! write kept by rank.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::super::ReportError;
use super::super::folded::frame_name;
use super::super::frames::{FrameView, KERNEL_MARKER, LineKey, Site, small_id};
use super::{IndexedWords, StackIndexKey};
use crate::profile::{Location, LocationKind};

/// The distinct words: numbered as they come (their id), and in the
/// report's order (their rank, what the stacks hold).
#[derive(Default)]
pub(super) struct WordTable {
    pub(super) words: Vec<Word>,
    pub(super) ids: HashMap<Word, u32>,
    /// Folded tokens: the id of the token of the same name as the last
    /// frame, by id (the tokens of locations are those followed by a `;`).
    pub(super) last: Vec<u32>,
    /// Folded tokens: the name a token is of (the id of its token followed
    /// by a `;`), by id.
    pub(super) names: Vec<u32>,
    /// Word ids in rank order.
    pub(super) by_rank: Vec<u32>,
    /// The text of each word, by rank: ` file:line; function` and a line
    /// break for tree lines, the token itself for folded tokens.
    pub(super) texts: Vec<String>,
    /// The names of folded tokens, by rank.
    pub(super) rank_names: Vec<u32>,
    /// The word ids of each location's frames, once asked: a range of
    /// `location_words`, `None` before.
    pub(super) locations: Vec<Option<(u32, u32)>>,
    pub(super) location_words: Vec<u32>,
    pub(super) kernel_marker: Option<u32>,
    pub(super) unknown_marker: Option<u32>,
}

/// A tree line or a folded token, owning its text; ordered as the report
/// orders them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Word {
    Line(OwnedLineKey),
    Token(String),
}

/// A [`LineKey`] that owns its names, in the same order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct OwnedLineKey {
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

    pub(super) fn key(&self) -> LineKey<'_> {
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

impl WordTable {
    /// The ids of a location's words, found once.
    pub(super) fn of_location(
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

    pub(super) fn marker(
        &mut self,
        name: &'static str,
        key: StackIndexKey,
    ) -> Result<u32, ReportError> {
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
                let name = frame_name(frame, key.python_lines);
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
    pub(super) fn rank(&mut self, words: IndexedWords) -> Vec<u32> {
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
    pub(super) fn rank_of_ids(&self) -> Vec<u32> {
        let mut rank_of = vec![0; self.by_rank.len()];
        for (rank, &id) in (0..).zip(&self.by_rank) {
            rank_of[id as usize] = rank;
        }
        rank_of
    }
}
