//! Turning stack copies into samples: every copy the sampling programs
//! wrote is unwound (by the process table, with the binaries' unwind
//! information) soon after it was written, while the process's binaries
//! are still known, and counted with the samples of the same thread,
//! stacks and kind until the next drain takes them into its batch. The
//! copies of sampled allocations come through a ring buffer of their own,
//! read in the same passes.
//!
//! This module owns the stack-copy readers and the samples unwound since
//! the last drain; it must not symbolize or store.

use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use profiler_common::{SampleKind, python::status as python_status};
use rustc_hash::FxHashMap as HashMap;
use tracing::warn;

use profiler_common::offcpu::WaitingThread;

use super::blocked;
use super::waits::{WaitIdentity, WaitStats, Waits};
use crate::{
    kernel::announcements::{ForkLineages, LineageStats},
    kernel::{
        allocation_copies::AllocationCopies,
        drain::{RawSample, ThreadNames},
        offcpu::{OffCpuIntervals, RecordedProcesses, monotonic_now_ns, sample_scale},
        python_targets::{PythonTargetStats, PythonTargets},
        stack_copies::{DeepThreadStats, DeepThreads, StackCopies, StackCopy},
    },
    lock,
    profile::UnwindStop,
    symbols::{
        processes::ProcessTable,
        python::{self, code_objects::CodeLayout},
    },
    unwind::UserRegisters,
};

/// A pass over the stack copies this slow is worth a warning: the ring
/// buffer holds about a second of them.
const SLOW_PASS: Duration = Duration::from_millis(250);

/// How often the unwind information held is checked against its limit
/// (summing it means visiting every binary known).
const UNWIND_INFO_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What one unwinding pass found, which sets when the next comes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pass {
    /// The share of the stack-copy ring buffer (or of the allocation ring
    /// buffer, whichever is more) they filled.
    pub fill: f64,
    /// Off-CPU intervals read.
    pub intervals: usize,
    /// Sampled allocations read: while allocation profiles run, passes
    /// come at [`PRESSED_PASS_INTERVAL`], the pace their shares of the
    /// allocation ring are sized for.
    pub allocations: usize,
}

/// Passes while new programs start: a process forked without exec is
/// unwound with its parent's mappings whenever its copies are read, but one
/// that exec'd must be recorded (its mappings read from procfs) before it
/// exits or execs again, so a short-lived one is unwound whole only if it
/// lives this long after its first sample (a process that execs itself
/// every 50 ms lost most of its programs to passes every 100 ms). A pass
/// costs a wake-up on top of its work, which is the same however it is
/// split: 40 a second only while new programs keep starting.
pub const NEW_PROGRAMS_PASS_INTERVAL: Duration = Duration::from_millis(25);

/// How long after a pass that found a new program announced the passes
/// keep coming at [`NEW_PROGRAMS_PASS_INTERVAL`]: a program is announced
/// once (at its exec, or its first sample), so a process execing every
/// 50 ms has passes with none between those with one.
pub const NEW_PROGRAMS_LATELY: Duration = Duration::from_millis(500);

/// Passes while the ring buffers fill fast (off-CPU recording, peeks,
/// allocation profiling).
const PRESSED_PASS_INTERVAL: Duration = Duration::from_millis(50);

/// Passes when the last found no new program starting (an idle machine,
/// or one whose new processes are forked from those it knows, as a
/// server's workers or `perf bench sched messaging`'s are): no pass but
/// the drain's own. A wake-up costs this 2-CPU VM tens of microseconds,
/// most of a lightly loaded daemon's CPU (at 150 ms, an idle daemon spent
/// 0.27% of a core, half of it on passes). Nothing waits for it: a new
/// process's announcement wakes the drain thread (for a pass within
/// [`NEW_PROGRAMS_PASS_INTERVAL`] of the last), and so does a ring buffer a
/// quarter full (the eBPF programs' `ring_wake`; see `wakeups`).
const QUIET_PASS_INTERVAL: Duration = Duration::from_secs(1);

/// The share of the ring buffer filled between two passes from which they
/// come at [`PRESSED_PASS_INTERVAL`].
const PRESSED_FILL: f64 = 0.4;

impl Pass {
    /// How long to wait before the next pass, given what this one found
    /// and whether new programs were announced lately (see
    /// [`NEW_PROGRAMS_LATELY`]).
    pub fn next_in(&self, new_programs: bool) -> Duration {
        if new_programs {
            NEW_PROGRAMS_PASS_INTERVAL
        } else if self.fill >= PRESSED_FILL || self.intervals > 0 || self.allocations > 0 {
            PRESSED_PASS_INTERVAL
        } else {
            QUIET_PASS_INTERVAL
        }
    }
}

/// What makes two unwound samples the same sample.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SampleIdentity {
    pid: u32,
    tid: u32,
    uid: u32,
    gid: u32,
    cgroup: u64,
    comm: [u8; 16],
    kind: u32,
    flags: u32,
    user: Vec<u64>,
    user_stop: Option<UnwindStop>,
    kernel: Vec<u64>,
}

impl WaitIdentity for SampleIdentity {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn tid(&self) -> u32 {
        self.tid
    }

    fn with_kind(&self, kind: SampleKind) -> Self {
        Self {
            kind: kind as u32,
            ..self.clone()
        }
    }
}

/// Reads the stack copies and keeps the samples unwound from them.
pub struct StackCopyUnwinder {
    copies: StackCopies,
    /// The allocation ring buffer, when allocations can be profiled.
    allocation_copies: Option<AllocationCopies>,
    pending: HashMap<SampleIdentity, Pending>,
    /// Sampled allocations, each its own sample (with its size and id):
    /// whether it is still held is asked of each.
    allocations: Vec<(SampleIdentity, u64, u64)>,
    thread_names: ThreadNames,
    /// Off-CPU waits under way, when the switch program runs.
    waits: Option<Waits<SampleIdentity>>,
    /// Where new processes come from, when the fork tracepoint says: a
    /// process first met here (before its announcement is read) takes its
    /// parent's mappings from it too.
    lineages: Option<Arc<ForkLineages>>,
    /// When the unwind information held was last checked against its limit.
    unwind_info_checked: Instant,
    /// The threads whose copies are larger: those whose stacks a copy
    /// could not hold are named as they are met.
    deep_threads: Option<DeepThreads>,
    /// The processes whose Python frames the programs read: those whose
    /// interpreters were found are named as their samples are met.
    python_targets: Option<PythonTargets>,
}

impl StackCopyUnwinder {
    pub fn new(
        copies: StackCopies,
        allocation_copies: Option<AllocationCopies>,
        intervals: Option<(OffCpuIntervals, RecordedProcesses)>,
        lineages: Option<Arc<ForkLineages>>,
        deep_threads: Option<DeepThreads>,
        python_targets: Option<PythonTargets>,
    ) -> Self {
        Self {
            copies,
            deep_threads,
            python_targets,
            allocation_copies,
            pending: HashMap::default(),
            allocations: Vec::new(),
            thread_names: ThreadNames::default(),
            waits: intervals.map(|(intervals, recorded)| Waits::new(intervals, recorded)),
            lineages,
            unwind_info_checked: Instant::now(),
        }
    }

    /// The ring buffers whose writers wake the reader once one is a
    /// quarter full (stack copies, off-CPU intervals), so the drain thread
    /// sleeps on them between passes. Not the allocation ring: its
    /// profiles' shares are sized for the passes' pace (see
    /// [`Pass::allocations`]).
    pub fn rings(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let mut rings = vec![self.copies.as_fd()];
        rings.extend(self.waits.as_ref().map(Waits::intervals_ring));
        rings
    }

    /// The book of fork lineages, when forks are recorded.
    pub fn lineage_stats(&self) -> Option<LineageStats> {
        self.lineages.as_deref().map(ForkLineages::stats)
    }

    /// The processes whose Python frames the programs read, when stacks
    /// are copied.
    pub fn python_target_stats(&self) -> Option<PythonTargetStats> {
        self.python_targets.as_ref().map(PythonTargets::stats)
    }

    /// The threads named deep, when stacks are copied.
    pub fn deep_thread_stats(&self) -> Option<DeepThreadStats> {
        self.deep_threads.as_ref().map(DeepThreads::stats)
    }

    /// What became of the off-CPU waits, when they are recorded.
    pub fn wait_stats(&self) -> Option<WaitStats> {
        self.waits.as_ref().map(Waits::stats)
    }

    /// Notes the threads of `pid` already waiting as off-CPU recording of it
    /// begins, their stacks read from procfs and unwound as copies are.
    pub fn note_waiting_threads(
        &mut self,
        pid: u32,
        registers: &[WaitingThread],
        pages: u32,
        processes: &Mutex<ProcessTable>,
    ) {
        let Some(waits) = &mut self.waits else {
            return;
        };
        let threads = blocked::blocked_threads(pid, pages, registers);
        if threads.is_empty() {
            return;
        }
        let now = monotonic_now_ns();
        let mut table = lock(processes);
        for thread in threads {
            let copy = StackCopy {
                header: thread.header,
                stack: &thread.stack,
                python: Vec::new(),
            };
            let (identity, _) = unwind(&mut table, &copy, self.lineages.as_deref());
            waits.begin_already_waiting(identity, now);
        }
    }

    /// Unwinds every copy written so far, and charges the off-CPU intervals
    /// ended so far; says what the pass found.
    pub fn unwind_all(&mut self, processes: &Mutex<ProcessTable>) -> Pass {
        let started = Instant::now();
        let mut waited = Duration::ZERO;
        let intervals = self.waits.as_mut().map(Waits::read_intervals);
        let intervals_read = intervals.as_ref().map_or(0, Vec::len);
        let pending = &mut self.pending;
        let allocations = &mut self.allocations;
        let waits = &mut self.waits;
        let lineages = self.lineages.as_deref();
        let deep_threads = &mut self.deep_threads;
        let python_targets = &mut self.python_targets;
        let mut table = None;
        let mut visit = |copy: StackCopy<'_>| {
            let table = table.get_or_insert_with(|| {
                let asked = Instant::now();
                let table = lock(processes);
                waited = asked.elapsed();
                table
            });
            let (identity, weight) = unwind(table, &copy, lineages);
            // A stack deeper than its copy: the thread's next copies are
            // larger, up to the top of the mapping its stack is in.
            if identity.user_stop == Some(UnwindStop::StackCopyTooShort)
                && let Some(deep_threads) = deep_threads.as_mut()
                && let Some(top) = table.stack_top(identity.pid, copy.header.sp)
            {
                deep_threads.name(identity.tid, top);
            }
            // A sample without Python frames of a process whose interpreter
            // was found: the programs are told where its frames are.
            if python_status::outcome(copy.header.python_status) == python_status::NONE
                && let Some(targets) = python_targets.as_mut()
                && let Some(process) = table.python_of(identity.pid)
                && let Some(layout) = python::threads::kernel_layout(&process)
            {
                targets.name(identity.pid, layout);
            }
            let kind = SampleKind::from_raw(identity.kind);
            let off_cpu = kind.is_some_and(SampleKind::is_off_cpu);
            match waits {
                _ if kind == Some(SampleKind::Allocation) => {
                    allocations.push((identity, weight, copy.header.time_ns));
                }
                Some(waits) if off_cpu => {
                    let scale = sample_scale(copy.header.weight as u32);
                    waits.begin(identity, copy.header.time_ns, scale);
                }
                // A peek tick keeps its time: a timeline places it.
                _ if kind.is_some_and(SampleKind::is_peek) => {
                    add(pending, identity, weight)
                        .times_ns
                        .push(copy.header.time_ns);
                }
                _ => {
                    add(pending, identity, weight);
                }
            }
        };
        let mut count = self.copies.read(&mut visit);
        let mut fill = self.copies.last_fill();
        let mut allocations = 0;
        if let Some(allocation_copies) = &mut self.allocation_copies {
            allocations = allocation_copies.read(&mut visit);
            count += allocations;
            fill = fill.max(allocation_copies.last_fill());
        }
        if let (Some(waits), Some(intervals)) = (waits, intervals) {
            waits.end(intervals, |identity, nanos| {
                add(pending, identity, nanos);
            });
        }
        if let Some(table) = &mut table
            && self.unwind_info_checked.elapsed() >= UNWIND_INFO_CHECK_INTERVAL
        {
            self.unwind_info_checked = Instant::now();
            table.enforce_unwind_info_limit();
        }
        let pass = Pass {
            fill,
            intervals: intervals_read,
            allocations,
        };
        let took = started.elapsed();
        tracing::trace!(
            stacks = count,
            took_ms = took.as_secs_f64() * 1e3,
            waited_for_process_table_ms = waited.as_secs_f64() * 1e3,
            fill = pass.fill,
            "unwound the stack copies"
        );
        if took > SLOW_PASS {
            warn!(
                stacks = count,
                took_ms = took.as_millis() as u64,
                waited_for_process_table_ms = waited.as_millis() as u64,
                "unwinding fell behind; if this repeats, stack copies are lost \
                 (stack_copy_buffer_full): raise stack_copy_buffer or lower frequency_hz"
            );
        }
        pass
    }

    /// Takes the samples unwound since the last call, with the time of the
    /// waits still under way up to `cut_ns` (the drain's cut, monotonic):
    /// time after it belongs to the next window, however long unwinding
    /// took.
    pub fn take(&mut self, cut_ns: u64) -> Vec<RawSample> {
        if let Some(waits) = &mut self.waits {
            let pending = &mut self.pending;
            waits.credit_until(cut_ns, |identity, nanos| {
                add(pending, identity, nanos);
            });
        }
        let empty: Arc<[u64]> = Arc::from([]);
        let thread_names = &mut self.thread_names;
        let mut raw = |identity: SampleIdentity, count, weight, allocation_id, times_ns| {
            Some(RawSample {
                pid: identity.pid,
                tid: identity.tid,
                uid: identity.uid,
                gid: identity.gid,
                cgroup: identity.cgroup,
                thread_name: thread_names.get(&identity.comm),
                kind: SampleKind::from_raw(identity.kind)?,
                flags: identity.flags,
                user: Arc::from(identity.user),
                user_stop: identity.user_stop,
                kernel: if identity.kernel.is_empty() {
                    empty.clone()
                } else {
                    Arc::from(identity.kernel)
                },
                count,
                weight,
                allocation_id,
                times_ns,
            })
        };
        let mut samples: Vec<RawSample> = self
            .pending
            .drain()
            .filter_map(|(identity, pending)| {
                raw(identity, pending.count, pending.weight, 0, pending.times_ns)
            })
            .collect();
        samples.extend(
            self.allocations
                .drain(..)
                .filter_map(|(identity, size, id)| raw(identity, 1, size, id, Vec::new())),
        );
        samples
    }
}

/// The samples (or waits) of one identity unwound since the last take.
#[derive(Debug, Default)]
struct Pending {
    count: u64,
    weight: u64,
    /// When each was taken (monotonic), for peek ticks only.
    times_ns: Vec<u64>,
}

/// Counts one sample (or wait) of `weight` under `identity`.
fn add(
    pending: &mut HashMap<SampleIdentity, Pending>,
    identity: SampleIdentity,
    weight: u64,
) -> &mut Pending {
    let entry = pending.entry(identity).or_default();
    entry.count += 1;
    entry.weight += weight;
    entry
}

/// One copy unwound: its identity and weight.
fn unwind(
    table: &mut ProcessTable,
    copy: &StackCopy<'_>,
    lineages: Option<&ForkLineages>,
) -> (SampleIdentity, u64) {
    let header = &copy.header;
    let key = &header.key;
    if let Some(lineages) = lineages
        && !table.is_recorded(key.pid)
    {
        table.adopt_forked(key.pid, lineages.of(key.pid));
    }
    let registers = UserRegisters {
        ip: header.ip,
        sp: header.sp,
        bp: header.bp,
    };
    let ancestry = || lineages.map_or_else(Vec::new, |lineages| lineages.ancestry(key.pid));
    let unwound = table.unwind(key.pid, registers, header.stack_base, copy.stack, ancestry);
    let mut user = unwound.frames;
    // The Python frames the programs read take the evaluation loop's place.
    if !copy.python.is_empty()
        && let Some(process) = table.python_of(key.pid)
        && let Some(layout) = CodeLayout::of(process.interpreter.version)
    {
        user = python::frames::merge(
            &user,
            &process.eval_loop,
            &copy.python,
            &layout,
            header.python_status,
        );
    }
    (
        SampleIdentity {
            pid: key.pid,
            tid: key.tid,
            uid: key.uid,
            gid: key.gid,
            cgroup: key.cgroup,
            comm: key.comm,
            kind: key.kind,
            flags: key.flags,
            user,
            user_stop: unwound.stop,
            kernel: header.kernel_frames().to_vec(),
        },
        header.weight,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_come_sooner_while_new_programs_start_or_the_buffers_fill() {
        let busy = Pass {
            fill: 0.1,
            intervals: 0,
            allocations: 0,
        };
        assert_eq!(busy.next_in(false), QUIET_PASS_INTERVAL);
        assert_eq!(Pass::default().next_in(false), QUIET_PASS_INTERVAL);
        assert_eq!(busy.next_in(true), NEW_PROGRAMS_PASS_INTERVAL);
        let filling = Pass { fill: 0.5, ..busy };
        assert_eq!(filling.next_in(false), PRESSED_PASS_INTERVAL);
        let waits = Pass {
            intervals: 3,
            ..busy
        };
        assert_eq!(waits.next_in(false), PRESSED_PASS_INTERVAL);
        assert_eq!(waits.next_in(true), NEW_PROGRAMS_PASS_INTERVAL);
        let allocating = Pass {
            allocations: 1,
            ..busy
        };
        assert_eq!(allocating.next_in(false), PRESSED_PASS_INTERVAL);
    }
}
