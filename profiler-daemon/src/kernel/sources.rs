//! Where the pipeline drains samples from: the seam between the kernel's
//! sample sources and the pipeline. Today the one source is the aggregated
//! maps (counts and stacks, two generations flipped by the drain); a
//! per-sample ring buffer (registers and the top of the user stack, for
//! unwinding in the daemon) is the next.
//!
//! Owns the source's contract; the sources themselves live beside their
//! maps (`drain`).

use super::drain::{Drainer, RawBatch};

/// Which source the sampling programs write to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SampleSourceKind {
    /// Samples aggregated in the kernel, one counts entry per distinct
    /// thread and pair of stacks (the stacks in a map of their own).
    #[default]
    AggregatedMaps,
}

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
