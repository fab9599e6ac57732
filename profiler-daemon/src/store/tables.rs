//! The store's intern tables: threads, locations and stacks numbered once,
//! so that a bucket entry is a few integers, with what they really occupy.
//!
//! This module owns the tables and their memory accounting; it must not
//! know about buckets, time or queries.

use std::{
    hash::{BuildHasher as _, Hash},
    mem::size_of,
};

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};

/// What a value owns beyond itself, in bytes (an estimate).
pub(super) trait HeapBytes {
    fn heap_bytes(&self) -> usize;
}

/// Values numbered in order of first appearance, found by key.
#[derive(Debug)]
pub(super) struct Interner<K, V> {
    ids: FxHashMap<K, u32>,
    values: Vec<V>,
    /// The values' [`HeapBytes`], summed as they come (the store asks for
    /// its size at every insert).
    heap_bytes: usize,
}

impl<K, V> Default for Interner<K, V> {
    fn default() -> Self {
        Self {
            ids: FxHashMap::default(),
            values: Vec::new(),
            heap_bytes: 0,
        }
    }
}

impl<K: Eq + Hash, V: HeapBytes> Interner<K, V> {
    /// The id of `key`, numbering it (with `value()`) if it is new.
    pub fn intern(&mut self, key: K, value: impl FnOnce() -> V) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.values.len() as u32;
        let value = value();
        self.heap_bytes += value.heap_bytes();
        self.values.push(value);
        self.ids.insert(key, id);
        id
    }

    pub fn get(&self, id: u32) -> &V {
        &self.values[id as usize]
    }

    pub fn values(&self) -> &[V] {
        &self.values
    }

    /// Bytes held: both tables at their capacity, plus what the values own
    /// beyond themselves.
    pub fn bytes(&self) -> usize {
        // A hash table slot holds the entry and one control byte.
        self.ids.capacity() * (size_of::<(K, u32)>() + 1)
            + self.values.capacity() * size_of::<V>()
            + self.heap_bytes
    }
}

/// A table's ids renumbered from 0 in the order they are first asked for,
/// as a profile numbers the part of the tables it copies.
pub(super) struct Renumbering(Vec<u32>);

impl Renumbering {
    const UNUSED: u32 = u32::MAX;

    /// For ids below `len`.
    pub fn new(len: usize) -> Self {
        Self(vec![Self::UNUSED; len])
    }

    /// The new number of `id`; on its first use, `add()` copies what it
    /// stands for and returns its new number.
    pub fn get_or_add(&mut self, id: u32, add: impl FnOnce() -> usize) -> u32 {
        let slot = &mut self.0[id as usize];
        if *slot == Self::UNUSED {
            // Fewer than the table's ids, which are 32-bit.
            *slot = add() as u32;
        }
        *slot
    }

    /// The new number of an id numbered before.
    pub fn get(&self, id: u32) -> u32 {
        self.0[id as usize]
    }
}

/// Where a stack lies in the arena.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

/// Stacks of location ids, stored end to end in one arena and found by
/// content: 4 bytes per frame and about 13 per stack, where a table of
/// boxed slices would spend three allocations' worth.
#[derive(Debug, Default)]
pub(super) struct StackTable {
    arena: Vec<u32>,
    spans: Vec<Span>,
    /// Stack ids, hashed by the stack they stand for.
    index: HashTable<u32>,
}

impl StackTable {
    /// The id of `stack`, storing it if it is new.
    pub fn intern(&mut self, stack: &[u32]) -> u32 {
        let Self {
            arena,
            spans,
            index,
        } = self;
        let hash = FxBuildHasher.hash_one(stack);
        if let Some(&id) = index.find(hash, |&id| &arena[spans[id as usize].range()] == stack) {
            return id;
        }
        let id = spans.len() as u32;
        spans.push(Span {
            start: arena.len() as u32,
            len: stack.len() as u32,
        });
        arena.extend_from_slice(stack);
        index.insert_unique(hash, id, |&id| {
            FxBuildHasher.hash_one(&arena[spans[id as usize].range()])
        });
        id
    }

    pub fn get(&self, id: u32) -> &[u32] {
        &self.arena[self.spans[id as usize].range()]
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Bytes held: the arena and the spans as far as they are filled, the
    /// index at capacity. The arena is the store's largest vector: each
    /// time it doubles, its spare half is address space the allocator maps
    /// but no page of which is touched until stacks fill it (a realloc of a
    /// large block moves its pages, it does not copy them). Counted at
    /// capacity, a storm's store jumped by 19 MiB at once at 240k stacks
    /// and dropped history for a memory ceiling its resident memory was far
    /// from. A hash table's slots are all written when it grows: at
    /// capacity.
    pub fn bytes(&self) -> usize {
        self.arena.len() * size_of::<u32>()
            + self.spans.len() * size_of::<Span>()
            + self.index.capacity() * (size_of::<u32>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_found_by_content() {
        let mut table = StackTable::default();
        let a = table.intern(&[1, 2, 3]);
        let b = table.intern(&[1, 2]);
        let empty = table.intern(&[]);
        assert_eq!(table.intern(&[1, 2, 3]), a);
        assert_eq!(table.intern(&[]), empty);
        assert_ne!(a, b);
        assert_eq!(table.get(a), [1, 2, 3]);
        assert_eq!(table.get(b), [1, 2]);
        assert!(table.get(empty).is_empty());
        assert_eq!(table.len(), 3);
        // Many stacks: the index grows and still finds every one.
        let ids: Vec<u32> = (0..10_000).map(|n| table.intern(&[n, n + 1, 7])).collect();
        for (n, &id) in ids.iter().enumerate() {
            let n = n as u32;
            assert_eq!(table.get(id), [n, n + 1, 7]);
            assert_eq!(table.intern(&[n, n + 1, 7]), id);
        }
        assert!(table.bytes() >= 10_003 * (3 * 4 + 8));
    }

    impl HeapBytes for String {
        fn heap_bytes(&self) -> usize {
            self.capacity()
        }
    }

    #[test]
    fn interned_values_keep_their_ids() {
        let mut interner: Interner<&str, String> = Interner::default();
        let a = interner.intern("a", || "A".to_owned());
        let b = interner.intern("b", || "B".to_owned());
        assert_eq!(interner.intern("a", || unreachable!()), a);
        assert_eq!(interner.get(b), "B");
        assert_eq!(interner.values().len(), 2);
        // Both tables, and the strings' own bytes, counted as they came.
        let tables = interner.bytes();
        interner.intern("c", || String::with_capacity(1000));
        assert!(
            interner.bytes() >= tables + 1000,
            "{tables} {}",
            interner.bytes()
        );
    }
}
