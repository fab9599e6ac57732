//! The reports' indexes of the store's stacks, kept from report to report
//! while they are asked for (see [`crate::report::StackIndex`]): which are kept,
//! brought up to the store's stacks, and let go of when idle or for memory.
//!
//! Owns the indexes and their bound; it must not render reports (see
//! `answers`) nor change the store.

use std::{
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use crate::{
    profile::{Format, GroupBy, ReportOptions},
    report::{StackIndex, StackIndexKey},
    store::Store,
};

/// An index unused this long is dropped: its memory is given back.
pub(super) const STACK_INDEX_IDLE: Duration = Duration::from_secs(600);

/// How often the indexes in use are brought up to the store's stacks
/// between reports.
pub const STACK_INDEX_REFRESH: Duration = Duration::from_secs(1);

/// The share of an index's stacks (1 in this many) the refresher lets new
/// stacks reach before it extends the index (see
/// [`StackIndexes::keep_current`]).
pub const STACK_INDEX_LAG: usize = 64;

/// [`STACK_INDEX_LAG`] for the warm indexes while no report asks for them
/// (none in [`STACK_INDEX_IDLE`]): a daemon nobody asks keeps them within
/// reach (a first report extends by at most an eighth of the stacks, ~40 ms
/// at 170k) for a fraction of the refresher's CPU. (Extending at the
/// 64th cost a quarter of an idle daemon's CPU at 99 Hz with both CPUs
/// busy over 10,000 distinct paths: 0.08% of a core.)
pub const STACK_INDEX_IDLE_LAG: usize = 8;

/// The reports' indexes of the store's stacks (see [`crate::report::StackIndex`]),
/// one per kind of words, `kernel` and `combine` options and sight of
/// kernel addresses that reports ask for, kept from report to report while
/// they are asked for (the warm ones always).
#[derive(Default)]
pub struct StackIndexes {
    indexes: Mutex<Vec<KeptIndex>>,
    /// The most bytes the indexes hold (0: no limit), and indexes let go
    /// of to stay within it.
    limit: u64,
    evicted: std::sync::atomic::AtomicU64,
    /// Indexes let go of for memory, with the store's stacks then: they
    /// are not built again (their reports are made without one) until the
    /// store holds half as many, so that an index too large for the share
    /// is not built and let go of report after report.
    too_large: Mutex<Vec<(StackIndexKey, usize)>>,
}

/// An index, what it is of, and when it was last asked for.
struct KeptIndex {
    key: StackIndexKey,
    index: Arc<RwLock<StackIndex>>,
    used: Instant,
    /// Kept whether asked for or not.
    warm: bool,
    /// Whether a report asked for it yet (a warm index is made before).
    asked: bool,
}

impl StackIndexes {
    /// Indexes that hold the indexes of the reports most asked for from the
    /// start, whether asked for or not: the tree, and folded stacks, flame
    /// graphs and speedscope, of the whole machine with the default
    /// options, as an asker who may read kernel addresses sees them.
    /// [`StackIndexes::keep_current`] builds them as the store fills, so
    /// that no report waits for a first build.
    pub fn warmed() -> Self {
        let now = Instant::now();
        let keys = [Format::Tree, Format::Folded].map(|format| {
            let options = ReportOptions {
                format,
                groupby: GroupBy::None,
                ..ReportOptions::default()
            };
            StackIndexKey::of(&options, false)
        });
        let kept = keys.into_iter().flatten().map(|key| KeptIndex {
            key,
            index: Arc::new(RwLock::new(StackIndex::new(key))),
            used: now,
            warm: true,
            asked: false,
        });
        Self {
            indexes: Mutex::new(kept.collect()),
            ..Self::default()
        }
    }

    /// Holds the indexes within `bytes` (0: no limit): past it, those
    /// asked for least recently are let go of (a report that needs one
    /// again builds it), the warm ones last.
    pub fn with_limit(mut self, bytes: u64) -> Self {
        self.limit = bytes;
        self
    }

    /// Indexes let go of to stay within the limit since start.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Lets go of indexes, least recently asked for first (the warm ones
    /// last), until those held are within the limit; the store holds
    /// `stacks` stacks.
    fn keep_within_limit(&self, stacks: usize) {
        if self.limit == 0 {
            return;
        }
        let mut indexes = crate::lock(&self.indexes);
        let mut held: Vec<(bool, Instant, usize, u64)> = indexes
            .iter()
            .enumerate()
            .map(|(at, kept)| {
                // An index a report is extending is counted when done.
                let bytes = kept
                    .index
                    .try_read()
                    .map_or(0, |index| index.bytes() as u64);
                (kept.warm, kept.used, at, bytes)
            })
            .collect();
        let mut total: u64 = held.iter().map(|&(.., bytes)| bytes).sum();
        if total <= self.limit {
            return;
        }
        held.sort_unstable();
        let mut gone = Vec::new();
        for (warm, _, at, bytes) in held {
            if total <= self.limit {
                break;
            }
            total -= bytes;
            gone.push(at);
            tracing::info!(
                warm,
                bytes,
                limit = self.limit,
                "let go of a report index to stay within its share of memory_budget"
            );
        }
        gone.sort_unstable();
        let mut too_large = crate::lock(&self.too_large);
        for at in gone.into_iter().rev() {
            let kept = indexes.remove(at);
            too_large.retain(|(key, _)| *key != kept.key);
            too_large.push((kept.key, stacks));
            self.evicted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Drops the indexes left unused for `STACK_INDEX_IDLE`, and has the
    /// others follow the store's compactions and take in the stacks added
    /// once they are a [`STACK_INDEX_LAG`]th of those held, so that a report
    /// asking for one finds few to add. (An extension moves every held
    /// stack once, whatever it adds: about 3.5 ms for 170k stacks, and 2 µs
    /// more per stack added. Under a storm of new stacks, extending every
    /// second would cost ~1% of a core per index; this way a report pays
    /// at most ~10 ms for what the refresher left.) It blocks: call it off
    /// the async threads.
    pub fn keep_current(&self, store: &RwLock<Store>) {
        let stacks = crate::read_lock(store).stack_count();
        self.keep_within_limit(stacks);
        let now = Instant::now();
        for (index, lag) in self.live_with_lag(now) {
            // An index a report is using is left to it: the report brings
            // it up to date itself. Never waiting for one here, while the
            // store is locked, is what keeps this from deadlocking with a
            // report, which locks the index first.
            let store = crate::read_lock(store);
            if let Ok(mut index) = index.try_write()
                && behind(&index, &store, lag)
            {
                extend_index(&store, &mut index);
            }
        }
    }

    /// Whether [`StackIndexes::keep_current`] would extend an index now,
    /// found without waiting for a lock (a lock someone holds says yes):
    /// cheap enough for an async thread, so that a refresh with nothing to
    /// do costs no blocking thread's wake-ups. First lets go of the
    /// indexes over the limit, as `keep_current` does.
    pub fn refresh_due(&self, store: &RwLock<Store>) -> bool {
        let Ok(store) = store.try_read() else {
            return true;
        };
        self.keep_within_limit(store.stack_count());
        self.live_with_lag(Instant::now())
            .iter()
            .any(|(index, lag)| {
                index
                    .try_read()
                    .is_ok_and(|index| behind(&index, &store, *lag))
            })
    }

    /// Bytes the indexes hold, roughly.
    pub fn bytes(&self) -> u64 {
        let bytes = self
            .live()
            .into_iter()
            .map(|index| crate::read_lock(&index).bytes());
        bytes.sum::<usize>() as u64
    }

    /// The indexes asked for within [`STACK_INDEX_IDLE`], and the warm
    /// ones; the others go.
    fn live(&self) -> Vec<Arc<RwLock<StackIndex>>> {
        self.live_at(Instant::now())
    }

    /// [`StackIndexes::live`] as of `now`.
    pub(super) fn live_at(&self, now: Instant) -> Vec<Arc<RwLock<StackIndex>>> {
        let live = self.live_with_lag(now).into_iter();
        live.map(|(index, _)| index).collect()
    }

    /// [`StackIndexes::live_at`], each with the share of its stacks (1 in
    /// this many) new ones may reach before the refresher extends it:
    /// [`STACK_INDEX_IDLE_LAG`] for a warm index no report asked for in
    /// [`STACK_INDEX_IDLE`], else [`STACK_INDEX_LAG`].
    pub(super) fn live_with_lag(&self, now: Instant) -> Vec<(Arc<RwLock<StackIndex>>, usize)> {
        let mut indexes = crate::lock(&self.indexes);
        let recent = |kept: &KeptIndex| now.duration_since(kept.used) < STACK_INDEX_IDLE;
        indexes.retain(|kept| kept.warm || recent(kept));
        let lag = |kept: &KeptIndex| match kept.asked && recent(kept) {
            true => STACK_INDEX_LAG,
            false => STACK_INDEX_IDLE_LAG,
        };
        indexes
            .iter()
            .map(|kept| (kept.index.clone(), lag(kept)))
            .collect()
    }

    /// The index of `key`, made empty on first use; none while it is too
    /// large for the limit (see [`StackIndexes::too_large`]) with the store
    /// holding `stacks` stacks.
    pub(super) fn get(&self, key: StackIndexKey, stacks: usize) -> Option<Arc<RwLock<StackIndex>>> {
        {
            let mut too_large = crate::lock(&self.too_large);
            too_large.retain(|&(_, then)| stacks > then / 2);
            if too_large.iter().any(|(large, _)| *large == key) {
                return None;
            }
        }
        let now = Instant::now();
        let mut indexes = crate::lock(&self.indexes);
        match indexes.iter_mut().find(|kept| kept.key == key) {
            Some(kept) => {
                kept.used = now;
                kept.asked = true;
                Some(kept.index.clone())
            }
            None => {
                let index = Arc::new(RwLock::new(StackIndex::new(key)));
                indexes.push(KeptIndex {
                    key,
                    index: index.clone(),
                    used: now,
                    warm: false,
                    asked: true,
                });
                Some(index)
            }
        }
    }
}

/// Whether `index` is behind `store` by more than 1 in `lag` of its stacks
/// (or a compaction since).
fn behind(index: &StackIndex, store: &Store, lag: usize) -> bool {
    let behind = store.stack_count().saturating_sub(index.len());
    index.generation() != store.generation() || behind > index.len() / lag
}

/// Brings `index` up to the store's stacks: follows the store's last
/// compaction when the index is of the generation before, then indexes the
/// stacks added since.
pub fn extend_index(store: &Store, index: &mut StackIndex) {
    let started = Instant::now();
    let generation = store.generation();
    if index.generation() != generation
        && let Some(renumberings) = store.renumberings_from(index.generation())
    {
        let mut compactions = 0;
        let mut renumbered = true;
        for renumbering in renumberings {
            compactions += 1;
            renumbered = index.renumber(
                (renumbering.from, renumbering.to()),
                &renumbering.stacks,
                &renumbering.locations,
                crate::store::GONE,
            );
            if !renumbered {
                break;
            }
        }
        tracing::debug!(
            compactions,
            renumbered,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "followed the store's compactions in a stack index"
        );
    }
    let (before, words_before) = (index.len(), index.word_count());
    let extended = index.extend(
        store.generation(),
        store.stack_count(),
        |id| store.stack_locations(id),
        |id| store.location(id),
    );
    match extended {
        Ok(()) => tracing::debug!(
            stacks = index.len(),
            before,
            words = index.word_count(),
            words_before,
            bytes = index.bytes(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "extended a line index"
        ),
        Err(err) => {
            // Reports still render, from their own profile.
            tracing::warn!("cannot index the store's stacks for reports: {err}");
            *index = StackIndex::new(index.key());
        }
    }
}
