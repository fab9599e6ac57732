//! The prefixes a tree report's stacks share, in their lexicographic
//! order: how many lines each stack shares with the one before it, its
//! number of lines, and the least share over blocks of stacks, so that the
//! lines any two stacks share are found without reading either.
//!
//! A section's tree has a node per distinct prefix of its stacks, and a
//! node's count is what the stacks under it add up to; counting a
//! section's lines needs only these numbers. Reading the stacks of each of
//! hundreds of sections instead (scattered across the order, a cache miss
//! each) was most of a tree by process.
//!
//! It must not hold lines: it reads the stacks once, front to back.

use super::Ranked;

/// Stacks per block of [`Prefixes::block_least`].
const BLOCK: usize = 16;

pub(super) struct Prefixes {
    /// For each stack (by place in the order), the lines it shares with
    /// the one before it (0 for the first) and its lines: side by side, as
    /// they are read together.
    places: Vec<(u32, u32)>,
    /// The least of `shared` over runs of blocks of [`BLOCK`] places: level
    /// `k` holds, for each block, the least over the `2^k` blocks from it
    /// (a sparse table: any run of blocks is two overlapping runs of one
    /// level).
    block_least: Vec<Vec<u32>>,
}

impl Prefixes {
    /// The prefixes of `stacks`, which must be in lexicographic order.
    pub fn new(stacks: &Ranked<'_>) -> Self {
        let places = stacks.len();
        let mut shared_and_lens = Vec::with_capacity(places);
        let mut previous: &[u32] = &[];
        for place in 0..places {
            // Places are numbered in 32 bits, as ranks are.
            let lines = stacks.get(place as u32);
            let common = previous
                .iter()
                .zip(lines)
                .take_while(|(a, b)| a == b)
                .count();
            // Lines of one stack, fewer than its frames' 32-bit ids.
            shared_and_lens.push((common as u32, lines.len() as u32));
            previous = lines;
        }
        let blocks: Vec<u32> = shared_and_lens
            .chunks(BLOCK)
            .map(|block| block.iter().map(|&(shared, _)| shared).min().unwrap_or(0))
            .collect();
        let mut block_least = vec![blocks];
        let mut run = 1;
        while let Some(level) = block_least.last()
            && level.len() > run
        {
            let next = (0..level.len() - run)
                .map(|block| level[block].min(level[block + run]))
                .collect();
            block_least.push(next);
            run *= 2;
        }
        Self {
            places: shared_and_lens,
            block_least,
        }
    }

    /// Lines of the stack at `place`.
    pub fn len(&self, place: u32) -> u32 {
        self.places[place as usize].1
    }

    /// Lines the stacks at places `before <= after` share: the least share
    /// of the stacks between, the first excluded (all of them for one).
    pub fn shared(&self, before: u32, after: u32) -> u32 {
        if before >= after {
            return self.len(after);
        }
        let (first, last) = (before as usize + 1, after as usize);
        let least_of = |places: &[(u32, u32)]| {
            let shared = places.iter().map(|&(shared, _)| shared);
            shared.min().unwrap_or(u32::MAX)
        };
        if last / BLOCK <= first / BLOCK + 1 {
            return least_of(&self.places[first..=last]);
        }
        // The rest of the first block, whole blocks, the start of the last.
        let first_block_end = (first / BLOCK + 1) * BLOCK;
        let last_block_start = last / BLOCK * BLOCK;
        least_of(&self.places[first..first_block_end])
            .min(self.least_of_blocks(first / BLOCK + 1, last / BLOCK))
            .min(least_of(&self.places[last_block_start..=last]))
    }

    /// The least share of the blocks `first..end` (at least one).
    fn least_of_blocks(&self, first: usize, end: usize) -> u32 {
        let blocks = end - first;
        // The longest run of one level that fits, from either end.
        let level = (usize::BITS - 1 - blocks.leading_zeros()) as usize;
        let least = &self.block_least[level];
        least[first].min(least[end - (1 << level)])
    }
}

/// A section's stacks, by place in the order, with their counts, and what
/// each shares with the one before: the section's tree without its lines.
pub(super) struct SectionStacks {
    /// (place, count), by place, one per place.
    entries: Vec<(u32, u64)>,
    /// Lines each stack shares with the one before it; 0 for the first.
    shared: Vec<u32>,
    lens: Vec<u32>,
    /// `sums[i]`: the counts of the first `i` entries.
    sums: Vec<u64>,
}

/// A step of [`SectionStacks::walk`].
pub(super) enum Step {
    /// A node starts: `depth` from 1, its samples and those ending in it,
    /// and the place of a stack through it.
    Open {
        depth: u32,
        count: u64,
        overhead: u64,
        place: u32,
    },
    /// The subtree of the last node open ends.
    Close,
}

impl SectionStacks {
    /// `entries`: (place, count) by place; the counts of one place (stacks
    /// of equal lines) are added up.
    pub fn new(entries: &[(u32, u64)], prefixes: &Prefixes) -> Self {
        let mut merged: Vec<(u32, u64)> = Vec::with_capacity(entries.len());
        for &(place, count) in entries {
            match merged.last_mut() {
                Some((last, sum)) if *last == place => *sum = sum.saturating_add(count),
                _ => merged.push((place, count)),
            }
        }
        let entries = merged;
        let mut shared = Vec::with_capacity(entries.len());
        let mut sums = Vec::with_capacity(entries.len() + 1);
        let mut before: Option<u32> = None;
        let mut sum = 0_u64;
        sums.push(sum);
        for &(place, count) in &entries {
            shared.push(before.map_or(0, |before| prefixes.shared(before, place)));
            sum = sum.saturating_add(count);
            sums.push(sum);
            before = Some(place);
        }
        let lens = entries
            .iter()
            .map(|&(place, _)| prefixes.len(place))
            .collect();
        Self {
            entries,
            shared,
            lens,
            sums,
        }
    }

    /// The lines of the section's tree at most `maxdepth` deep: one per
    /// distinct prefix of its stacks.
    pub fn lines(&self, maxdepth: Option<u32>) -> u64 {
        let deep = |lines: u32| u64::from(maxdepth.map_or(lines, |maxdepth| lines.min(maxdepth)));
        self.lens
            .iter()
            .zip(&self.shared)
            .map(|(&len, &shared)| deep(len) - deep(shared))
            .sum()
    }

    /// Walks the nodes of the section's tree of at least `floor` samples
    /// (their subtrees have fewer still) in depth-first order, children in
    /// the order of their lines, as [`super::Tree::build`] lays them out.
    /// Iterative, so that deep stacks cannot overflow.
    pub fn walk<E>(
        &self,
        floor: u64,
        mut step: impl FnMut(Step) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut tasks = Vec::new();
        let mut children = Vec::new();
        self.push_children(&mut tasks, &mut children, (0, self.entries.len(), 1), floor);
        while let Some(task) = tasks.pop() {
            let (first, end, depth) = match task {
                Task::Close(n) => {
                    for _ in 0..n {
                        step(Step::Close)?;
                    }
                    continue;
                }
                Task::Open { first, end, depth } => (first, end, depth),
            };
            // The lines all of them share: one node per line down to where
            // they part (or the one stack ends).
            let last = match end - first {
                1 => self.lens[first],
                _ => self.shared[first + 1..end]
                    .iter()
                    .copied()
                    .min()
                    .unwrap_or(depth),
            };
            let (place, count) = (self.entries[first].0, self.sums[end] - self.sums[first]);
            for depth in depth..=last {
                let overhead = match self.lens[first] == depth {
                    true => self.entries[first].1,
                    false => 0,
                };
                step(Step::Open {
                    depth,
                    count,
                    overhead,
                    place,
                })?;
            }
            tasks.push(Task::Close(last + 1 - depth));
            if end - first > 1 {
                self.push_children(&mut tasks, &mut children, (first, end, last + 1), floor);
            }
        }
        Ok(())
    }

    /// Pushes the tasks of the children at `depth` of the node of
    /// entries `first..end`, of at least `floor` samples, the first
    /// child on top.
    fn push_children(
        &self,
        tasks: &mut Vec<Task>,
        children: &mut Vec<(usize, usize)>,
        (first, end, depth): (usize, usize, u32),
        floor: u64,
    ) {
        // A stack that ends at the node sorts first.
        let mut start = first + usize::from(self.lens[first] < depth);
        children.clear();
        for at in start + 1..end {
            if self.shared[at] < depth {
                children.push((start, at));
                start = at;
            }
        }
        if start < end {
            children.push((start, end));
        }
        let kept = children
            .iter()
            .rev()
            .filter(|&&(first, end)| self.sums[end] - self.sums[first] >= floor);
        tasks.extend(kept.map(|&(first, end)| Task::Open { first, end, depth }));
    }
}

/// A step of [`SectionStacks::walk`]'s own: entries `first..end`, which
/// share their first `depth - 1` lines, make the nodes at `depth` and below;
/// or `n` nodes close.
enum Task {
    Open {
        first: usize,
        end: usize,
        depth: u32,
    },
    Close(u32),
}

#[cfg(test)]
mod tests {
    use super::super::super::sequences::Sequences;
    use super::super::super::test_support::Random;
    use super::*;

    #[test]
    fn shared_lines_are_those_of_the_two_stacks() {
        // Sorted stacks of 1-6 lines over 3 words, many sharing prefixes.
        let mut numbers = Random::new(0x2545_f491_4f6c_dd1d);
        let mut random = |below: u32| numbers.below(below as usize) as u32;
        let mut all: Vec<Vec<u32>> = (0..700)
            .map(|_| (0..1 + random(6)).map(|_| random(3)).collect())
            .collect();
        all.sort();
        let mut stacks = Sequences::with_capacity(all.len(), 0);
        for stack in &all {
            for &word in stack {
                stacks.push(word);
            }
            stacks.finish().expect("a stack");
        }
        let prefixes = Prefixes::new(&Ranked::Sorted(stacks));
        let common = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(a, b)| a == b).count();
        for _ in 0..5000 {
            let (a, b) = (random(700), random(700));
            let (before, after) = (a.min(b), a.max(b));
            if before == after {
                continue;
            }
            let expected = common(&all[before as usize], &all[after as usize]) as u32;
            assert_eq!(
                prefixes.shared(before, after),
                expected,
                "{before}..{after}"
            );
        }
        for place in 0..700 {
            let len = all[place as usize].len() as u32;
            assert_eq!(prefixes.len(place), len);
            assert_eq!(
                prefixes.shared(place, place),
                len,
                "a stack shares all of itself"
            );
        }
    }
}
