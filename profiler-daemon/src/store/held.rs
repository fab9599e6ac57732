//! The CPU samples of every bucket the store holds, summed per stack and
//! per thread as buckets come and go: what a report of the whole machine
//! that shows no threads starts from, so that it reads only the buckets
//! outside its window instead of every bucket inside.
//!
//! Owns those running sums; the store tells it of every bucket added and
//! dropped and rebuilds it when ids change. It must not decide which
//! buckets a window holds (see `query`).

use super::{Bucket, CpuSamples};

/// Samples per stack and per thread of the buckets held.
#[derive(Clone, Debug, Default)]
pub(super) struct HeldSums {
    /// By stack id.
    pub(super) stacks: Vec<u64>,
    /// By thread id.
    pub(super) threads: Vec<u64>,
}

impl HeldSums {
    /// Sums of `buckets`.
    pub fn of<'b>(buckets: impl IntoIterator<Item = &'b Bucket>) -> Self {
        let mut sums = Self::default();
        for bucket in buckets {
            sums.add(bucket);
        }
        sums
    }

    pub fn add(&mut self, bucket: &Bucket) {
        for samples in bucket.cpu.iter() {
            let (stack, thread) = self.slots(samples);
            *stack += u64::from(samples.count);
            *thread += u64::from(samples.count);
        }
    }

    pub fn remove(&mut self, bucket: &Bucket) {
        for samples in bucket.cpu.iter() {
            let (stack, thread) = self.slots(samples);
            *stack = stack.saturating_sub(u64::from(samples.count));
            *thread = thread.saturating_sub(u64::from(samples.count));
        }
    }

    fn slots(&mut self, samples: &CpuSamples) -> (&mut u64, &mut u64) {
        let (stack, thread) = (samples.stack as usize, samples.thread as usize);
        if self.stacks.len() <= stack {
            self.stacks.resize(stack + 1, 0);
        }
        if self.threads.len() <= thread {
            self.threads.resize(thread + 1, 0);
        }
        (&mut self.stacks[stack], &mut self.threads[thread])
    }

    /// The sums of the buckets held but `outside`, for at least `threads`
    /// threads.
    pub fn without<'b>(
        &self,
        outside: impl IntoIterator<Item = &'b Bucket>,
        threads: usize,
    ) -> HeldSums {
        let mut sums = self.clone();
        sums.threads.resize(threads.max(sums.threads.len()), 0);
        for bucket in outside {
            sums.remove(bucket);
        }
        sums
    }

    /// The sums per thread of the buckets held but `outside`, for at least
    /// `threads` threads.
    pub fn threads_without<'b>(
        &self,
        outside: impl IntoIterator<Item = &'b Bucket>,
        threads: usize,
    ) -> Vec<u64> {
        let mut sums = self.threads.clone();
        sums.resize(threads.max(sums.len()), 0);
        for bucket in outside {
            for samples in bucket.cpu.iter() {
                if let Some(thread) = sums.get_mut(samples.thread as usize) {
                    *thread = thread.saturating_sub(u64::from(samples.count));
                }
            }
        }
        sums
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        (self.stacks.capacity() + self.threads.capacity()) * size_of::<u64>()
    }
}
