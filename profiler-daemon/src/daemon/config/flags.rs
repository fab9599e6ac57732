//! The command line's overrides of the configuration file: every key has
//! a flag of the same name, and a flag given wins over the file.
//!
//! Owns the flags; it must not validate (see `validation`).

use std::{path::PathBuf, time::Duration};

use bytesize::ByteSize;

use super::Config;
use crate::config_format::parse_duration;

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
    /// Host names the HTTP listener answers besides its own address, comma-separated, e.g. profiler.example.com,10.0.0.5:6060 [default: none]
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub http_allowed_hosts: Option<Vec<String>>,
    /// Directories whose source files the web view may show, comma-separated absolute paths [default: none]
    #[arg(long, value_name = "DIRS", value_delimiter = ',')]
    pub http_source_dirs: Option<Vec<PathBuf>>,
    /// Samples per second on each CPU, 1-1000 [default: 49]
    #[arg(long, value_name = "HZ")]
    pub frequency_hz: Option<u32>,
    /// How often the kernel maps are drained, e.g. 1s, 500ms [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_interval: Option<Duration>,
    /// How often they are drained (when more often) for a minute after a
    /// report of a window up to now, so that the next finds little to
    /// drain; the drain interval or more turns it off [default: 250ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub watched_drain_interval: Option<Duration>,
    /// How long samples are kept, e.g. 10m [default: 1h]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retention: Option<Duration>,
    /// Time span of a stored bucket once past, e.g. 10s [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub resolution: Option<Duration>,
    /// Most memory the whole daemon holds, divided among its parts, e.g. 512MiB [default: 256MiB]
    #[arg(long, value_name = "SIZE")]
    pub memory_budget: Option<ByteSize>,
    /// Memory ceiling of the profile store, e.g. 64MiB [default: its share of memory_budget]
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
    /// Build the indexes of the reports most asked for as samples arrive, not on the first request [default: true]
    #[arg(long, value_name = "BOOL")]
    pub warm_report_indexes: Option<bool>,
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
    /// Allocation ring buffer size, 0 = automatic [default: 0]
    #[arg(long, value_name = "SIZE")]
    pub alloc_stack_copy_buffer: Option<ByteSize>,
    /// Most unwind information held, 0 = no limit [default: its share of memory_budget]
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

impl Config {
    /// Puts the flags given over the file's values.
    pub(super) fn apply(&mut self, overrides: &Overrides) {
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
            http_allowed_hosts,
            http_source_dirs,
            frequency_hz,
            drain_interval,
            watched_drain_interval,
            retention,
            resolution,
            memory_budget,
            memory_limit,
            max_profile_duration,
            max_sessions,
            max_sessions_per_caller,
            max_streams_per_caller,
            max_response_bytes,
            warm_report_indexes,
            max_stacks,
            max_sample_keys,
            stack_copy,
            stack_copy_buffer,
            alloc_stack_copy_buffer,
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
        set(&mut self.http_allowed_hosts, http_allowed_hosts);
        set(&mut self.http_source_dirs, http_source_dirs);
        set(&mut self.frequency_hz, frequency_hz);
        set(&mut self.drain_interval, drain_interval);
        set(&mut self.watched_drain_interval, watched_drain_interval);
        set(&mut self.retention, retention);
        set(&mut self.resolution, resolution);
        set(&mut self.memory_budget, memory_budget);
        if memory_limit.is_some() {
            self.memory_limit = memory_limit;
        }
        if max_profile_duration.is_some() {
            self.max_profile_duration = max_profile_duration;
        }
        set(&mut self.max_sessions, max_sessions);
        set(&mut self.max_sessions_per_caller, max_sessions_per_caller);
        set(&mut self.max_streams_per_caller, max_streams_per_caller);
        set(&mut self.max_response_bytes, max_response_bytes);
        set(&mut self.warm_report_indexes, warm_report_indexes);
        set(&mut self.max_stacks, max_stacks);
        set(&mut self.max_sample_keys, max_sample_keys);
        set(&mut self.stack_copy, stack_copy);
        set(&mut self.stack_copy_buffer, stack_copy_buffer);
        set(&mut self.alloc_stack_copy_buffer, alloc_stack_copy_buffer);
        if unwind_info_limit.is_some() {
            self.unwind_info_limit = unwind_info_limit;
        }
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
}
