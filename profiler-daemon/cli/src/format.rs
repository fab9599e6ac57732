//! The text profilerctl prints for what the daemon answers: status, top
//! updates, a report's summary line, targets, sessions. Pure functions of
//! the replies (and of the time, where ages are shown).

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profilerd_client::v1;

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
fn seconds(ms: u64) -> humantime::FormattedDuration {
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
        let _ = writeln!(text, "lost: {} {}", loss.count, loss.cause);
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
        "window of {seconds:.1}s at {} Hz: {} ({:.2} CPU-seconds{}), {}, {}; lost: {}",
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
        if lost.is_empty() {
            "none".to_owned()
        } else {
            lost.join(", ")
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

/// The summary of an allocation profile, for standard error.
pub fn allocs_summary(summary: &v1::ProfileSummary, output: Option<&Path>) -> String {
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let mut text = format!(
        "allocations over {seconds:.1}s (estimated from samples): {} bytes in {} allocated, \
         {} bytes in {} still held at the end",
        summary.allocated_bytes,
        plural(summary.allocated_objects, "object"),
        summary.held_bytes,
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

/// `profilerctl status`: zero counters of peeks are left out unless
/// `verbose`.
pub fn status(status: &v1::StatusReply, verbose: bool, now: SystemTime) -> String {
    let lost: Vec<String> = status
        .samples_lost
        .iter()
        .filter(|loss| verbose || loss.count > 0)
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    let symbolizer = status.symbolizer.unwrap_or_default();
    let store = status.store.unwrap_or_default();
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let history = if store.oldest_unix_nanos > 0 {
        let age = now
            .duration_since(UNIX_EPOCH)
            .map(|now| now.as_nanos() as i64 - store.oldest_unix_nanos)
            .unwrap_or(0)
            .max(0);
        let coarsest = if store.coarsest_bucket_ms > store.resolution_ms + 1000 {
            format!(
                " (the oldest coarsened up to {})",
                seconds(store.coarsest_bucket_ms)
            )
        } else {
            String::new()
        };
        format!(
            "the last {} at {} resolution{coarsest}",
            seconds(age as u64 / 1_000_000),
            seconds(store.resolution_ms)
        )
    } else {
        "none yet".to_owned()
    };
    let targets = match &status.targets {
        Some(targets) => targets_text(targets),
        None if status.targets_hidden => "not shown (root and the admin group only)".to_owned(),
        None => "every process".to_owned(),
    };
    let mut text = format!(
        "profilerd {version}, up {uptime}\n\
         sampling:   {cpus} CPUs at {hz} Hz; {taken} samples taken, {drains} drains (at most {gap} apart)\n\
         targets:    {targets} ({outside} ticks outside them)\n\
         lost:       {lost}\n\
         processes:  {seen} seen, {tracked} tracked, {adopted} took the maps of the process that forked them\n\
         symbolizer: {binaries} binaries parsed ({released} let go of when idle, {evicted_binaries} for memory; {symbols_only} named from their symbol tables only, their debug information too large for memory_budget), {user} user and {kernel} kernel addresses cached\n\
         unwinding:  {unwinding}\n\
         off-CPU:    {offcpu}\n\
         allocs:     {allocs}\n\
         history:    {history}; retention {retention}\n\
         store:      {used:.1} MiB of {limit:.1} MiB, {buckets} buckets, {stacks} stacks; for memory {coarsened} buckets merged, {evicted} evicted\n\
         sessions:   {sessions} open; longest profile {max}\n",
        version = status.version,
        uptime = seconds(status.uptime_ms),
        cpus = status.cpus.len(),
        hz = status.frequency_hz,
        taken = status.samples_taken,
        drains = status.drains,
        gap = seconds(status.longest_drain_gap_ms),
        outside = status.samples_outside_targets,
        lost = if lost.is_empty() {
            "none".to_owned()
        } else {
            lost.join(", ")
        },
        seen = status.processes_seen,
        unwinding = unwinding_status(status.unwinding.as_ref()),
        offcpu = offcpu_status(status.offcpu.as_ref()),
        allocs = allocation_status(status.allocations.as_ref()),
        tracked = symbolizer.processes_tracked,
        adopted = symbolizer.processes_adopted,
        binaries = symbolizer.binaries,
        released = symbolizer.binaries_released,
        evicted_binaries = symbolizer.binaries_evicted,
        symbols_only = symbolizer.binaries_symbols_only,
        user = symbolizer.user_addresses_cached,
        kernel = symbolizer.kernel_addresses_cached,
        used = mib(store.memory_bytes),
        limit = mib(store.memory_limit_bytes),
        buckets = store.buckets,
        stacks = store.distinct_stacks,
        retention = humantime::format_duration(Duration::from_millis(store.retention_ms)),
        evicted = store.buckets_evicted_for_memory,
        coarsened = store.buckets_coarsened_for_memory,
        sessions = status.open_sessions,
        max = humantime::format_duration(Duration::from_millis(status.max_profile_duration_ms)),
    );
    text.push_str(&crate::memory::jit_status(status.jit.as_ref()));
    text.push_str(&crate::memory::memory_status(status.memory.as_ref()));
    for target in &status.push {
        text.push_str(&push_status(target, now));
    }
    text.push_str(&peek_status(
        &status.peek.clone().unwrap_or_default(),
        verbose,
    ));
    text
}

/// A push target's line: where, what went through, what waits or failed.
fn push_status(target: &v1::PushTargetStatus, now: SystemTime) -> String {
    let last = if target.last_success_unix_ms > 0 {
        let ago = now
            .duration_since(UNIX_EPOCH)
            .map(|now| now.as_millis() as i64 - target.last_success_unix_ms)
            .unwrap_or(0)
            .max(0);
        format!("last success {} ago", seconds(ago as u64))
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

/// The off-CPU line of the status: whether waits are recorded, and what
/// came of them.
fn allocation_status(allocations: Option<&v1::AllocationStatus>) -> String {
    let Some(allocations) = allocations else {
        return "not reported by this daemon".to_owned();
    };
    if !allocations.unavailable.is_empty() {
        return format!("unavailable ({})", allocations.unavailable);
    }
    let counts = |counts: &[v1::LossCount]| {
        let nonzero: Vec<String> = counts
            .iter()
            .filter(|count| count.count > 0)
            .map(|count| format!("{}={}", count.cause, count.count))
            .collect();
        if nonzero.is_empty() {
            "none".to_owned()
        } else {
            nonzero.join(", ")
        }
    };
    format!(
        "{} process(es) profiled now, at most {} ({} of them kept for root and the admin \
         group); refused: {}; {} ended as their client went away, {} as their process \
         exited; {} allocations sampled, dropped: {}; ring of {} records, {} per profile now",
        allocations.profiles_running,
        allocations.profiles_limit,
        allocations.profiles_reserved,
        counts(&allocations.refused),
        allocations.abandoned,
        allocations.process_exited,
        allocations.sampled,
        counts(&allocations.dropped),
        allocations.ring_records,
        allocations.ring_share,
    )
}

fn offcpu_status(offcpu: Option<&v1::OffCpuStatus>) -> String {
    let Some(offcpu) = offcpu else {
        return "not reported by this daemon".to_owned();
    };
    if !offcpu.unavailable.is_empty() {
        return format!("unavailable ({})", offcpu.unavailable);
    }
    let always = if offcpu.sample_probability > 0.0 {
        format!("{:.2}% of every wait", offcpu.sample_probability * 100.0)
    } else {
        "none".to_owned()
    };
    format!(
        "recorded for {} request(s), always {always}; {} switches seen, {} waits recorded \
         (and {} found waiting), {} charged, {} under way, {} unmatched, {} lost at their end, \
         {} lost with their stack",
        offcpu.recordings,
        offcpu.switches,
        offcpu.recorded,
        offcpu.already_waiting,
        offcpu.charged,
        offcpu.under_way,
        offcpu.unmatched,
        offcpu.abandoned,
        offcpu.stack_lost + offcpu.dropped + offcpu.lost_whole
    )
}

/// The unwinding line of the status: how user stacks are unwound and how
/// that went.
fn unwinding_status(unwinding: Option<&v1::UnwindStatus>) -> String {
    let Some(unwinding) = unwinding else {
        return "unknown (an older daemon)".to_owned();
    };
    if unwinding.stack_copy_bytes == 0 {
        return "frame pointers, walked in the kernel (stack_copy = 0): callers of leaf \
                functions and of code without frame pointers are missing"
            .to_owned();
    }
    let stopped: u64 = unwinding.stopped.iter().map(|stop| stop.count).sum();
    let mut text = format!(
        "{copy} KiB stack copies unwound with .eh_frame; {complete} whole, {stopped} stopped short",
        copy = unwinding.stack_copy_bytes / 1024,
        complete = unwinding.complete,
    );
    if stopped > 0 {
        let reasons: Vec<String> = unwinding
            .stopped
            .iter()
            .map(|stop| format!("{} {}", stop.reason, stop.count))
            .collect();
        text.push_str(&format!(" ({})", reasons.join(", ")));
    }
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    text.push_str(&format!(
        "; unwind info of {} binaries held ({:.1} MiB",
        unwinding.binaries,
        mib(unwinding.bytes)
    ));
    if unwinding.limit > 0 {
        text.push_str(&format!(" of at most {:.0} MiB", mib(unwinding.limit)));
    }
    text.push(')');
    if unwinding.binaries_evicted > 0 {
        text.push_str(&format!(
            "; {} let go of to stay under the limit (raise unwind_info_limit if this grows fast)",
            unwinding.binaries_evicted
        ));
    }
    text
}

/// The peek lines of the status: how peeks are triggered, whether
/// processes without a handler are protected, then one counter a line.
fn peek_status(peek: &v1::PeekStatus, verbose: bool) -> String {
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
    let mut text = format!("peeks:      {trigger}\n            {protection}\n");
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

    fn status_reply() -> v1::StatusReply {
        v1::StatusReply {
            version: "0.1.0".into(),
            uptime_ms: 3_723_000,
            cpus: vec![0, 1],
            frequency_hz: 49,
            samples_taken: 1000,
            samples_lost: vec![
                v1::LossCount {
                    cause: "counts_map_full".into(),
                    count: 0,
                },
                v1::LossCount {
                    cause: "stack_map_full".into(),
                    count: 3,
                },
            ],
            peek: Some(v1::PeekStatus {
                signal: 10,
                signal_name: "SIGUSR1".into(),
                completed: 5,
                requests: 2,
                ..Default::default()
            }),
            targets_hidden: true,
            ..Default::default()
        }
    }

    #[test]
    fn status_shows_nonzero_counters_one_a_line() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let text = status(&status_reply(), false, now);
        assert!(text.contains("up 1h 2m 3s"), "{text}");
        assert!(text.contains("lost:       stack_map_full=3\n"), "{text}");
        assert!(!text.contains("counts_map_full"), "{text}");
        assert!(
            text.contains("targets:    not shown (root and the admin group only)"),
            "{text}"
        );
        assert!(text.contains("\n                  5 done\n"), "{text}");
        assert!(
            text.contains("\n                  2 peek requests\n"),
            "{text}"
        );
        assert!(!text.contains("failed"), "{text}");
        let verbose = status(&status_reply(), true, now);
        assert!(verbose.contains("counts_map_full=0"), "{verbose}");
        assert!(verbose.contains("      0 failed\n"), "{verbose}");
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
