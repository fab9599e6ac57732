//! What the kernel and this process must offer before any program loads:
//! the privileges to load BPF programs, BTF and perf events; the BPF
//! features the required programs (the CPU-clock and peek samplers) use,
//! each probed and named with the Linux version that brought it
//! ([`REQUIRED_FEATURES`]); tracefs (mounted when it is missing); and
//! resource limits raised where they would get in the way.
//!
//! Owns those checks; it must not load the daemon's programs (the probes
//! load a two-instruction program each, as libbpf's do).

use std::{fmt, path::Path};

use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{BpfHelper, is_helper_supported, is_map_supported},
};
use tracing::{debug, info, warn};

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
    check_kernel_features()
}

/// A kernel version: the numbers a release (`uname -r`) starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// The version a release starts with ("6.1.0-57-amd64" is 6.1.0,
    /// "6.12.117+deb13-amd64" 6.12.117, "6.8-rc1" 6.8.0); `None` without
    /// at least a major and a minor number.
    pub fn parse(release: &str) -> Option<Self> {
        let numbers = release
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .next()?;
        let mut parts = numbers.split('.').map(|part| part.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Self::new(major, minor, patch))
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patch == 0 {
            write!(f, "{}.{}", self.major, self.minor)
        } else {
            write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
        }
    }
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// The oldest kernel profilerd is tested on (`cargo xtask test --kernels`,
/// docs/kernels.md): older ones that have every required feature start
/// with a warning; a kernel whose verifier gives up on the samplers is
/// refused ([`SamplingError::VerifierLimit`]). On Debian 12's 6.1 the
/// off-CPU program runs without Python frames (`record_switch_without_python`).
pub const OLDEST_TESTED: KernelVersion = KernelVersion::new(6, 1, 0);

/// The oldest kernel with every feature in [`REQUIRED_FEATURES`] (the
/// newest of their versions): below it the daemon refuses to start,
/// unless the distribution backported what is missing (the features are
/// probed, not inferred from the version).
pub const OLDEST_SUPPORTED: KernelVersion = KernelVersion::new(5, 17, 0);

/// How a feature is probed.
#[derive(Clone, Copy, Debug)]
enum Probe {
    /// The map type can be created.
    Map(MapType),
    /// A perf_event program (what the samplers are) may call the helper.
    PerfEventHelper(BpfHelper),
}

/// A BPF feature the required programs use, and the version that brought it.
#[derive(Clone, Copy, Debug)]
pub struct KernelFeature {
    pub name: &'static str,
    pub since: KernelVersion,
    probe: Probe,
}

/// What the CPU-clock and peek samplers (required: nothing works without
/// them) use that older kernels lack. The optional groups need no more
/// than these (their own needs, BTF tracepoints 5.5, BPF LSM 5.7, the task
/// iterator 5.8, uprobe cookies 5.15, all come before bpf_loop's 5.17):
/// they turn off by kernel configuration, not by version.
pub const REQUIRED_FEATURES: [KernelFeature; 7] = [
    KernelFeature {
        name: "BPF ring buffer",
        since: KernelVersion::new(5, 8, 0),
        probe: Probe::Map(MapType::RingBuf),
    },
    KernelFeature {
        name: "bpf_probe_read_user helper",
        since: KernelVersion::new(5, 5, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_probe_read_user),
    },
    KernelFeature {
        name: "bpf_get_ns_current_pid_tgid helper",
        since: KernelVersion::new(5, 7, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_get_ns_current_pid_tgid),
    },
    KernelFeature {
        name: "bpf_get_current_task_btf helper",
        since: KernelVersion::new(5, 11, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_get_current_task_btf),
    },
    KernelFeature {
        name: "bpf_get_current_ancestor_cgroup_id helper in tracing programs",
        since: KernelVersion::new(5, 14, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_get_current_ancestor_cgroup_id),
    },
    KernelFeature {
        name: "bpf_task_pt_regs helper",
        since: KernelVersion::new(5, 15, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_task_pt_regs),
    },
    KernelFeature {
        name: "bpf_loop helper",
        since: KernelVersion::new(5, 17, 0),
        probe: Probe::PerfEventHelper(BpfHelper::BPF_FUNC_loop),
    },
];

impl KernelFeature {
    /// Whether the running kernel has it: probed; when the probe itself
    /// fails, judged by `version` (assumed there when that is unknown).
    fn present(&self, version: Option<KernelVersion>) -> bool {
        let probed = match self.probe {
            Probe::Map(map_type) => is_map_supported(map_type).map_err(|err| err.to_string()),
            Probe::PerfEventHelper(helper) => {
                is_helper_supported(ProgramType::PerfEvent, helper).map_err(|err| err.to_string())
            }
        };
        probed.unwrap_or_else(|err| {
            debug!(
                "cannot probe the {}: {err}; judging by the version",
                self.name
            );
            version.is_none_or(|version| version >= self.since)
        })
    }
}

/// The features in `features` that `present` says are missing, as
/// "NAME (Linux X.Y)", newest first.
fn missing_features(
    features: &[KernelFeature],
    present: impl Fn(&KernelFeature) -> bool,
) -> Vec<String> {
    let mut missing: Vec<&KernelFeature> = features.iter().filter(|f| !present(f)).collect();
    missing.sort_by_key(|feature| std::cmp::Reverse(feature.since));
    missing
        .iter()
        .map(|feature| format!("{} (Linux {})", feature.name, feature.since))
        .collect()
}

/// Refuses a kernel that lacks a feature the required programs use,
/// naming each and the version that brought it; warns on one older than
/// the oldest tested.
fn check_kernel_features() -> Result<(), SamplingError> {
    let release = kernel_release();
    let version = KernelVersion::parse(&release);
    let missing = missing_features(&REQUIRED_FEATURES, |feature| feature.present(version));
    if !missing.is_empty() {
        return Err(SamplingError::KernelLacks {
            release,
            missing: missing.join(", "),
        });
    }
    match version {
        Some(version) if version < OLDEST_TESTED => warn!(
            "this kernel ({release}) has every BPF feature profilerd needs, but is older than \
             the oldest it is tested on (Linux {OLDEST_TESTED}): see docs/kernels.md"
        ),
        Some(_) => debug!("kernel {release}: every BPF feature profilerd needs is there"),
        None => warn!("cannot read a version in the kernel's release {release:?}"),
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

/// Whether the running kernel is older than 5.11 (or its version cannot be
/// read).
fn kernel_charges_memlock() -> bool {
    KernelVersion::parse(&kernel_release())
        .is_none_or(|version| version < KernelVersion::new(5, 11, 0))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_off_distribution_releases() {
        let parse = KernelVersion::parse;
        assert_eq!(parse("6.1.0-57-amd64"), Some(KernelVersion::new(6, 1, 0)));
        assert_eq!(
            parse("6.12.117+deb13-amd64"),
            Some(KernelVersion::new(6, 12, 117))
        );
        assert_eq!(parse("5.15.0-1049-aws"), Some(KernelVersion::new(5, 15, 0)));
        assert_eq!(parse("6.8-rc1"), Some(KernelVersion::new(6, 8, 0)));
        assert_eq!(
            parse("4.18.0-513.el8.x86_64"),
            Some(KernelVersion::new(4, 18, 0))
        );
        assert_eq!(parse("6"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("linux"), None);
    }

    #[test]
    fn versions_compare_numerically() {
        let v = KernelVersion::new;
        assert!(v(5, 10, 262) < v(5, 17, 0));
        assert!(v(5, 9, 0) < v(5, 10, 0));
        assert!(v(6, 1, 0) > v(5, 17, 0));
        assert!(v(6, 12, 0) > v(6, 1, 192));
        assert_eq!(v(6, 1, 0).to_string(), "6.1");
        assert_eq!(v(6, 12, 117).to_string(), "6.12.117");
    }

    #[test]
    fn the_oldest_supported_kernel_is_the_newest_required_feature() {
        let newest = REQUIRED_FEATURES.iter().map(|f| f.since).max();
        assert_eq!(newest, Some(OLDEST_SUPPORTED));
        assert!(OLDEST_SUPPORTED <= OLDEST_TESTED);
    }

    #[test]
    fn missing_features_are_named_with_their_version_newest_first() {
        // What a 5.10 kernel has: every feature from before 5.11.
        let on_5_10 = |feature: &KernelFeature| feature.since <= KernelVersion::new(5, 10, 0);
        assert_eq!(
            missing_features(&REQUIRED_FEATURES, on_5_10),
            [
                "bpf_loop helper (Linux 5.17)",
                "bpf_task_pt_regs helper (Linux 5.15)",
                "bpf_get_current_ancestor_cgroup_id helper in tracing programs (Linux 5.14)",
                "bpf_get_current_task_btf helper (Linux 5.11)",
            ]
        );
        assert!(missing_features(&REQUIRED_FEATURES, |_| true).is_empty());
        let error = SamplingError::KernelLacks {
            release: "5.4.0".to_owned(),
            missing: missing_features(&REQUIRED_FEATURES[..1], |_| false).join(", "),
        };
        assert!(
            error
                .to_string()
                .starts_with("this kernel (5.4.0) has no BPF ring buffer (Linux 5.8)"),
            "{error}"
        );
    }
}
