//! The push settings of the configuration file: the targets (`[[push]]`),
//! how often, with which labels and service names; and their validation.
//!
//! Owns the push keys, their defaults and rules; it must not open files or
//! connections (the exporter reads the secret files when it starts).

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::naming::{DEFAULT_SOURCES, NameSource};

/// The protocol of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// Grafana Pyroscope's `push.v1.PusherService/Push` (connect protocol).
    Pyroscope,
    /// OpenTelemetry's `ProfilesService/Export` over gRPC (experimental:
    /// the signal is still alpha).
    Otlp,
}

impl TargetKind {
    /// Its name in status and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pyroscope => "pyroscope",
            Self::Otlp => "otlp",
        }
    }
}

/// One `[[push]]` target.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PushTarget {
    pub kind: TargetKind,
    /// Its name in status, metrics and logs (default: the kind, with its
    /// position when there are several of one kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `http://` or `https://` base address, e.g.
    /// `https://profiles-prod-001.grafana.net` or `http://127.0.0.1:4317`.
    pub url: String,
    /// CA certificates (PEM) that sign the server's certificate; default:
    /// the system's (`/etc/ssl/certs/ca-certificates.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate and key (PEM) for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    /// Basic authentication: the user, and a file holding the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth_password_file: Option<PathBuf>,
    /// A file holding a bearer token (`Authorization: Bearer …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<PathBuf>,
    /// The tenant (`X-Scope-OrgID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Further headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// How long one request may take.
    #[serde(
        default = "default_timeout",
        deserialize_with = "crate::config_format::duration",
        serialize_with = "crate::config_format::duration_text"
    )]
    pub timeout: Duration,
    /// Most bytes of payloads queued in memory while the target is slow or
    /// down.
    #[serde(default = "default_queue_bytes")]
    pub queue_bytes: ByteSize,
    /// Most bytes of payloads kept on disk (under the state directory)
    /// when the queue is full; 0: none (they are dropped, and counted).
    #[serde(default)]
    pub spool_bytes: ByteSize,
    /// Payloads older than this are dropped (at most 1h: stores refuse
    /// older profiles).
    #[serde(
        default = "default_max_age",
        deserialize_with = "crate::config_format::duration",
        serialize_with = "crate::config_format::duration_text"
    )]
    pub max_age: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_queue_bytes() -> ByteSize {
    ByteSize::mib(32)
}

fn default_max_age() -> Duration {
    MAX_AGE
}

/// The oldest a payload may be: Pyroscope refuses profiles over 1 h old.
pub const MAX_AGE: Duration = Duration::from_secs(3600);

/// The push settings, as the configuration holds them.
#[derive(Clone, Debug, PartialEq)]
pub struct PushSettings {
    pub targets: Vec<PushTarget>,
    pub interval: Duration,
    /// Series labels added to every profile (`hostname` is added unless
    /// set here).
    pub labels: BTreeMap<String, String>,
    pub service_name_sources: Vec<NameSource>,
    pub service_name_default: String,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            interval: Duration::from_secs(15),
            labels: BTreeMap::new(),
            service_name_sources: DEFAULT_SOURCES.to_vec(),
            service_name_default: "unknown_service".to_owned(),
        }
    }
}

impl PushTarget {
    /// Its name, given or made from its kind and position.
    pub fn display_name(&self, targets: &[PushTarget], index: usize) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let kind = match self.kind {
            TargetKind::Pyroscope => "pyroscope",
            TargetKind::Otlp => "otlp",
        };
        let of_kind = targets
            .iter()
            .filter(|target| target.kind == self.kind)
            .count();
        if of_kind > 1 {
            format!("{kind}-{}", index + 1)
        } else {
            kind.to_owned()
        }
    }
}

/// Checks the push settings; the error names the key and what to do.
pub fn validate(settings: &PushSettings) -> Result<(), (&'static str, String)> {
    if settings.interval < Duration::from_secs(1) || settings.interval > Duration::from_secs(600) {
        return Err((
            "push_interval",
            "must be between 1s and 10m (15s or 30s suits Pyroscope and OTLP stores)".to_owned(),
        ));
    }
    for name in settings.labels.keys() {
        if !is_label_name(name) || name.starts_with("__") || name == "service_name" {
            return Err((
                "push_labels",
                format!(
                    "{name:?} cannot be a label name: use letters, digits and _ (not first a \
                     digit, not __…); service_name comes from push_service_name"
                ),
            ));
        }
    }
    if settings.service_name_sources.is_empty() && settings.service_name_default.is_empty() {
        return Err((
            "push_service_default",
            "must not be empty when push_service_name names no source".to_owned(),
        ));
    }
    let mut names = Vec::new();
    for (index, target) in settings.targets.iter().enumerate() {
        let name = target.display_name(&settings.targets, index);
        if names.contains(&name) {
            return Err((
                "push",
                format!("two targets are named {name:?}; name them apart"),
            ));
        }
        let bad = |message: String| Err(("push", format!("target {name:?}: {message}")));
        let Some(rest) = target
            .url
            .strip_prefix("https://")
            .or_else(|| target.url.strip_prefix("http://"))
        else {
            return bad(format!(
                "url {:?} must start with http:// or https://",
                target.url
            ));
        };
        if rest.is_empty() || target.url.parse::<hyper::Uri>().is_err() {
            return bad(format!("url {:?} is not a valid address", target.url));
        }
        if target.client_cert.is_some() != target.client_key.is_some() {
            return bad("client_cert and client_key go together".to_owned());
        }
        if target.basic_auth_user.is_some() != target.basic_auth_password_file.is_some() {
            return bad("basic_auth_user and basic_auth_password_file go together".to_owned());
        }
        if target.basic_auth_user.is_some() && target.bearer_token_file.is_some() {
            return bad("use basic authentication or a bearer token, not both".to_owned());
        }
        if target.timeout.is_zero() || target.timeout > Duration::from_secs(300) {
            return bad("timeout must be between 1ms and 5m".to_owned());
        }
        if target.max_age.is_zero() || target.max_age > MAX_AGE {
            return bad("max_age must be more than 0 and at most 1h".to_owned());
        }
        if target.queue_bytes.as_u64() < 16 * 1024 {
            return bad("queue_bytes must be at least 16KiB".to_owned());
        }
        for header in target.headers.keys() {
            if hyper::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return bad(format!("{header:?} is not a valid header name"));
            }
        }
        names.push(name);
    }
    Ok(())
}

fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}
