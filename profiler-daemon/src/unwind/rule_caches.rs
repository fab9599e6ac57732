//! The caches of unwind rules framehop keeps by address: a few, each lent
//! to one process's unwinder at a time.
//!
//! framehop tells the rules of different unwinders apart by a 16-bit
//! generation drawn from one counter for the whole process: after 65,536
//! unwinders made or modules added (many processes, many earlier memory
//! maps), one shared cache could give a process another's rule for the same
//! address. Here a cache serves one unwinder until it is lent to another,
//! and is emptied then, and again before the counter could come round.
//!
//! Owns the caches and which unwinder each serves; it must not unwind.

use std::sync::atomic::{AtomicU64, Ordering};

use framehop::x86_64::CacheX86_64;

/// Caches kept: the processes whose stacks come one after another in a
/// drain keep theirs (~16 KiB each).
pub const RULE_CACHES: usize = 16;

/// A cache is emptied once framehop's generation counter has moved this
/// far since it was: well before it wraps (at 65,536).
const GENERATIONS_BEFORE_EMPTYING: u64 = 1 << 15;

/// How far framehop's generation counter has moved: each unwinder made
/// and each module added moves it by one ([`moved_generation`]).
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

/// Call at each `UnwinderX86_64::new` and `add_module`.
pub(super) fn moved_generation() {
    GENERATIONS.fetch_add(1, Ordering::Relaxed);
}

/// An unwinder's number, never given twice.
pub(super) fn next_unwinder() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

struct Lent {
    unwinder: u64,
    /// [`GENERATIONS`] when it was last emptied.
    emptied_at: u64,
    /// When it was last asked for (a count of asks).
    used_at: u64,
    cache: Box<CacheX86_64>,
}

/// The unwinders' caches of unwind rules, at most [`RULE_CACHES`].
#[derive(Default)]
pub struct UnwindCache {
    lent: Vec<Lent>,
    asks: u64,
    /// Caches emptied to serve another unwinder or for the counter.
    emptied: u64,
}

impl std::fmt::Debug for UnwindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnwindCache")
            .field("caches", &self.lent.len())
            .field("emptied", &self.emptied)
            .finish()
    }
}

impl UnwindCache {
    /// The cache of `unwinder`: its own since it last had one, or the
    /// least recently used, emptied.
    pub(super) fn of(&mut self, unwinder: u64) -> &mut CacheX86_64 {
        self.asks += 1;
        let now = GENERATIONS.load(Ordering::Relaxed);
        let index = match self.lent.iter().position(|lent| lent.unwinder == unwinder) {
            Some(index) => index,
            None if self.lent.len() < RULE_CACHES => {
                self.lent.push(Lent {
                    unwinder,
                    emptied_at: now,
                    used_at: 0,
                    cache: Box::new(CacheX86_64::new()),
                });
                self.lent.len() - 1
            }
            None => {
                let (index, _) = (self.lent.iter().enumerate())
                    .min_by_key(|(_, lent)| lent.used_at)
                    .expect("RULE_CACHES is not 0");
                self.empty(index, now);
                self.lent[index].unwinder = unwinder;
                index
            }
        };
        if now - self.lent[index].emptied_at >= GENERATIONS_BEFORE_EMPTYING {
            self.empty(index, now);
        }
        let lent = &mut self.lent[index];
        lent.used_at = self.asks;
        &mut lent.cache
    }

    fn empty(&mut self, index: usize, now: u64) {
        let lent = &mut self.lent[index];
        *lent.cache = CacheX86_64::new();
        lent.emptied_at = now;
        self.emptied += 1;
    }

    /// Caches held, and how many times one was emptied.
    pub fn counts(&self) -> (usize, u64) {
        (self.lent.len(), self.emptied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unwinder_has_its_own_cache_until_another_needs_it() {
        let mut caches = UnwindCache::default();
        caches.of(1);
        caches.of(1);
        assert_eq!(caches.counts(), (1, 0), "the same cache again");
        for unwinder in 2..=RULE_CACHES as u64 {
            caches.of(unwinder);
        }
        assert_eq!(caches.counts(), (RULE_CACHES, 0), "one each");
        // 1 asked last but 2 first: 2's cache is lent, emptied.
        caches.of(1);
        caches.of(RULE_CACHES as u64 + 1);
        assert_eq!(caches.counts(), (RULE_CACHES, 1));
        caches.of(2);
        assert_eq!(caches.counts(), (RULE_CACHES, 2), "2 lost its own");
        caches.of(1);
        caches.of(RULE_CACHES as u64 + 1);
        assert_eq!(caches.counts(), (RULE_CACHES, 2), "kept theirs");
    }

    #[test]
    fn a_cache_is_emptied_before_framehop_s_generations_come_round() {
        let mut caches = UnwindCache::default();
        caches.of(7);
        for _ in 0..GENERATIONS_BEFORE_EMPTYING {
            moved_generation();
        }
        caches.of(7);
        assert_eq!(caches.counts(), (1, 1));
        caches.of(7);
        assert_eq!(caches.counts(), (1, 1), "not again until it moves as far");
    }
}
