//! Where the exporters plug in: every symbolized batch (one per drain, the
//! CPU samples of the whole machine) is handed to each export sink after
//! the peeks have taken theirs and before it is stored. A sink that pushes
//! to a remote store (Pyroscope, an OpenTelemetry collector) keeps its own
//! window and sends it on its own schedule, off the pipeline's thread.
//!
//! Owns the sink's contract only; it must not export anything itself.

use crate::symbols::symbolizer::SymbolizedBatch;

/// Why a sink could not take a batch (logged; the pipeline goes on).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// A consumer of every symbolized batch.
pub trait ExportSink: Send {
    /// What it is, for the log.
    fn name(&self) -> &str;

    /// Takes a batch. It runs on the symbolizer's thread, between drains:
    /// it must return quickly (copy what it needs and hand it on).
    fn export(&mut self, batch: &SymbolizedBatch) -> Result<(), SinkError>;
}
