//! The memory limits the daemon's own cgroup sets (systemd's MemoryHigh=
//! and MemoryMax=, cgroup v2's `memory.high` and `memory.max`), to say at
//! start whether they fit the budget.
//!
//! Owns reading them; it must not change them.

use std::path::Path;

/// The cgroup's limits, `None` where there is none (or it cannot be read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    pub high: Option<u64>,
    pub max: Option<u64>,
}

/// The limits of the cgroup (v2) this process runs in.
pub fn own_limits() -> CgroupLimits {
    // cgroup v2's is hierarchy 0 (the line "0::/path" of /proc/self/cgroup).
    // With procfs itself, not `tasks::cgroups`: this module is a leaf.
    let groups = procfs::process::Process::myself().and_then(|process| process.cgroups());
    let Some(path) = groups.ok().and_then(|groups| {
        (groups.0.into_iter())
            .find(|group| group.hierarchy == 0)
            .map(|group| group.pathname)
    }) else {
        return CgroupLimits::default();
    };
    let directory = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |name: &str| {
        std::fs::read_to_string(directory.join(name))
            .ok()
            .and_then(|text| parse_limit(&text))
    };
    CgroupLimits {
        high: read("memory.high"),
        max: read("memory.max"),
    }
}

/// A limit file's value: bytes, or `max` (none).
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// What to say of `limits` for a daemon holding itself to `budget`
/// bytes: a warning when a limit is below what the daemon may take.
pub fn advice(limits: CgroupLimits, budget: u64) -> Option<String> {
    let mib = |bytes: u64| bytes >> 20;
    match limits {
        CgroupLimits { max: Some(max), .. } if max < budget => Some(format!(
            "the cgroup's memory.max (systemd MemoryMax=) is {} MiB, below memory_budget {} MiB: \
             the kernel will kill the daemon before it reaches its budget; raise MemoryMax= or \
             lower memory_budget",
            mib(max),
            mib(budget)
        )),
        CgroupLimits {
            high: Some(high), ..
        } if high < budget => Some(format!(
            "the cgroup's memory.high (systemd MemoryHigh=) is {} MiB, below memory_budget {} \
             MiB: the kernel will throttle the daemon before it reaches its budget; raise \
             MemoryHigh= or lower memory_budget",
            mib(high),
            mib(budget)
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_below_the_budget_are_named_with_what_to_change() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("402653184\n"), Some(384 << 20));
        let budget = 256 << 20;
        assert_eq!(advice(CgroupLimits::default(), budget), None);
        let fits = CgroupLimits {
            high: Some(288 << 20),
            max: Some(384 << 20),
        };
        assert_eq!(advice(fits, budget), None);
        let low = CgroupLimits {
            high: None,
            max: Some(128 << 20),
        };
        let advice = advice(low, budget).unwrap();
        assert!(
            advice.contains("raise MemoryMax= or lower memory_budget"),
            "{advice}"
        );
        // Read, wherever the tests run.
        let _ = own_limits();
    }
}
