//! The daemon's configuration: a TOML file (`--config`) whose every key can
//! be overridden by a flag of the same name, validated once at start-up.
//!
//! This module owns the defaults and the validation rules; it must not act
//! on the configuration (no file system, no BPF) beyond reading the file.

mod flags;
mod signals;
#[cfg(test)]
mod tests;
mod validation;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use crate::{
    config_format::{duration, duration_text, optional_duration, optional_duration_text},
    export::settings::PushSettings,
    memory::{MemoryBudget, Part, budget::BudgetError},
    peek::{Allowlist, PeekSettings},
    store::StoreSettings,
};

pub use self::{flags::Overrides, signals::parse_signal};

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
    /// Host names (`host` or `host:port`) the HTTP listener answers besides
    /// its own address (and, on a loopback address, `localhost`): the names
    /// browsers and scrapers reach it by, e.g. through a proxy.
    pub http_allowed_hosts: Vec<String>,
    /// Directories whose source files the web view's source heatmap may
    /// show (absolute paths; empty, the default: none). The daemon runs as
    /// root and file names come from the debug information of programs
    /// any user builds, so it reads a file only under these, and only a
    /// regular file any local user could read, of 8 MiB at most (see
    /// [`crate::source_files`]); otherwise the heatmap shows the counts by
    /// line number, and `profilerctl annotate` reads the file as its user.
    pub http_source_dirs: Vec<PathBuf>,
    /// Samples per second on each CPU.
    pub frequency_hz: u32,
    /// How often the kernel maps are drained into the store.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub drain_interval: Duration,
    /// How often they are drained (when more often) for a minute after a
    /// report of a window up to now, so that the next report finds little
    /// to drain.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub watched_drain_interval: Duration,
    /// How long aggregated samples are kept in memory.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub retention: Duration,
    /// The time span of one stored bucket once its time is past: past
    /// windows are reported in whole buckets.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    pub resolution: Duration,
    /// The most memory the whole daemon holds, divided among its parts
    /// (see [`crate::memory::budget`]).
    pub memory_budget: ByteSize,
    /// Hard ceiling on the memory the profile store may hold; the oldest
    /// samples are dropped (and counted) to stay under it. Not set: the
    /// store's share of `memory_budget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<ByteSize>,
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
    /// Keep the stack indexes of the reports most asked for (the tree, and
    /// folded stacks and flame graphs, of the whole machine as root sees
    /// them) from the start, as the store fills, so that no report waits
    /// for a first build; they hold ~150 bytes per distinct stack each.
    /// Off: an index is made by the first report that needs it.
    pub warm_report_indexes: bool,
    /// Per-generation capacity of the kernel's stacks map; 0 sizes it from
    /// the frequency, the CPU count and the drain interval.
    pub max_stacks: u32,
    /// Per-generation capacity of the kernel's counts map; 0 sizes it
    /// automatically like `max_stacks`.
    pub max_sample_keys: u32,
    /// Bytes of user stack each sample copies for unwinding in the daemon
    /// (from the stack pointer's red zone up; at most 64 KiB); 0 walks frame pointers in the kernel instead, which loses
    /// the callers of leaf functions and of code built without them.
    pub stack_copy: ByteSize,
    /// Size of the ring buffer the stack copies go through; 0 sizes it from
    /// the frequency, the CPU count and `stack_copy`.
    pub stack_copy_buffer: ByteSize,
    /// Size of the ring buffer sampled allocations' stack copies go
    /// through (apart from CPU samples'); 0 sizes it from `stack_copy`
    /// (512 records).
    pub alloc_stack_copy_buffer: ByteSize,
    /// Most unwind information (`.eh_frame`, `.debug_frame`) held; above
    /// it, that of the binaries sampled least recently is let go of (and
    /// read again when needed). Not set: its share of `memory_budget`; 0:
    /// no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unwind_info_limit: Option<ByteSize>,
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
            http_allowed_hosts: Vec::new(),
            http_source_dirs: Vec::new(),
            frequency_hz: 49,
            drain_interval: Duration::from_secs(1),
            watched_drain_interval: Duration::from_millis(250),
            retention: Duration::from_secs(3600),
            resolution: Duration::from_secs(10),
            memory_budget: ByteSize::mib(256),
            memory_limit: None,
            max_profile_duration: None,
            max_sessions: 16,
            max_sessions_per_caller: 4,
            max_streams_per_caller: 8,
            max_response_bytes: ByteSize::mib(64),
            warm_report_indexes: true,
            max_stacks: 0,
            max_sample_keys: 0,
            stack_copy: ByteSize::kib(16),
            stack_copy_buffer: ByteSize::b(0),
            alloc_stack_copy_buffer: ByteSize::b(0),
            unwind_info_limit: None,
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
}

impl Config {
    /// `memory_budget` divided, once the program and `kernel_buffers`
    /// (bytes of the kernel's ring buffers the daemon maps) are taken, the
    /// bounds set in the configuration first.
    pub fn memory_budget(&self, kernel_buffers: u64) -> Result<MemoryBudget, BudgetError> {
        let mut set = Vec::new();
        if let Some(limit) = self.memory_limit {
            set.push((Part::Store, limit.as_u64(), "memory_limit"));
        }
        if let Some(limit) = self.unwind_info_limit {
            set.push((Part::UnwindInfo, limit.as_u64(), "unwind_info_limit"));
        }
        MemoryBudget::divide(self.memory_budget.as_u64(), kernel_buffers, &set)
    }

    /// The store settings of this configuration, within `budget`.
    pub fn store_settings(&self, budget: &MemoryBudget) -> StoreSettings {
        StoreSettings {
            retention: self.retention,
            resolution: self.resolution,
            memory_limit: self
                .memory_limit
                .map_or_else(|| budget.share(Part::Store), |limit| limit.as_u64()),
        }
    }

    /// The peek settings of this configuration, within `budget`.
    pub fn peek_settings(&self, budget: &MemoryBudget) -> PeekSettings {
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
            memory_limit: budget.share(Part::Peeks),
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
}
