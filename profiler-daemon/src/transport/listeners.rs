//! Where the API is served: the Unix socket (always) and the optional TCP
//! listener with mutual TLS, each with gRPC health checking and server
//! reflection beside the Profiler service, until shutdown.
//!
//! Owns the listeners and the socket file; it must not decide who may see
//! what (see `access`), nor answer requests (see `grpc` and `http`).

use std::{
    future::Future,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result, bail};
use tokio::{net::UnixListener, sync::watch};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{
    service::interceptor::InterceptedService,
    transport::{Certificate, Identity, Server, ServerTlsConfig},
};
use tracing::{info, warn};

use crate::{
    proto,
    service::{Service, access::TrustedRemote, metrics::Exposition, stopping::Stopping},
    transport::grpc::{GrpcApi, ProfilerServer},
};

/// The largest request accepted: requests are small (the longest fields are
/// bounded far below this, see the API's conversions), so a bigger one is
/// refused before it is decoded.
const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// The Profiler service as served: with its request size bound.
fn profiler_server(service: &Arc<Service>) -> ProfilerServer<GrpcApi> {
    ProfilerServer::new(GrpcApi::new(service.clone())).max_decoding_message_size(MAX_REQUEST_BYTES)
}

/// The listeners beside the Unix socket, each optional.
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    /// gRPC over TCP.
    pub tcp: Option<TcpListener>,
    /// The self-metrics for Prometheus.
    pub metrics: Option<SocketAddr>,
    /// Profiles over HTTP.
    pub http: Option<crate::transport::http::HttpListener>,
}

/// The optional TCP listener.
#[derive(Clone, Debug)]
pub struct TcpListener {
    pub address: SocketAddr,
    /// `None`: plaintext (validated to be on a loopback address).
    pub tls: Option<TlsFiles>,
}

/// PEM files of the TCP listener's mutual TLS.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// The socket file, removed when the daemon stops (or fails to start).
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Binds the API socket, replacing a stale socket file but never a live
/// daemon's.
pub fn bind_socket(socket: &Path) -> Result<(UnixListener, SocketFile)> {
    if let Some(dir) = socket.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the socket's directory {}", dir.display()))?;
    }
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            bail!(
                "another profilerd is already serving on {}; stop it first, or pass --socket",
                socket.display()
            );
        }
        info!(
            socket = %socket.display(),
            "replacing the stale socket of an instance that did not stop cleanly"
        );
        std::fs::remove_file(socket)
            .with_context(|| format!("cannot remove the stale socket {}", socket.display()))?;
    }
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("cannot listen on {}", socket.display()))?;
    let file = SocketFile(socket.to_owned());
    // Anyone may connect: each request is authorized by the caller's
    // credentials (see `access`).
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot set the permissions of {}", socket.display()))?;
    Ok((listener, file))
}

/// Serves `service` on the socket (and on TCP when configured) until
/// `shutdown` resolves.
pub async fn serve(
    service: Arc<Service>,
    socket: UnixListener,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let Listeners { tcp, metrics, http } = listeners;
    let (stop, stopped) = watch::channel(false);
    let wait_for_stop = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let metrics_server = match metrics {
        Some(address) => {
            Some(serve_metrics(address, service.clone(), wait_for_stop(stopped.clone())).await?)
        }
        None => None,
    };

    let http_server = match http {
        Some(http) => Some(
            crate::transport::http::serve_http(
                http,
                service.clone(),
                wait_for_stop(stopped.clone()),
            )
            .await?,
        ),
        None => None,
    };

    let tcp_server = match tcp {
        Some(tcp) => {
            let mut server = Server::builder().layer(service.rpc_counts().layer());
            if let Some(tls) = &tcp.tls {
                server = server
                    .tls_config(tls_config(tls)?)
                    .context("cannot set up TLS for the TCP listener")?;
            } else {
                warn!(
                    address = %tcp.address,
                    "serving TCP without TLS (tcp_plaintext_loopback): each local user is \
                     answered as on the Unix socket, by who opened the connection"
                );
            }
            let listener = tokio::net::TcpListener::bind(tcp.address)
                .await
                .with_context(|| format!("cannot listen on TCP {}", tcp.address))?;
            info!(address = %tcp.address, mutual_tls = tcp.tls.is_some(), "serving on TCP");
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let profiler = InterceptedService::new(
                profiler_server(&service),
                Gate {
                    stopping: service.stopping(),
                    // Plaintext: the local user who connected (see
                    // `GrpcApi::asker`).
                    trusted_remote: tcp.tls.is_some(),
                },
            );
            let routes = with_discovery(server.add_service(profiler)).await?;
            Some(tokio::spawn(routes.serve_with_incoming_shutdown(
                incoming,
                wait_for_stop(stopped.clone()),
            )))
        }
        None => None,
    };

    let unix = with_discovery(
        Server::builder()
            .layer(service.rpc_counts().layer())
            .add_service(InterceptedService::new(
                profiler_server(&service),
                Gate {
                    stopping: service.stopping(),
                    trusted_remote: false,
                },
            )),
    )
    .await?;
    let mut unix_server = tokio::spawn(
        unix.serve_with_incoming_shutdown(UnixListenerStream::new(socket), wait_for_stop(stopped)),
    );
    tokio::select! {
        () = shutdown => {}
        // The server ends by itself only when it fails.
        served = &mut unix_server => {
            return served
                .context("the gRPC server task failed")?
                .context("the gRPC server on the socket failed");
        }
    }
    let discarded = service.stop();
    if discarded > 0 {
        warn!(
            sessions = discarded,
            "discarding the open profiling sessions; StopProfile will not find them"
        );
    }
    let _ = stop.send(true);
    let servers = async {
        let served = unix_server.await.context("the gRPC server task failed")?;
        served.context("the gRPC server on the socket failed")?;
        if let Some(tcp_server) = tcp_server {
            tcp_server
                .await
                .context("the gRPC server task failed")?
                .context("the gRPC server on TCP failed")?;
        }
        if let Some(http_server) = http_server {
            http_server.await.context("the HTTP server task failed")?;
        }
        if let Some(metrics_server) = metrics_server {
            metrics_server
                .await
                .context("the metrics server task failed")?
                .context("the metrics listener failed")?;
        }
        anyhow::Ok(())
    };
    match tokio::time::timeout(STOP_GRACE, servers).await {
        Ok(served) => served,
        Err(_) => {
            warn!(
                grace = ?STOP_GRACE,
                "requests were still running after the grace period; closing their connections"
            );
            Ok(())
        }
    }
}

/// How long requests under way may take to end after a stop was asked
/// for, so that the daemon exits within systemd's usual patience.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks every request before the service sees it: refuses new ones once
/// the daemon is stopping, and marks the ones that came over TCP past
/// mutual TLS as trusted remote callers.
#[derive(Clone)]
struct Gate {
    stopping: Stopping,
    trusted_remote: bool,
}

impl tonic::service::Interceptor for Gate {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if self.stopping.is_stopping() {
            return Err(tonic::Status::unavailable(
                crate::service::stopping::MESSAGE,
            ));
        }
        if self.trusted_remote {
            request.extensions_mut().insert(TrustedRemote);
        }
        Ok(request)
    }
}

/// Serves the self-metrics at http://`address`/metrics until `stopped`.
async fn serve_metrics(
    address: SocketAddr,
    service: Arc<Service>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| {
            format!(
                "cannot listen for metrics on {address} (metrics_listen); choose a free address"
            )
        })?;
    info!(%address, "serving metrics at /metrics");
    // OpenMetrics only when the scraper asks for it, else Prometheus' text
    // format 0.0.4.
    let metrics = axum::routing::get(move |headers: axum::http::HeaderMap| {
        let format = Exposition::negotiate(
            headers
                .get_all(axum::http::header::ACCEPT)
                .iter()
                .filter_map(|value| value.to_str().ok()),
        );
        let text = service.metrics_as(format);
        async move {
            (
                [(axum::http::header::CONTENT_TYPE, format.content_type())],
                text,
            )
        }
    });
    let app = axum::Router::new().route("/metrics", metrics);
    Ok(tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .into_future(),
    ))
}

/// Adds health checking and server reflection (v1 and v1alpha).
async fn with_discovery<L>(
    router: tonic::transport::server::Router<L>,
) -> Result<tonic::transport::server::Router<L>> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ProfilerServer<GrpcApi>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::DESCRIPTORS)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok(router
        .add_service(health_service)
        .add_service(
            reflection()
                .build_v1()
                .context("cannot build the gRPC reflection service")?,
        )
        .add_service(
            reflection()
                .build_v1alpha()
                .context("cannot build the gRPC reflection service")?,
        ))
}

fn tls_config(files: &TlsFiles) -> Result<ServerTlsConfig> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
    };
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(
            read(&files.cert, "TLS certificate (tls_cert)")?,
            read(&files.key, "TLS key (tls_key)")?,
        ))
        .client_ca_root(Certificate::from_pem(read(
            &files.client_ca,
            "client CA certificate (tls_client_ca)",
        )?)))
}
