//! The programs the daemon loads, in the nine groups of [`ProgramGroup`]
//! that load and attach together: the CPU-clock sampler, the process
//! lifecycle tracepoints, the peek sampler, the peek signal watcher, the
//! peek signal guard, the fork follower, the fork lineage tracepoints,
//! off-CPU recording and the allocator uprobes. A required group that
//! fails stops the daemon; an optional one is left off, and the daemon
//! says what it cannot do without it.
//!
//! Owns how each group attaches; it must not read their maps.

use std::io;

use aya::{
    Ebpf, EbpfError,
    programs::{
        BtfTracePoint, Iter, Lsm, PerfEvent, ProgramError, TracePoint, UProbe,
        perf_event::{
            PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
        },
    },
};
use profiler_common::{names, signal_generate};
use tracing::{info, warn};

use super::{OptionalProgramError, ProgramSettings, SamplingError};
use crate::kernel::{btf::BtfError, requirements::TRACEFS};

/// A group of programs that load and attach together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProgramGroup {
    /// Where samples come from: the CPU-clock sampler on every CPU,
    /// copying user stacks into the stack-copy ring buffer and aggregating
    /// the rest into the counts and stacks maps.
    SampleSource,
    /// The exec and exit tracepoints that keep process announcements
    /// fresh (need tracefs).
    ProcessLifecycle,
    /// The per-thread sampler of peeks (loaded now, attached per peek).
    PeekSampling,
    /// The peek signal watcher (needs tracefs and a peek signal).
    PeekSignals,
    /// The BPF LSM guard that keeps the peek signal from processes without
    /// a handler (where the kernel allows BPF LSM).
    SignalGuard,
    /// The fork follower of `profilerctl record`.
    ForkFollower,
    /// The fork and exec BTF tracepoints that record where processes
    /// forked without exec come from.
    ForkLineage,
    /// The context-switch and wake-up BTF tracepoints of off-CPU time.
    OffCpu,
    /// The allocator uprobes of allocation profiling (loaded now,
    /// attached per profiled process; need stack copies).
    Allocations,
}

impl ProgramGroup {
    /// Every group, in the order they load: sampling last, so that no
    /// stack copy is written before the daemon is about to read them (the
    /// other groups took ~0.3 s to attach, a storm's copies of that time
    /// more than the ring buffer holds).
    pub const ALL: [ProgramGroup; 9] = [
        ProgramGroup::ProcessLifecycle,
        ProgramGroup::PeekSampling,
        ProgramGroup::PeekSignals,
        ProgramGroup::SignalGuard,
        ProgramGroup::ForkFollower,
        ProgramGroup::ForkLineage,
        ProgramGroup::OffCpu,
        ProgramGroup::Allocations,
        ProgramGroup::SampleSource,
    ];

    /// What the daemon cannot do while the group is off, for the log.
    pub fn without(self) -> &'static str {
        match self {
            ProgramGroup::SampleSource | ProgramGroup::PeekSampling => "nothing works",
            ProgramGroup::ProcessLifecycle => {
                "processes that exec or exit are not announced again (they are read at the \
                 next drain instead)"
            }
            ProgramGroup::PeekSignals => {
                "peeks by signal are off; `profilerctl peek PID` still works"
            }
            ProgramGroup::SignalGuard => {
                "a peek signal to a process without a handler terminates it"
            }
            ProgramGroup::ForkFollower => {
                "processes' children cannot be followed (`profilerctl record`)"
            }
            ProgramGroup::ForkLineage => {
                "each new process has its /proc/PID/stat read to see whether it shares its \
                 parent's mappings"
            }
            ProgramGroup::OffCpu => "off-CPU and wall-clock time cannot be recorded",
            ProgramGroup::Allocations => "allocations cannot be profiled",
        }
    }

    /// Loads and attaches the group's programs.
    pub(super) fn attach(
        self,
        ebpf: &mut Ebpf,
        context: &AttachContext<'_>,
    ) -> Result<Attached, GroupFailure> {
        match self {
            ProgramGroup::SampleSource => {
                let sampler: &mut PerfEvent = program(ebpf, names::PROGRAM_SAMPLE_CPU)?;
                sampler.load().map_err(program_load_error)?;
                let links =
                    attach_cpu_clocks(sampler, context.cpus, context.settings.frequency_hz)?;
                Ok(Attached::CpuClocks(links))
            }
            ProgramGroup::ProcessLifecycle => {
                follow_process_lifecycle(ebpf, context.tracefs)?;
                Ok(Attached::Done)
            }
            ProgramGroup::PeekSampling => {
                let peeker: &mut PerfEvent = program(ebpf, names::PROGRAM_SAMPLE_PEEK)?;
                peeker.load().map_err(program_load_error)?;
                Ok(Attached::Done)
            }
            ProgramGroup::PeekSignals => {
                if let Some(err) = context.tracefs {
                    return Err(GroupFailure::Off(OptionalProgramError::Tracefs(
                        err.to_string(),
                    )));
                }
                watch_signals(ebpf, context.settings.peek_signal)?;
                Ok(Attached::Done)
            }
            ProgramGroup::SignalGuard => {
                if context.settings.peek_signal == 0 {
                    return Err(OptionalProgramError::PeeksBySignalOff.into());
                }
                if let Some(err) = context.signal_layout {
                    return Err(OptionalProgramError::from(err.clone()).into());
                }
                guard_peek_signal(ebpf)?;
                Ok(Attached::Done)
            }
            ProgramGroup::ForkFollower => {
                follow_forks(ebpf)?;
                Ok(Attached::Done)
            }
            ProgramGroup::ForkLineage => {
                if let Some(err) = context.signal_layout.or(context.process_layout) {
                    return Err(OptionalProgramError::from(err.clone()).into());
                }
                record_fork_lineages(ebpf)?;
                Ok(Attached::Done)
            }
            ProgramGroup::OffCpu => {
                if let Some(err) = context.signal_layout {
                    return Err(OptionalProgramError::from(err.clone()).into());
                }
                Ok(Attached::Switches(record_switches(ebpf)?))
            }
            ProgramGroup::Allocations => {
                if context.settings.stack_copy_pages == 0 {
                    return Err(OptionalProgramError::NoStackCopies.into());
                }
                for name in [
                    names::PROGRAM_ALLOCATOR_ENTRY,
                    names::PROGRAM_ALLOCATOR_RETURN,
                ] {
                    let probe: &mut UProbe = program(ebpf, name)?;
                    probe.load().map_err(load_failed(name))?;
                }
                Ok(Attached::Done)
            }
        }
    }
}

/// What the groups need to attach.
pub(super) struct AttachContext<'a> {
    pub cpus: &'a [u32],
    pub settings: &'a ProgramSettings,
    /// Why tracefs is not there, when it is not.
    pub tracefs: Option<&'a SamplingError>,
    /// Why the kernel fields the signal programs read were not found.
    pub signal_layout: Option<&'a BtfError>,
    /// Why the memory descriptor fields the fork tracepoint reads (the
    /// task's `mm`, its program's layout) were not found.
    pub process_layout: Option<&'a BtfError>,
}

/// What a group left to keep.
pub(super) enum Attached {
    /// The CPU clocks' links, one per CPU.
    CpuClocks(Vec<PerfEventLinkId>),
    /// The off-CPU switch program loaded.
    Switches(SwitchProgram),
    Done,
}

/// The off-CPU switch program loaded: `record_switch`, or where the
/// kernel's verifier cannot check it, the one without Python frames.
#[derive(Clone, Debug)]
pub struct SwitchProgram {
    pub name: &'static str,
    /// What off-CPU recording lacks with it, when it is not the whole one.
    pub limitation: Option<String>,
}

impl Default for SwitchProgram {
    fn default() -> Self {
        Self {
            name: names::PROGRAM_RECORD_SWITCH,
            limitation: None,
        }
    }
}

/// Why a group is not running.
#[derive(Debug)]
pub(super) enum GroupFailure {
    /// A required group failed: the daemon cannot run.
    Fatal(SamplingError),
    /// An optional group is off.
    Off(OptionalProgramError),
}

impl From<SamplingError> for GroupFailure {
    fn from(err: SamplingError) -> Self {
        Self::Fatal(err)
    }
}

impl From<OptionalProgramError> for GroupFailure {
    fn from(err: OptionalProgramError) -> Self {
        Self::Off(err)
    }
}

pub(super) fn program<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut P, SamplingError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program>,
{
    ebpf.program_mut(name)
        .and_then(|program| program.try_into().ok())
        .ok_or(SamplingError::Missing(name))
}

/// Attaches the CPU-clock sampler to every CPU at `frequency_hz`; on an
/// error, the CPUs attached so far are detached again.
pub(super) fn attach_cpu_clocks(
    sampler: &mut PerfEvent,
    cpus: &[u32],
    frequency_hz: u32,
) -> Result<Vec<aya::programs::perf_event::PerfEventLinkId>, SamplingError> {
    let mut links = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        match sampler.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(u64::from(frequency_hz)),
            false,
        ) {
            Ok(link) => links.push(link),
            Err(source) => {
                for link in links {
                    let _ = sampler.detach(link);
                }
                return Err(SamplingError::AttachCpuClock { cpu, source });
            }
        }
    }
    Ok(links)
}

/// Attaches the peek signal watcher, after checking that the tracepoint's
/// fields are where the program reads them.
fn watch_signals(ebpf: &mut Ebpf, signal: u32) -> Result<(), OptionalProgramError> {
    if signal == 0 {
        return Err(OptionalProgramError::PeeksBySignalOff);
    }
    let format_path = format!("{TRACEFS}/events/signal/signal_generate/format");
    let format = std::fs::read_to_string(&format_path).map_err(|err| {
        OptionalProgramError::TracepointFormat(format!("cannot read {format_path}: {err}"))
    })?;
    for (field, offset) in signal_generate::FIELDS {
        if field_offset(&format, field) != Some(offset) {
            return Err(OptionalProgramError::TracepointFormat(format!(
                "the kernel's signal:signal_generate tracepoint does not have `{field}` at \
                 offset {offset} ({format_path})"
            )));
        }
    }
    const PROGRAM: &str = "the signal:signal_generate tracepoint";
    let program: &mut TracePoint = program(ebpf, names::PROGRAM_WATCH_SIGNALS)
        .map_err(|_| OptionalProgramError::Missing(names::PROGRAM_WATCH_SIGNALS))?;
    program.load().map_err(load_failed(PROGRAM))?;
    program
        .attach("signal", "signal_generate")
        .map_err(attach_failed(PROGRAM))?;
    Ok(())
}

/// Loads the exec and exit tracepoints, and attaches them where tracefs is.
fn follow_process_lifecycle(
    ebpf: &mut Ebpf,
    tracefs: Option<&SamplingError>,
) -> Result<(), GroupFailure> {
    const TRACEPOINTS: [(&str, &str); 2] = [
        (names::PROGRAM_FORGET_ON_EXEC, "sched_process_exec"),
        (names::PROGRAM_FORGET_ON_EXIT, "sched_process_exit"),
    ];
    for (name, _) in TRACEPOINTS {
        let program: &mut TracePoint = program(ebpf, name)?;
        program.load().map_err(program_load_error)?;
    }
    if let Some(err) = tracefs {
        return Err(OptionalProgramError::Tracefs(err.to_string()).into());
    }
    for (name, tracepoint) in TRACEPOINTS {
        let program: &mut TracePoint = program(ebpf, name)?;
        program
            .attach("sched", tracepoint)
            .map_err(attach_failed(tracepoint))?;
    }
    Ok(())
}

/// Loads and attaches the fork follower (a BTF tracepoint: no tracefs).
fn follow_forks(ebpf: &mut Ebpf) -> Result<(), OptionalProgramError> {
    const PROGRAM: &str = "the sched_process_fork BTF tracepoint";
    let btf = kernel_btf()?;
    let tracepoint = (names::PROGRAM_FOLLOW_FORKS, "sched_process_fork", PROGRAM);
    load_btf_tracepoint(ebpf, &btf, tracepoint)?
        .attach()
        .map_err(attach_failed(PROGRAM))?;
    Ok(())
}

/// Loads and attaches the fork and exec BTF tracepoints of fork lineages.
fn record_fork_lineages(ebpf: &mut Ebpf) -> Result<(), OptionalProgramError> {
    let btf = kernel_btf()?;
    for (name, tracepoint, what) in [
        (
            names::PROGRAM_RECORD_FORKS,
            "sched_process_fork",
            "the sched_process_fork BTF tracepoint",
        ),
        (
            names::PROGRAM_FORGET_FORKS_ON_EXEC,
            "sched_process_exec",
            "the sched_process_exec BTF tracepoint",
        ),
    ] {
        load_btf_tracepoint(ebpf, &btf, (name, tracepoint, what))?
            .attach()
            .map_err(attach_failed(what))?;
    }
    Ok(())
}

/// Loads the BTF tracepoint program `name` for `tracepoint` (`what`, for
/// errors).
fn load_btf_tracepoint<'a>(
    ebpf: &'a mut Ebpf,
    btf: &aya::Btf,
    (name, tracepoint, what): (&'static str, &str, &'static str),
) -> Result<&'a mut BtfTracePoint, OptionalProgramError> {
    let program: &mut BtfTracePoint =
        program(ebpf, name).map_err(|_| OptionalProgramError::Missing(name))?;
    program.load(tracepoint, btf).map_err(load_failed(what))?;
    Ok(program)
}

/// Loads `record_switch`, or where the verifier gives up on it,
/// `record_switch_without_python`, saying (in the log and in what it
/// returns) what off-CPU recording then lacks.
fn load_switch_program(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    what: &'static str,
) -> Result<SwitchProgram, OptionalProgramError> {
    let whole: &mut BtfTracePoint = program(ebpf, names::PROGRAM_RECORD_SWITCH)
        .map_err(|_| OptionalProgramError::Missing(names::PROGRAM_RECORD_SWITCH))?;
    let Err(err) = whole.load("sched_switch", btf) else {
        return Ok(SwitchProgram::default());
    };
    let Some(last_words) = verifier_gave_up(&err) else {
        return Err(load_failed(what)(err));
    };
    load_btf_tracepoint(
        ebpf,
        btf,
        (
            names::PROGRAM_RECORD_SWITCH_WITHOUT_PYTHON,
            "sched_switch",
            what,
        ),
    )?;
    let limitation = format!(
        "this kernel ({}) cannot verify the off-CPU program that walks Python frames (its \
         verifier gave up at its complexity limit: {last_words}): off-CPU and wall-clock stacks \
         of Python processes show the interpreter's own frames, not Python's; Linux 6.12 and \
         later verify it",
        crate::kernel::requirements::kernel_release()
    );
    warn!("{limitation}");
    Ok(SwitchProgram {
        name: names::PROGRAM_RECORD_SWITCH_WITHOUT_PYTHON,
        limitation: Some(limitation),
    })
}

/// Loads and attaches the context-switch and wake-up BTF tracepoints:
/// `record_switch`, or when the kernel's verifier gives up on it at its
/// complexity limit (Linux 6.1), `record_switch_without_python`.
fn record_switches(ebpf: &mut Ebpf) -> Result<SwitchProgram, OptionalProgramError> {
    const SWITCH: &str = "the sched_switch BTF tracepoint";
    const WAKEUP: &str = "the sched_wakeup BTF tracepoint";
    let btf = kernel_btf()?;
    let switch = load_switch_program(ebpf, &btf, SWITCH)?;
    load_btf_tracepoint(
        ebpf,
        &btf,
        (names::PROGRAM_RECORD_WAKEUP, "sched_wakeup", WAKEUP),
    )?;
    for (name, what) in [
        (switch.name, SWITCH),
        (names::PROGRAM_RECORD_WAKEUP, WAKEUP),
    ] {
        let program: &mut BtfTracePoint =
            program(ebpf, name).map_err(|_| OptionalProgramError::Missing(name))?;
        // Attached only while something is recorded (see `offcpu`); once
        // now, so that a kernel that refuses says so at start.
        let link = program.attach().map_err(attach_failed(what))?;
        program.detach(link).map_err(attach_failed(what))?;
    }
    // Best effort: without it, threads already waiting when recording
    // begins are read from procfs alone (no frame pointer, no kernel stack).
    match program::<Iter>(ebpf, names::PROGRAM_READ_WAITING_THREADS) {
        Ok(iterator) => {
            if let Err(err) = iterator.load("task", &btf) {
                warn!(
                    "the kernel refused the task iterator ({}): the stacks of threads already \
                     waiting when off-CPU recording begins are read from procfs alone",
                    error_chain(&err)
                );
            }
        }
        Err(err) => warn!("{err}"),
    }
    Ok(switch)
}

/// The kernel's BTF, as aya reads it.
fn kernel_btf() -> Result<aya::Btf, OptionalProgramError> {
    aya::Btf::from_sys_fs().map_err(|err| OptionalProgramError::Btf(err.to_string()))
}

/// Loads and attaches the BPF LSM guard on `task_kill`.
fn guard_peek_signal(ebpf: &mut Ebpf) -> Result<(), OptionalProgramError> {
    const PROGRAM: &str = "the BPF LSM guard on task_kill";
    let btf = kernel_btf()?;
    let program: &mut Lsm = program(ebpf, names::PROGRAM_GUARD_PEEK_SIGNAL)
        .map_err(|_| OptionalProgramError::Missing(names::PROGRAM_GUARD_PEEK_SIGNAL))?;
    program.load("task_kill", &btf).map_err(|err| {
        if io_errno(&err) == Some(libc::EPERM) {
            OptionalProgramError::LsmRefused
        } else {
            load_failed(PROGRAM)(err)
        }
    })?;
    program.attach().map_err(attach_failed(PROGRAM))?;
    info!("peek signals to processes without a handler are intercepted (BPF LSM on task_kill)");
    Ok(())
}

/// The offset of a field in a tracepoint's `format` file.
pub(super) fn field_offset(format: &str, field: &str) -> Option<usize> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let declaration = parts.next()?.strip_prefix("field:")?;
        let name = declaration.rsplit([' ', '*']).next()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        parts.find_map(|part| part.strip_prefix("offset:")?.parse().ok())
    })
}

pub(super) fn load_error(err: EbpfError) -> SamplingError {
    // The verifier rejecting a program says EACCES too, with its log: not
    // a matter of privileges.
    if let EbpfError::ProgramError(program) = err {
        return program_load_error(program);
    }
    if let Some(errno) = io_errno(&err) {
        match errno {
            libc::EPERM | libc::EACCES => return SamplingError::PermissionDenied,
            libc::ENOSYS => return SamplingError::NoBpfSyscall,
            _ => {}
        }
    }
    SamplingError::Load(error_chain(&err))
}

fn program_load_error(err: ProgramError) -> SamplingError {
    if let Some(log) = verifier_gave_up(&err) {
        return SamplingError::VerifierLimit {
            release: crate::kernel::requirements::kernel_release(),
            log,
        };
    }
    if let ProgramError::LoadError {
        io_error,
        verifier_log,
    } = &err
        && matches!(io_error.raw_os_error(), Some(libc::EPERM | libc::EACCES))
        && verifier_log.to_string().trim().is_empty()
    {
        return SamplingError::PermissionDenied;
    }
    SamplingError::Load(error_chain(&err))
}

/// The last words of a verifier that gave up at its complexity limit (E2BIG
/// with a log: a million instructions checked, or too long a sequence of
/// jumps); `None` for any other error (without a log, the kernel refused
/// the request itself).
fn verifier_gave_up(err: &ProgramError) -> Option<String> {
    let ProgramError::LoadError {
        io_error,
        verifier_log,
    } = err
    else {
        return None;
    };
    if io_error.raw_os_error() != Some(libc::E2BIG) || verifier_log.to_string().trim().is_empty() {
        return None;
    }
    // Its log is the path it was checking: its last lines say where.
    let log = error_chain(err);
    let lines: Vec<&str> = log.lines().filter(|line| !line.trim().is_empty()).collect();
    Some(lines[lines.len().saturating_sub(3)..].join(" / "))
}

/// The errno at the root of an aya error, if there is one.
fn io_errno(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<io::Error>()
            && let Some(errno) = io.raw_os_error()
        {
            return Some(errno);
        }
        source = err.source();
    }
    None
}

fn load_failed(program: &'static str) -> impl FnOnce(ProgramError) -> OptionalProgramError {
    move |err| OptionalProgramError::Load {
        program,
        reason: error_chain(&err),
    }
}

fn attach_failed(program: &'static str) -> impl FnOnce(ProgramError) -> OptionalProgramError {
    move |err| OptionalProgramError::Attach {
        program,
        reason: error_chain(&err),
    }
}

pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(": ");
        text.push_str(&err.to_string());
        source = err.source();
    }
    text
}
