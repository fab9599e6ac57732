//! Many short sequences of small ids (stacks as sites, lines or tokens)
//! stored back to back in one vector, and their lexicographic order: what
//! lets the formats work on stacks without a vector, a string or a hash per
//! stack.

use super::ReportError;
use super::frames::small_id;

/// Some sequences of a [`Sequences`] copied side by side (see
/// [`Sequences::gather`]), numbered from 0 in the order asked for.
#[derive(Default)]
pub(super) struct Gathered {
    values: Vec<u32>,
    /// Where each lies in `values`.
    spans: Vec<(usize, usize)>,
}

impl Gathered {
    pub fn get(&self, sequence: usize) -> &[u32] {
        let (start, end) = self.spans[sequence];
        &self.values[start..end]
    }
}

/// Sequences of ids, numbered in the order they were added.
pub(super) struct Sequences {
    values: Vec<u32>,
    /// Sequence `s` is `values[starts[s]..starts[s + 1]]`; the values past
    /// the last start are the sequence being added.
    starts: Vec<usize>,
}

impl Sequences {
    /// Room for `sequences` sequences of `values` values in all.
    pub fn with_capacity(sequences: usize, values: usize) -> Self {
        let mut starts = Vec::with_capacity(sequences + 1);
        starts.push(0);
        Sequences {
            values: Vec::with_capacity(values),
            starts,
        }
    }

    pub fn push(&mut self, value: u32) {
        self.values.push(value);
    }

    /// Adds values to the sequence being added.
    pub fn extend_from_slice(&mut self, values: &[u32]) {
        self.values.extend_from_slice(values);
    }

    /// Replaces the last value of the sequence being added, if it has one.
    pub fn set_last(&mut self, value: u32) {
        if !self.current().is_empty()
            && let Some(last) = self.values.last_mut()
        {
            *last = value;
        }
    }

    /// The values of the sequence being added so far.
    pub fn current(&self) -> &[u32] {
        let start = self.starts.last().copied().unwrap_or_default();
        &self.values[start..]
    }

    /// Ends the sequence being added and returns its number.
    pub fn finish(&mut self) -> Result<u32, ReportError> {
        let number = small_id(self.starts.len() - 1, "stacks")?;
        self.starts.push(self.values.len());
        Ok(number)
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Number of values of all sequences.
    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    pub fn get(&self, sequence: u32) -> &[u32] {
        let sequence = sequence as usize;
        &self.values[self.starts[sequence]..self.starts[sequence + 1]]
    }

    /// Copies `sequences` into `into`, in the order given. A walk that
    /// skips through many sequences waits on memory for each one in turn;
    /// reading where a batch of them lie first, then their values, lets
    /// the processor fetch them all at once.
    pub fn gather(&self, sequences: impl IntoIterator<Item = u32>, into: &mut Gathered) {
        into.values.clear();
        into.spans.clear();
        into.spans.extend(sequences.into_iter().map(|sequence| {
            let sequence = sequence as usize;
            (self.starts[sequence], self.starts[sequence + 1])
        }));
        for span in &mut into.spans {
            let from = into.values.len();
            into.values.extend_from_slice(&self.values[span.0..span.1]);
            *span = (from, into.values.len());
        }
    }

    /// Replaces every value of every sequence by `map(value)`.
    pub fn map_values(&mut self, map: impl Fn(u32) -> u32) {
        for value in &mut self.values {
            *value = map(*value);
        }
    }

    /// Puts sequences among these in place: `inserts[i] = (place, values)`
    /// puts `values` before the sequence now numbered `place` (or after
    /// the last, for `len()`), and those after it are numbered on. Places
    /// must be ascending; inserts at one place keep their order. Each held
    /// value moves once, in blocks, with no new allocation beyond growth:
    /// what lets a few sequences join many at the cost of a copy.
    pub fn insert(&mut self, inserts: &[(usize, &[u32])]) {
        let held = self.len();
        debug_assert!(inserts.is_sorted_by_key(|&(place, _)| place));
        debug_assert!(inserts.iter().all(|&(place, _)| place <= held));
        let added: usize = inserts.iter().map(|(_, values)| values.len()).sum();
        let held_values = self.starts[held];
        grow_closely(&mut self.values, held_values + added);
        grow_closely(&mut self.starts, held + inserts.len() + 1);
        self.values.resize(held_values + added, 0);
        self.starts.resize(held + inserts.len() + 1, 0);
        // Backwards, so that nothing is overwritten before it is moved: the
        // held sequences from insert `i`'s place up to the next insert's
        // move up by `i + 1` sequences and by the values of inserts `..=i`.
        let mut shift_values = added;
        let mut block_end = held;
        for (i, &(place, values)) in inserts.iter().enumerate().rev() {
            let (from, to) = (self.starts[place], self.starts[block_end]);
            self.values.copy_within(from..to, from + shift_values);
            for sequence in (place + 1..=block_end).rev() {
                self.starts[sequence + i + 1] = self.starts[sequence] + shift_values;
            }
            shift_values -= values.len();
            let start = from + shift_values;
            self.values[start..start + values.len()].copy_from_slice(values);
            self.starts[place + i + 1] = start + values.len();
            self.starts[place + i] = start;
            block_end = place;
        }
    }

    /// Bytes held, at capacity.
    pub fn bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<u32>()
            + self.starts.capacity() * std::mem::size_of::<usize>()
    }

    /// All sequences, in number order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> {
        self.starts
            .windows(2)
            .map(|bounds| &self.values[bounds[0]..bounds[1]])
    }

    /// The distinct sequences in lexicographic order (a proper prefix
    /// first), laid out in that order so that walking them in order reads
    /// memory in order, and the rank of each sequence among them. Values
    /// must be below `alphabet`.
    pub fn sorted(&self, alphabet: usize) -> (Sequences, Vec<u32>) {
        // As many as `finish` numbered, so each fits in 32 bits.
        let mut order: Vec<u32> = (0..self.len()).map(|s| s as u32).collect();
        sort_by_sequence(&mut order, alphabet, |sequence| self.get(sequence));
        let mut sorted = Sequences::with_capacity(order.len(), self.values.len());
        let mut ranks = vec![0; order.len()];
        let mut previous: Option<&[u32]> = None;
        for &sequence in &order {
            let values = self.get(sequence);
            if previous != Some(values) {
                sorted.values.extend_from_slice(values);
                sorted.starts.push(sorted.values.len());
                previous = Some(values);
            }
            ranks[sequence as usize] = (sorted.len() - 1) as u32;
        }
        (sorted, ranks)
    }
}

/// Sorts `items` by their sequences (`sequence(item)`, values below
/// `alphabet`) in lexicographic order, a proper prefix first.
///
/// Comparing long slices that share long prefixes is what makes sorting
/// stacks slow (stacks share their first frames), so items are sorted by
/// 128-bit keys packing a chunk of their sequence (each value + 1, 0 past
/// the end), first chunk first. Only items whose keys tie on a full chunk
/// need more: many are sorted again by their next chunk, a few compare the
/// rest of their slices.
pub(super) fn sort_by_sequence<'s>(
    items: &mut [u32],
    alphabet: usize,
    sequence: impl Fn(u32) -> &'s [u32],
) {
    /// Ties up to this many compare the rest of their slices.
    const FEW: usize = 32;
    let bits = (usize::BITS - alphabet.leading_zeros()).max(1);
    let packed = (u128::BITS / bits) as usize;
    let last_value = (1u128 << bits) - 1;
    let key = |item: u32, offset: usize| {
        let values = sequence(item).get(offset..).unwrap_or_default();
        let values = &values[..values.len().min(packed)];
        let key = values
            .iter()
            .fold(0u128, |key, &value| (key << bits) | (u128::from(value) + 1));
        // Digits past the end are 0.
        let missing = (packed - values.len()) as u32 * bits;
        key.checked_shl(missing).unwrap_or(0)
    };
    let mut keyed: Vec<(u128, u32)> = Vec::with_capacity(items.len());
    // Ranges of `items` in order up to `offset` values, to sort on the rest.
    let mut pending = vec![(0, items.len(), 0)];
    while let Some((start, end, offset)) = pending.pop() {
        let items = &mut items[start..end];
        keyed.clear();
        keyed.extend(items.iter().map(|&item| (key(item, offset), item)));
        keyed.sort_unstable_by_key(|&(key, _)| key);
        for (item, &(_, sorted)) in items.iter_mut().zip(&keyed) {
            *item = sorted;
        }
        // Ties on a chunk that is full: their sequences go on.
        let next = offset + packed;
        let rest = |item: u32| sequence(item).get(next..).unwrap_or_default();
        let mut first = 0;
        for tie in keyed.chunk_by(|a, b| a.0 == b.0) {
            let range = first..first + tie.len();
            first = range.end;
            if tie.len() == 1 || tie[0].0 & last_value == 0 {
                continue;
            }
            if tie.len() <= FEW {
                items[range].sort_unstable_by(|&a, &b| rest(a).cmp(rest(b)));
            } else {
                pending.push((start + range.start, start + range.end, next));
            }
        }
    }
}

/// Makes room in `items` for `len` items, with a sixteenth to spare rather
/// than the doubling `Vec` does: an index that grows a few stacks at a time
/// and is counted at capacity (its part of the memory budget) must not
/// hold twice what it uses. Every growth already moves every held item
/// once (see [`Sequences::insert`]), so a closer fit costs no more copying.
pub(super) fn grow_closely<T>(items: &mut Vec<T>, len: usize) {
    if len > items.capacity() {
        items.reserve_exact(len + len / 16 - items.len());
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Random;
    use super::*;

    fn sequences(values: &[Vec<u32>]) -> Sequences {
        let mut sequences = Sequences::with_capacity(0, 0);
        for sequence in values {
            sequences.extend_from_slice(sequence);
            sequences.finish().expect("few");
        }
        sequences
    }

    #[test]
    fn inserts_in_place_are_those_of_a_vector_of_sequences() {
        let mut random = Random::new(11);
        for round in 0..200 {
            let held: Vec<Vec<u32>> = (0..random.below(12))
                .map(|_| {
                    (0..random.below(4))
                        .map(|_| random.below(100) as u32)
                        .collect()
                })
                .collect();
            let mut inserts: Vec<(usize, Vec<u32>)> = (0..random.below(6) + round % 2)
                .map(|_| {
                    let place = random.below(held.len() + 1);
                    let values = (0..random.below(4)).map(|_| 100 + random.below(9) as u32);
                    (place, values.collect())
                })
                .collect();
            inserts.sort_by_key(|&(place, _)| place);
            let mut expected = held.clone();
            for (i, (place, values)) in inserts.iter().enumerate() {
                expected.insert(place + i, values.clone());
            }
            let mut sequences = sequences(&held);
            let borrowed: Vec<(usize, &[u32])> = inserts
                .iter()
                .map(|(place, values)| (*place, &values[..]))
                .collect();
            sequences.insert(&borrowed);
            let got: Vec<Vec<u32>> = sequences.iter().map(<[u32]>::to_vec).collect();
            assert_eq!(got, expected, "held {held:?}, inserts {inserts:?}");
            assert_eq!(
                sequences.value_count(),
                expected.iter().map(Vec::len).sum::<usize>()
            );
        }
    }

    #[test]
    fn sorted_orders_like_slices_and_merges_equal_sequences() {
        let long = |last: &[u32]| {
            let mut values = vec![0];
            values.extend([5; 13]);
            values.extend(last);
            values
        };
        let values: Vec<Vec<u32>> = vec![
            vec![3, 1],
            vec![3],
            vec![],
            long(&[2]),
            long(&[1, 9]),
            long(&[]),
            vec![3, 1],
            vec![1000],
            vec![999, 1000, 0],
            long(&[2]),
        ];
        let mut expected = values.clone();
        expected.sort();
        expected.dedup();
        for alphabet in [1001, 1 << 20, u32::MAX as usize + 1] {
            let (sorted, ranks) = sequences(&values).sorted(alphabet);
            let sorted: Vec<Vec<u32>> = sorted.iter().map(<[u32]>::to_vec).collect();
            assert_eq!(sorted, expected);
            for (sequence, rank) in values.iter().zip(ranks) {
                assert_eq!(&expected[rank as usize], sequence);
            }
        }
    }

    #[test]
    fn many_sequences_with_long_common_prefixes_sort_like_slices() {
        // Enough ties on every chunk to sort groups again, and to compare
        // the slices of small ones.
        let mut random = Random::new(7);
        let values: Vec<Vec<u32>> = (0..3000)
            .map(|_| {
                let mut values = vec![7; 3 + random.below(40)];
                values.extend((0..random.below(10)).map(|_| random.below(3) as u32));
                values
            })
            .collect();
        let mut expected = values.clone();
        expected.sort();
        expected.dedup();
        for alphabet in [8, 1 << 20] {
            let (sorted, ranks) = sequences(&values).sorted(alphabet);
            let sorted: Vec<Vec<u32>> = sorted.iter().map(<[u32]>::to_vec).collect();
            assert_eq!(sorted, expected);
            for (sequence, rank) in values.iter().zip(ranks) {
                assert_eq!(&expected[rank as usize], sequence);
            }
        }
    }

    #[test]
    fn sequences_are_numbered_in_order() {
        let mut s = Sequences::with_capacity(2, 3);
        s.push(4);
        s.extend_from_slice(&[5, 6]);
        assert_eq!(s.current(), [4, 5, 6]);
        assert_eq!(s.finish().expect("few"), 0);
        assert!(s.current().is_empty());
        assert_eq!(s.finish().expect("few"), 1);
        assert_eq!(s.len(), 2);
        assert_eq!((s.get(0), s.get(1)), (&[4, 5, 6][..], &[][..]));
    }
}
