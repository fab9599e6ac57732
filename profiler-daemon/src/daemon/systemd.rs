//! The service manager's side of the daemon (systemd's `sd_notify`
//! protocol): readiness with a status line, watchdog keep-alives at half of
//! `WATCHDOG_USEC`, stopping, and a start-up failure's reason; and whether
//! standard error is connected to the journal.
//!
//! Owns what is sent to `$NOTIFY_SOCKET`; everything here is a no-op when
//! the daemon is not run by a service manager. It must not decide when the
//! daemon is ready (the caller says so) nor configure logging (see
//! `logging`).

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use sd_notify::NotifyState;
use tracing::{debug, warn};

/// Tells the service manager the daemon is ready (its programs attached,
/// its socket listening), with `status` as the line `systemctl status`
/// shows.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tells the service manager the daemon is shutting down.
pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

/// Tells the service manager why start-up failed (shown by `systemctl
/// status` beside the exit status).
pub fn failed(reason: &str) {
    send(&[NotifyState::Status(reason)]);
}

/// Sends `WATCHDOG=1` at half of the watchdog interval the service manager
/// asked for (`WATCHDOG_USEC`, for this process), for as long as the async
/// runtime runs it; does nothing when no watchdog is asked for. The
/// keep-alives stop, and the service manager restarts the daemon, when the
/// runtime that serves the API stops making progress.
pub async fn keep_watchdog_alive() {
    let Some(interval) = watchdog_interval() else {
        return;
    };
    debug!(
        every = %humantime::format_duration(interval),
        "sending watchdog keep-alives to the service manager"
    );
    let mut every = tokio::time::interval(interval);
    loop {
        every.tick().await;
        send(&[NotifyState::Watchdog]);
    }
}

/// Half of the watchdog timeout asked for, if any (at least 1 ms).
fn watchdog_interval() -> Option<Duration> {
    let timeout = sd_notify::watchdog_enabled()?;
    (!timeout.is_zero()).then(|| (timeout / 2).max(Duration::from_millis(1)))
}

/// Sends `states`; a failure is logged as a warning the first time (the
/// watchdog would repeat it every few seconds), then at debug level.
fn send(states: &[NotifyState]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let Err(err) = sd_notify::notify(states) else {
        return;
    };
    let notify_socket = std::env::var_os("NOTIFY_SOCKET");
    if WARNED.swap(true, Ordering::Relaxed) {
        debug!(?notify_socket, "cannot notify the service manager: {err}");
    } else {
        warn!(
            ?notify_socket,
            "cannot notify the service manager: {err}; under systemd, check that the unit's \
             NotifyAccess= allows the main process (a watchdog will restart the daemon)"
        );
    }
}

/// Whether standard error is the journal's stream, as systemd documents it:
/// `$JOURNAL_STREAM` holds the device and inode numbers of the stream it
/// connected, and they match standard error's (they do not once standard
/// error was redirected elsewhere).
pub fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    stream.to_str().and_then(parse_journal_stream) == Some((stat.st_dev, stat.st_ino))
}

/// `<device>:<inode>`, both decimal.
fn parse_journal_stream(text: &str) -> Option<(u64, u64)> {
    let (device, inode) = text.split_once(':')?;
    Some((device.parse().ok()?, inode.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_journal_stream_variable() {
        assert_eq!(parse_journal_stream("8:1234"), Some((8, 1234)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("x:1"), None);
        assert_eq!(parse_journal_stream(""), None);
    }
}
