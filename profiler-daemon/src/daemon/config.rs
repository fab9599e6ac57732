//! The daemon's configuration: a TOML file (`--config`) whose every key can
//! be overridden by a flag of the same name, validated once at start-up.
//!
//! This module owns the defaults and the validation rules; it must not act
//! on the configuration (no file system, no BPF) beyond reading the file.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use bytesize::ByteSize;
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

use crate::{
    export::settings::PushSettings,
    peek::{Allowlist, PeekSettings},
    store::StoreSettings,
};

/// Lowest and highest accepted sampling frequencies.
pub const FREQUENCY_RANGE_HZ: std::ops::RangeInclusive<u32> = 1..=1000;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid configuration file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
    /// Members of this group (and root) may profile every process; other
    /// users only their own.
    pub admin_group: String,
    /// Address of the optional TCP listener for remote dashboards (off when
    /// unset). It needs mutual TLS (`tls_cert`, `tls_key`, `tls_client_ca`)
    /// unless `tcp_plaintext_loopback` allows plaintext on a loopback address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_listen: Option<std::net::SocketAddr>,
    /// The server's certificate chain and private key (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// The CA whose client certificates are let in (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve TCP without TLS, allowed only on a loopback address.
    pub tcp_plaintext_loopback: bool,
    /// Address of the optional HTTP listener that serves the self-metrics
    /// to Prometheus at /metrics (off when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Address of the optional HTTP listener that serves profiles the way
    /// Go's net/http/pprof does (off when unset). Like `tcp_listen`, it
    /// needs TLS with client certificates (the same `tls_*` files) unless
    /// `http_plaintext_loopback` allows plaintext on a loopback address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_listen: Option<std::net::SocketAddr>,
    /// Serve HTTP without TLS, allowed only on a loopback address.
    pub http_plaintext_loopback: bool,
    /// Samples per second on each CPU.
    pub frequency_hz: u32,
    /// How often the kernel maps are drained into the store.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub drain_interval: Duration,
    /// How long aggregated samples are kept in memory.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub retention: Duration,
    /// The time span of one stored bucket once its time is past: past
    /// windows are reported in whole buckets.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub resolution: Duration,
    /// Hard ceiling on the memory the profile store may hold; the oldest
    /// samples are dropped (and counted) to stay under it.
    pub memory_limit: ByteSize,
    /// Longest `Profile` request or session accepted; `None`: the
    /// retention (see [`Config::max_profile_duration`]).
    #[serde(
        deserialize_with = "optional_duration",
        serialize_with = "optional_duration_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_profile_duration: Option<Duration>,
    /// Most profiling sessions open at once, and per caller.
    pub max_sessions: u32,
    pub max_sessions_per_caller: u32,
    /// Most streams (WatchPeeks) one caller may hold open.
    pub max_streams_per_caller: u32,
    /// Largest report a request may return.
    pub max_response_bytes: ByteSize,
    /// Per-generation capacity of the kernel's stacks map; 0 sizes it from
    /// the frequency, the CPU count and the drain interval.
    pub max_stacks: u32,
    /// Per-generation capacity of the kernel's counts map; 0 sizes it
    /// automatically like `max_stacks`.
    pub max_sample_keys: u32,
    /// Bytes of user stack each sample copies for unwinding in the daemon
    /// (whole pages, from the page holding the stack pointer; at most
    /// 64 KiB); 0 walks frame pointers in the kernel instead, which loses
    /// the callers of leaf functions and of code built without them.
    pub stack_copy: ByteSize,
    /// Size of the ring buffer the stack copies go through; 0 sizes it from
    /// the frequency, the CPU count and `stack_copy`.
    pub stack_copy_buffer: ByteSize,
    /// Most unwind information (`.eh_frame`, `.debug_frame`) held; above
    /// it, that of the binaries sampled least recently is let go of (and
    /// read again when needed). 0: no limit.
    pub unwind_info_limit: ByteSize,
    /// Off-CPU time recorded always, for the history: the probability
    /// that any wait of any process is recorded (its time is scaled back
    /// up in reports), 0 (the default) for none. Requests for off-CPU or
    /// wall-clock time record their processes in full whatever this is.
    pub offcpu: f64,
    /// Threads that can be off CPU and recorded at once (the kernel's
    /// pending map); more are counted as lost (`offcpu_pending_full`).
    pub offcpu_max_pending: u32,
    /// Log filter, in `tracing_subscriber::EnvFilter` syntax
    /// (e.g. `info`, `profilerd=debug`).
    pub log_level: String,
    /// The signal whose sending to a process starts a peek at it: a name
    /// (`SIGUSR1`, `USR2`), a number, or `off`.
    pub peek_signal: String,
    /// How long a peek samples its process.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub peek_duration: Duration,
    /// Samples per second of each peeked thread's CPU time.
    pub peek_frequency_hz: u32,
    /// Peek only processes with one of these command names (empty: any).
    pub peek_allow_commands: Vec<String>,
    /// Peek only processes of one of these user ids (empty: any).
    pub peek_allow_uids: Vec<u32>,
    /// Peek only processes in one of these cgroups or below (paths as in
    /// `/proc/PID/cgroup`, e.g. `/system.slice`; empty: any).
    pub peek_allow_cgroups: Vec<String>,
    /// Most peeks running at once; more triggers are dropped and counted.
    pub max_concurrent_peeks: u32,
    /// Where the daemon keeps its state (peek reports under `peeks/`).
    pub state_dir: PathBuf,
    /// Most peek reports kept on disk; the oldest go first.
    pub peeks_kept: u32,
    /// Most bytes of peek reports kept on disk.
    pub peeks_max_bytes: ByteSize,
    /// Most peek reports of one user's processes kept (and their share of
    /// `peeks_max_bytes`): one user cannot push out the others' reports.
    pub peeks_kept_per_user: u32,
    /// Most peeks of one user's processes started per minute; more triggers
    /// are dropped and counted.
    pub peeks_per_user_per_minute: u32,
    /// How often the window just ended is pushed to the `[[push]]` targets.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub push_interval: Duration,
    /// Series labels added to every pushed profile (`hostname`, the
    /// machine's name, unless set here).
    pub push_labels: std::collections::BTreeMap<String, String>,
    /// Where a process's `service_name` comes from, first match first:
    /// `unit` (its systemd unit), `container` (its container's id),
    /// `comm` (its command name).
    pub push_service_name: Vec<crate::export::naming::NameSource>,
    /// The `service_name` of processes none of those name.
    pub push_service_default: String,
    /// Where profiles are pushed (Pyroscope); none by default. Set in the
    /// file only, as `[[push]]` tables.
    pub push: Vec<crate::export::settings::PushTarget>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/profilerd/profilerd.sock"),
            admin_group: "profilerd".to_owned(),
            tcp_listen: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tcp_plaintext_loopback: false,
            metrics_listen: None,
            http_listen: None,
            http_plaintext_loopback: false,
            frequency_hz: 49,
            drain_interval: Duration::from_secs(1),
            retention: Duration::from_secs(3600),
            resolution: Duration::from_secs(10),
            memory_limit: ByteSize::mib(64),
            max_profile_duration: None,
            max_sessions: 16,
            max_sessions_per_caller: 4,
            max_streams_per_caller: 8,
            max_response_bytes: ByteSize::mib(64),
            max_stacks: 0,
            max_sample_keys: 0,
            stack_copy: ByteSize::kib(16),
            stack_copy_buffer: ByteSize::b(0),
            unwind_info_limit: ByteSize::mib(64),
            offcpu: 0.0,
            offcpu_max_pending: 16_384,
            log_level: "info".to_owned(),
            peek_signal: "SIGUSR1".to_owned(),
            peek_duration: Duration::from_secs(1),
            peek_frequency_hz: 1000,
            peek_allow_commands: Vec::new(),
            peek_allow_uids: Vec::new(),
            peek_allow_cgroups: Vec::new(),
            max_concurrent_peeks: 4,
            state_dir: PathBuf::from("/var/lib/profilerd"),
            peeks_kept: 100,
            peeks_max_bytes: ByteSize::mib(16),
            peeks_kept_per_user: 20,
            peeks_per_user_per_minute: 20,
            push_interval: PushSettings::default().interval,
            push_labels: PushSettings::default().labels,
            push_service_name: PushSettings::default().service_name_sources,
            push_service_default: PushSettings::default().service_name_default,
            push: Vec::new(),
        }
    }
}

/// Flag values that override the file's; `None` keeps the file's value.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// Unix socket to serve the gRPC API on [default: /run/profilerd/profilerd.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Group whose members may profile every process [default: profilerd]
    #[arg(long, value_name = "GROUP")]
    pub admin_group: Option<String>,
    /// Also serve on this TCP address, e.g. 0.0.0.0:7443 (needs mutual TLS) [default: off]
    #[arg(long, value_name = "ADDRESS")]
    pub tcp_listen: Option<std::net::SocketAddr>,
    /// The TCP listener's certificate chain (PEM)
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The TCP listener's private key (PEM)
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA certificate of the clients let in over TCP (PEM)
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve the self-metrics for Prometheus at http://ADDRESS/metrics, e.g. 127.0.0.1:9464 [default: off]
    #[arg(long, value_name = "ADDRESS")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Allow TCP without TLS on a loopback address [default: false]
    #[arg(long, value_name = "BOOL")]
    pub tcp_plaintext_loopback: Option<bool>,
    /// Serve profiles over HTTP (Go's /debug/pprof/profile and more), e.g. 127.0.0.1:6060 [default: off]
    #[arg(long, value_name = "ADDRESS")]
    pub http_listen: Option<std::net::SocketAddr>,
    /// Allow HTTP without TLS on a loopback address [default: false]
    #[arg(long, value_name = "BOOL")]
    pub http_plaintext_loopback: Option<bool>,
    /// Samples per second on each CPU, 1-1000 [default: 49]
    #[arg(long, value_name = "HZ")]
    pub frequency_hz: Option<u32>,
    /// How often the kernel maps are drained, e.g. 1s, 500ms [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_interval: Option<Duration>,
    /// How long samples are kept, e.g. 10m [default: 1h]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retention: Option<Duration>,
    /// Time span of a stored bucket once past, e.g. 10s [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub resolution: Option<Duration>,
    /// Memory ceiling of the profile store, e.g. 64MiB [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<ByteSize>,
    /// Longest profile request or session [default: the retention]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_profile_duration: Option<Duration>,
    /// Most profiling sessions open at once [default: 16]
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u32>,
    /// Most profiling sessions one caller may hold open [default: 4]
    #[arg(long, value_name = "N")]
    pub max_sessions_per_caller: Option<u32>,
    /// Most streams one caller may hold open [default: 8]
    #[arg(long, value_name = "N")]
    pub max_streams_per_caller: Option<u32>,
    /// Largest report a request may return, e.g. 64MiB [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    pub max_response_bytes: Option<ByteSize>,
    /// Kernel stacks map capacity per generation, 0 = automatic [default: 0]
    #[arg(long, value_name = "N")]
    pub max_stacks: Option<u32>,
    /// Kernel counts map capacity per generation, 0 = automatic [default: 0]
    #[arg(long, value_name = "N")]
    pub max_sample_keys: Option<u32>,
    /// User stack copied per sample for unwinding, 0 = frame pointers [default: 16KiB]
    #[arg(long, value_name = "SIZE")]
    pub stack_copy: Option<ByteSize>,
    /// Stack-copy ring buffer size, 0 = automatic [default: 0]
    #[arg(long, value_name = "SIZE")]
    pub stack_copy_buffer: Option<ByteSize>,
    /// Most unwind information held, 0 = no limit [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    pub unwind_info_limit: Option<ByteSize>,
    /// Probability that any wait is recorded off CPU, 0 = off [default: 0]
    #[arg(long, value_name = "PROBABILITY")]
    pub offcpu: Option<f64>,
    /// Threads recorded off CPU at once [default: 16384]
    #[arg(long, value_name = "N")]
    pub offcpu_max_pending: Option<u32>,
    /// Log filter, e.g. info or profilerd=debug [default: info]
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Signal that starts a peek: a name, a number or off [default: SIGUSR1]
    #[arg(long, value_name = "SIGNAL")]
    pub peek_signal: Option<String>,
    /// How long a peek samples, e.g. 1s, 500ms [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub peek_duration: Option<Duration>,
    /// Samples per second of a peeked thread's CPU time, 1-1000 [default: 1000]
    #[arg(long, value_name = "HZ")]
    pub peek_frequency_hz: Option<u32>,
    /// Peek only these command names, comma-separated [default: any]
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub peek_allow_commands: Option<Vec<String>>,
    /// Peek only processes of these uids, comma-separated [default: any]
    #[arg(long, value_name = "UIDS", value_delimiter = ',')]
    pub peek_allow_uids: Option<Vec<u32>>,
    /// Peek only processes in these cgroups, comma-separated [default: any]
    #[arg(long, value_name = "PATHS", value_delimiter = ',')]
    pub peek_allow_cgroups: Option<Vec<String>>,
    /// Most peeks running at once [default: 4]
    #[arg(long, value_name = "N")]
    pub max_concurrent_peeks: Option<u32>,
    /// State directory; peek reports go under its peeks/ [default: /var/lib/profilerd]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Most peek reports kept on disk [default: 100]
    #[arg(long, value_name = "N")]
    pub peeks_kept: Option<u32>,
    /// Most bytes of peek reports kept on disk, e.g. 16MiB [default: 16MiB]
    #[arg(long, value_name = "SIZE")]
    pub peeks_max_bytes: Option<ByteSize>,
    /// Most peek reports of one user's processes kept [default: 20]
    #[arg(long, value_name = "N")]
    pub peeks_kept_per_user: Option<u32>,
    /// Most peeks of one user's processes started per minute [default: 20]
    #[arg(long, value_name = "N")]
    pub peeks_per_user_per_minute: Option<u32>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 1s, 500ms, 10m)"))
}

pub(crate) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(D::Error::custom)
}

pub(crate) fn duration_text<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&humantime::format_duration(*duration).to_string())
}

fn optional_duration_text<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => duration_text(duration, serializer),
        None => serializer.serialize_none(),
    }
}

fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// Keys a configuration reload applies while the daemon runs; every other
/// key needs a restart.
pub const LIVE_KEYS: &[&str] = &[
    "frequency_hz",
    "retention",
    "resolution",
    "memory_limit",
    "max_profile_duration",
    "log_level",
    "peek_duration",
    "peek_frequency_hz",
    "offcpu",
    "peek_allow_commands",
    "peek_allow_uids",
    "peek_allow_cgroups",
    "max_concurrent_peeks",
    "peeks_kept",
    "peeks_max_bytes",
    "peeks_kept_per_user",
    "peeks_per_user_per_minute",
    "push_interval",
    "push_labels",
    "push_service_name",
    "push_service_default",
    "push",
];

impl Config {
    /// The keys whose values differ between `self` and `other`, in the
    /// order of the file's keys.
    pub fn changed_keys(&self, other: &Config) -> Vec<String> {
        let table = |config: &Config| toml::Table::try_from(config).unwrap_or_default();
        let (old, new) = (table(self), table(other));
        let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|key| old.get(*key) != new.get(*key))
            .cloned()
            .collect()
    }

    /// Longest `Profile` request or session accepted: as configured, else
    /// the retention (a longer one could not be reported whole).
    pub fn max_profile_duration(&self) -> Duration {
        self.max_profile_duration.unwrap_or(self.retention)
    }

    /// Reads `path` (or starts from the defaults when there is none), applies
    /// the flag overrides and validates the result.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Self::parse(&text).map_err(|message| ConfigError::Parse {
                    path: path.to_owned(),
                    message,
                })?
            }
            None => Self::default(),
        };
        config.apply(overrides);
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text; the error names the offending key and line.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|err| err.to_string().trim_end().to_owned())
    }

    fn apply(&mut self, overrides: &Overrides) {
        let Overrides {
            socket,
            admin_group,
            tcp_listen,
            tls_cert,
            tls_key,
            tls_client_ca,
            tcp_plaintext_loopback,
            metrics_listen,
            http_listen,
            http_plaintext_loopback,
            frequency_hz,
            drain_interval,
            retention,
            resolution,
            memory_limit,
            max_profile_duration,
            max_sessions,
            max_sessions_per_caller,
            max_streams_per_caller,
            max_response_bytes,
            max_stacks,
            max_sample_keys,
            stack_copy,
            stack_copy_buffer,
            unwind_info_limit,
            offcpu,
            offcpu_max_pending,
            log_level,
            peek_signal,
            peek_duration,
            peek_frequency_hz,
            peek_allow_commands,
            peek_allow_uids,
            peek_allow_cgroups,
            max_concurrent_peeks,
            state_dir,
            peeks_kept,
            peeks_max_bytes,
            peeks_kept_per_user,
            peeks_per_user_per_minute,
        } = overrides.clone();
        fn set<T>(slot: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *slot = value;
            }
        }
        set(&mut self.socket, socket);
        set(&mut self.admin_group, admin_group);
        for (slot, value) in [
            (&mut self.tls_cert, tls_cert),
            (&mut self.tls_key, tls_key),
            (&mut self.tls_client_ca, tls_client_ca),
        ] {
            if value.is_some() {
                *slot = value;
            }
        }
        if tcp_listen.is_some() {
            self.tcp_listen = tcp_listen;
        }
        if metrics_listen.is_some() {
            self.metrics_listen = metrics_listen;
        }
        if http_listen.is_some() {
            self.http_listen = http_listen;
        }
        set(&mut self.tcp_plaintext_loopback, tcp_plaintext_loopback);
        set(&mut self.http_plaintext_loopback, http_plaintext_loopback);
        set(&mut self.frequency_hz, frequency_hz);
        set(&mut self.drain_interval, drain_interval);
        set(&mut self.retention, retention);
        set(&mut self.resolution, resolution);
        set(&mut self.memory_limit, memory_limit);
        if max_profile_duration.is_some() {
            self.max_profile_duration = max_profile_duration;
        }
        set(&mut self.max_sessions, max_sessions);
        set(&mut self.max_sessions_per_caller, max_sessions_per_caller);
        set(&mut self.max_streams_per_caller, max_streams_per_caller);
        set(&mut self.max_response_bytes, max_response_bytes);
        set(&mut self.max_stacks, max_stacks);
        set(&mut self.max_sample_keys, max_sample_keys);
        set(&mut self.stack_copy, stack_copy);
        set(&mut self.stack_copy_buffer, stack_copy_buffer);
        set(&mut self.unwind_info_limit, unwind_info_limit);
        set(&mut self.offcpu, offcpu);
        set(&mut self.offcpu_max_pending, offcpu_max_pending);
        set(&mut self.log_level, log_level);
        set(&mut self.peek_signal, peek_signal);
        set(&mut self.peek_duration, peek_duration);
        set(&mut self.peek_frequency_hz, peek_frequency_hz);
        set(&mut self.peek_allow_commands, peek_allow_commands);
        set(&mut self.peek_allow_uids, peek_allow_uids);
        set(&mut self.peek_allow_cgroups, peek_allow_cgroups);
        set(&mut self.max_concurrent_peeks, max_concurrent_peeks);
        set(&mut self.state_dir, state_dir);
        set(&mut self.peeks_kept, peeks_kept);
        set(&mut self.peeks_max_bytes, peeks_max_bytes);
        set(&mut self.peeks_kept_per_user, peeks_kept_per_user);
        set(
            &mut self.peeks_per_user_per_minute,
            peeks_per_user_per_minute,
        );
    }

    /// The store settings of this configuration.
    pub fn store_settings(&self) -> StoreSettings {
        StoreSettings {
            retention: self.retention,
            resolution: self.resolution,
            memory_limit: self.memory_limit.as_u64(),
        }
    }

    /// The peek settings of this configuration.
    pub fn peek_settings(&self) -> PeekSettings {
        PeekSettings {
            signal: self.peek_signal_number(),
            duration: self.peek_duration,
            frequency_hz: self.peek_frequency_hz,
            allow: Allowlist {
                commands: self.peek_allow_commands.clone(),
                uids: self.peek_allow_uids.clone(),
                cgroups: self.peek_allow_cgroups.clone(),
            },
            max_concurrent: self.max_concurrent_peeks as usize,
            directory: self.state_dir.join("peeks"),
            max_reports: self.peeks_kept as usize,
            max_bytes: self.peeks_max_bytes.as_u64(),
            max_reports_per_user: self.peeks_kept_per_user as usize,
            per_user_per_minute: self.peeks_per_user_per_minute,
        }
    }

    /// The push settings.
    pub fn push_settings(&self) -> PushSettings {
        PushSettings {
            targets: self.push.clone(),
            interval: self.push_interval,
            labels: self.push_labels.clone(),
            service_name_sources: self.push_service_name.clone(),
            service_name_default: self.push_service_default.clone(),
        }
    }

    /// Pages of user stack each sample copies; 0: frame pointers only.
    pub fn stack_copy_pages(&self) -> u32 {
        self.stack_copy
            .as_u64()
            .div_ceil(profiler_common::STACK_COPY_PAGE as u64) as u32
    }

    /// The peek signal's number; 0 when peeks by signal are off. Valid once
    /// [`Config::validate`] passed.
    pub fn peek_signal_number(&self) -> u32 {
        parse_signal(&self.peek_signal).unwrap_or(0)
    }

    /// Checks every rule; the error names the key and the accepted values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        if !FREQUENCY_RANGE_HZ.contains(&self.frequency_hz) {
            return invalid(
                "frequency_hz",
                format!(
                    "{} Hz is out of range; accepted: {}-{} Hz",
                    self.frequency_hz,
                    FREQUENCY_RANGE_HZ.start(),
                    FREQUENCY_RANGE_HZ.end()
                ),
            );
        }
        if self.drain_interval < Duration::from_millis(100)
            || self.drain_interval > Duration::from_secs(10)
        {
            return invalid(
                "drain_interval",
                format!(
                    "{} is out of range; accepted: 100ms-10s",
                    humantime::format_duration(self.drain_interval)
                ),
            );
        }
        if self.retention < Duration::from_secs(10) || self.retention > Duration::from_secs(86_400)
        {
            return invalid(
                "retention",
                format!(
                    "{} is out of range; accepted: 10s-24h",
                    humantime::format_duration(self.retention)
                ),
            );
        }
        if self.resolution < Duration::from_secs(1)
            || self.resolution < self.drain_interval
            || self.resolution > self.retention
        {
            return invalid(
                "resolution",
                format!(
                    "{} is out of range; accepted: from 1s and the drain_interval ({}) up to the \
                     retention ({})",
                    humantime::format_duration(self.resolution),
                    humantime::format_duration(self.drain_interval),
                    humantime::format_duration(self.retention)
                ),
            );
        }
        if self.memory_limit < ByteSize::mib(4) {
            return invalid(
                "memory_limit",
                format!("{} is too small; at least 4 MiB", self.memory_limit),
            );
        }
        if let Some(longest) = self.max_profile_duration
            && (longest < Duration::from_secs(1) || longest > self.retention)
        {
            return invalid(
                "max_profile_duration",
                format!(
                    "{} is out of range; accepted: 1s up to the retention ({})",
                    humantime::format_duration(longest),
                    humantime::format_duration(self.retention)
                ),
            );
        }
        for (key, value) in [
            ("max_sessions", self.max_sessions),
            ("max_sessions_per_caller", self.max_sessions_per_caller),
            ("max_streams_per_caller", self.max_streams_per_caller),
        ] {
            if value == 0 {
                return invalid(key, "must be at least 1".to_owned());
            }
        }
        if self.max_response_bytes < ByteSize::kib(64) {
            return invalid(
                "max_response_bytes",
                format!("{} is too small; at least 64 KiB", self.max_response_bytes),
            );
        }
        for (key, value) in [
            ("max_stacks", self.max_stacks),
            ("max_sample_keys", self.max_sample_keys),
        ] {
            if value != 0 && !(256..=1 << 22).contains(&value) {
                return invalid(
                    key,
                    format!("{value} is out of range; accepted: 0 (automatic) or 256-4194304"),
                );
            }
        }
        if self.stack_copy > ByteSize::kib(64) {
            return invalid(
                "stack_copy",
                format!(
                    "{} is too large; accepted: 0 (frame pointers only) up to 64 KiB",
                    self.stack_copy
                ),
            );
        }
        let buffer = self.stack_copy_buffer.as_u64();
        if buffer != 0 && !(buffer.is_power_of_two() && (1 << 16..=1 << 30).contains(&buffer)) {
            return invalid(
                "stack_copy_buffer",
                format!(
                    "{} is not accepted: 0 (automatic) or a power of two from 64 KiB to 1 GiB",
                    self.stack_copy_buffer
                ),
            );
        }
        if let Err(err) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            return invalid("log_level", format!("{:?}: {err}", self.log_level));
        }
        self.validate_tcp()?;
        crate::export::settings::validate(&self.push_settings())
            .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
        if let Err(message) = parse_signal(&self.peek_signal) {
            return invalid("peek_signal", message);
        }
        if self.peek_duration < Duration::from_millis(100)
            || self.peek_duration > Duration::from_secs(60)
        {
            return invalid(
                "peek_duration",
                format!(
                    "{} is out of range; accepted: 100ms-60s",
                    humantime::format_duration(self.peek_duration)
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.offcpu) {
            return invalid(
                "offcpu",
                format!(
                    "{} is not a probability; accepted: 0 (off) to 1 (every wait)",
                    self.offcpu
                ),
            );
        }
        if !(1..=1 << 20).contains(&self.offcpu_max_pending) {
            return invalid(
                "offcpu_max_pending",
                format!(
                    "{} is out of range; accepted: 1-1048576",
                    self.offcpu_max_pending
                ),
            );
        }
        if !FREQUENCY_RANGE_HZ.contains(&self.peek_frequency_hz) {
            return invalid(
                "peek_frequency_hz",
                format!(
                    "{} Hz is out of range; accepted: {}-{} Hz",
                    self.peek_frequency_hz,
                    FREQUENCY_RANGE_HZ.start(),
                    FREQUENCY_RANGE_HZ.end()
                ),
            );
        }
        if let Some(cgroup) = self.peek_allow_cgroups.iter().find(|c| !c.starts_with('/')) {
            return invalid(
                "peek_allow_cgroups",
                format!(
                    "{cgroup:?} is not a cgroup path; write it as in /proc/PID/cgroup, e.g. \"/system.slice\""
                ),
            );
        }
        if !(1..=64).contains(&self.max_concurrent_peeks) {
            return invalid(
                "max_concurrent_peeks",
                format!(
                    "{} is out of range; accepted: 1-64",
                    self.max_concurrent_peeks
                ),
            );
        }
        if self.peeks_kept == 0 {
            return invalid("peeks_kept", "must be at least 1".to_owned());
        }
        if self.peeks_max_bytes < ByteSize::kib(64) {
            return invalid(
                "peeks_max_bytes",
                format!("{} is too small; at least 64 KiB", self.peeks_max_bytes),
            );
        }
        if self.peeks_kept_per_user == 0 {
            return invalid(
                "peeks_kept_per_user",
                "must be at least 1 (more than peeks_kept means no bound per user)".to_owned(),
            );
        }
        if self.peeks_per_user_per_minute == 0 {
            return invalid(
                "peeks_per_user_per_minute",
                "must be at least 1 (peek_signal = \"off\" turns peeks by signal off)".to_owned(),
            );
        }
        Ok(())
    }
}

impl Config {
    /// The TCP and HTTP listeners need all of mutual TLS, or explicit
    /// plaintext on a loopback address.
    fn validate_tcp(&self) -> Result<(), ConfigError> {
        let tls = [&self.tls_cert, &self.tls_key, &self.tls_client_ca];
        let given = tls.iter().filter(|path| path.is_some()).count();
        if given != 0 && given != tls.len() {
            return Err(ConfigError::Invalid {
                key: "tls_cert",
                message: "mutual TLS needs all of tls_cert, tls_key and tls_client_ca".to_owned(),
            });
        }
        let with_tls = given != 0;
        for (key, address, plaintext_key, plaintext) in [
            (
                "tcp_listen",
                self.tcp_listen,
                "tcp_plaintext_loopback",
                self.tcp_plaintext_loopback,
            ),
            (
                "http_listen",
                self.http_listen,
                "http_plaintext_loopback",
                self.http_plaintext_loopback,
            ),
        ] {
            let Some(address) = address else {
                continue;
            };
            if !(with_tls || plaintext && address.ip().is_loopback()) {
                let why = if address.ip().is_loopback() {
                    format!("set {plaintext_key} = true to serve it without TLS, or")
                } else {
                    "plaintext is only ever allowed on a loopback address:".to_owned()
                };
                return Err(ConfigError::Invalid {
                    key,
                    message: format!(
                        "{address} would serve profiles (function names, paths, command lines) \
                         without authentication; {why} set tls_cert, tls_key and tls_client_ca \
                         so that only clients with a certificate of that CA get in"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Signals by name, as `kill -l` lists them (without the `SIG`).
const SIGNALS: [(&str, i32); 29] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("SYS", libc::SIGSYS),
];

/// A signal's number from its name (`SIGUSR1`, `usr1`) or number; `off`
/// is 0. SIGKILL and SIGSTOP cannot be handled, so they are refused.
pub fn parse_signal(text: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(0);
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let number = match name.parse::<i32>() {
        Ok(number) if (1..=64).contains(&number) => number,
        Ok(number) => return Err(format!("{number} is not a signal number; accepted: 1-64")),
        Err(_) => SIGNALS
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, number)| number)
            .ok_or_else(|| {
                format!("{text:?} is not a signal; use a name such as SIGUSR1 or SIGUSR2, a number, or off")
            })?,
    };
    if number == libc::SIGKILL || number == libc::SIGSTOP {
        return Err(format!(
            "{text} cannot be caught by anyone, so peeking on it would always kill or stop \
             the process; use SIGUSR1, SIGUSR2 or a real-time signal"
        ));
    }
    Ok(number as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        Config::default().validate().unwrap();
    }

    #[test]
    fn the_example_file_lists_the_defaults() {
        let example = include_str!("../../../deploy/config.toml");
        assert_eq!(Config::parse(example).unwrap(), Config::default());
    }

    /// deploy/config.toml names every key the configuration knows, set to
    /// its default or, for a key without one, commented out
    /// (`# key = ...`), so the example cannot fall behind a new key.
    #[test]
    fn the_example_file_names_every_key() {
        let example = include_str!("../../../deploy/config.toml");
        let named = |key: &str| {
            example.lines().any(|line| {
                let line = line.trim_start();
                let line = line.strip_prefix('#').unwrap_or(line).trim_start();
                line.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
                    // A table array, `[[key]]`.
                    || line.strip_prefix("[[").and_then(|rest| rest.strip_suffix("]]")) == Some(key)
            })
        };
        let keys = field_names::<Config>();
        assert!(keys.len() > 20, "too few keys found: {keys:?}");
        let missing: Vec<_> = keys.iter().filter(|key| !named(key)).collect();
        assert!(
            missing.is_empty(),
            "deploy/config.toml does not name {missing:?}: add each with its default \
             (commented out if it has none) and a comment saying what it does"
        );
    }

    /// The names of the fields `T` deserializes, as serde knows them.
    fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        /// A deserializer that only records the struct's field names.
        struct Fields(Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("field names recorded")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> Deserializer<'de> for &mut Fields {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0 = Some(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut fields = Fields(None);
        let _ = T::deserialize(&mut fields);
        fields.0.expect("a struct")
    }

    #[test]
    fn every_key_parses() {
        let config = Config::parse(
            r#"
            socket = "/tmp/p.sock"
            admin_group = "wheel"
            tcp_listen = "127.0.0.1:7443"
            tcp_plaintext_loopback = true
            metrics_listen = "127.0.0.1:9464"
            frequency_hz = 99
            drain_interval = "500ms"
            retention = "5m"
            resolution = "30s"
            memory_limit = "32 MiB"
            max_profile_duration = "2m"
            max_sessions = 3
            max_stacks = 4096
            max_sample_keys = 8192
            log_level = "debug"
            peek_signal = "SIGUSR2"
            peek_duration = "2s"
            peek_frequency_hz = 500
            peek_allow_commands = ["nginx"]
            peek_allow_uids = [0, 1000]
            peek_allow_cgroups = ["/system.slice"]
            max_concurrent_peeks = 2
            state_dir = "/tmp/profilerd"
            peeks_kept = 10
            peeks_max_bytes = "1 MiB"
            "#,
        )
        .unwrap();
        assert_eq!(config.frequency_hz, 99);
        assert_eq!(config.drain_interval, Duration::from_millis(500));
        assert_eq!(config.retention, Duration::from_secs(300));
        assert_eq!(config.resolution, Duration::from_secs(30));
        assert_eq!(config.max_profile_duration(), Duration::from_secs(120));
        assert_eq!(config.memory_limit, ByteSize::mib(32));
        assert_eq!(config.max_stacks, 4096);
        config.validate().unwrap();
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("SIGUSR1"), Ok(libc::SIGUSR1 as u32));
        assert_eq!(parse_signal("usr2"), Ok(libc::SIGUSR2 as u32));
        assert_eq!(parse_signal("34"), Ok(34));
        assert_eq!(parse_signal("off"), Ok(0));
        assert!(parse_signal("SIGSTOP").is_err());
        assert_eq!(Config::default().peek_signal_number(), libc::SIGUSR1 as u32);
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::parse("frequency = 99").unwrap_err();
        assert!(err.contains("frequency"), "{err}");
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn bad_value_names_the_key() {
        let err = Config::parse("retention = \"ten minutes\"").unwrap_err();
        assert!(err.contains("retention"), "{err}");
        let err = Config::parse("frequency_hz = \"fast\"").unwrap_err();
        assert!(err.contains("frequency_hz"), "{err}");
    }

    #[test]
    fn out_of_range_values_are_rejected_by_key() {
        for (text, key) in [
            ("frequency_hz = 0", "frequency_hz"),
            ("frequency_hz = 1001", "frequency_hz"),
            ("drain_interval = \"1ms\"", "drain_interval"),
            ("memory_limit = \"1KiB\"", "memory_limit"),
            ("max_profile_duration = \"2h\"", "max_profile_duration"),
            ("resolution = \"500ms\"", "resolution"),
            ("resolution = \"2h\"", "resolution"),
            ("drain_interval = \"5s\"\nresolution = \"2s\"", "resolution"),
            ("max_stacks = 10", "max_stacks"),
            ("log_level = \"[\"", "log_level"),
            ("peek_signal = \"SIGFOO\"", "peek_signal"),
            ("peek_signal = \"SIGKILL\"", "peek_signal"),
            ("peek_signal = \"65\"", "peek_signal"),
            ("peek_duration = \"10ms\"", "peek_duration"),
            ("peek_frequency_hz = 0", "peek_frequency_hz"),
            (
                "peek_allow_cgroups = [\"system.slice\"]",
                "peek_allow_cgroups",
            ),
            ("max_concurrent_peeks = 0", "max_concurrent_peeks"),
            ("peeks_kept = 0", "peeks_kept"),
            ("tcp_listen = \"0.0.0.0:7443\"", "tcp_listen"),
            ("tcp_listen = \"127.0.0.1:7443\"", "tcp_listen"),
            (
                "tcp_listen = \"0.0.0.0:7443\"\ntcp_plaintext_loopback = true",
                "tcp_listen",
            ),
            ("tls_cert = \"/c.pem\"", "tls_cert"),
            ("http_listen = \"127.0.0.1:6060\"", "http_listen"),
            (
                "http_listen = \"0.0.0.0:6060\"\nhttp_plaintext_loopback = true",
                "http_listen",
            ),
            (
                "http_listen = \"127.0.0.1:6060\"\ntcp_plaintext_loopback = true",
                "http_listen",
            ),
            ("push_interval = \"0s\"", "push_interval"),
            ("push_labels = { __name__ = \"x\" }", "push_labels"),
            ("push_labels = { service_name = \"x\" }", "push_labels"),
            (
                "[[push]]\nkind = \"pyroscope\"\nurl = \"ftp://host\"",
                "push",
            ),
            (
                "[[push]]\nkind = \"otlp\"\nurl = \"http://host:4317\"\ntimeout = \"0s\"",
                "push",
            ),
            (
                "[[push]]\nkind = \"pyroscope\"\nurl = \"http://h\"\nbasic_auth_user = \"u\"",
                "push",
            ),
            (
                "[[push]]\nkind = \"pyroscope\"\nurl = \"http://h\"\nmax_age = \"2h\"",
                "push",
            ),
            (
                "[[push]]\nkind = \"pyroscope\"\nurl = \"http://a\"\n\
                 [[push]]\nkind = \"pyroscope\"\nname = \"pyroscope-1\"\nurl = \"http://b\"",
                "push",
            ),
        ] {
            let err = Config::parse(text).unwrap().validate().unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn the_longest_profile_follows_the_retention_unless_set() {
        let config = Config::parse("retention = \"30s\"").unwrap();
        config.validate().unwrap();
        assert_eq!(config.max_profile_duration(), Duration::from_secs(30));
        assert_eq!(
            Config::default().max_profile_duration(),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn changed_keys_name_what_differs() {
        let old = Config::default();
        let new = Config::parse(
            "frequency_hz = 99\nretention = \"2h\"\nsocket = \"/tmp/x.sock\"\nmax_profile_duration = \"5m\"",
        )
        .unwrap();
        assert_eq!(
            old.changed_keys(&new),
            [
                "frequency_hz",
                "max_profile_duration",
                "retention",
                "socket"
            ]
        );
        assert!(old.changed_keys(&old.clone()).is_empty());
        // Every key serializes, so every change is seen.
        let table = toml::Table::try_from(&new).unwrap();
        assert!(table.contains_key("peek_allow_cgroups"));
        for key in LIVE_KEYS {
            assert!(table.contains_key(*key), "{key}");
        }
    }

    #[test]
    fn flags_override_the_file() {
        let mut config = Config::parse("frequency_hz = 99").unwrap();
        config.apply(&Overrides {
            frequency_hz: Some(1000),
            ..Overrides::default()
        });
        assert_eq!(config.frequency_hz, 1000);
        assert_eq!(config.retention, Duration::from_secs(3600));
    }
}
