//! The text profilerctl prints for what the daemon answers: top updates, a
//! report's summary line, targets, sessions (the status has a module of its
//! own, `status`). Pure functions of the replies (and of the time, where
//! ages are shown).

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profilerd_client::v1;
use profilerd_words::bytes_with_count;

/// `1 process`, `2 processes`, `0 samples`.
pub fn plural(count: u64, noun: &str) -> String {
    match (count, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{count} {noun}es"),
        (_, false) => format!("{count} {noun}s"),
    }
}

/// A time in nanoseconds since the epoch as a date, e.g.
/// `2026-11-21T17:30:00Z`.
pub fn date(unix_nanos: i64) -> String {
    let time = UNIX_EPOCH + Duration::from_nanos(u64::try_from(unix_nanos).unwrap_or(0));
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Whole seconds, as humantime writes them (`1h 5m 3s`).
pub fn seconds(ms: u64) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(ms / 1000))
}

/// One update of `profilerctl top`: a summary line, then the functions.
pub fn top(update: &v1::TopUpdate) -> String {
    let summary = update.summary.clone().unwrap_or_default();
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    // Samples over ticks of one CPU: how many CPUs the selection kept busy.
    // With off-CPU time, CPU-seconds over seconds instead (the samples
    // count time waited too).
    let cpus = if seconds <= 0.0 || summary.frequency_hz == 0 {
        0.0
    } else if summary.off_cpu_nanos > 0 {
        summary.cpu_nanos as f64 / 1e9 / seconds
    } else {
        summary.samples as f64 / (seconds * f64::from(summary.frequency_hz))
    };
    let waited = if summary.off_cpu_nanos > 0 {
        format!(", {:.2} s off CPU", summary.off_cpu_nanos as f64 / 1e9)
    } else {
        String::new()
    };
    let mut text = format!(
        "profilerd top: {} in {seconds:.1}s ({cpus:.2} CPUs busy{waited}), {}, {}\n\n",
        plural(summary.samples, "sample"),
        plural(u64::from(summary.processes), "process"),
        plural(u64::from(summary.threads), "thread"),
    );
    for loss in &summary.lost {
        let _ = writeln!(text, "lost machine-wide: {} {}", loss.count, loss.cause);
    }
    text.push_str(" self%  total%    self   total  function  (module)\n");
    for function in &update.functions {
        let _ = writeln!(
            text,
            "{:>6.1} {:>6.1} {:>7} {:>7}  {}  ({})",
            function.self_percent,
            function.total_percent,
            function.self_samples,
            function.total_samples,
            function.function,
            function.module
        );
    }
    if update.functions.is_empty() {
        text.push_str("  (no samples of the selection in this interval)\n");
    }
    text
}

/// The line a report's window gets on standard error.
pub fn summary(summary: &v1::ProfileSummary, output: Option<&Path>) -> String {
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let lost: Vec<String> = summary
        .lost
        .iter()
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    let mut text = format!(
        "window of {seconds:.1}s at {} Hz: {} ({:.2} CPU-seconds{}), {}, {}; lost{}",
        summary.frequency_hz,
        plural(summary.samples, "sample"),
        summary.cpu_nanos as f64 / 1e9,
        if summary.off_cpu_nanos > 0 {
            format!(", {:.2} s off CPU", summary.off_cpu_nanos as f64 / 1e9)
        } else {
            String::new()
        },
        plural(u64::from(summary.processes), "process"),
        plural(u64::from(summary.threads), "thread"),
        // A time profile's losses are the whole machine's in the window,
        // and its own samples kept without their stacks (under `[lost…]`
        // frames); an allocation profile's (`alloc_…`) its own.
        if lost.is_empty() && summary.own_lost.is_empty() {
            ": none".to_owned()
        } else if lost.is_empty() {
            format!(": {}", own_losses(summary))
        } else if summary
            .lost
            .iter()
            .all(|loss| loss.cause.starts_with("alloc_"))
        {
            format!(": {}", lost.join(", "))
        } else if summary.own_lost.is_empty() {
            format!(
                " machine-wide: {}; of these samples, none kept without their stacks",
                lost.join(", ")
            )
        } else {
            format!(
                " machine-wide: {}; {}",
                lost.join(", "),
                own_losses(summary)
            )
        }
    );
    if let Some(path) = output {
        let _ = write!(text, "; report written to {}", path.display());
    }
    for warning in &summary.warnings {
        let _ = write!(text, "\nwarning: {warning}");
    }
    text
}

/// The report's own samples kept without their stacks, by cause.
fn own_losses(summary: &v1::ProfileSummary) -> String {
    let own: Vec<String> = summary
        .own_lost
        .iter()
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    format!(
        "of these samples, kept without their stacks (under [lost…] frames): {}",
        own.join(", ")
    )
}

/// The summary of an allocation profile, for standard error.
pub fn allocs_summary(summary: &v1::ProfileSummary, output: Option<&Path>) -> String {
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let mut text = format!(
        "allocations over {seconds:.1}s (estimated from samples): {} in {} allocated, {} in {} \
         still held at the end",
        bytes_with_count(summary.allocated_bytes),
        plural(summary.allocated_objects, "object"),
        bytes_with_count(summary.held_bytes),
        plural(summary.held_objects, "object"),
    );
    if let Some(path) = output {
        let _ = write!(text, "; report written to {}", path.display());
    }
    for warning in &summary.warnings {
        let _ = write!(text, "\nwarning: {warning}");
    }
    text
}

/// What the kernel samples, in a line.
pub fn targets_text(targets: &v1::Targets) -> String {
    if targets.everything {
        return "every process".to_owned();
    }
    let mut parts: Vec<String> = targets
        .pids
        .iter()
        .map(|pid| format!("pid {pid}"))
        .collect();
    parts.extend(
        targets
            .cgroups
            .iter()
            .map(|cgroup| format!("cgroup {cgroup}")),
    );
    parts.join(", ")
}

/// `profilerctl sessions`: one line per session.
pub fn sessions(sessions: &[v1::SessionInfo], now: SystemTime) -> String {
    if sessions.is_empty() {
        return "no profiling sessions are open\n".to_owned();
    }
    let mut text = String::from(
        "session id                 owner      started (age)                  selector\n",
    );
    for session in sessions {
        let owner = if session.remote {
            "remote".to_owned()
        } else {
            format!("uid {}", session.owner_uid)
        };
        let started =
            UNIX_EPOCH + Duration::from_nanos(u64::try_from(session.start_unix_nanos).unwrap_or(0));
        let age = now.duration_since(started).unwrap_or_default();
        let _ = writeln!(
            text,
            "{:<26} {owner:<10} {} ({}) {}",
            session.session_id,
            date(session.start_unix_nanos),
            humantime::format_duration(Duration::from_secs(age.as_secs())),
            selector_text(session.selector.as_ref())
        );
    }
    text
}

/// A selector in the CLI's flags.
pub fn selector_text(selector: Option<&v1::Selector>) -> String {
    let Some(selector) = selector else {
        return "every process".to_owned();
    };
    let mut parts = Vec::new();
    parts.extend(selector.pids.iter().map(|pid| format!("--pid {pid}")));
    parts.extend(selector.tids.iter().map(|tid| format!("--tid {tid}")));
    parts.extend(selector.comms.iter().map(|comm| format!("--comm {comm}")));
    if !selector.comm_regex.is_empty() {
        parts.push(format!("--comm-regex {}", selector.comm_regex));
    }
    parts.extend(selector.uids.iter().map(|uid| format!("--uid {uid}")));
    parts.extend(
        selector
            .cgroups
            .iter()
            .map(|cgroup| format!("--cgroup {cgroup}")),
    );
    if parts.is_empty() {
        "every process".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "process"), "1 process");
        assert_eq!(plural(2, "process"), "2 processes");
        assert_eq!(plural(0, "sample"), "0 samples");
    }

    #[test]
    fn summaries_and_sessions_read_plainly() {
        let line = summary(
            &v1::ProfileSummary {
                start_unix_nanos: 0,
                end_unix_nanos: 2_000_000_000,
                frequency_hz: 99,
                samples: 1,
                cpu_nanos: 10_000_000,
                processes: 1,
                threads: 2,
                warnings: vec!["cut".into()],
                ..Default::default()
            },
            Some(Path::new("/tmp/x")),
        );
        assert_eq!(
            line,
            "window of 2.0s at 99 Hz: 1 sample (0.01 CPU-seconds), 1 process, 2 threads; lost: \
             none; report written to /tmp/x\nwarning: cut"
        );
        // Losses are the whole machine's, and said to be; and the report's
        // own samples kept without their stacks, by cause.
        let count = |cause: &str, count| v1::LossCount {
            cause: cause.into(),
            count,
        };
        let line = |lost: Vec<v1::LossCount>, own_lost: Vec<v1::LossCount>| {
            summary(
                &v1::ProfileSummary {
                    end_unix_nanos: 1_000_000_000,
                    frequency_hz: 99,
                    lost,
                    own_lost,
                    ..Default::default()
                },
                None,
            )
        };
        let machine = || vec![count("stack_copy_buffer_full", 567)];
        let own = || vec![count("stack_copy_ring_full", 12)];
        let own_said = "of these samples, kept without their stacks (under [lost…] frames): \
                        stack_copy_ring_full=12";
        for (text, expected) in [
            (
                line(machine(), vec![]),
                "; lost machine-wide: stack_copy_buffer_full=567; of these samples, none kept \
                 without their stacks"
                    .to_owned(),
            ),
            (
                line(machine(), own()),
                format!("; lost machine-wide: stack_copy_buffer_full=567; {own_said}"),
            ),
            (line(vec![], own()), format!("; lost: {own_said}")),
        ] {
            assert!(text.ends_with(&expected), "{text}");
        }
        let now = UNIX_EPOCH + Duration::from_secs(100);
        let listed = sessions(
            &[v1::SessionInfo {
                session_id: "abc".into(),
                owner_uid: 65534,
                start_unix_nanos: 40_000_000_000,
                selector: Some(v1::Selector {
                    pids: vec![7],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            now,
        );
        assert!(
            listed.contains(
                "abc                        uid 65534  1970-01-01T00:00:40Z (1m) --pid 7"
            ),
            "{listed}"
        );
        assert_eq!(sessions(&[], now), "no profiling sessions are open\n");
    }

    #[test]
    fn top_updates_say_how_busy() {
        let text = top(&v1::TopUpdate {
            summary: Some(v1::ProfileSummary {
                end_unix_nanos: 1_000_000_000,
                frequency_hz: 100,
                samples: 150,
                ..Default::default()
            }),
            functions: vec![v1::TopFunction {
                function: "spin".into(),
                module: "app".into(),
                self_samples: 150,
                total_samples: 150,
                self_percent: 100.0,
                total_percent: 100.0,
            }],
        });
        assert!(text.starts_with("profilerd top: 150 samples in 1.0s (1.50 CPUs busy)"));
        assert!(text.contains("spin  (app)"), "{text}");
    }
}
