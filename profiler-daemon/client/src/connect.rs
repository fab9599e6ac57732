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
    "cannot connect to profilerd at {socket}: {reason}; is the daemon running? {how_to_start} \
     (or pass --socket, or set PROFILERD_SOCKET, if it serves elsewhere)"
)]
pub struct ConnectError {
    socket: PathBuf,
    reason: String,
    how_to_start: &'static str,
}

/// Where a packaged or installed daemon's systemd unit is.
const UNIT_PATHS: [&str; 3] = [
    "/etc/systemd/system/profilerd.service",
    "/usr/lib/systemd/system/profilerd.service",
    "/lib/systemd/system/profilerd.service",
];

/// How to start the daemon, as it was installed here.
fn how_to_start() -> &'static str {
    if UNIT_PATHS.iter().any(|path| Path::new(path).exists()) {
        "Start it with `systemctl start profilerd` (and `journalctl -u profilerd` tells why it \
         stopped)"
    } else {
        "Start it as root (`profilerd`, or `cargo xtask run` in a source checkout)"
    }
}

/// A client of the daemon listening on `socket`.
pub async fn connect(socket: &Path) -> Result<ProfilerClient<Channel>, ConnectError> {
    let error = |reason: String| ConnectError {
        socket: socket.to_owned(),
        reason,
        how_to_start: how_to_start(),
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
