//! Connecting to the daemon's gRPC API over its Unix socket, for
//! profilerctl and the tests. Owns nothing but the connection recipe.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::v1::profiler_client::ProfilerClient;

/// The socket the daemon serves on by default.
pub const DEFAULT_SOCKET: &str = "/run/profilerd/profilerd.sock";

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot connect to profilerd at {socket}: {reason}; is the daemon running? (start it \
     with `cargo xtask run`, or pass --socket if it serves elsewhere)"
)]
pub struct ConnectError {
    socket: PathBuf,
    reason: String,
}

/// A client of the daemon listening on `socket`.
pub async fn connect(socket: &Path) -> Result<ProfilerClient<Channel>, ConnectError> {
    let error = |reason: String| ConnectError {
        socket: socket.to_owned(),
        reason,
    };
    // Fail early with the socket's own error (missing, permission denied)
    // rather than a generic transport error.
    tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|err| error(err.to_string()))?;
    let path = socket.to_owned();
    // The URI is required by the HTTP/2 layer but unused by the connector.
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|err| error(err.to_string()))?;
    Ok(ProfilerClient::new(channel).max_decoding_message_size(256 * 1024 * 1024))
}
