//! The rules of the configuration: every key's range and the combinations
//! that do not go together, each error naming the key and what to do.
//!
//! Owns the rules; it must not act on the configuration.

use std::{ops::RangeInclusive, time::Duration};

use bytesize::ByteSize;

use super::{Config, ConfigError, FREQUENCY_RANGE_HZ, parse_signal};
use crate::transport::http::AllowedHost;

/// A duration key's accepted range, and how the error words it.
type DurationRule = (
    &'static str,
    Duration,
    RangeInclusive<Duration>,
    &'static str,
);

/// A number key's accepted range, and its unit (as the error shows it).
type NumberRule = (&'static str, u64, RangeInclusive<u64>, &'static str);

impl Config {
    /// Checks every rule; the error names the key and the accepted values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        let (ms, secs) = (Duration::from_millis, Duration::from_secs);
        #[rustfmt::skip]
        let durations: [DurationRule; 4] = [
            ("drain_interval", self.drain_interval, ms(100)..=secs(10), "100ms-10s"),
            ("watched_drain_interval", self.watched_drain_interval, ms(100)..=secs(10),
                "100ms-10s (the drain_interval or more turns it off)"),
            ("retention", self.retention, secs(10)..=secs(86_400), "10s-24h"),
            ("peek_duration", self.peek_duration, ms(100)..=secs(60), "100ms-60s"),
        ];
        for (key, value, range, accepted) in durations {
            if !range.contains(&value) {
                let value = humantime::format_duration(value);
                return invalid(
                    key,
                    format!("{value} is out of range; accepted: {accepted}"),
                );
            }
        }
        let hz = |value: u32| u64::from(value);
        let frequencies = hz(*FREQUENCY_RANGE_HZ.start())..=hz(*FREQUENCY_RANGE_HZ.end());
        #[rustfmt::skip]
        let numbers: [NumberRule; 9] = [
            ("frequency_hz", hz(self.frequency_hz), frequencies.clone(), " Hz"),
            ("peek_frequency_hz", hz(self.peek_frequency_hz), frequencies, " Hz"),
            ("offcpu_max_pending", u64::from(self.offcpu_max_pending), 1..=1 << 20, ""),
            ("max_concurrent_peeks", u64::from(self.max_concurrent_peeks), 1..=64, ""),
            ("max_sessions", u64::from(self.max_sessions), 1..=u64::MAX, ""),
            ("max_sessions_per_caller", u64::from(self.max_sessions_per_caller), 1..=u64::MAX, ""),
            ("max_streams_per_caller", u64::from(self.max_streams_per_caller), 1..=u64::MAX, ""),
            ("peeks_kept", u64::from(self.peeks_kept), 1..=u64::MAX, ""),
            ("peeks_kept_per_user", u64::from(self.peeks_kept_per_user), 1..=u64::MAX, ""),
        ];
        for (key, value, range, unit) in numbers {
            if range.contains(&value) {
                continue;
            }
            let message = match (range.start(), range.end()) {
                (&1, &u64::MAX) if key == "peeks_kept_per_user" => {
                    "must be at least 1 (more than peeks_kept means no bound per user)".to_owned()
                }
                (&1, &u64::MAX) => "must be at least 1".to_owned(),
                (low, high) => {
                    format!("{value}{unit} is out of range; accepted: {low}-{high}{unit}")
                }
            };
            return invalid(key, message);
        }
        if self.peeks_per_user_per_minute == 0 {
            return invalid(
                "peeks_per_user_per_minute",
                "must be at least 1 (peek_signal = \"off\" turns peeks by signal off)".to_owned(),
            );
        }
        let least_bytes = [
            ("memory_limit", self.memory_limit, ByteSize::mib(4)),
            (
                "max_response_bytes",
                Some(self.max_response_bytes),
                ByteSize::kib(64),
            ),
            (
                "peeks_max_bytes",
                Some(self.peeks_max_bytes),
                ByteSize::kib(64),
            ),
        ];
        for (key, size, least) in least_bytes {
            if let Some(size) = size
                && size < least
            {
                return invalid(key, format!("{size} is too small; at least {least}"));
            }
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
        if !(0.0..=1.0).contains(&self.offcpu) {
            return invalid(
                "offcpu",
                format!(
                    "{} is not a probability; accepted: 0 (off) to 1 (every wait)",
                    self.offcpu
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
        if let Err(message) = parse_signal(&self.peek_signal) {
            return invalid("peek_signal", message);
        }
        self.validate_tcp()?;
        crate::export::settings::validate(&self.push_settings())
            .map_err(|(key, message)| ConfigError::Invalid { key, message })
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
        self.validate_source_dirs()
    }

    /// `http_source_dirs`: absolute directories, none the whole file system
    /// nor a kernel pseudo-file system.
    fn validate_source_dirs(&self) -> Result<(), ConfigError> {
        let kernel = ["/proc", "/sys", "/dev"].map(std::path::Path::new);
        for dir in &self.http_source_dirs {
            let message = if !dir.is_absolute() {
                "is not an absolute path; name each directory from the root, e.g. /usr/src/app"
            } else if dir.parent().is_none() {
                "is the whole file system: name the directories that hold source code, e.g. \
                 /usr/src/app"
            } else if kernel.iter().any(|pseudo| dir.starts_with(pseudo)) {
                "holds the kernel's pseudo-files, not source code; name the directories that \
                 hold source code, e.g. /usr/src/app"
            } else {
                continue;
            };
            return Err(ConfigError::Invalid {
                key: "http_source_dirs",
                message: format!("{} {message}", dir.display()),
            });
        }
        Ok(())
    }
}
