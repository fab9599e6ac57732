//! Cheap checks that the running kernel can load what the tests load,
//! read off /sys and /proc (no BPF syscall is made here).

use std::path::Path;

use anyhow::{Result, bail};

/// One kernel requirement and the file whose presence shows it is met.
struct Requirement {
    evidence: &'static str,
    missing: &'static str,
}

const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        evidence: "/proc/sys/kernel/unprivileged_bpf_disabled",
        missing: "kernel has no BPF syscall (CONFIG_BPF_SYSCALL)",
    },
    Requirement {
        evidence: "/proc/sys/kernel/perf_event_paranoid",
        missing: "kernel has no perf events (CONFIG_PERF_EVENTS)",
    },
    Requirement {
        evidence: "/sys/kernel/btf/vmlinux",
        missing: "kernel has no BTF: /sys/kernel/btf/vmlinux is missing (CONFIG_DEBUG_INFO_BTF)",
    },
    Requirement {
        evidence: "/sys/kernel/tracing",
        missing: "kernel has no tracefs: /sys/kernel/tracing is missing (CONFIG_TRACING)",
    },
];

/// Fails naming every requirement this kernel misses.
pub fn check() -> Result<()> {
    let missing: Vec<&str> = REQUIREMENTS
        .iter()
        .filter(|req| !Path::new(req.evidence).exists())
        .map(|req| req.missing)
        .collect();
    if !missing.is_empty() {
        bail!(
            "this kernel cannot run the integration tests:\n  - {}",
            missing.join("\n  - ")
        );
    }
    Ok(())
}
