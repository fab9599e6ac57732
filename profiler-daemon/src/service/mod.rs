//! The service the daemon offers, whatever the protocol: who may ask and
//! what they may see (`access`), open sessions (`sessions`), stopping
//! (`stopping`), self-metrics (`metrics`), and the listeners (`serving`)
//! with the gRPC API (`grpc`) on them.
//!
//! This layer answers requests from the store, the peeker and the
//! pipeline's window cuts; it must not touch the kernel's maps itself.

pub mod access;
pub mod grpc;
pub mod metrics;
pub mod serving;
pub mod sessions;
pub mod stopping;
