//! The status lines of what the daemon serves besides its history: the
//! push targets, the peeks and the HTTP listener (with what its web view
//! may read). Pure functions of the status reply.

use std::{fmt::Write as _, time::SystemTime};

use profilerd_client::v1;

use super::milliseconds_since;
use crate::format::seconds;

/// A push target's line: where, what went through, what waits or failed.
pub(super) fn push_status(target: &v1::PushTargetStatus, now: SystemTime) -> String {
    let last = if target.last_success_unix_ms > 0 {
        let ago = milliseconds_since(now, target.last_success_unix_ms);
        format!("last success {} ago", seconds(ago))
    } else {
        "no success yet".to_owned()
    };
    let failures: Vec<String> = target
        .failures
        .iter()
        .map(|failure| format!("{}={}", failure.cause, failure.count))
        .collect();
    let mut line = format!(
        "push:       {} ({} {}): {} sent, {last}; {} queued ({} B), {} spooled ({} B), {} dropped",
        target.name,
        target.kind,
        target.url,
        target.sent,
        target.queued,
        target.queued_bytes,
        target.spooled,
        target.spooled_bytes,
        target.dropped
    );
    if !failures.is_empty() {
        line.push_str(&format!("; failures {}", failures.join(", ")));
    }
    if !target.last_error.is_empty() {
        line.push_str(&format!("; last error: {}", target.last_error));
    }
    line.push('\n');
    line
}

/// The peek lines of the status: how peeks are triggered, whether
/// processes without a handler are protected, then one counter a line.
pub(super) fn peek_status(peek: &v1::PeekStatus, verbose: bool) -> String {
    let trigger = if peek.signal == 0 || !peek.signal_off_reason.is_empty() {
        format!(
            "by signal off ({}); `profilerctl peek PID` works",
            if peek.signal_off_reason.is_empty() {
                "peek_signal = off"
            } else {
                &peek.signal_off_reason
            }
        )
    } else {
        format!("on {}", peek.signal_name)
    };
    let protection = if peek.protection_active {
        "processes without a handler are protected".to_owned()
    } else {
        format!(
            "processes without a handler are NOT protected ({})",
            peek.protection_reason
        )
    };
    let mut text = format!(
        "peeks:      {trigger}\n            {protection}\n            {} of {} slots in use \
         ({} peeks, {} processes profiled at a rate of their own); a user's processes hold at \
         most {} (max_concurrent_peeks)\n",
        peek.running + peek.rated_running,
        peek.max_concurrent,
        peek.running,
        peek.rated_running,
        (peek.max_concurrent / 2).max(1),
    );
    let counters = [
        (peek.completed, "done"),
        (peek.running.into(), "running"),
        (peek.failed, "failed"),
        (peek.signals, "peek signals received"),
        (peek.requests, "peek requests"),
        (peek.folded, "triggers folded into a running peek"),
        (peek.refused, "signals refused by the allowlist"),
        (peek.gone, "signals for processes that had exited"),
        (
            peek.killed,
            "processes terminated by the peek signal (no handler; see the log)",
        ),
        (
            peek.self_sent,
            "signals a process sent to itself (not peeks)",
        ),
        (
            peek.dropped_limit,
            "triggers dropped: max_concurrent_peeks running",
        ),
        (
            peek.dropped_user_limit,
            "triggers dropped: a user's peeks too many or too often",
        ),
        (
            peek.dropped_in_kernel,
            "signals dropped in the kernel (ring buffer full)",
        ),
        (
            peek.not_written,
            "reports not written to disk (kept in memory)",
        ),
        (
            peek.logged_briefly,
            "reports logged in one line (a user's beyond the first few a minute)",
        ),
    ];
    let mut shown = 0;
    for (count, what) in counters {
        if verbose || count > 0 {
            let _ = writeln!(text, "            {count:>7} {what}");
            shown += 1;
        }
    }
    if shown == 0 {
        text.push_str("            none yet (--verbose shows every counter)\n");
    }
    text
}

/// The HTTP listener's line: where it listens, and which source files its
/// web view's heatmap may show (none from a daemon that does not say, or
/// whose listener is off).
pub(super) fn http_status(http: Option<&v1::HttpStatus>) -> String {
    let Some(http) = http else {
        return String::new();
    };
    let how = match http.tls {
        true => "TLS, clients with a certificate of tls_client_ca",
        false => "plaintext on loopback, each client as the local user that connected",
    };
    let sources = match http.source_dirs.is_empty() {
        true => "reads no source file (http_source_dirs is empty, the default: it shows the \
                 counts by line number; profilerctl annotate reads the source as you)"
            .to_owned(),
        false => format!(
            "reads source files under http_source_dirs {} (regular files every user may read, \
             of {} MiB at most; {} at once, {} each at most)",
            http.source_dirs.join(", "),
            http.max_source_bytes >> 20,
            http.max_source_reads,
            seconds(http.source_read_timeout_ms)
        ),
    };
    format!(
        "http:       {} ({how}); the web view's source heatmap {sources}\n",
        http.listen
    )
}
