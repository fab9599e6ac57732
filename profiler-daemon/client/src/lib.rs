//! profilerd's gRPC API for its clients: the message types and the client
//! generated from its .proto files, and the connection to the daemon's
//! socket. profilerctl, the tests and third-party Rust clients use it
//! without compiling the daemon (aya, blazesym, the kernel side).

mod connect;

pub use connect::{ConnectError, DEFAULT_SOCKET, connect};

/// profilerd's gRPC API, version 1: messages and the `Profiler` client.
#[expect(
    clippy::allow_attributes_without_reason,
    reason = "tonic's generated client allows lints without saying why"
)]
pub mod v1 {
    tonic::include_proto!("profilerd.v1");
}

/// The pprof profile format (`perftools.profiles`).
pub mod pprof {
    tonic::include_proto!("perftools.profiles");
}
