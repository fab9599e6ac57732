//! Sorting many items by a small integer key in a few passes over them
//! (least significant digit first), for the reports' lines: the lines of
//! each group of a busy window (thousands of stack ranks) sort faster this
//! way than by comparing them.
//!
//! Owns the sort; it must not know what the keys mean.

/// Bits of the key sorted by in one pass: 2048 counters, small enough to
/// stay in the cache while items are scattered.
const DIGIT_BITS: u32 = 11;

/// Sorts `items` by `key`, stably; every key must be below `2^bits`.
/// `scratch` is overwritten: a caller sorting many runs passes the same
/// one, so that they are sorted with one allocation.
pub(super) fn sort_by_key<T: Copy>(
    items: &mut [T],
    scratch: &mut Vec<T>,
    bits: u32,
    key: impl Fn(&T) -> u64,
) {
    if items.len() < 2 || bits == 0 {
        return;
    }
    debug_assert!(
        items
            .iter()
            .all(|item| bits >= 64 || key(item) >> bits == 0)
    );
    // Every place is written by each pass: filled once.
    scratch.clear();
    scratch.extend_from_slice(items);
    let digits = 1_usize << DIGIT_BITS;
    let passes = bits.div_ceil(DIGIT_BITS) as usize;
    // Each pass's counts, all taken in one read of the items.
    let mut counts = vec![0_usize; digits * passes];
    let digit =
        |item: &T, pass: usize| ((key(item) >> (pass as u32 * DIGIT_BITS)) as usize) & (digits - 1);
    for item in items.iter() {
        for pass in 0..passes {
            counts[pass * digits + digit(item, pass)] += 1;
        }
    }
    for (pass, counts) in counts.chunks_mut(digits).enumerate() {
        // Each digit's first place.
        let mut place = 0;
        for count in counts.iter_mut() {
            let items = *count;
            *count = place;
            place += items;
        }
        let mut scatter = |from: &[T], to: &mut [T]| {
            for item in from {
                let slot = &mut counts[digit(item, pass)];
                to[*slot] = *item;
                *slot += 1;
            }
        };
        // The items go back and forth between `items` and `scratch`.
        match pass % 2 {
            0 => scatter(items, scratch),
            _ => scatter(scratch, items),
        }
    }
    if passes % 2 == 1 {
        items.copy_from_slice(scratch);
    }
}

/// Bits needed to write every number below `bound`.
pub(super) fn bits_below(bound: u64) -> u32 {
    u64::BITS - bound.saturating_sub(1).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Random;
    use super::*;

    #[test]
    fn sorts_as_a_stable_sort_does() {
        let mut random = Random::new(7);
        // One scratch for every sort, whatever it held before.
        let mut scratch = Vec::new();
        for round in 0..50 {
            let bound = 1 + random.below(1 << (round % 30)) as u64;
            let items: Vec<(u64, usize)> = (0..random.below(5000))
                .map(|at| (random.below(bound as usize) as u64, at))
                .collect();
            let mut expected = items.clone();
            expected.sort_by_key(|&(key, _)| key);
            let mut sorted = items;
            sort_by_key(&mut sorted, &mut scratch, bits_below(bound), |&(key, _)| {
                key
            });
            assert_eq!(sorted, expected, "bound {bound}");
        }
    }

    #[test]
    fn bits_below_a_bound() {
        assert_eq!(bits_below(0), 0);
        assert_eq!(bits_below(1), 0);
        assert_eq!(bits_below(2), 1);
        assert_eq!(bits_below(1024), 10);
        assert_eq!(bits_below(1025), 11);
    }
}
