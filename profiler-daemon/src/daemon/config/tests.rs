use serde::Deserializer;

use super::*;

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(Config::parse("").unwrap(), Config::default());
    Config::default().validate().unwrap();
}

#[test]
fn the_example_file_lists_the_defaults() {
    let example = include_str!("../../../../deploy/config.toml");
    assert_eq!(Config::parse(example).unwrap(), Config::default());
}

/// deploy/config.toml names every key the configuration knows, set to
/// its default or, for a key without one, commented out
/// (`# key = ...`), so the example cannot fall behind a new key.
#[test]
fn the_example_file_names_every_key() {
    let example = include_str!("../../../../deploy/config.toml");
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
        http_allowed_hosts = ["profiler.example.com", "10.0.0.5:6060", "[fd00::1]:6060"]
        http_source_dirs = ["/usr/src/app", "/home/alice/src"]
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
    assert_eq!(config.memory_limit, Some(ByteSize::mib(32)));
    assert_eq!(config.max_stacks, 4096);
    assert_eq!(config.http_allowed_hosts.len(), 3);
    assert_eq!(config.http_source_dirs.len(), 2);
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
        (
            "watched_drain_interval = \"50ms\"",
            "watched_drain_interval",
        ),
        ("memory_limit = \"1KiB\"", "memory_limit"),
        ("memory_budget = \"32MiB\"", "memory_budget"),
        (
            "memory_budget = \"128MiB\"\nmemory_limit = \"120MiB\"",
            "memory_budget",
        ),
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
        (
            "http_allowed_hosts = [\"http://profiler.example.com\"]",
            "http_allowed_hosts",
        ),
        (
            "http_allowed_hosts = [\"*.example.com\"]",
            "http_allowed_hosts",
        ),
        ("http_source_dirs = [\"src\"]", "http_source_dirs"),
        ("http_source_dirs = [\"/\"]", "http_source_dirs"),
        ("http_source_dirs = [\"/proc/1/root\"]", "http_source_dirs"),
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
        "frequency_hz = 99\nretention = \"2h\"\nsocket = \"/tmp/x.sock\"\nmax_profile_duration = \"5m\"\nmemory_limit = \"32MiB\"",
    )
    .unwrap();
    assert_eq!(
        old.changed_keys(&new),
        [
            "frequency_hz",
            "max_profile_duration",
            "memory_limit",
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
