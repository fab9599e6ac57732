//! The rules of the configuration: every key's range and the combinations
//! that do not go together, each error naming the key and what to do.
//!
//! Owns the rules; it must not act on the configuration.

use std::time::Duration;

use bytesize::ByteSize;

use super::{Config, ConfigError, FREQUENCY_RANGE_HZ, parse_signal};
use crate::service::http::AllowedHost;

impl Config {
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
        if self.watched_drain_interval < Duration::from_millis(100)
            || self.watched_drain_interval > Duration::from_secs(10)
        {
            return invalid(
                "watched_drain_interval",
                format!(
                    "{} is out of range; accepted: 100ms-10s (the drain_interval or more \
                     turns it off)",
                    humantime::format_duration(self.watched_drain_interval)
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
        if let Some(limit) = self.memory_limit
            && limit < ByteSize::mib(4)
        {
            return invalid(
                "memory_limit",
                format!("{limit} is too small; at least 4 MiB"),
            );
        }
        // The kernel's ring buffers are known once sampling starts; the
        // budget is divided again then.
        if let Err(err) = self.memory_budget(0) {
            return invalid("memory_budget", err.to_string());
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
        for (key, size) in [
            ("stack_copy_buffer", self.stack_copy_buffer),
            ("alloc_stack_copy_buffer", self.alloc_stack_copy_buffer),
        ] {
            let buffer = size.as_u64();
            if buffer != 0 && !(buffer.is_power_of_two() && (1 << 16..=1 << 30).contains(&buffer)) {
                return invalid(
                    key,
                    format!(
                        "{size} is not accepted: 0 (automatic) or a power of two from 64 KiB to \
                         1 GiB"
                    ),
                );
            }
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
        for host in &self.http_allowed_hosts {
            AllowedHost::parse(host).map_err(|message| ConfigError::Invalid {
                key: "http_allowed_hosts",
                message,
            })?;
        }
        Ok(())
    }
}
