//! `profilerctl status`: the daemon's figures, a line or a few per part —
//! sampling, losses, unwinding, off-CPU time, allocations, history, the
//! memory budget and what each part holds, JIT names, push targets and
//! peeks. Pure functions of the status reply (and of the time, for ages).

use std::{
    fmt::Write as _,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profilerd_client::v1;

use crate::format::{seconds, targets_text};

/// `profilerctl status`: zero counters of peeks are left out unless
/// `verbose`.
pub fn status(status: &v1::StatusReply, verbose: bool, now: SystemTime) -> String {
    let lost: Vec<String> = status
        .samples_lost
        .iter()
        .filter(|loss| verbose || loss.count > 0)
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    let symbolizer = status.symbolizer.clone().unwrap_or_default();
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
         processes:  {seen} seen, {tracked} tracked, {adopted} took the maps of the process that forked them ({before_exec} stacks from before an exec unwound with them); {map_records}; {lineages}\n\
         python:     {python}\n\
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
        before_exec = symbolizer.stacks_unwound_before_exec,
        map_records =
            memory_map_records_status(symbolizer.memory_map_records.as_ref(), status.drains),
        lineages = fork_lineages_status(symbolizer.fork_lineages.as_ref(), status.drains),
        python = python_status(symbolizer.python.as_ref()),
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
    text.push_str(&jit_status(status.jit.as_ref()));
    text.push_str(&memory_status(status.memory.as_ref()));
    for target in &status.push {
        text.push_str(&push_status(target, now));
    }
    text.push_str(&peek_status(
        &status.peek.clone().unwrap_or_default(),
        verbose,
    ));
    text
}

/// `held` bytes of at most `limit` (0: no bound).
fn bytes_held(held: u64, limit: u64) -> String {
    let kib = |bytes: u64| format!("{} KiB", bytes.div_ceil(1024));
    match limit {
        0 => kib(held),
        limit => format!("{} of at most {}", kib(held), kib(limit)),
    }
}

/// The CPython interpreters found, by version, and those refused, by
/// reason.
fn python_status(python: Option<&v1::PythonStatus>) -> String {
    let Some(python) = python else {
        return "not said by this daemon".to_owned();
    };
    let counts = |counts: &std::collections::HashMap<String, u64>| {
        let mut counts: Vec<_> = counts.iter().collect();
        counts.sort();
        counts
            .iter()
            .map(|(name, count)| format!("{name}: {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found: u64 = python.processes.values().sum();
    let mut text = match found {
        0 => "no CPython 3.11+ process found".to_owned(),
        found => format!(
            "{found} CPython processes found ({})",
            counts(&python.processes)
        ),
    };
    if !python.refused.is_empty() {
        text.push_str(&format!(
            "; {} refused ({})",
            python.refused.values().sum::<u64>(),
            counts(&python.refused)
        ));
    }
    if python.processes_limit > 0 {
        text.push_str(&format!(
            "; named to the kernel {} times (at most {} at once, {} refused); code objects: {} \
             of at most {} held, {} ({} read, {} unreadable, {} let go of), {} frames unnamed",
            python.processes_named,
            python.processes_limit,
            python.processes_refused_by_kernel,
            python.code_objects_held,
            python.code_objects_limit,
            bytes_held(python.code_objects_bytes, python.code_objects_bytes_limit),
            python.code_objects_read,
            python.code_objects_failed,
            python.code_objects_evicted,
            python.frames_unnamed,
        ));
        if python.code_object_readers_stuck > 0 {
            text.push_str(&format!(
                "; {} readers stuck in a process's memory",
                python.code_object_readers_stuck
            ));
        }
    }
    text
}

/// What the book of fork lineages holds (absent when forks are not
/// recorded: the frame-pointer mode).
fn fork_lineages_status(book: Option<&v1::ForkLineagesStatus>, drains: u64) -> String {
    match book {
        None if drains == 0 => "fork lineages: not known before the first drain".to_owned(),
        None => "fork lineages: not recorded".to_owned(),
        Some(book) => format!(
            "fork lineages: {} forked of at most {} ({} let go of), {} exec'd of at most {} \
             ({} let go of), {}",
            book.forked,
            book.forked_limit,
            book.forked_evicted,
            book.exec_left,
            book.exec_left_limit,
            book.exec_left_evicted,
            if book.bytes < 1 << 20 {
                format!("{} KiB", book.bytes.div_ceil(1024))
            } else {
                format!("{} MiB", mib(book.bytes))
            }
        ),
    }
}

/// What the kernel's records of memory maps hold (the processes gone before
/// procfs was read are recorded from them). The daemon says so from its
/// first drain on: before it, nothing is known either way.
fn memory_map_records_status(records: Option<&v1::MemoryMapRecordsStatus>, drains: u64) -> String {
    if records.is_none() && drains == 0 {
        return "memory maps as made: not known before the first drain".to_owned();
    }
    let Some(records) = records else {
        return "memory maps not followed as they are made (programs that exit within ~25 ms \
                show as [unmapped]; see the log)"
            .to_owned();
    };
    format!(
        "memory maps as made: {} mappings of at most {} ({} processes; {} recorded from them, \
         {} let go of, {} records lost)",
        records.mappings,
        records.mapping_limit,
        records.processes,
        records.processes_recalled,
        records.processes_evicted,
        records.records_lost
    )
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
    let limitation = if offcpu.limitation.is_empty() {
        String::new()
    } else {
        format!("; limited: {}", offcpu.limitation)
    };
    format!(
        "recorded for {} request(s), always {always}; {} switches seen, {} waits recorded \
         (and {} found waiting), {} charged, {} under way, {} unmatched, {} lost at their end, \
         {} lost with their stack{limitation}",
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
    if unwinding.deep_threads > 0 {
        text.push_str(&format!(
            "; {} deeper than a copy given copies of up to {} KiB (at most {} at once{})",
            if unwinding.deep_threads == 1 {
                "1 thread".to_owned()
            } else {
                format!("{} threads", unwinding.deep_threads)
            },
            unwinding.deep_copy_bytes / 1024,
            unwinding.deep_threads_limit,
            if unwinding.deep_threads_refused > 0 {
                format!(", {} refused by the kernel", unwinding.deep_threads_refused)
            } else {
                String::new()
            }
        ));
    }
    if unwinding.without_unwind_info > 0 {
        text.push_str(&format!(
            "; {} with frames walked without unwind info (frame pointers, call stubs)",
            unwinding.without_unwind_info
        ));
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
    text.push_str(&format!(
        "; {} of at most {} caches of unwind rules ({} emptied for another process)",
        unwinding.rule_caches, unwinding.rule_caches_limit, unwinding.rule_caches_emptied
    ));
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

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The memory lines, or none from a daemon that does not say.
pub fn memory_status(memory: Option<&v1::MemoryStatus>) -> String {
    let Some(memory) = memory else {
        return String::new();
    };
    let mut text = format!(
        "memory:     resident {} MiB (anonymous {}, files {}; the most so far {}), heap {} MiB; \
         budget {} MiB: the program ~{} and the kernel's ring buffers {} first, then\n",
        mib(memory.resident_bytes),
        mib(memory.resident_anonymous_bytes),
        mib(memory.resident_file_bytes),
        mib(memory.resident_peak_bytes),
        mib(memory.heap_bytes),
        mib(memory.budget_bytes),
        mib(memory.program_bytes),
        mib(memory.kernel_buffer_bytes),
    );
    let width = memory
        .parts
        .iter()
        .map(|part| part.name.len())
        .max()
        .unwrap_or(0);
    for part in &memory.parts {
        let _ = writeln!(
            text,
            "            {name:<width$}  {held:>7} of {share:>7} MiB; let go of: {evicted} {unit}",
            name = part.name,
            held = mib(part.held_bytes),
            share = mib(part.share_bytes),
            evicted = part.evicted,
            unit = part.evicted_unit,
        );
    }
    text
}

/// The JIT names line, or none from a daemon that does not say.
pub fn jit_status(jit: Option<&v1::JitStatus>) -> String {
    let Some(jit) = jit else {
        return String::new();
    };
    let refused: Vec<String> = jit
        .refused
        .iter()
        .filter(|refused| refused.cause != "none")
        .map(|refused| format!("{}={}", refused.cause, refused.count))
        .collect();
    format!(
        "jit names:  {} processes, {} names held; {} MiB of perf maps and jitdump files read, \
         {} too long lines or records, {} files past 64 MiB; refused: {}\n",
        jit.processes,
        jit.names,
        mib(jit.bytes_read),
        jit.lines_too_long,
        jit.files_cut,
        if refused.is_empty() {
            "none".to_owned()
        } else {
            refused.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_maps_unknown_before_the_first_drain_are_not_said_unfollowed() {
        assert!(memory_map_records_status(None, 0).contains("not known before the first drain"));
        assert!(memory_map_records_status(None, 3).contains("not followed"));
        assert!(fork_lineages_status(None, 3).contains("not recorded"));
        let python = v1::PythonStatus {
            processes: [("3.13.0".to_owned(), 1), ("3.11.2".to_owned(), 2)].into(),
            refused: [("before_3_11".to_owned(), 1)].into(),
            binaries: 3,
            processes_named: 4,
            processes_limit: 4096,
            code_objects_held: 10,
            code_objects_limit: 32768,
            code_objects_read: 11,
            code_objects_failed: 1,
            frames_unnamed: 2,
            code_objects_bytes: 2048,
            code_objects_bytes_limit: 6 << 20,
            ..Default::default()
        };
        assert_eq!(
            python_status(Some(&python)),
            "3 CPython processes found (3.11.2: 2, 3.13.0: 1); 1 refused (before_3_11: 1); named \
             to the kernel 4 times (at most 4096 at once, 0 refused); code objects: 10 of at most \
             32768 held, 2 KiB of at most 6144 KiB (11 read, 1 unreadable, 0 let go of), 2 frames \
             unnamed"
        );
        assert_eq!(
            python_status(Some(&v1::PythonStatus::default())),
            "no CPython 3.11+ process found"
        );
        let book = v1::ForkLineagesStatus {
            forked: 3,
            forked_limit: 32768,
            forked_evicted: 1,
            exec_left: 2,
            exec_left_limit: 4096,
            exec_left_evicted: 0,
            bytes: 1 << 20,
        };
        assert_eq!(
            fork_lineages_status(Some(&book), 1),
            "fork lineages: 3 forked of at most 32768 (1 let go of), 2 exec'd of at most 4096 \
             (0 let go of), 1.0 MiB"
        );
        let small = v1::ForkLineagesStatus {
            bytes: 3000,
            ..book
        };
        assert!(fork_lineages_status(Some(&small), 1).ends_with(", 3 KiB"));
        let records = v1::MemoryMapRecordsStatus {
            mappings: 7,
            ..Default::default()
        };
        assert!(memory_map_records_status(Some(&records), 0).starts_with("memory maps as made: 7"));
    }

    #[test]
    fn off_cpu_recording_says_what_it_lacks_on_this_kernel() {
        let whole = v1::OffCpuStatus {
            switches: 192,
            ..Default::default()
        };
        assert!(!offcpu_status(Some(&whole)).contains("limited"));
        let limited = v1::OffCpuStatus {
            limitation: "this kernel (6.1.0-57-amd64) cannot verify the off-CPU program that \
                         walks Python frames"
                .to_owned(),
            ..whole
        };
        assert!(
            offcpu_status(Some(&limited)).ends_with(
                "; limited: this kernel (6.1.0-57-amd64) cannot verify the off-CPU program that \
                 walks Python frames"
            ),
            "{}",
            offcpu_status(Some(&limited))
        );
        let unavailable = v1::OffCpuStatus {
            unavailable: "the kernel refused it".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            offcpu_status(Some(&unavailable)),
            "unavailable (the kernel refused it)"
        );
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
}
