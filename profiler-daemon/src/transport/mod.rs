//! How the service is reached: the gRPC API (`grpc`) and the HTTP routes
//! and web view (`http`), thin shims that turn requests into the service's
//! domain calls and its answers back into their protocol; who a plaintext
//! loopback connection comes from (`loopback`); and the listeners that
//! serve them (`listeners`: the Unix socket, TCP with TLS, HTTP, metrics).
//!
//! Owns the protocols and the sockets; it must not decide what a caller may
//! see or do (the service's `access` does) nor hold state of its own beyond
//! a connection.

pub mod grpc;
pub mod http;
pub mod listeners;
pub mod loopback;
