//! Code generated from the .proto files in `proto/` (see build.rs).

/// profilerd's gRPC API, version 1.
pub mod v1 {
    tonic::include_proto!("profilerd.v1");
}

/// The pprof profile format.
pub mod pprof {
    tonic::include_proto!("perftools.profiles");
}

/// The encoded descriptors of every .proto file, for server reflection.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
