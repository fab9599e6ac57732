//! Where the daemon's log goes: to the journal with structured fields when
//! systemd connected standard error to it, otherwise to standard error as
//! text.
//!
//! Owns the global `tracing` subscriber; it must not decide what is logged.
//! In the journal, each event's fields become `PROFILERD_<FIELD>` fields
//! (`PROFILERD_PID`, `PROFILERD_PEEK_ID`, `PROFILERD_BINARY`...) beside
//! `MESSAGE`, `PRIORITY` (error 3, warn 4, info 6, debug and trace 7),
//! `TARGET`, `CODE_FILE` and `CODE_LINE`, so that
//! `journalctl -u profilerd PROFILERD_PID=1234` finds one process's events.

use tracing_journald::{Priority, PriorityMappings};

pub use crate::daemon::reload::SetLogFilter;
use tracing_subscriber::{EnvFilter, layer::SubscriberExt as _, util::SubscriberInitExt as _};

/// Prefix of the journal fields made from events' fields.
pub const JOURNAL_FIELD_PREFIX: &str = "PROFILERD";

/// Installs the subscriber with `filter` (EnvFilter syntax), which
/// `$PROFILERD_LOG` overrides; an invalid filter falls back to `info`.
/// Logs a warning, once installed, if the journal was wanted but could not
/// be reached. Returns how to change the filter later (a configuration
/// reload), unless `$PROFILERD_LOG` pins it.
pub fn init(filter: &str) -> SetLogFilter {
    let from_env = EnvFilter::try_from_env("PROFILERD_LOG").ok();
    let pinned_by_env = from_env.is_some();
    let filter = from_env
        .or_else(|| EnvFilter::try_new(filter).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let set_filter: SetLogFilter = Box::new(move |level: &str| {
        if pinned_by_env {
            return Err("PROFILERD_LOG is set in the daemon's environment and wins".to_owned());
        }
        let filter = EnvFilter::try_new(level).map_err(|err| err.to_string())?;
        handle.reload(filter).map_err(|err| err.to_string())
    });
    let registry = tracing_subscriber::registry().with(filter);
    if !crate::daemon::systemd::stderr_is_journal() {
        // Colours only for a person at a terminal, not in files.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(ansi),
            )
            .init();
        return set_filter;
    }
    match tracing_journald::layer() {
        Ok(journal) => registry
            .with(
                journal
                    .with_field_prefix(Some(JOURNAL_FIELD_PREFIX.to_owned()))
                    .with_syslog_identifier("profilerd".to_owned())
                    // As syslog does: info is 6, debug and trace are 7.
                    .with_priority_mappings(PriorityMappings {
                        info: Priority::Informational,
                        debug: Priority::Debug,
                        ..PriorityMappings::new()
                    }),
            )
            .init(),
        Err(err) => {
            // Without timestamps and colors: the journal adds its own.
            registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(false)
                        .without_time(),
                )
                .init();
            tracing::warn!(
                "cannot write to the journal's socket ({err}); logging to standard error \
                 as text instead"
            );
        }
    }
    set_filter
}
