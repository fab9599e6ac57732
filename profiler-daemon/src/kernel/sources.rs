//! What the pipeline drains, a batch at a time: the seam between the
//! kernel's aggregated maps and the pipeline. In the daemon the source is
//! the aggregated maps (counts and stacks, two generations flipped by the
//! drain: samples without user memory, and every sample when
//! `stack_copy_pages` is 0); the pipeline's tests feed it queued batches
//! instead (`pipeline::testing::QueuedSource`). Samples with user memory
//! do not come through here: they come one record each through the
//! stack-copy ring buffer (`stack_copies`), which the pipeline reads and
//! unwinds between drains and joins to each drain's batch.
//!
//! Owns the source's contract; the source itself lives beside its maps
//! (`drain`).

use super::drain::{Drainer, RawBatch};

/// Why a source could not be drained.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read the kernel's maps: {0}")]
    Maps(#[from] aya::maps::MapError),
}

/// A source of samples the pipeline drains, a batch at a time.
pub trait SampleSource: Send {
    /// What it is, for the log.
    fn name(&self) -> &'static str;

    /// Reads out every sample taken since the previous drain, as one batch
    /// whose window ends now; a sample is in exactly one batch.
    fn drain(&mut self) -> Result<RawBatch, SourceError>;
}

impl SampleSource for Drainer {
    fn name(&self) -> &'static str {
        "aggregated maps"
    }

    fn drain(&mut self) -> Result<RawBatch, SourceError> {
        Ok(Drainer::drain(self)?)
    }
}
