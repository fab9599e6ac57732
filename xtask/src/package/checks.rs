//! The checks `cargo xtask test` runs on what `cargo xtask package` makes:
//! the Debian package's file list and lintian's verdict; installing it into
//! a scratch root (`dpkg --root`, the maintainer scripts acting on that
//! root), the installed unit verified, the installed daemon profiling a
//! workload, an upgrade keeping a changed configuration, purge leaving the
//! root as it was; the image's content, and the daemon run from the image
//! where podman can run it.
//!
//! Owns those checks; it builds nothing but the artifacts and a C
//! workload, and it must leave no process running.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

use super::{Inputs, debian, fresh_dir, image, write_file};
use crate::process;

/// The known chain of the workload (tests/workloads/chain.c).
const CHAIN: &str = "main;drive;hot_leaf";

/// Runs every check; the first failure ends them.
pub fn run(inputs: &Inputs) -> Result<()> {
    let built = super::build(inputs)?;
    let workload = build_workload(inputs)?;
    check("the package holds exactly its files", || {
        deb_holds_its_files(&built.deb)
    })?;
    check("lintian finds no error or warning", || lintian(&built.deb))?;
    check(
        "install, upgrade, remove and purge in a scratch root",
        || install_upgrade_purge(inputs, &built.deb, &workload),
    )?;
    check("the image holds the binaries and their libraries", || {
        image_content(&built.image.path)
    })?;
    check("the daemon in the image profiles a host process", || {
        image_runs(inputs, &built.image, &workload)
    })?;
    Ok(())
}

fn check(name: &str, body: impl FnOnce() -> Result<()>) -> Result<()> {
    println!("==> package check: {name}");
    let started = Instant::now();
    body().with_context(|| format!("package check failed: {name}"))?;
    println!("    ok ({:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

/// tests/workloads/chain.c, built with gcc into the output directory.
fn build_workload(inputs: &Inputs) -> Result<PathBuf> {
    let source = inputs
        .workspace
        .join("profiler-daemon/tests/workloads/chain.c");
    let binary = inputs.out.join("chain");
    process::output(
        process::command("gcc")
            .args(["-O1", "-g", "-o"])
            .arg(&binary)
            .arg(&source),
    )
    .context("gcc cannot build the workload")?;
    Ok(binary)
}

/// The regular files a .deb holds, as installed paths.
fn deb_files(deb: &Path) -> Result<Vec<String>> {
    let listing = process::output(process::command("dpkg-deb").arg("--contents").arg(deb))?;
    Ok(listing
        .lines()
        .filter(|line| line.starts_with('-'))
        .filter_map(|line| line.split_whitespace().last())
        .map(|path| path.trim_start_matches('.').to_owned())
        .collect())
}

/// Whether `path` matches `pattern` (one `*` at most).
fn matches(pattern: &str, path: &str) -> bool {
    match pattern.split_once('*') {
        Some((head, tail)) => {
            path.len() >= head.len() + tail.len() && path.starts_with(head) && path.ends_with(tail)
        }
        None => pattern == path,
    }
}

fn deb_holds_its_files(deb: &Path) -> Result<()> {
    let files = deb_files(deb)?;
    let unexpected: Vec<&String> = files
        .iter()
        .filter(|file| !debian::FILES.iter().any(|pattern| matches(pattern, file)))
        .collect();
    ensure!(
        unexpected.is_empty(),
        "files not in the list: {unexpected:?}"
    );
    let missing: Vec<&&str> = debian::FILES
        .iter()
        .filter(|pattern| !files.iter().any(|file| matches(pattern, file)))
        .collect();
    ensure!(missing.is_empty(), "files missing: {missing:?}");
    // A page per command a user types; none for the hidden generator.
    for page in ["profile", "query", "peek", "completions"] {
        let path = format!("/usr/share/man/man1/profilerctl-{page}.1.gz");
        ensure!(files.contains(&path), "no man page {path}");
    }
    ensure!(
        !files.iter().any(|file| file.contains("man-pages")),
        "a man page for the hidden man-pages command: {files:?}"
    );
    let depends = process::output(
        process::command("dpkg-deb")
            .arg("--field")
            .arg(deb)
            .arg("Depends"),
    )?;
    ensure!(depends.contains("libc6"), "Depends: {depends}");
    let conffiles = process::output(
        process::command("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .arg("conffiles"),
    )?;
    ensure!(
        conffiles.trim() == debian::CONFFILE,
        "conffiles: {conffiles:?}"
    );
    println!("    {} files; Depends: {}", files.len(), depends.trim());
    Ok(())
}

fn lintian(deb: &Path) -> Result<()> {
    let output = process::command("lintian")
        .args(["--fail-on", "error,warning", "--display-info"])
        .arg(deb)
        .output()
        .context("cannot run lintian")?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for line in printed.lines() {
        println!("    lintian: {line}");
    }
    ensure!(
        output.status.success(),
        "lintian failed ({})",
        output.status
    );
    Ok(())
}

/// A scratch root: an empty dpkg database and the account files a
/// Debian system starts with.
fn scratch_root(root: &Path) -> Result<()> {
    fresh_dir(root)?;
    // dpkg's database, and systemd's directories (deb-systemd-helper
    // keeps its state there) as a Debian system with systemd has them.
    for dir in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
        "etc/systemd/system",
        "var/lib/systemd",
    ] {
        fs::create_dir_all(root.join(dir))?;
    }
    write_file(&root.join("var/lib/dpkg/status"), b"", 0o644)?;
    write_file(&root.join("var/lib/dpkg/available"), b"", 0o644)?;
    let accounts: [(&str, &[u8], u32); 5] = [
        // The lock the shadow tools take (every Debian system has it).
        ("etc/.pwd.lock", b"", 0o600),
        ("etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n", 0o644),
        ("etc/group", b"root:x:0:\nadm:x:4:\n", 0o644),
        ("etc/shadow", b"root:*:20000:0:99999:7:::\n", 0o640),
        ("etc/gshadow", b"root:*::\nadm:*::\n", 0o640),
    ];
    for (path, text, mode) in accounts {
        write_file(&root.join(path), text, mode)?;
    }
    Ok(())
}

/// Every path under `root` with what it is (mode, owner, content), leaving
/// out dpkg's own database and log and the account files' backups (`-`).
fn snapshot(root: &Path) -> Result<BTreeMap<String, String>> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            let relative = path.strip_prefix(root)?.display().to_string();
            if relative.starts_with("var/lib/dpkg")
                || relative.starts_with("var/log")
                || relative.ends_with('-')
            {
                continue;
            }
            let metadata = fs::symlink_metadata(&path)?;
            let what = if metadata.is_dir() {
                pending.push(path.clone());
                "dir".to_owned()
            } else if metadata.is_symlink() {
                format!("-> {}", fs::read_link(&path)?.display())
            } else {
                image::sha256(&fs::read(&path)?)
            };
            let mode = metadata.permissions().mode() & 0o7777;
            entries.insert(
                relative,
                format!("{mode:o} {}:{} {what}", metadata.uid(), metadata.gid()),
            );
        }
    }
    Ok(entries)
}

/// `dpkg --root ROOT` with the maintainer scripts run outside a chroot
/// (they act on DPKG_ROOT), the dependencies (the root has no libc
/// package) not enforced.
fn dpkg(root: &Path, args: &[&str], deb: Option<&Path>) -> Result<String> {
    let mut command = process::command("dpkg");
    command
        .arg(format!("--root={}", root.display()))
        .args([
            "--force-script-chrootless",
            "--force-depends",
            "--force-confold",
        ])
        .args(args);
    if let Some(deb) = deb {
        command.arg(deb);
    }
    process::output(&mut command).with_context(|| format!("dpkg {} failed", args.join(" ")))
}

fn install_upgrade_purge(inputs: &Inputs, deb: &Path, workload: &Path) -> Result<()> {
    let root = inputs.out.join("scratch-root");
    scratch_root(&root)?;
    let before = snapshot(&root)?;

    dpkg(&root, &["--install"], Some(deb))?;
    for file in debian::FILES.iter().filter(|file| !file.contains('*')) {
        ensure!(
            root.join(file.trim_start_matches('/')).is_file(),
            "{file} is not installed"
        );
    }
    let group = fs::read_to_string(root.join("etc/group"))?;
    ensure!(
        group.lines().any(|line| line.starts_with("profilerd:")),
        "postinst made no profilerd group: {group}"
    );
    let state = fs::metadata(root.join("var/lib/profilerd"))
        .context("postinst made no /var/lib/profilerd")?;
    ensure!(state.permissions().mode() & 0o777 == 0o700);
    // A link to the unit as the installed system sees it (/lib/…).
    ensure!(
        fs::symlink_metadata(
            root.join("etc/systemd/system/multi-user.target.wants/profilerd.service")
        )
        .is_ok(),
        "the service is not enabled in the root"
    );
    verify_unit(&root)?;
    installed_daemon_profiles(&root, workload)?;

    // The administrator changes the configuration; an upgrade keeps it.
    let config = root.join(debian::CONFFILE.trim_start_matches('/'));
    let mut changed = fs::read_to_string(&config)?;
    changed.push_str("\n# changed by the administrator\n");
    fs::write(&config, &changed)?;
    let upgrade = Inputs {
        version: format!("{}+upgrade", inputs.version),
        out: inputs.out.join("upgrade"),
        ..inputs.clone()
    };
    fs::create_dir_all(&upgrade.out)?;
    let newer = debian::build(&upgrade)?;
    dpkg(&root, &["--install"], Some(&newer))?;
    let status = dpkg(&root, &["--status", debian::PACKAGE], None)?;
    ensure!(
        status.contains(&format!("Version: {}", upgrade.version)),
        "not upgraded: {status}"
    );
    ensure!(
        fs::read_to_string(&config)? == changed,
        "the upgrade did not keep the changed configuration"
    );

    // Removed: the binaries go, the configuration and state stay.
    dpkg(&root, &["--remove", debian::PACKAGE], None)?;
    ensure!(
        !root.join("usr/bin/profilerd").exists(),
        "remove left the daemon"
    );
    ensure!(config.exists(), "remove took the configuration");
    ensure!(
        root.join("var/lib/profilerd").is_dir(),
        "remove took the state"
    );

    // Purged: the root is as it was.
    dpkg(&root, &["--purge", debian::PACKAGE], None)?;
    let after = snapshot(&root)?;
    let changes: Vec<String> = before
        .iter()
        .filter(|(path, what)| after.get(*path) != Some(what))
        .map(|(path, what)| format!("{path}: was {what}, now {:?}", after.get(path)))
        .chain(
            after
                .iter()
                .filter(|(path, _)| !before.contains_key(*path))
                .map(|(path, what)| format!("{path}: left behind ({what})")),
        )
        .collect();
    ensure!(
        changes.is_empty(),
        "purge left the root changed:\n  {}",
        changes.join("\n  ")
    );
    fs::remove_dir_all(&root)?;
    Ok(())
}

/// `systemd-analyze verify` on the installed unit, its ExecStart pointed
/// at the daemon installed in the root (the host has no /usr/bin/profilerd;
/// the man pages its Documentation= names are the package's, checked by
/// the file list).
fn verify_unit(root: &Path) -> Result<()> {
    let installed = fs::read_to_string(root.join(debian::UNIT.trim_start_matches('/')))?;
    let exec_start = "ExecStart=/usr/bin/profilerd ";
    ensure!(
        installed.contains(exec_start),
        "the unit does not start /usr/bin/profilerd"
    );
    let unit = root.join("verify/profilerd.service");
    write_file(
        &unit,
        installed
            .replace(
                exec_start,
                &format!("ExecStart={} ", root.join("usr/bin/profilerd").display()),
            )
            .as_bytes(),
        0o644,
    )?;
    let output = process::command("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .context("cannot run systemd-analyze")?;
    fs::remove_dir_all(root.join("verify"))?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let about_the_unit: Vec<&str> = printed
        .lines()
        .filter(|line| line.contains("profilerd"))
        .collect();
    ensure!(
        output.status.success() && about_the_unit.is_empty(),
        "systemd-analyze verify: {printed}"
    );
    Ok(())
}

/// A daemon started for a check, stopped (and waited for) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = process::command("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .output();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `workload` for a few seconds and checks that `profile` (given
/// its pid) prints its chain in folded form.
fn profiles_the_workload(workload: &Path, profile: impl Fn(u32) -> Result<String>) -> Result<()> {
    let child = process::command(workload)
        .arg("20")
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start the workload")?;
    let workload = Running(child);
    let folded = profile(workload.0.id())?;
    let samples: u64 = folded
        .lines()
        .filter(|line| line.contains(CHAIN))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    ensure!(samples > 0, "no sample of {CHAIN} in:\n{folded}");
    println!("    {samples} samples of {CHAIN}");
    Ok(())
}

/// Waits until `socket` exists (the daemon listens), or the daemon exits.
fn wait_for_socket(daemon: &mut Running, socket: &Path, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        if let Ok(Some(status)) = daemon.0.try_wait() {
            bail!(
                "the daemon exited ({status}): {}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        ensure!(
            Instant::now() < deadline,
            "the daemon did not listen within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn installed_daemon_profiles(root: &Path, workload: &Path) -> Result<()> {
    let run = root.join("run-check");
    fresh_dir(&run)?;
    let socket = run.join("profilerd.sock");
    let log = run.join("daemon.log");
    let child = process::command(root.join("usr/bin/profilerd"))
        .arg("--config")
        .arg(root.join(debian::CONFFILE.trim_start_matches('/')))
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(run.join("state"))
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log)?)
        .spawn()
        .context("cannot start the installed profilerd")?;
    let mut daemon = Running(child);
    wait_for_socket(&mut daemon, &socket, &log)?;
    let result = profiles_the_workload(workload, |pid| {
        process::output(
            process::command(root.join("usr/bin/profilerctl"))
                .env("PROFILERD_SOCKET", &socket)
                .args(["profile", "--pid", &pid.to_string(), "--duration", "3s"])
                .args(["--format", "folded"]),
        )
    });
    drop(daemon);
    fs::remove_dir_all(&run)?;
    result
}

/// The image's layer: exactly the two binaries, the libraries they load,
/// and the few files the image adds.
fn image_content(path: &Path) -> Result<()> {
    let mut archive = tar::Archive::new(fs::File::open(path)?);
    let mut blobs = BTreeMap::new();
    let mut index = String::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path()?.display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        if name == "index.json" {
            index = String::from_utf8(bytes)?;
        } else if let Some(digest) = name.strip_prefix("blobs/sha256/") {
            ensure!(
                image::sha256(&bytes) == format!("sha256:{digest}"),
                "blob {name} does not hash to its name"
            );
            blobs.insert(format!("sha256:{digest}"), bytes);
        }
    }
    let index: serde_json::Value = serde_json::from_str(&index)?;
    let blob = |digest: &serde_json::Value| -> Result<&Vec<u8>> {
        let digest = digest.as_str().context("a digest is not a string")?;
        blobs
            .get(digest)
            .with_context(|| format!("no blob {digest}"))
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(blob(&index["manifests"][0]["digest"])?)?;
    let layers = manifest["layers"]
        .as_array()
        .context("the manifest has no layers")?;
    ensure!(layers.len() == 1, "{} layers", layers.len());
    let layer = blob(&layers[0]["digest"])?;
    let mut files = Vec::new();
    let mut layer = tar::Archive::new(flate2::read::GzDecoder::new(layer.as_slice()));
    for entry in layer.entries()? {
        let entry = entry?;
        if entry.header().entry_type().is_file() {
            files.push(entry.path()?.display().to_string());
        }
    }
    let unexpected: Vec<&String> = files
        .iter()
        .filter(|file| {
            !(file.starts_with("usr/bin/profiler")
                || file.contains(".so")
                || ["etc/profilerd/profilerd.toml", "etc/passwd", "etc/group"]
                    .contains(&file.as_str()))
        })
        .collect();
    ensure!(unexpected.is_empty(), "unexpected files: {unexpected:?}");
    for needed in ["usr/bin/profilerd", "usr/bin/profilerctl"] {
        ensure!(files.iter().any(|file| file == needed), "no {needed}");
    }
    ensure!(
        files.iter().any(|file| file.contains("libc.so.6"))
            && files.iter().any(|file| file.contains("ld-linux")),
        "no libc or loader: {files:?}"
    );
    println!("    {} files: {}", files.len(), files.join(", "));
    Ok(())
}

/// Loads the image into podman and runs the daemon in it with the host's
/// pid namespace and the DaemonSet's capabilities; profiles a host
/// process through the socket it serves on a host directory.
fn image_runs(inputs: &Inputs, built: &image::Built, workload: &Path) -> Result<()> {
    let loaded = process::output(
        process::command("podman")
            .args(["load", "--quiet", "--input"])
            .arg(&built.path),
    )
    .context("podman cannot load the image")?;
    println!("    {}", loaded.trim());
    let reference = format!("{}:{}", image::NAME, inputs.version);
    let run = inputs.out.join("image-run");
    fresh_dir(&run)?;
    let log = run.join("daemon.log");
    let name = format!("profilerd-check-{}", std::process::id());
    let mut podman = process::command("podman");
    if Path::new("/sys/fs/cgroup/unified").is_dir() {
        // A hybrid cgroup hierarchy (v1 controllers, v2 beside them), as
        // on these test machines: crun refuses it, runc takes it.
        podman.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    }
    let child = podman
        .args(["run", "--rm", "--name", &name, "--pid=host"])
        // Limits at most a sandbox's hard ones (podman's defaults are
        // above them, which needs CAP_SYS_RESOURCE): peeks need open
        // files, nothing needs many processes.
        .args([
            "--ulimit",
            "nofile=16384:16384",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .args(["--cap-drop=all", "--security-opt", "seccomp=unconfined"])
        // As the DaemonSet runs it: its capabilities and host paths.
        .args(["--cap-add=bpf,perfmon,sys_ptrace,dac_read_search,syslog"])
        .args(["--volume", "/sys/kernel/tracing:/sys/kernel/tracing:ro"])
        .args(["--volume", "/sys/fs/cgroup:/sys/fs/cgroup:ro"])
        .arg("--volume")
        .arg(format!("{}:/run/profilerd", run.display()))
        .arg(&reference)
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log)?)
        .spawn()
        .context("cannot run podman")?;
    let mut daemon = Running(child);
    let socket = run.join("profilerd.sock");
    let started = wait_for_socket(&mut daemon, &socket, &log);
    let result = started.and_then(|()| {
        profiles_the_workload(workload, |pid| {
            process::output(
                process::command(inputs.binary("profilerctl")?)
                    .env("PROFILERD_SOCKET", &socket)
                    .args(["profile", "--pid", &pid.to_string(), "--duration", "3s"])
                    .args(["--format", "folded"]),
            )
        })
    });
    let _ = process::command("podman")
        .args(["stop", "--time", "10", &name])
        .output();
    drop(daemon);
    let _ = process::command("podman")
        .args(["rmi", "--force", &reference])
        .output();
    result.with_context(|| {
        format!(
            "the daemon's log: {}",
            fs::read_to_string(&log).unwrap_or_default()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_patterns_match() {
        assert!(matches(
            "/usr/share/man/man1/profilerctl-*.1.gz",
            "/usr/share/man/man1/profilerctl-profile.1.gz"
        ));
        assert!(!matches(
            "/usr/share/man/man1/profilerctl-*.1.gz",
            "/usr/share/man/man1/profilerctl.1.gz"
        ));
        assert!(matches("/usr/bin/profilerd", "/usr/bin/profilerd"));
        assert!(!matches("/usr/bin/profilerd", "/usr/bin/profilerctl"));
    }
}
