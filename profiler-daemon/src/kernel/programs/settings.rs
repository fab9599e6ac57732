//! What the programs are loaded with: how often to sample, how big the
//! kernel's maps and ring buffers are (sized from the settings and the
//! CPUs when not configured).
//!
//! Owns the sizing rules; it must not load anything.

use std::{mem::size_of, time::Duration};

use profiler_common::{STACK_COPY_PAGE, StackCopyHeader};

/// What to sample and how big the kernel's maps are.
#[derive(Clone, Copy, Debug)]
pub struct ProgramSettings {
    pub frequency_hz: u32,
    pub drain_interval: Duration,
    /// 0 = size automatically.
    pub max_stacks: u32,
    /// 0 = size automatically.
    pub max_sample_keys: u32,
    /// Signal whose sending starts a peek; 0: none.
    pub peek_signal: u32,
    /// Samples per second of a peeked thread.
    pub peek_frequency_hz: u32,
    /// Pages of user stack each sample copies for unwinding in the daemon;
    /// 0: user stacks are walked by frame pointers in the kernel.
    pub stack_copy_pages: u32,
    /// Bytes of the stack-copy ring buffer; 0 sizes it automatically.
    pub stack_copy_buffer: u64,
    /// Bytes of the allocation ring buffer (sampled allocations' stack
    /// copies); 0 sizes it automatically.
    pub alloc_stack_copy_buffer: u64,
    /// Threads that can be off CPU and recorded at once (the pending map).
    pub offcpu_max_pending: u32,
}

/// Capacities of the per-generation maps, and of the stack-copy ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSizes {
    pub stacks: u32,
    pub sample_keys: u32,
    /// Bytes.
    pub stack_copies: u32,
    /// Bytes of the allocation ring buffer.
    pub alloc_stack_copies: u32,
}

/// Bytes of the off-CPU intervals ring buffer: 26,000 intervals, half a
/// million a second at the pipeline's reading interval.
pub(super) const OFFCPU_INTERVALS_BYTES: u32 = 1 << 20;

/// How long the automatically sized stack-copy ring buffer holds the
/// samples of every CPU, peeks running, when the daemon stops reading it
/// (four of the pipeline's reads at their usual interval; with the size
/// rounded down to a power of two, at least half that). The daemon maps
/// the ring twice over (its wrap-around), so it adds twice its size to the
/// daemon's resident memory: a longer hold costs memory on every machine.
const STACK_COPY_HOLD: Duration = Duration::from_millis(400);

/// Records the automatically sized allocation ring buffer holds (with the
/// size rounded down to a power of two, at least half): between two
/// unwinding passes (50 ms while it fills), one profile may have this many
/// allocations sampled, and running profiles share them. Like the
/// stack-copy ring, it adds twice its size to the daemon's resident memory.
const ALLOCATION_RING_RECORDS: u64 = 512;

/// Bytes one record of `pages` pages of stack takes in a ring buffer
/// (with the ring's own 8-byte header, rounded up to 8 bytes).
pub fn stack_copy_record_bytes(pages: u32) -> u64 {
    let record = size_of::<StackCopyHeader>() as u64 + u64::from(pages) * STACK_COPY_PAGE as u64;
    record.next_multiple_of(8) + 8
}

impl MapSizes {
    /// Sizes each generation for twice the samples one drain interval can
    /// bring on `cpus` CPUs (stacks: two per sample, user and kernel), so a
    /// late drain does not lose samples; explicit settings win.
    pub fn for_settings(settings: &ProgramSettings, cpus: usize) -> Self {
        // Peeks sample running threads only, so at most one per CPU at once.
        let samples_per_drain = (f64::from(settings.frequency_hz + settings.peek_frequency_hz)
            * cpus as f64
            * settings.drain_interval.as_secs_f64())
        .ceil() as u64;
        let auto = |per_sample: u64, cap: u64| {
            (samples_per_drain * per_sample * 2)
                .next_power_of_two()
                .clamp(1024, cap) as u32
        };
        let pick = |configured: u32, automatic: u32| {
            if configured == 0 {
                automatic
            } else {
                configured
            }
        };
        let record = (size_of::<StackCopyHeader>()
            + settings.stack_copy_pages as usize * STACK_COPY_PAGE) as f64;
        let records = f64::from(settings.frequency_hz + settings.peek_frequency_hz)
            * STACK_COPY_HOLD.as_secs_f64()
            * cpus as f64;
        let stack_copies = match settings.stack_copy_buffer {
            0 => {
                let wanted = ((records * record) as u64).max(1);
                // The largest power of two not above it.
                (1_u64 << (63 - wanted.leading_zeros())).clamp(1 << 20, 1 << 26)
            }
            configured => configured,
        } as u32;
        let alloc_stack_copies = match settings.alloc_stack_copy_buffer {
            0 => {
                let wanted =
                    ALLOCATION_RING_RECORDS * stack_copy_record_bytes(settings.stack_copy_pages);
                (1_u64 << (63 - wanted.leading_zeros())).clamp(1 << 20, 1 << 24)
            }
            configured => configured,
        } as u32;
        Self {
            stacks: pick(settings.max_stacks, auto(2, 1 << 16)),
            sample_keys: pick(settings.max_sample_keys, auto(1, 1 << 20)),
            stack_copies,
            alloc_stack_copies,
        }
    }
}
