//! The API's protobuf types (the client crate's) and the gRPC server
//! generated on them here (see build.rs), with its codec (`codec`); pprof's
//! (the report crate's).
//!
//! The generated code names only this module's items, so that the lint,
//! which cannot read it, misses no edge between layers.

pub mod codec;

/// profilerd's gRPC API, version 1: the client crate's messages, and the
/// `Profiler` server.
#[expect(
    clippy::allow_attributes_without_reason,
    reason = "tonic's generated server allows lints without saying why"
)]
pub mod v1 {
    pub use profilerd_client::v1::*;

    tonic::include_proto!("profilerd.v1");
}

/// What Grafana Pyroscope's push API takes (messages only; sent over the
/// connect protocol, see `export::pyroscope`).
pub mod pyroscope {
    pub mod push {
        pub mod v1 {
            tonic::include_proto!("push.v1");
        }
    }
    pub mod types {
        pub mod v1 {
            tonic::include_proto!("types.v1");
        }
    }
}

/// The pprof profile format: the report crate's messages, which the
/// reports encode (the client crate generates its own for its users).
pub use profilerd_report::pprof;

/// The encoded descriptors of every .proto file, for server reflection.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
