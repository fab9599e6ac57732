//! Why the programs could not be loaded (the daemon cannot run:
//! [`SamplingError`]) and why an optional group is off (the daemon runs
//! without it, and says so: [`OptionalProgramError`]).
//!
//! Owns the error types only.

use std::io;

use aya::programs::ProgramError;

use crate::kernel::{
    btf::BtfError,
    requirements::{OLDEST_SUPPORTED, OLDEST_TESTED, TRACEFS, VMLINUX_BTF},
};

/// Why the kernel side cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SamplingError {
    #[error(
        "the kernel has no BTF type information ({VMLINUX_BTF} is missing): profilerd needs a \
         kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf,
    #[error(
        "the kernel has no perf events (/proc/sys/kernel/perf_event_paranoid is missing): \
         profilerd needs a kernel built with CONFIG_PERF_EVENTS=y"
    )]
    NoPerfEvents,
    #[error(
        "this kernel ({release}) has no {missing}: profilerd needs Linux {OLDEST_SUPPORTED} or \
         later (it is tested from Linux {OLDEST_TESTED} on; see docs/kernels.md)"
    )]
    KernelLacks { release: String, missing: String },
    #[error(
        "this kernel ({release}) cannot verify profilerd's sampling programs: its BPF verifier \
         gave up at its complexity limit (E2BIG), where newer verifiers prune more; Linux \
         {OLDEST_TESTED} and later verify them (see docs/kernels.md). The verifier's last words: \
         {log}"
    )]
    VerifierLimit { release: String, log: String },
    #[error(
        "profilerd lacks the privileges to load BPF programs: run it as root (or with \
         CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON)"
    )]
    NotPrivileged,
    #[error(
        "the kernel refused to load the BPF programs: permission denied; run profilerd as root \
         (or with CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE)"
    )]
    PermissionDenied,
    #[error("the kernel has no bpf() system call: profilerd needs CONFIG_BPF_SYSCALL=y")]
    NoBpfSyscall,
    #[error("cannot list the online CPUs ({path}): {source}")]
    OnlineCpus {
        path: &'static str,
        source: io::Error,
    },
    #[error(
        "cannot attach to the software CPU clock on CPU {cpu}: {source}; the kernel must \
         support perf events of type software/cpu-clock"
    )]
    AttachCpuClock { cpu: u32, source: ProgramError },
    #[error(
        "tracefs is not mounted at {TRACEFS} and mounting it failed: {0}; mount it with `mount -t tracefs nodev {TRACEFS}`"
    )]
    Tracefs(io::Error),
    #[error("cannot attach to tracepoint {tracepoint}: {source}")]
    AttachTracepoint {
        tracepoint: &'static str,
        source: ProgramError,
    },
    #[error(
        "the eBPF object has no {0}; the build is inconsistent, rebuild with `cargo xtask build`"
    )]
    Missing(&'static str),
    #[error("loading the BPF programs failed: {0}")]
    Load(String),
    #[error(
        "cannot sample thread {tid} for a peek: {source}; the thread may have exited, or \
         the kernel refused a per-thread perf event"
    )]
    SampleThread { tid: u32, source: ProgramError },
    #[error("cannot set up the aggregated maps' drain: {0}")]
    SourceMaps(aya::maps::MapError),
}

/// Why an optional program (the peek-signal guard, the fork follower) does
/// not run: the daemon works without it, and says why.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OptionalProgramError {
    #[error("peeks by signal are off")]
    PeeksBySignalOff,
    #[error("cannot find the kernel fields it reads: {0}")]
    Layout(#[from] BtfError),
    #[error("cannot read the kernel's BTF: {0}")]
    Btf(String),
    #[error(
        "the kernel refused to load a BPF LSM program (EPERM): BPF LSM needs \
         CONFIG_BPF_LSM=y and `bpf` among the active LSMs (the lsm= boot parameter), and some \
         kernel builds refuse it even then"
    )]
    LsmRefused,
    #[error("the kernel refused {program}: {reason}")]
    Load {
        program: &'static str,
        reason: String,
    },
    #[error("cannot attach {program}: {reason}")]
    Attach {
        program: &'static str,
        reason: String,
    },
    #[error("the eBPF object has no {0}; rebuild with `cargo xtask build`")]
    Missing(&'static str),
    #[error("tracefs is not there: {0}")]
    Tracefs(String),
    #[error("{0}")]
    TracepointFormat(String),
    #[error(
        "it unwinds copied user stacks, and stack_copy_pages is 0 (user stacks are walked by \
         frame pointers in the kernel); set stack_copy_pages above 0"
    )]
    NoStackCopies,
}
