//! What every push target connects with: TLS (the server's CAs, an
//! optional client certificate), the authentication and extra headers, read
//! once from the target's settings and files; and a plain HTTP/1.1 POST for
//! the targets that speak HTTP.
//!
//! Owns the connections; it must not encode payloads nor decide retries
//! beyond saying which errors may be retried.

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, Result, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::{
    Request, StatusCode, Uri,
    body::Bytes,
    header::{HeaderName, HeaderValue},
};
use hyper_util::rt::TokioIo;
use tokio_rustls::{
    TlsConnector,
    rustls::{
        self, ClientConfig, RootCertStore,
        pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject as _},
    },
};

use super::{delivery::SendError, settings::PushTarget};

/// The system's CA bundle on Debian and its derivatives.
pub const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A target's address, TLS and headers, ready to send with.
#[derive(Clone)]
pub struct Connection {
    pub uri: Uri,
    pub tls: Option<Arc<ClientConfig>>,
    /// Authentication, tenant and extra headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
}

impl Connection {
    /// Reads the target's files (CAs, client certificate, secrets); the
    /// error names the file and the key.
    pub fn of(target: &PushTarget) -> Result<Self> {
        let uri: Uri = target
            .url
            .parse()
            .with_context(|| format!("url {:?} is not a valid address", target.url))?;
        let tls = match uri.scheme_str() {
            Some("https") => Some(Arc::new(client_tls(target)?)),
            _ => None,
        };
        let mut headers = Vec::new();
        let read_secret = |path: &std::path::Path, key: &str| -> Result<String> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {key} {}", path.display()))?;
            Ok(text.trim().to_owned())
        };
        if let (Some(user), Some(file)) =
            (&target.basic_auth_user, &target.basic_auth_password_file)
        {
            use base64::Engine as _;
            let password = read_secret(file, "basic_auth_password_file")?;
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            headers.push((
                hyper::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {encoded}"))
                    .context("the basic authentication is not a valid header")?,
            ));
        }
        if let Some(file) = &target.bearer_token_file {
            let token = read_secret(file, "bearer_token_file")?;
            headers.push((
                hyper::header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {token}")).with_context(|| {
                    format!(
                        "the token in {} is not a valid header value",
                        file.display()
                    )
                })?,
            ));
        }
        if let Some(tenant) = &target.tenant {
            headers.push((
                HeaderName::from_static("x-scope-orgid"),
                HeaderValue::from_str(tenant).context("tenant is not a valid header value")?,
            ));
        }
        for (name, value) in &target.headers {
            headers.push((
                HeaderName::from_bytes(name.as_bytes())
                    .with_context(|| format!("{name:?} is not a valid header name"))?,
                HeaderValue::from_str(value)
                    .with_context(|| format!("the value of header {name:?} is not valid"))?,
            ));
        }
        Ok(Self {
            uri,
            tls,
            headers,
            timeout: target.timeout,
        })
    }

    /// POSTs `body` to `path` under the target's address, over HTTP/1.1.
    pub async fn post(
        &self,
        path: &str,
        content_type: &'static str,
        extra: &[(&'static str, &'static str)],
        body: Vec<u8>,
    ) -> Result<(), SendError> {
        match tokio::time::timeout(self.timeout, self.post_now(path, content_type, extra, body))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(SendError::Retryable {
                cause: "timeout".into(),
                message: format!("no answer within {:?} (the target's timeout)", self.timeout),
            }),
        }
    }

    async fn post_now(
        &self,
        path: &str,
        content_type: &'static str,
        extra: &[(&'static str, &'static str)],
        body: Vec<u8>,
    ) -> Result<(), SendError> {
        let connect_error = |message: String| SendError::Retryable {
            cause: "connect".into(),
            message,
        };
        let host = self.uri.host().unwrap_or_default().to_owned();
        let https = self.tls.is_some();
        let port = self.uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|err| connect_error(format!("cannot connect to {host}:{port}: {err}")))?;
        let base = self.uri.path().trim_end_matches('/');
        let mut request = Request::post(format!("{base}{path}"))
            .header(
                hyper::header::HOST,
                self.uri.authority().map_or(host.clone(), |a| a.to_string()),
            )
            .header(hyper::header::CONTENT_TYPE, content_type)
            .header(
                hyper::header::USER_AGENT,
                concat!("profilerd/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let request =
            request
                .body(Full::new(Bytes::from(body)))
                .map_err(|err| SendError::Fatal {
                    cause: "request".into(),
                    message: format!("cannot make the request: {err}"),
                })?;
        match &self.tls {
            None => send(TokioIo::new(tcp), request).await,
            Some(tls) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|err| connect_error(format!("{host} is not a server name: {err}")))?;
                let stream = TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|err| SendError::Retryable {
                        cause: "tls".into(),
                        message: format!("TLS with {host}:{port} failed: {err}"),
                    })?;
                send(TokioIo::new(stream), request).await
            }
        }
    }
}

async fn send<S>(io: TokioIo<S>, request: Request<Full<Bytes>>) -> Result<(), SendError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|err| SendError::Retryable {
                cause: "connect".into(),
                message: format!("HTTP handshake failed: {err}"),
            })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|err| SendError::Retryable {
            cause: "connection".into(),
            message: format!("the request failed: {err}"),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map(|body| {
            String::from_utf8_lossy(&body.to_bytes())
                .chars()
                .take(300)
                .collect::<String>()
        })
        .unwrap_or_default();
    Err(http_error(status, body.trim()))
}

/// Retryable: 429 and 5xx; anything else is the payload's fault.
pub fn http_error(status: StatusCode, body: &str) -> SendError {
    let cause = format!("http_{}", status.as_u16());
    let message = format!("HTTP {status}: {body}");
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        SendError::Retryable { cause, message }
    } else {
        SendError::Fatal { cause, message }
    }
}

/// TLS to the target: its CAs (or the system's), its client certificate.
fn client_tls(target: &PushTarget) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ca_file = target
        .ca_file
        .clone()
        .unwrap_or_else(|| SYSTEM_CA_FILE.into());
    let mut roots = RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(&ca_file)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| {
            format!(
                "cannot read the CA certificates (ca_file) {}",
                ca_file.display()
            )
        })?;
    let (added, _) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        bail!(
            "{} holds no usable CA certificate (ca_file)",
            ca_file.display()
        );
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_root_certificates(roots);
    let mut config = match (&target.client_cert, &target.client_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .with_context(|| format!("cannot read client_cert {}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("cannot read client_key {}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .context("client_cert and client_key do not go together")?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_429_and_server_errors_are_retried() {
        for (status, retryable) in [
            (429, true),
            (503, true),
            (500, true),
            (400, false),
            (401, false),
            (404, false),
        ] {
            let error = http_error(StatusCode::from_u16(status).unwrap(), "");
            assert_eq!(
                matches!(error, SendError::Retryable { .. }),
                retryable,
                "{status}"
            );
        }
    }
}
