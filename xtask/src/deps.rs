//! What the test suite and the benchmark need besides Rust: Debian
//! packages (installed with apt-get when their program is missing) and the
//! Python environment of the foreign clients and receivers.
//!
//! Owns those lists; it must not build anything.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::process;

/// A Debian package and what shows it is installed: a program on PATH, or
/// (an absolute path) a file.
pub struct AptPackage {
    pub name: &'static str,
    pub provides: &'static str,
}

impl AptPackage {
    fn installed(&self) -> bool {
        if self.provides.starts_with('/') {
            Path::new(self.provides).exists()
        } else {
            process::find_program(self.provides).is_some()
        }
    }
}

/// Where Debian's libjemalloc2 puts jemalloc (the allocation tests preload
/// it).
pub const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

/// Debian's Chromium, which the web view's tests drive headless.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Debian's Firefox ESR, which the web view's tests drive headless too.
pub const FIREFOX: &str = "/usr/bin/firefox-esr";

/// Debian packages the test suite needs, installed with apt-get when the
/// program they provide is not on PATH.
pub const TEST_APT_PACKAGES: &[AptPackage] = &[
    // `go tool pprof` reads the daemon's gzipped profile.proto output.
    AptPackage {
        name: "golang-go",
        provides: "go",
    },
    // JIT code named from a perf map: `node --perf-basic-prof`.
    AptPackage {
        name: "nodejs",
        provides: "node",
    },
    // A static musl binary, whose libc has no unwind tables.
    AptPackage {
        name: "musl-tools",
        provides: "musl-gcc",
    },
    // The allocation tests' C++ workload (operator new and delete).
    AptPackage {
        name: "g++",
        provides: "g++",
    },
    // An allocator preloaded in place of libc's (allocation profiles).
    AptPackage {
        name: "libjemalloc2",
        provides: JEMALLOC,
    },
    // `profilerctl annotate` shows objdump's disassembly of a function
    // without line information; its tests read it.
    AptPackage {
        name: "binutils",
        provides: "objdump",
    },
    // The HTTP listener's tests fetch with curl.
    AptPackage {
        name: "curl",
        provides: "curl",
    },
    // The web view's tests drive Debian's Chromium and Firefox ESR (with
    // puppeteer-core, installed by npm: see `web_test_driver`).
    AptPackage {
        name: "chromium",
        provides: CHROMIUM,
    },
    AptPackage {
        name: "firefox-esr",
        provides: FIREFOX,
    },
    AptPackage {
        name: "npm",
        provides: "npm",
    },
    // `systemd-analyze verify` checks deploy/profilerd.service.
    AptPackage {
        name: "systemd",
        provides: "systemd-analyze",
    },
];

/// Debian packages `cargo xtask package` needs to build the Debian package.
pub const PACKAGE_APT_PACKAGES: &[AptPackage] = &[
    AptPackage {
        name: "dpkg-dev",
        provides: "dpkg-shlibdeps",
    },
    AptPackage {
        name: "binutils",
        provides: "strip",
    },
];

/// Debian packages the package checks of `cargo xtask test` need: Debian's
/// package checker, and podman to run the image.
pub const PACKAGE_CHECK_APT_PACKAGES: &[AptPackage] = &[
    AptPackage {
        name: "lintian",
        provides: "lintian",
    },
    AptPackage {
        name: "podman",
        provides: "podman",
    },
    // The runtime podman runs the image with on a hybrid cgroup hierarchy.
    AptPackage {
        name: "runc",
        provides: "runc",
    },
];

/// Debian packages the benchmark needs: the profilers it compares profilerd
/// with, and addr2line for the symbolization question.
pub const BENCH_APT_PACKAGES: &[AptPackage] = &[
    AptPackage {
        name: "linux-perf",
        provides: "perf",
    },
    AptPackage {
        name: "bpftrace",
        provides: "bpftrace",
    },
    AptPackage {
        name: "binutils",
        provides: "addr2line",
    },
];

/// Makes sure the test suite's programs are there: gcc (which must be), and
/// the packages in [`TEST_APT_PACKAGES`] (installed when missing).
pub fn test_deps() -> Result<()> {
    system_deps("the tests", TEST_APT_PACKAGES)?;
    process::output(process::command("go").args(["tool", "-n", "pprof"]))
        .context("`go tool pprof` is not available; the tests read profiles with it")?;
    Ok(())
}

/// PyPI packages of the test suite's foreign gRPC client (Python's grpcio,
/// which learns the API by reflection), PyYAML, which reads the Kubernetes
/// manifests in deploy/, OpenTelemetry's generated Python classes, with
/// which an OTLP receiver decodes what the daemon pushes, and py-spy, whose
/// dump a peek's Python stacks are held against; pinned.
const PYTHON_CLIENT_PACKAGES: &[&str] = &[
    "grpcio==1.85.1",
    "grpcio-reflection==1.85.1",
    "grpcio-health-checking==1.85.1",
    "PyYAML==6.0.3",
    "opentelemetry-proto==1.45.2",
    "py-spy==0.4.3",
];

/// A Python virtual environment under `target_dir` with the client
/// packages, created (once) when missing; returns its interpreter.
pub fn python_clients(target_dir: &Path) -> Result<PathBuf> {
    let venv = target_dir.join("python-clients");
    let python = venv.join("bin/python");
    let ready = python.exists()
        && venv.join("bin/py-spy").is_file()
        && process::output(process::command(&python).args([
            "-c",
            "import grpc, grpc_reflection, grpc_health, yaml, \
                     opentelemetry.proto.collector.profiles.v1development",
        ]))
        .is_ok();
    if !ready {
        let system_python = process::find_program("python3").context(
            "python3 is not on PATH: the tests run Python's grpcio against the daemon; \
             install it (Debian: `apt-get install python3 python3-venv`)",
        )?;
        println!(
            "==> creating {} with {}",
            venv.display(),
            PYTHON_CLIENT_PACKAGES.join(", ")
        );
        process::run(
            process::command(system_python)
                .arg("-m")
                .arg("venv")
                .arg(&venv),
        )
        .context(
            "creating the Python virtual environment (Debian: apt-get install python3-venv)",
        )?;
        process::run(
            process::command(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(PYTHON_CLIENT_PACKAGES),
        )
        .context("installing the Python gRPC packages from PyPI")?;
    }
    println!("ok: Python gRPC client ({})", python.display());
    Ok(python)
}

/// Where the web view tests' npm packages are pinned (package.json and
/// its package-lock.json, with every package's integrity).
const WEB_TEST_PACKAGES: &str = "profiler-daemon/tests/web";

/// puppeteer-core, which drives Chromium and Firefox through the web view's tests,
/// installed with `npm ci` from the pinned lock file into a directory under
/// `target_dir` (once per lock file); returns its `node_modules`.
pub fn web_test_driver(workspace: &Path, target_dir: &Path) -> Result<PathBuf> {
    let pinned = workspace.join(WEB_TEST_PACKAGES);
    let dir = target_dir.join("web-test-driver");
    let lock = std::fs::read(pinned.join("package-lock.json"))
        .with_context(|| format!("reading {}/package-lock.json", pinned.display()))?;
    let installed_lock = dir.join("package-lock.json");
    let ready = dir
        .join("node_modules/puppeteer-core/package.json")
        .is_file()
        && std::fs::read(&installed_lock).is_ok_and(|installed| installed == lock);
    if !ready {
        println!(
            "==> installing puppeteer-core with npm ci into {} (one time)",
            dir.display()
        );
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned.join(file), dir.join(file))
                .with_context(|| format!("copying {file} into {}", dir.display()))?;
        }
        process::run(
            process::command("npm")
                .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
                .current_dir(&dir),
        )
        .context("installing puppeteer-core from the npm registry (npm ci)")?;
    }
    let modules = dir.join("node_modules");
    println!("ok: puppeteer-core ({})", modules.display());
    Ok(modules)
}

/// Makes sure the benchmark's programs are there: gcc, and the packages in
/// [`BENCH_APT_PACKAGES`] (installed when missing).
/// What `cargo xtask package` needs, installed when missing.
pub fn package_deps() -> Result<()> {
    ensure_apt_packages(PACKAGE_APT_PACKAGES)
}

/// What the package checks need (besides [`package_deps`]).
pub fn package_check_deps() -> Result<()> {
    ensure_apt_packages(PACKAGE_CHECK_APT_PACKAGES)
}

pub fn bench_deps() -> Result<()> {
    system_deps("the benchmark", BENCH_APT_PACKAGES)
}

/// gcc (which `who` compiles its C workloads with, and which cannot be
/// installed for it), then `packages`, installed when missing.
fn system_deps(who: &str, packages: &[AptPackage]) -> Result<()> {
    if process::find_program("gcc").is_none() {
        bail!(
            "gcc is not on PATH: {who} compile C workloads with it; \
             install it (Debian: `apt-get install gcc`)"
        );
    }
    ensure_apt_packages(packages)?;
    let names: Vec<&str> = packages.iter().map(|pkg| pkg.provides).collect();
    println!("ok: programs {who} need (gcc, {})", names.join(", "));
    Ok(())
}

/// Installs with apt-get the packages whose program is not on PATH; when
/// that fails (empty or stale package lists), runs `apt-get update` once
/// and retries.
pub fn ensure_apt_packages(packages: &[AptPackage]) -> Result<()> {
    let missing: Vec<&AptPackage> = packages.iter().filter(|pkg| !pkg.installed()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|pkg| pkg.name).collect();
    let wanted = missing
        .iter()
        .map(|pkg| format!("`{}` (Debian package {})", pkg.provides, pkg.name))
        .collect::<Vec<_>>()
        .join(", ");
    if process::find_program("apt-get").is_none() {
        bail!("the tests need {wanted}, and there is no apt-get here: install them yourself");
    }
    let privilege = process::privilege(&format!("installing {}", names.join(" ")))?;

    println!("==> installing {} with apt-get (one time)", names.join(" "));
    let env = [("DEBIAN_FRONTEND", "noninteractive")];
    let install = || {
        let mut cmd = process::as_root(privilege, "apt-get", &env);
        cmd.args(["install", "-y", "--no-install-recommends"])
            .args(&names);
        process::run(&mut cmd)
    };
    if let Err(first) = install() {
        println!(
            "==> apt-get install failed ({first:#}); refreshing the package lists and retrying"
        );
        process::run(process::as_root(privilege, "apt-get", &env).arg("update"))
            .context("apt-get update failed")?;
        install().with_context(|| format!("installing {} with apt-get failed", names.join(" ")))?;
    }
    for pkg in missing {
        if !pkg.installed() {
            bail!(
                "apt-get installed {} but `{}` is still not there",
                pkg.name,
                pkg.provides
            );
        }
    }
    Ok(())
}
