//! The optional TCP listener: mutual TLS lets in clients with a certificate
//! of the configured CA and no one else; plaintext is refused off loopback.

use std::{path::Path, process::Command, time::Duration};

use profilerd_client::v1::{self, profiler_client::ProfilerClient};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::support::Daemon;

/// A certificate authority of the test's own.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("a CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a CA certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate and key for `names`, signed by this authority.
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let params = CertificateParams::new(names).expect("parameters");
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// The files of a mutual-TLS listener in a temporary directory: a server
/// certificate of `servers` for localhost and 127.0.0.1, its key, and
/// `clients`' CA certificate; and other files the test writes beside them.
pub struct TlsFiles {
    dir: tempfile::TempDir,
    cert: String,
    key: String,
    client_ca: String,
}

impl TlsFiles {
    pub fn new(servers: &Authority, clients: &Authority) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (cert, key) = servers.issue(&["localhost", "127.0.0.1"]);
        let mut files = Self {
            dir,
            cert: String::new(),
            key: String::new(),
            client_ca: String::new(),
        };
        files.cert = files.write("server.pem", &cert);
        files.key = files.write("server.key", &key);
        files.client_ca = files.write("clients.pem", &clients.pem());
        files
    }

    /// Writes `text` into the directory as `name`; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    }

    /// The daemon's flags that take these files.
    pub fn flags(&self) -> [&str; 6] {
        [
            "--tls-cert",
            &self.cert,
            "--tls-key",
            &self.key,
            "--tls-client-ca",
            &self.client_ca,
        ]
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

async fn status_over_tls(
    port: u16,
    ca: &str,
    identity: Option<(&str, &str)>,
) -> Result<v1::StatusReply, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .expect("a URI")
        .tls_config(tls)
        .map_err(|err| err.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|err| format!("connect: {err:?}"))?;
    ProfilerClient::new(channel)
        .get_status(v1::GetStatusRequest::default())
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| format!("request: {status:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_lets_in_only_clients_of_the_ca() {
    let clients = Authority::new("profilerd test clients");
    let servers = Authority::new("profilerd test servers");
    let tls = TlsFiles::new(&servers, &clients);
    let (client_cert, client_key) = clients.issue(&["dashboard"]);
    let rogue = Authority::new("someone else");
    let (rogue_cert, rogue_key) = rogue.issue(&["intruder"]);

    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let daemon =
        Daemon::start_with(&[&["--tcp-listen", &address][..], &tls.flags()].concat()).await;

    let status = status_over_tls(port, &servers.pem(), Some((&client_cert, &client_key)))
        .await
        .unwrap_or_else(|err| panic!("a client of the CA is let in: {err}\n{}", daemon.log()));
    assert!(!status.cpus.is_empty());

    for (who, identity) in [
        ("a client without a certificate", None),
        (
            "a client of another CA",
            Some((rogue_cert.as_str(), rogue_key.as_str())),
        ),
    ] {
        let refused = status_over_tls(port, &servers.pem(), identity).await;
        assert!(refused.is_err(), "{who} was let in");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plaintext_is_refused_off_loopback_and_allowed_on_it_when_asked() {
    crate::support::require_root();
    let port = free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_profilerd"))
        .args(["--socket", "/nonexistent/never.sock", "--tcp-listen"])
        .arg(format!("0.0.0.0:{port}"))
        .args(["--tcp-plaintext-loopback", "true"])
        .output()
        .expect("profilerd runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tcp_listen") && stderr.contains("without authentication"),
        "{stderr}"
    );
    assert!(!Path::new("/nonexistent/never.sock").exists());

    let daemon = Daemon::start_with(&[
        "--tcp-listen",
        &format!("127.0.0.1:{port}"),
        "--tcp-plaintext-loopback",
        "true",
    ])
    .await;
    let mut client = ProfilerClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|err| panic!("plaintext loopback connects: {err}\n{}", daemon.log()));
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus answers over loopback");
    assert!(daemon.log().contains("serving TCP without TLS"));
}
