//! What the kernel and this process must offer before any program loads:
//! the privileges to load BPF programs, BTF and perf events; tracefs
//! (mounted when it is missing); and resource limits raised where they
//! would get in the way.
//!
//! Owns those checks; it must not load programs.

use std::path::Path;

use tracing::{info, warn};

use super::programs::SamplingError;

/// Where the kernel exposes tracefs, needed to attach tracepoints.
pub(super) const TRACEFS: &str = "/sys/kernel/tracing";
/// The kernel's type information; its absence means a kernel without BTF.
pub(super) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Checks what sampling cannot do without, and raises the limits that
/// would get in its way.
pub(super) fn check() -> Result<(), SamplingError> {
    check_requirements()?;
    raise_memlock_limit();
    raise_open_files_limit();
    Ok(())
}

fn check_requirements() -> Result<(), SamplingError> {
    if !privileged() {
        return Err(SamplingError::NotPrivileged);
    }
    if !Path::new(VMLINUX_BTF).exists() {
        return Err(SamplingError::NoBtf);
    }
    if !Path::new("/proc/sys/kernel/perf_event_paranoid").exists() {
        return Err(SamplingError::NoPerfEvents);
    }
    Ok(())
}

/// Whether this process may load BPF programs and open system-wide perf
/// events: CAP_SYS_ADMIN, or both CAP_BPF and CAP_PERFMON, in its effective
/// set (root has them all).
fn privileged() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let Some(effective) = crate::tasks::own_effective_capabilities() else {
        // Cannot tell: let the kernel decide.
        return true;
    };
    let has = |capability: u32| effective & (1 << capability) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Kernels before 5.11 charge BPF maps against RLIMIT_MEMLOCK; lift it
/// there (later kernels charge the memory cgroup instead).
/// Peeks open one perf event per thread of the peeked process, and the
/// process table keeps binaries open: lift the soft limit on open files to
/// the hard one.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if let Err(err) = setrlimit(Resource::Nofile, raised) {
        warn!(
            limit = ?limit.current,
            "cannot raise RLIMIT_NOFILE ({err}); peeks of processes with many threads may \
             leave threads unsampled (LimitNOFILE= under systemd raises it)"
        );
    }
}

fn raise_memlock_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    if !kernel_charges_memlock() {
        return;
    }
    let current = getrlimit(Resource::Memlock);
    if current.current.is_none() {
        return;
    }
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    if let Err(err) = setrlimit(Resource::Memlock, unlimited) {
        warn!(
            limit = ?current.current,
            "cannot raise RLIMIT_MEMLOCK ({err}); loading the BPF maps may fail: \
             run profilerd as root, or raise the limit (LimitMEMLOCK=infinity under systemd)"
        );
    }
}

/// Whether the running kernel is older than 5.11.
fn kernel_charges_memlock() -> bool {
    let release = rustix::system::uname();
    let release = release.release().to_string_lossy();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse::<u32>().ok());
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) < (5, 11)
}

/// Mounts tracefs when it is missing (it is not mounted at boot on every
/// system); tracepoints cannot be attached without it.
pub(super) fn ensure_tracefs() -> Result<(), SamplingError> {
    let mounted = std::fs::read_dir(TRACEFS)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if mounted {
        return Ok(());
    }
    rustix::mount::mount(
        "tracefs",
        TRACEFS,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|errno| SamplingError::Tracefs(errno.into()))?;
    info!("tracefs was not mounted: mounted it at {TRACEFS}");
    Ok(())
}
