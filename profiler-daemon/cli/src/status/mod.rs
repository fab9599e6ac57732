//! `profilerctl status`: the daemon's figures, a line or a few per part —
//! sampling, losses, unwinding, off-CPU time, allocations, history, the
//! memory budget and what each part holds, JIT names, push targets, the
//! HTTP listener and peeks (those three in `serving`). Pure functions of
//! the status reply (and of the time, for ages).

mod serving;

use std::{
    fmt::Write as _,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profilerd_client::v1;

use crate::format::{seconds, targets_text};
use serving::{http_status, peek_status, push_status};

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
        let age = milliseconds_since(now, store.oldest_unix_nanos / 1_000_000);
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
            seconds(age),
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
    text.push_str(&http_status(status.http.as_ref()));
    text.push_str(&peek_status(
        &status.peek.clone().unwrap_or_default(),
        verbose,
    ));
    text
}

/// Milliseconds from `unix_ms` (Unix milliseconds) to `now`; 0 when it is
/// later.
fn milliseconds_since(now: SystemTime, unix_ms: i64) -> u64 {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |now| now.as_millis() as i64);
    now.saturating_sub(unix_ms).max(0) as u64
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
mod tests;
