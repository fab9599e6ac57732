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
use serde::{Deserialize, Deserializer, de::Error as _};

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
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Unix socket the gRPC API is served on.
    pub socket: PathBuf,
    /// Samples per second on each CPU.
    pub frequency_hz: u32,
    /// How often the kernel maps are drained into the store.
    #[serde(deserialize_with = "duration")]
    pub drain_interval: Duration,
    /// How long aggregated samples are kept in memory.
    #[serde(deserialize_with = "duration")]
    pub retention: Duration,
    /// Hard ceiling on the memory the profile store may hold; the oldest
    /// samples are dropped (and counted) to stay under it.
    pub memory_limit: ByteSize,
    /// Longest `Profile` request or session accepted; `None`: the
    /// retention (see [`Config::max_profile_duration`]).
    #[serde(deserialize_with = "optional_duration")]
    pub max_profile_duration: Option<Duration>,
    /// Most profiling sessions open at once.
    pub max_sessions: u32,
    /// Per-generation capacity of the kernel's stacks map; 0 sizes it from
    /// the frequency, the CPU count and the drain interval.
    pub max_stacks: u32,
    /// Per-generation capacity of the kernel's counts map; 0 sizes it
    /// automatically like `max_stacks`.
    pub max_sample_keys: u32,
    /// Log filter, in `tracing_subscriber::EnvFilter` syntax
    /// (e.g. `info`, `profilerd=debug`).
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/profilerd/profilerd.sock"),
            frequency_hz: 49,
            drain_interval: Duration::from_secs(1),
            retention: Duration::from_secs(600),
            memory_limit: ByteSize::mib(64),
            max_profile_duration: None,
            max_sessions: 16,
            max_stacks: 0,
            max_sample_keys: 0,
            log_level: "info".to_owned(),
        }
    }
}

/// Flag values that override the file's; `None` keeps the file's value.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// Unix socket to serve the gRPC API on [default: /run/profilerd/profilerd.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Samples per second on each CPU, 1-1000 [default: 49]
    #[arg(long, value_name = "HZ")]
    pub frequency_hz: Option<u32>,
    /// How often the kernel maps are drained, e.g. 1s, 500ms [default: 1s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_interval: Option<Duration>,
    /// How long samples are kept, e.g. 10m [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retention: Option<Duration>,
    /// Memory ceiling of the profile store, e.g. 64MiB [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<ByteSize>,
    /// Longest profile request or session [default: the retention]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_profile_duration: Option<Duration>,
    /// Most profiling sessions open at once [default: 16]
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u32>,
    /// Kernel stacks map capacity per generation, 0 = automatic [default: 0]
    #[arg(long, value_name = "N")]
    pub max_stacks: Option<u32>,
    /// Kernel counts map capacity per generation, 0 = automatic [default: 0]
    #[arg(long, value_name = "N")]
    pub max_sample_keys: Option<u32>,
    /// Log filter, e.g. info or profilerd=debug [default: info]
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 1s, 500ms, 10m)"))
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(D::Error::custom)
}

fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

impl Config {
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
            frequency_hz,
            drain_interval,
            retention,
            memory_limit,
            max_profile_duration,
            max_sessions,
            max_stacks,
            max_sample_keys,
            log_level,
        } = overrides.clone();
        fn set<T>(slot: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *slot = value;
            }
        }
        set(&mut self.socket, socket);
        set(&mut self.frequency_hz, frequency_hz);
        set(&mut self.drain_interval, drain_interval);
        set(&mut self.retention, retention);
        set(&mut self.memory_limit, memory_limit);
        if max_profile_duration.is_some() {
            self.max_profile_duration = max_profile_duration;
        }
        set(&mut self.max_sessions, max_sessions);
        set(&mut self.max_stacks, max_stacks);
        set(&mut self.max_sample_keys, max_sample_keys);
        set(&mut self.log_level, log_level);
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
        if self.max_sessions == 0 {
            return invalid("max_sessions", "must be at least 1".to_owned());
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
        if let Err(err) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            return invalid("log_level", format!("{:?}: {err}", self.log_level));
        }
        Ok(())
    }
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
        let example = include_str!("../../deploy/config.toml");
        assert_eq!(Config::parse(example).unwrap(), Config::default());
    }

    #[test]
    fn every_key_parses() {
        let config = Config::parse(
            r#"
            socket = "/tmp/p.sock"
            frequency_hz = 99
            drain_interval = "500ms"
            retention = "5m"
            memory_limit = "32 MiB"
            max_profile_duration = "2m"
            max_sessions = 3
            max_stacks = 4096
            max_sample_keys = 8192
            log_level = "debug"
            "#,
        )
        .unwrap();
        assert_eq!(config.frequency_hz, 99);
        assert_eq!(config.drain_interval, Duration::from_millis(500));
        assert_eq!(config.retention, Duration::from_secs(300));
        assert_eq!(config.max_profile_duration(), Duration::from_secs(120));
        assert_eq!(config.memory_limit, ByteSize::mib(32));
        assert_eq!(config.max_stacks, 4096);
        config.validate().unwrap();
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
            ("max_profile_duration = \"1h\"", "max_profile_duration"),
            ("max_stacks = 10", "max_stacks"),
            ("log_level = \"[\"", "log_level"),
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
            Duration::from_secs(600)
        );
    }

    #[test]
    fn flags_override_the_file() {
        let mut config = Config::parse("frequency_hz = 99").unwrap();
        config.apply(&Overrides {
            frequency_hz: Some(1000),
            ..Overrides::default()
        });
        assert_eq!(config.frequency_hz, 1000);
        assert_eq!(config.retention, Duration::from_secs(600));
    }
}
