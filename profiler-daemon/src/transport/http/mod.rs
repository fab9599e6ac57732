//! The HTTP listener (`http_listen`, off by default): profiles pulled the
//! way existing tools scrape them (see `routes`) and the web view.
//!
//! Who may ask: over TLS, a client that presents a certificate signed by
//! `tls_client_ca` is a trusted remote caller and sees everything, as on
//! the gRPC TCP listener; one without gets 403 with the reason (rather
//! than a failed handshake it cannot read). Plaintext is served only on a
//! loopback address when `http_plaintext_loopback` allows it, and each of
//! its clients is the local user that opened the connection (see
//! `loopback`), under the Unix socket's rules. Every request then passes
//! the `guard` (Host, cross-site requests, security headers).
//!
//! Owns the socket, TLS and each connection's admission; it must not answer
//! requests (see `routes`).

mod guard;
mod hosts;
#[cfg(test)]
mod names_mirror;
mod page;
mod params;
mod routes;
mod source;
mod view;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        self, RootCertStore, ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
        server::WebPkiClientVerifier,
    },
};
use tracing::{debug, info, warn};

use crate::{
    service::{
        Service,
        access::{Asker, Caller, CallerKey},
    },
    source_files::SourceFiles,
    transport::listeners::TlsFiles,
};
pub use hosts::AllowedHost;
pub use routes::Admission;

/// The HTTP listener's settings.
#[derive(Clone, Debug)]
pub struct HttpListener {
    pub address: SocketAddr,
    /// `None`: plaintext (validated to be on a loopback address).
    pub tls: Option<TlsFiles>,
    /// Host names answered beside the listener's own (`http_allowed_hosts`).
    pub allowed_hosts: Vec<AllowedHost>,
    /// The source files the web view's heatmap may show (`http_source_dirs`).
    pub sources: SourceFiles,
}

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a TLS client without a certificate is refused.
const NO_CERTIFICATE: &str = "forbidden: this listener answers only clients that present a \
     certificate signed by its tls_client_ca (e.g. curl --cert client.pem --key client-key.pem)";

/// Binds the listener and serves it until `stopped`.
pub async fn serve_http(
    listener: HttpListener,
    service: Arc<Service>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>> {
    let acceptor = match &listener.tls {
        Some(files) => Some(TlsAcceptor::from(Arc::new(tls_config(files)?))),
        None => {
            info!(
                address = %listener.address,
                "serving HTTP without TLS (http_plaintext_loopback): each local client is \
                 answered as the user that opened its connection, as on the Unix socket"
            );
            None
        }
    };
    let socket = tokio::net::TcpListener::bind(listener.address)
        .await
        .with_context(|| {
            format!(
                "cannot listen for HTTP on {} (http_listen); choose a free address",
                listener.address
            )
        })?;
    info!(address = %listener.address, tls = acceptor.is_some(), "serving HTTP");
    let router = routes::router(service.clone(), listener.sources);
    let allowed_hosts: Arc<[AllowedHost]> = listener.allowed_hosts.into();
    Ok(tokio::spawn(async move {
        tokio::pin!(stopped);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut stopped => return,
                accepted = socket.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        warn!("cannot accept an HTTP connection: {err}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let local = match stream.local_addr() {
                Ok(local) => local,
                Err(err) => {
                    debug!(%peer, "an HTTP connection has no local address: {err}");
                    continue;
                }
            };
            let guard = guard::Guard {
                local,
                tls: acceptor.is_some(),
                allowed: allowed_hosts.clone(),
            };
            let (router, acceptor, service) = (router.clone(), acceptor.clone(), service.clone());
            tokio::spawn(async move {
                match acceptor {
                    None => {
                        let admission = local_user(&service, peer, local).await;
                        serve_connection(stream, router, guard, admission, peer).await;
                    }
                    Some(acceptor) => {
                        let handshake =
                            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                        let stream = match handshake {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(err)) => {
                                debug!(%peer, "TLS handshake failed: {err}");
                                return;
                            }
                            Err(_) => {
                                debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                        // The verifier checked any certificate presented.
                        let admission = match stream.get_ref().1.peer_certificates() {
                            Some(certificates) if !certificates.is_empty() => Ok(Asker {
                                caller: Caller::Root,
                                key: CallerKey::Remote,
                            }),
                            _ => Err(NO_CERTIFICATE.to_owned()),
                        };
                        serve_connection(stream, router, guard, admission, peer).await;
                    }
                }
            });
        }
    }))
}

/// The asker of a plaintext loopback connection from `peer` to `local`:
/// the user that opened it, under the Unix socket's rules (SO_PEERCRED's
/// credentials there, the kernel's record of the socket here); 403's
/// reason when it cannot be known.
async fn local_user(
    service: &Service,
    peer: SocketAddr,
    local: SocketAddr,
) -> Result<Asker, String> {
    let credentials =
        tokio::task::spawn_blocking(move || crate::transport::loopback::credentials(peer, local))
            .await
            .map_err(|err| {
                format!("internal error: finding who opened the connection failed: {err}")
            })?;
    let credentials = credentials.inspect_err(|reason| debug!(%peer, "{reason}"))?;
    service
        .access()
        .asker(Some(credentials))
        .map_err(|err| err.to_string())
}

async fn serve_connection<S>(
    stream: S,
    router: axum::Router,
    guard: guard::Guard,
    admission: Result<Asker, String>,
    peer: SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let routes = router
        .layer(axum::Extension(Admission(admission)))
        .layer(axum::middleware::from_fn_with_state(guard, guard::guard));
    if let Err(err) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(routes))
        .await
    {
        debug!(%peer, "HTTP connection ended: {err}");
    }
}

/// The server's certificate and key, and the CA whose client certificates
/// are trusted (a client without one is let through the handshake, to be
/// told why it is refused).
fn tls_config(files: &TlsFiles) -> Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificates = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| {
            format!(
                "cannot read the TLS certificate (tls_cert) {}",
                files.cert.display()
            )
        })?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("cannot read the TLS key (tls_key) {}", files.key.display()))?;
    let mut roots = RootCertStore::empty();
    let client_ca = CertificateDer::pem_file_iter(&files.client_ca)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| {
            format!(
                "cannot read the client CA certificate (tls_client_ca) {}",
                files.client_ca.display()
            )
        })?;
    for certificate in client_ca {
        roots
            .add(certificate)
            .context("the client CA certificate (tls_client_ca) is not a valid CA certificate")?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .context("cannot use the client CA certificate (tls_client_ca)")?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certificates, key)
        .context("the TLS certificate (tls_cert) and key (tls_key) do not go together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
