//! `cargo xtask test --kernels`: the kernel compatibility matrix.
//!
//! Each Debian release's kernel (`linux-image-amd64` of its suites, fetched
//! with `apt-get download` through a private apt configuration under
//! target/kernels/apt, so that the host's apt is untouched) boots under
//! qemu-system-x86_64 with an initramfs made here: busybox, the release
//! profilerd and profilerctl, the libraries they load, and a C workload
//! whose hot path is `main → outer_fn → middle_fn → hot_leaf`. Its /init
//! starts the daemon, profiles the workload for three seconds and prints
//! what happened between `KERNEL-MATRIX-` marker lines on the serial
//! console, which this module reads and judges: a kernel from
//! [`OLDEST_TESTED`] on must start the daemon and give the chain whole; one
//! older than [`OLDEST_SUPPORTED`] must be refused by the daemon's
//! requirements check naming the missing feature (or pass whole).
//!
//! Owns the matrix: the kernels, the initramfs, the boots, the verdicts and
//! target/kernels/results.md. It must not build the daemon (the caller
//! does) nor change the host's apt configuration.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};

use crate::deps::{self, AptPackage};
use crate::process;

/// The oldest kernel profilerd is tested on (the daemon's
/// `requirements::OLDEST_TESTED`): from it on, a kernel must pass whole.
pub const OLDEST_TESTED: (u32, u32) = (6, 1);

/// The oldest kernel with every BPF feature the daemon requires (the
/// daemon's `requirements::OLDEST_SUPPORTED`): below it, the daemon must
/// refuse naming what is missing.
pub const OLDEST_SUPPORTED: (u32, u32) = (5, 17);

/// The mirror the kernels come from (Debian's own, as the host's apt uses).
const MIRROR: &str = "http://deb.debian.org";

/// A Debian release whose kernel is booted: the suites its
/// `linux-image-amd64` is taken from (the newest version among them).
struct Release {
    label: &'static str,
    /// `(archive, suite)`: `debian` or `debian-security`, and the suite.
    suites: &'static [(&'static str, &'static str)],
    /// Whether the run fails when this kernel cannot be fetched (Debian
    /// 12's own must be there; the others are tried).
    required: bool,
}

const RELEASES: &[Release] = &[
    Release {
        label: "Debian 11 (bullseye)",
        suites: &[
            ("debian", "bullseye"),
            ("debian-security", "bullseye-security"),
        ],
        required: false,
    },
    Release {
        label: "Debian 12 (bookworm)",
        suites: &[
            ("debian", "bookworm"),
            ("debian", "bookworm-updates"),
            ("debian-security", "bookworm-security"),
        ],
        required: true,
    },
    // What Debian 12 offers in place of its own kernel (see docs/kernels.md).
    Release {
        label: "Debian 12 backports",
        suites: &[("debian", "bookworm-backports")],
        required: false,
    },
    Release {
        label: "Debian 13 (trixie)",
        suites: &[
            ("debian", "trixie"),
            ("debian", "trixie-updates"),
            ("debian-security", "trixie-security"),
        ],
        required: false,
    },
    Release {
        label: "Debian testing (forky)",
        suites: &[("debian", "forky")],
        required: false,
    },
];

/// What the matrix needs from Debian besides gcc.
const APT_PACKAGES: &[AptPackage] = &[
    AptPackage {
        name: "qemu-system-x86",
        provides: "qemu-system-x86_64",
    },
    AptPackage {
        name: "busybox-static",
        provides: "busybox",
    },
];

/// How long one boot may take, with KVM and without (TCG emulates every
/// instruction).
const BOOT_TIMEOUT_KVM: Duration = Duration::from_secs(180);
const BOOT_TIMEOUT_TCG: Duration = Duration::from_secs(900);

/// How long a KVM guest has to reach /init before KVM is given up for TCG
/// (a boot to /init takes seconds under a working KVM).
const KVM_ALIVE: Duration = Duration::from_secs(45);

/// The marker lines the initramfs's /init prints.
const MARK: &str = "KERNEL-MATRIX-";

/// The known chain of the workload, outermost first.
const CHAIN: [&str; 4] = ["main", "outer_fn", "middle_fn", "hot_leaf"];

/// The napping workload's path to its sleeps, off CPU.
const NAP_CHAIN: [&str; 4] = ["main", "outer_fn", "middle_fn", "nap_leaf"];

/// The workload: its hot path is [`CHAIN`], spinning until it is killed;
/// with an argument, [`NAP_CHAIN`], sleeping 2 ms at a time.
const WORKLOAD_C: &str = r#"
#include <stdint.h>
#include <time.h>
volatile uint64_t sink;
volatile int stop;
int napping;
__attribute__((noinline)) void hot_leaf(void) {
    while (!stop) {
        for (uint64_t i = 0; i < 1000000; i++) sink += i;
    }
}
__attribute__((noinline)) void nap_leaf(void) {
    struct timespec nap = {0, 2000000};
    while (!stop) nanosleep(&nap, 0);
}
__attribute__((noinline)) void middle_fn(void) {
    if (napping) nap_leaf(); else hot_leaf();
    __asm__ volatile("");
}
__attribute__((noinline)) void outer_fn(void) { middle_fn(); __asm__ volatile(""); }
int main(int argc, char **argv) { napping = argc > 1; outer_fn(); return 0; }
"#;

/// The initramfs's /init (busybox sh).
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
say() { echo "KERNEL-MATRIX-$*"; }
say "RELEASE: $(uname -r)"
mkdir -p /var/lib/profilerd
profilerd --socket /run/p.sock --state-dir /var/lib/profilerd >/tmp/daemon.log 2>&1 &
daemon=$!
# The socket is bound before the programs load: serving is the log's word.
i=0
while ! grep -q "profilerd is serving" /tmp/daemon.log && kill -0 $daemon 2>/dev/null &&
    [ $i -lt 1200 ]; do
    sleep 0.5
    i=$((i + 1))
done
if grep -q "profilerd is serving" /tmp/daemon.log; then
    say "DAEMON: started"
    /usr/bin/workload &
    workload=$!
    sleep 1
    profilerctl --socket /run/p.sock profile --pid $workload --duration 3s --format folded \
        >/tmp/folded 2>/tmp/profilerctl.err
    say "PROFILE-EXIT: $?"
    say "FOLDED-BEGIN"
    cat /tmp/folded
    echo
    say "FOLDED-END"
    say "PROFILERCTL-BEGIN"
    cat /tmp/profilerctl.err
    echo
    say "PROFILERCTL-END"
    kill $workload
    /usr/bin/workload nap &
    napper=$!
    sleep 1
    profilerctl --socket /run/p.sock profile --pid $napper --duration 3s --mode offcpu \
        --format folded >/tmp/offcpu 2>&1
    say "OFFCPU-EXIT: $?"
    say "OFFCPU-BEGIN"
    cat /tmp/offcpu
    echo
    say "OFFCPU-END"
    kill $napper
    say "STATUS-BEGIN"
    profilerctl --socket /run/p.sock status
    echo
    say "STATUS-END"
    kill -TERM $daemon
    i=0
    while kill -0 $daemon 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
elif kill -0 $daemon 2>/dev/null; then
    say "DAEMON: not serving after 600 s"
    kill -KILL $daemon
else
    wait $daemon
    say "DAEMON: exited $?"
fi
say "LOG-BEGIN"
cat /tmp/daemon.log
echo
say "LOG-END"
say "DONE"
poweroff -f
"#;

/// Runs the matrix: fetches the kernels, builds the initramfs from the
/// binaries in `release_dir`, boots each kernel and judges it; prints the
/// table and writes it to `work_dir`/results.md. Fails when a kernel from
/// [`OLDEST_SUPPORTED`] on fails, or an older one is not refused by name.
pub fn matrix(release_dir: &Path, work_dir: &Path) -> Result<()> {
    if process::find_program("gcc").is_none() {
        bail!("gcc is not on PATH: the matrix compiles its C workload with it");
    }
    deps::ensure_apt_packages(APT_PACKAGES)?;
    fs::create_dir_all(work_dir).with_context(|| format!("creating {}", work_dir.display()))?;

    let apt = PrivateApt::new(&work_dir.join("apt"))?;
    apt.update()?;
    let mut kernels = Vec::new();
    for release in RELEASES {
        match fetch_kernel(&apt, release, work_dir) {
            Ok(kernel) => kernels.push(Ok(kernel)),
            Err(err) if release.required => {
                return Err(err.context(format!("fetching the kernel of {}", release.label)));
            }
            Err(err) => {
                println!("==> skipping {}: {err:#}", release.label);
                kernels.push(Err((release.label, format!("{err:#}"))));
            }
        }
    }

    let initrd = build_initramfs(release_dir, work_dir)?;
    let mut accel = Accel::detect();
    println!("==> booting with {}", accel.describe());
    let logs = work_dir.join("logs");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let mut outcomes = Vec::new();
    for kernel in kernels {
        let outcome = match kernel {
            Ok(kernel) => {
                println!("==> booting {} ({})", kernel.package, kernel.release_label);
                let log = logs.join(format!("{}.log", kernel.package));
                let mut booted = boot(&kernel, &initrd, accel, &log);
                if matches!(booted, Ok(None)) {
                    println!(
                        "    under KVM the guest did not reach /init within {} s (a nested KVM \
                         that runs only guests built for it, such as PVM): falling back to TCG",
                        KVM_ALIVE.as_secs()
                    );
                    accel = Accel::Tcg;
                    booted = boot(&kernel, &initrd, accel, &log);
                }
                match booted {
                    Ok(Some(serial)) => judge(&kernel, &serial, &log),
                    Ok(None) => unreachable!("only a KVM boot gives up early"),
                    Err(err) => {
                        let mut outcome = Outcome::not_run(
                            &kernel_name(&kernel),
                            &format!("did not boot: {err:#}"),
                        );
                        outcome.verdict = Verdict::Fail;
                        outcome.log = Some(log);
                        outcome
                    }
                }
            }
            Err((label, reason)) => Outcome::not_run(label, &reason),
        };
        println!("    {}", outcome.verdict_line());
        outcomes.push(outcome);
    }

    let table = table(&outcomes);
    println!("\n{table}");
    let date = process::output(process::command("date").args(["-u", "+%F"]))
        .map(|date| date.trim().to_owned())
        .unwrap_or_default();
    let results = work_dir.join("results.md");
    fs::write(
        &results,
        format!(
            "# Kernel matrix ({date}, `cargo xtask test --kernels`, {})\n\n{table}",
            accel.describe()
        ),
    )
    .with_context(|| format!("writing {}", results.display()))?;
    println!("results: {}", results.display());

    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.verdict.failed()).collect();
    for outcome in &failed {
        println!("\n--- {} failed: {}", outcome.kernel, outcome.detail);
        if let Some(log) = &outcome.log {
            println!("    serial log: {}", log.display());
        }
        for line in &outcome.daemon_log_tail {
            println!("    | {line}");
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} kernel(s) failed the matrix (see {})",
            failed.len(),
            results.display()
        );
    }
    Ok(())
}

/// apt-get and apt-cache with their own sources, lists and caches under
/// one directory: the host's configuration and package lists are left as
/// they are.
struct PrivateApt {
    dir: PathBuf,
    options: Vec<String>,
}

impl PrivateApt {
    fn new(dir: &Path) -> Result<Self> {
        let empty = dir.join("empty.d");
        for sub in [dir.join("lists/partial"), dir.join("cache"), empty.clone()] {
            fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        }
        let mut sources = String::new();
        for release in RELEASES {
            for (archive, suite) in release.suites {
                writeln!(
                    sources,
                    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                     {MIRROR}/{archive} {suite} main"
                )?;
            }
        }
        let list = dir.join("sources.list");
        if fs::read_to_string(&list).ok().as_deref() != Some(sources.as_str()) {
            fs::write(&list, &sources).with_context(|| format!("writing {}", list.display()))?;
            // New sources: the lists must be read again.
            let _ = fs::remove_file(dir.join("updated"));
        }
        let path = |p: &Path| p.display().to_string();
        let options = [
            format!("Dir::Etc::sourcelist={}", path(&list)),
            format!("Dir::Etc::sourceparts={}", path(&empty)),
            format!("Dir::Etc::preferences={}", path(&empty.join("none"))),
            format!("Dir::Etc::preferencesparts={}", path(&empty)),
            format!("Dir::State::Lists={}", path(&dir.join("lists"))),
            format!("Dir::Cache={}", path(&dir.join("cache"))),
            "Acquire::Languages=none".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".to_owned(),
            "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false".to_owned(),
            "APT::Sandbox::User=root".to_owned(),
        ]
        .into_iter()
        .flat_map(|option| ["-o".to_owned(), option])
        .collect();
        Ok(Self {
            dir: dir.to_owned(),
            options,
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = process::command(program);
        cmd.args(&self.options);
        cmd
    }

    /// `apt-get update` of the private lists, at most once a day; a
    /// suite that cannot be reached leaves only its own kernel out.
    fn update(&self) -> Result<()> {
        let stamp = self.dir.join("updated");
        let fresh = fs::metadata(&stamp)
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| SystemTime::now().duration_since(modified).ok())
            .is_some_and(|age| age < Duration::from_secs(24 * 3600));
        if fresh {
            return Ok(());
        }
        println!(
            "==> apt-get update of the kernels' suites (private lists in {})",
            self.dir.display()
        );
        let mut cmd = self.command("apt-get");
        cmd.args(["-q", "update"]);
        match process::output(&mut cmd) {
            Ok(_) => {
                fs::write(&stamp, "").with_context(|| format!("writing {}", stamp.display()))?;
            }
            // Some suites may be unreachable; what was read is used.
            Err(err) => println!("    apt-get update had errors: {err:#}"),
        }
        Ok(())
    }
}

/// A kernel ready to boot.
struct Kernel {
    release_label: &'static str,
    /// The binary package it comes from (`linux-image-6.1.0-57-amd64`).
    package: String,
    /// The package's version (`6.1.192-3`).
    version: String,
    vmlinuz: PathBuf,
}

/// The newest `linux-image-amd64` of `release`'s suites, resolved to the
/// image package it depends on, downloaded into `work_dir`/debs (once)
/// and its vmlinuz extracted (once).
fn fetch_kernel(apt: &PrivateApt, release: &Release, work_dir: &Path) -> Result<Kernel> {
    let madison = process::output(
        apt.command("apt-cache")
            .args(["madison", "linux-image-amd64"]),
    )?;
    let suites: Vec<&str> = release.suites.iter().map(|(_, suite)| *suite).collect();
    let meta_version = newest_in_suites(&madison, &suites).with_context(|| {
        format!(
            "no linux-image-amd64 in {} (suites not reachable?)",
            suites.join(", ")
        )
    })?;
    let depends = process::output(
        apt.command("apt-cache")
            .args(["depends", &format!("linux-image-amd64={meta_version}")]),
    )?;
    let mut package = dependency(&depends, "linux-image-").with_context(|| {
        format!("linux-image-amd64 {meta_version} depends on no linux-image package")
    })?;
    let madison = process::output(apt.command("apt-cache").args(["madison", &package]))?;
    let version = newest_in_suites(&madison, &suites)
        .with_context(|| format!("no {package} in {}", suites.join(", ")))?;
    // From Linux 7 on, Debian's image package is empty: the kernel itself
    // is in the linux-binary package it depends on (of the same version).
    let depends = process::output(
        apt.command("apt-cache")
            .args(["depends", &format!("{package}={version}")]),
    )?;
    if let Some(binary) = dependency(&depends, "linux-binary-") {
        package = binary;
    }

    let debs = work_dir.join("debs");
    fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
    let deb = debs.join(format!(
        "{package}_{}_amd64.deb",
        version.replace(':', "%3a")
    ));
    if !deb.is_file() {
        println!("==> apt-get download {package}={version}");
        process::run(
            apt.command("apt-get")
                .args(["-q", "download", &format!("{package}={version}")])
                .current_dir(&debs),
        )?;
        if !deb.is_file() {
            bail!("apt-get download left no {}", deb.display());
        }
    }

    let dir = work_dir.join(&package);
    let vmlinuz = dir.join("vmlinuz");
    if !vmlinuz.is_file() {
        extract_vmlinuz(&deb, &dir)?;
    }
    Ok(Kernel {
        release_label: release.label,
        package,
        version,
        vmlinuz,
    })
}

/// The first (newest) version in `apt-cache madison` output that comes
/// from one of `suites`.
fn newest_in_suites(madison: &str, suites: &[&str]) -> Option<String> {
    madison.lines().find_map(|line| {
        let mut fields = line.split('|').map(str::trim);
        let (_, version, source) = (fields.next()?, fields.next()?, fields.next()?);
        // "http://deb.debian.org/debian bookworm/main amd64 Packages"
        let suite = source.split_whitespace().nth(1)?.split('/').next()?;
        suites.contains(&suite).then(|| version.to_owned())
    })
}

/// The first package named `prefix*` that an `apt-cache depends` output
/// says the package depends on.
fn dependency(depends: &str, prefix: &str) -> Option<String> {
    depends.lines().find_map(|line| {
        let name = line.trim().strip_prefix("Depends:")?.trim();
        let name = name.trim_start_matches('<').trim_end_matches('>');
        name.starts_with(prefix).then(|| name.to_owned())
    })
}

/// Extracts the package's kernel image (./boot/vmlinuz-*, or from Linux 7
/// on ./usr/lib/modules/*/vmlinuz) as `dir`/vmlinuz. The rest of the
/// package is not needed: Debian's kernels build in BPF, perf events,
/// tracefs, devtmpfs and the serial console.
fn extract_vmlinuz(deb: &Path, dir: &Path) -> Result<()> {
    let listing = process::output(process::command("dpkg-deb").arg("-c").arg(deb))?;
    let member =
        vmlinuz_member(&listing).with_context(|| format!("{} holds no vmlinuz", deb.display()))?;
    let unpacked = dir.join("unpacked");
    let _ = fs::remove_dir_all(&unpacked);
    fs::create_dir_all(&unpacked).with_context(|| format!("creating {}", unpacked.display()))?;
    let mut dpkg = process::command("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("could not start dpkg-deb")?;
    let tar_input = dpkg.stdout.take().context("dpkg-deb has no stdout")?;
    let tar = process::command("tar")
        .arg("-x")
        .arg("-C")
        .arg(&unpacked)
        .arg(&member)
        .stdin(tar_input)
        .status()
        .context("could not start tar")?;
    let dpkg_status = dpkg.wait().context("waiting for dpkg-deb")?;
    if !tar.success() || !dpkg_status.success() {
        bail!("extracting {member} from {} failed", deb.display());
    }
    fs::rename(unpacked.join(&member), dir.join("vmlinuz"))
        .with_context(|| format!("moving {member} to {}", dir.display()))?;
    let _ = fs::remove_dir_all(&unpacked);
    Ok(())
}

/// The kernel image's path in a `dpkg-deb -c` listing.
fn vmlinuz_member(listing: &str) -> Option<String> {
    listing.lines().find_map(|line| {
        // Mode, owner, size, date, time, path.
        let path = line.split_whitespace().nth(5)?;
        let image = path.starts_with("./boot/vmlinuz-")
            || (path.starts_with("./usr/lib/modules/") && path.ends_with("/vmlinuz"));
        (line.starts_with('-') && image).then(|| path.to_owned())
    })
}

/// One entry of the initramfs.
enum Entry {
    Dir,
    File { data: Vec<u8>, mode: u32 },
    Symlink(String),
    CharDevice { major: u32, minor: u32 },
}

/// Builds `work_dir`/initrd.cpio.gz: busybox, profilerd, profilerctl, the
/// workload, the libraries they load (as `ldd` finds them), /init.
fn build_initramfs(release_dir: &Path, work_dir: &Path) -> Result<PathBuf> {
    let workload = work_dir.join("workload");
    let source = work_dir.join("workload.c");
    fs::write(&source, WORKLOAD_C).with_context(|| format!("writing {}", source.display()))?;
    process::run(
        process::command("gcc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline"])
            .arg("-fno-optimize-sibling-calls")
            .arg("-o")
            .arg(&workload)
            .arg(&source),
    )?;

    let busybox = process::find_program("busybox").context("busybox is not on PATH")?;
    let mut binaries: Vec<(PathBuf, &str)> =
        vec![(busybox, "/bin/busybox"), (workload, "/usr/bin/workload")];
    for name in ["profilerd", "profilerctl"] {
        let binary = release_dir.join(name);
        if !binary.is_file() {
            bail!("{} is missing: build the release first", binary.display());
        }
        binaries.push((
            binary,
            if name == "profilerd" {
                "/usr/bin/profilerd"
            } else {
                "/usr/bin/profilerctl"
            },
        ));
    }

    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    for dir in [
        "/bin", "/dev", "/etc", "/proc", "/root", "/run", "/sys", "/tmp", "/usr/bin", "/var",
    ] {
        add(&mut entries, dir, Entry::Dir);
    }
    add(
        &mut entries,
        "/dev/console",
        Entry::CharDevice { major: 5, minor: 1 },
    );
    add(
        &mut entries,
        "/dev/null",
        Entry::CharDevice { major: 1, minor: 3 },
    );
    add(
        &mut entries,
        "/etc/passwd",
        text("root:x:0:0:root:/root:/bin/sh\n", 0o644),
    );
    add(&mut entries, "/etc/group", text("root:x:0:\n", 0o644));
    add(&mut entries, "/init", text(INIT, 0o755));
    add(
        &mut entries,
        "/bin/sh",
        Entry::Symlink("busybox".to_owned()),
    );
    for (source, target) in &binaries {
        add(&mut entries, target, file(source, 0o755)?);
        for library in shared_libraries(source)? {
            let target = library.display().to_string();
            add(&mut entries, &target, file(&library, 0o755)?);
        }
    }

    let mut cpio = Vec::new();
    for (inode, (name, entry)) in entries.iter().enumerate() {
        write_cpio_entry(
            &mut cpio,
            inode as u32 + 1,
            name.trim_start_matches('/'),
            entry,
        );
    }
    write_cpio_trailer(&mut cpio);

    let initrd = work_dir.join("initrd.cpio.gz");
    let out = File::create(&initrd).with_context(|| format!("creating {}", initrd.display()))?;
    let mut gzip = process::command("gzip")
        .args(["-1", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(out)
        .spawn()
        .context("could not start gzip")?;
    gzip.stdin
        .take()
        .context("gzip has no stdin")?
        .write_all(&cpio)
        .context("writing the initramfs to gzip")?;
    if !gzip.wait()?.success() {
        bail!("gzip failed writing {}", initrd.display());
    }
    println!(
        "==> initramfs {} ({} files, {:.1} MiB before gzip)",
        initrd.display(),
        entries.len(),
        cpio.len() as f64 / (1 << 20) as f64
    );
    Ok(initrd)
}

/// Adds `entry` at `path`, and the directories above it.
fn add(entries: &mut BTreeMap<String, Entry>, path: &str, entry: Entry) {
    let mut parent = Path::new(path).parent();
    while let Some(dir) = parent {
        let dir_name = dir.display().to_string();
        if dir_name != "/" {
            entries.entry(dir_name).or_insert(Entry::Dir);
        }
        parent = dir.parent();
    }
    entries.insert(path.to_owned(), entry);
}

fn text(content: &str, mode: u32) -> Entry {
    Entry::File {
        data: content.as_bytes().to_vec(),
        mode,
    }
}

/// A file's contents (through any symbolic links).
fn file(path: &Path, mode: u32) -> Result<Entry> {
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Entry::File { data, mode })
}

/// The shared libraries `binary` loads (and its interpreter), as `ldd`
/// names them; none for a static binary.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = process::command("ldd")
        .arg(binary)
        .stdin(Stdio::null())
        .output()
        .context("could not start ldd")?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_ldd(output: &str) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, right)) => right.trim(),
                None => line,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Appends one entry in the "newc" cpio format the kernel unpacks.
fn write_cpio_entry(out: &mut Vec<u8>, inode: u32, name: &str, entry: &Entry) {
    const DIR: u32 = 0o040_000;
    const REGULAR: u32 = 0o100_000;
    const SYMLINK: u32 = 0o120_000;
    const CHAR_DEVICE: u32 = 0o020_000;
    let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match entry {
        Entry::Dir => (DIR | 0o755, &[], (0, 0)),
        Entry::File { data, mode } => (REGULAR | mode, data, (0, 0)),
        Entry::Symlink(target) => (SYMLINK | 0o777, target.as_bytes(), (0, 0)),
        Entry::CharDevice { major, minor } => (CHAR_DEVICE | 0o600, &[], (*major, *minor)),
    };
    let nlink = if matches!(entry, Entry::Dir) { 2 } else { 1 };
    let fields = [
        inode,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime
        data.len() as u32,
        0, // device major
        0, // device minor
        rdev.0,
        rdev.1,
        name.len() as u32 + 1,
        0, // check
    ];
    out.extend_from_slice(b"070701");
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn write_cpio_trailer(out: &mut Vec<u8>) {
    write_cpio_entry(out, 0, "TRAILER!!!", &Entry::Dir);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// How qemu runs the guest.
#[derive(Clone, Copy, Debug)]
enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// KVM when /dev/kvm can be opened, else TCG.
    fn detect() -> Self {
        let usable = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        if usable { Self::Kvm } else { Self::Tcg }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Kvm => "qemu-system-x86_64 under KVM (-cpu host)",
            Self::Tcg => "qemu-system-x86_64 under TCG (no usable /dev/kvm)",
        }
    }

    fn timeout(self) -> Duration {
        match self {
            Self::Kvm => BOOT_TIMEOUT_KVM,
            Self::Tcg => BOOT_TIMEOUT_TCG,
        }
    }
}

/// Boots `kernel` with `initrd`; returns the serial console's output (also
/// kept in `log`). The guest powers itself off; qemu is killed at the
/// timeout. Under KVM, `None` when the guest has not reached /init within
/// [`KVM_ALIVE`] (a nested KVM may run nothing but its own kind of guest).
fn boot(kernel: &Kernel, initrd: &Path, accel: Accel, log: &Path) -> Result<Option<String>> {
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = process::command("qemu-system-x86_64");
    match accel {
        Accel::Kvm => cmd.args(["-enable-kvm", "-cpu", "host"]),
        Accel::Tcg => cmd.args(["-cpu", "max"]),
    };
    cmd.args(["-m", "2G", "-smp", "2", "-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 loglevel=4"])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start `{}`", process::display(&cmd)))?;
    let started = Instant::now();
    let alive = format!("{MARK}RELEASE");
    let mut reached_init = false;
    let timed_out = loop {
        if child.try_wait()?.is_some() {
            break false;
        }
        if let Accel::Kvm = accel
            && !reached_init
            && started.elapsed() > KVM_ALIVE
        {
            reached_init = String::from_utf8_lossy(&fs::read(log)?).contains(&alive);
            if !reached_init {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
        }
        if started.elapsed() > accel.timeout() {
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let serial = String::from_utf8_lossy(&fs::read(log)?).replace('\r', "");
    if timed_out && !serial.contains(&format!("{MARK}DONE")) {
        bail!(
            "qemu did not finish within {} s (serial log: {})",
            accel.timeout().as_secs(),
            log.display()
        );
    }
    Ok(Some(serial))
}

/// What the requirements check said.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The daemon started.
    Passed,
    /// It refused the kernel, naming what is missing.
    Refused(String),
    /// It stopped for another reason.
    Failed(String),
    /// It did not run.
    NotRun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// Not run (a kernel that could not be fetched, not a required one).
    Skipped,
}

impl Verdict {
    fn failed(self) -> bool {
        self == Self::Fail
    }
}

/// One kernel's row.
struct Outcome {
    kernel: String,
    release: String,
    started: bool,
    check: Check,
    /// Samples of the workload whose stack holds [`CHAIN`] whole, of all.
    chain_samples: u64,
    samples: u64,
    offcpu: OffCpuOutcome,
    verdict: Verdict,
    detail: String,
    log: Option<PathBuf>,
    daemon_log_tail: Vec<String>,
}

impl Outcome {
    fn not_run(label: &str, reason: &str) -> Self {
        Self {
            kernel: label.to_owned(),
            release: "-".to_owned(),
            started: false,
            check: Check::NotRun,
            chain_samples: 0,
            samples: 0,
            offcpu: OffCpuOutcome::default(),
            verdict: Verdict::Skipped,
            detail: reason.to_owned(),
            log: None,
            daemon_log_tail: Vec::new(),
        }
    }

    fn verdict_line(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skipped => "SKIPPED",
        };
        format!("{verdict}: {} {}", self.release, self.detail)
    }
}

/// The off-CPU profile of the napping workload on one kernel.
#[derive(Debug, Default)]
struct OffCpuOutcome {
    /// Samples whose stack holds [`NAP_CHAIN`] whole, of all.
    chain_samples: u64,
    samples: u64,
    /// Why off-CPU time cannot be recorded, as `status` says it.
    unavailable: Option<String>,
    /// What off-CPU recording lacks there, as `status` says it.
    limitation: Option<String>,
}

impl OffCpuOutcome {
    fn read(serial: &str) -> Self {
        let folded = section(serial, "OFFCPU-BEGIN", "OFFCPU-END");
        let (chain_samples, samples) = count_chain(&folded, &NAP_CHAIN);
        let status = section(serial, "STATUS-BEGIN", "STATUS-END");
        let line = status
            .iter()
            .find_map(|line| line.trim().strip_prefix("off-CPU:"))
            .map(str::trim);
        Self {
            chain_samples,
            samples,
            unavailable: line
                .and_then(|line| line.strip_prefix("unavailable ("))
                .map(|rest| rest.trim_end_matches(')').to_owned()),
            limitation: line
                .and_then(|line| line.split_once("; limited: "))
                .map(|(_, limitation)| limitation.to_owned()),
        }
    }

    /// In at least nine samples of ten, as the CPU profile's.
    fn whole(&self) -> bool {
        self.unavailable.is_none()
            && self.samples > 0
            && self.chain_samples * 10 >= self.samples * 9
    }

    fn describe(&self) -> String {
        if let Some(why) = &self.unavailable {
            return format!("unavailable: {}", shorten(why));
        }
        if self.samples == 0 {
            return "-".to_owned();
        }
        let whole = if self.whole() { "whole" } else { "NOT whole" };
        let mut text = format!("{whole} ({}/{})", self.chain_samples, self.samples);
        if self.limitation.is_some() {
            text.push_str(", without Python frames (verifier limit)");
        }
        text
    }
}

/// The lines between `KERNEL-MATRIX-{begin}` and `KERNEL-MATRIX-{end}`
/// (an end marker on a line of its own or ending the last one).
fn section<'a>(serial: &'a str, begin: &str, end: &str) -> Vec<&'a str> {
    let begin = format!("{MARK}{begin}");
    let end = format!("{MARK}{end}");
    let mut lines = Vec::new();
    for line in serial
        .lines()
        .skip_while(|line| !line.trim_end().ends_with(begin.as_str()))
        .skip(1)
    {
        if let Some(at) = line.find(end.as_str()) {
            if !line[..at].trim().is_empty() {
                lines.push(&line[..at]);
            }
            break;
        }
        lines.push(line);
    }
    lines
}

/// The value of the marker line `KERNEL-MATRIX-{key}: value` (what the
/// firmware left on the console may come before it on its line).
fn marker<'a>(serial: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{MARK}{key}: ");
    serial
        .lines()
        .find_map(|line| Some(&line[line.find(prefix.as_str())? + prefix.len()..]))
        .map(str::trim)
}

/// Samples in `folded` (`frame;frame;... count` lines), and those whose
/// frames hold `chain` in order, consecutively.
fn count_chain(folded: &[&str], chain: &[&str]) -> (u64, u64) {
    let mut whole = 0;
    let mut all = 0;
    for line in folded {
        let Some((stack, count)) = line.trim().rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        all += count;
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.windows(chain.len()).any(|window| window == chain) {
            whole += count;
        }
    }
    (whole, all)
}

/// The `(major, minor)` a release starts with.
fn version_of(release: &str) -> Option<(u32, u32)> {
    let numbers = release
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?;
    let mut parts = numbers.split('.').map(|part| part.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// Reads a boot's serial output and judges it.
fn judge(kernel: &Kernel, serial: &str, log: &Path) -> Outcome {
    let release = marker(serial, "RELEASE").unwrap_or("?").to_owned();
    let daemon = marker(serial, "DAEMON").unwrap_or("");
    let daemon_log = section(serial, "LOG-BEGIN", "LOG-END");
    let started = daemon == "started";
    // The daemon's refusals (a missing feature, a verifier that gives up)
    // are errors that say "this kernel (RELEASE)".
    let refusal = daemon_log
        .iter()
        .find(|line| line.contains("ERROR") && line.contains("this kernel ("));
    let check = if started {
        Check::Passed
    } else if let Some(line) = refusal {
        Check::Refused(refusal_text(line))
    } else if daemon.is_empty() {
        Check::Failed("the guest did not get to start the daemon".to_owned())
    } else {
        let last = daemon_log
            .iter()
            .rev()
            .find(|line| line.contains("ERROR") || line.contains("error"))
            .map_or_else(|| daemon.to_owned(), |line| line.trim().to_owned());
        Check::Failed(last)
    };
    let folded = section(serial, "FOLDED-BEGIN", "FOLDED-END");
    let (chain_samples, samples) = count_chain(&folded, &CHAIN);
    let offcpu = OffCpuOutcome::read(serial);
    // Whole: in at least nine samples of ten (the others may be taken
    // before the workload reached its hot loop).
    let chain_whole = samples > 0 && chain_samples * 10 >= samples * 9;

    let version = version_of(&release);
    let (verdict, detail) = match version {
        None => (Verdict::Fail, "the kernel did not boot to /init".to_owned()),
        Some(version) => {
            let passed = started && chain_whole && offcpu.whole();
            let refused = matches!(check, Check::Refused(_));
            if passed {
                (
                    Verdict::Pass,
                    "started and the chain came out whole".to_owned(),
                )
            } else if version >= OLDEST_TESTED {
                let why = if started && !chain_whole {
                    format!("the chain came out whole in {chain_samples} of {samples} samples")
                } else if started {
                    format!("off-CPU: {}", offcpu.describe())
                } else {
                    "the daemon did not start".to_owned()
                };
                (Verdict::Fail, format!("supported kernel, but {why}"))
            } else if refused {
                let detail = if version < OLDEST_SUPPORTED {
                    format!(
                        "below Linux {}.{}: refused, naming what is missing",
                        OLDEST_SUPPORTED.0, OLDEST_SUPPORTED.1
                    )
                } else {
                    format!(
                        "below Linux {}.{}, the oldest tested: refused, saying why",
                        OLDEST_TESTED.0, OLDEST_TESTED.1
                    )
                };
                (Verdict::Pass, detail)
            } else {
                (
                    Verdict::Fail,
                    "below the supported kernels, and not refused by name".to_owned(),
                )
            }
        }
    };
    let daemon_log_tail = daemon_log
        .iter()
        .rev()
        .take(15)
        .rev()
        .map(|line| (*line).to_owned())
        .collect();
    Outcome {
        kernel: kernel_name(kernel),
        release,
        started,
        check,
        chain_samples,
        samples,
        offcpu,
        verdict,
        detail,
        log: Some(log.to_owned()),
        daemon_log_tail,
    }
}

/// How a kernel is named in the table.
fn kernel_name(kernel: &Kernel) -> String {
    format!(
        "{} {} ({})",
        kernel.package, kernel.version, kernel.release_label
    )
}

/// The refusal's message from its log line (after the log's level and
/// target).
fn refusal_text(line: &str) -> String {
    line.find("this kernel (")
        .map_or(line, |start| &line[start..])
        .trim()
        .to_owned()
}

/// `text` up to its first ": profilerd needs" or ". The verifier" (what
/// follows is the same for every kernel, or long), and at most 300
/// characters (the serial logs keep it whole).
fn shorten(text: &str) -> String {
    let end = [": profilerd needs", ". The verifier"]
        .iter()
        .filter_map(|cut| text.find(cut))
        .min()
        .unwrap_or(text.len());
    let text = &text[..end];
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The results as a Markdown table.
fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| kernel | release | started | requirement check | chain whole | samples | off-CPU | verdict |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for o in outcomes {
        let check = match &o.check {
            Check::Passed => "passed".to_owned(),
            Check::Refused(message) => format!("refused: {}", shorten(message)),
            Check::Failed(message) => format!("failed: {}", shorten(message)),
            Check::NotRun => format!("not run: {}", o.detail),
        };
        let chain = if o.samples == 0 {
            "-".to_owned()
        } else {
            let whole = o.chain_samples * 10 >= o.samples * 9;
            if whole { "yes" } else { "no" }.to_owned()
        };
        let samples = if o.samples == 0 {
            "-".to_owned()
        } else {
            format!("{}/{}", o.chain_samples, o.samples)
        };
        let verdict = match o.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Skipped => "skipped",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            o.kernel,
            o.release,
            if o.started { "yes" } else { "no" },
            check.replace('|', "\\|"),
            chain,
            samples,
            o.offcpu.describe().replace('|', "\\|"),
            verdict
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn madison_lines_give_the_newest_version_of_the_suites() {
        let madison = "\
linux-image-amd64 | 6.12.117-1 | http://deb.debian.org/debian trixie/main amd64 Packages
linux-image-amd64 |  6.1.192-3 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
linux-image-amd64 |  6.1.176-1 | http://deb.debian.org/debian bookworm/main amd64 Packages
linux-image-amd64 | 5.10.223-1 | http://deb.debian.org/debian bullseye/main amd64 Packages
";
        let bookworm = ["bookworm", "bookworm-security"];
        assert_eq!(
            newest_in_suites(madison, &bookworm).as_deref(),
            Some("6.1.192-3")
        );
        assert_eq!(
            newest_in_suites(madison, &["bullseye"]).as_deref(),
            Some("5.10.223-1")
        );
        assert_eq!(newest_in_suites(madison, &["forky"]), None);
    }

    #[test]
    fn the_image_package_is_read_off_the_dependencies() {
        let depends = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            dependency(depends, "linux-image-").as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(dependency("linux-image-amd64\n", "linux-image-"), None);
        let depends = "linux-image-7.2.12+deb14-amd64\n  PreDepends: linux-base\n  \
                       Depends: linux-base-7.2.12+deb14-amd64\n  \
                       Depends: linux-binary-7.2.12+deb14-amd64\n";
        assert_eq!(
            dependency(depends, "linux-binary-").as_deref(),
            Some("linux-binary-7.2.12+deb14-amd64")
        );
    }

    #[test]
    fn the_kernel_image_is_found_in_old_and_new_packages() {
        let old = "\
drwxr-xr-x root/root         0 2026-10-01 10:00 ./boot/
-rw-r--r-- root/root   7999 2026-10-01 10:00 ./boot/config-6.1.0-57-amd64
-rw-r--r-- root/root 8000000 2026-10-01 10:00 ./boot/vmlinuz-6.1.0-57-amd64
";
        assert_eq!(
            vmlinuz_member(old).as_deref(),
            Some("./boot/vmlinuz-6.1.0-57-amd64")
        );
        let new = "\
drwxr-xr-x root/root         0 2026-10-22 19:53 ./usr/lib/modules/7.2.12+deb14-amd64/
-rw-r--r-- root/root  14550976 2026-10-22 19:53 ./usr/lib/modules/7.2.12+deb14-amd64/vmlinuz
";
        assert_eq!(
            vmlinuz_member(new).as_deref(),
            Some("./usr/lib/modules/7.2.12+deb14-amd64/vmlinuz")
        );
        assert_eq!(
            vmlinuz_member("-rw-r--r-- root/root 1 2026-10-22 19:53 ./x\n"),
            None
        );
    }

    #[test]
    fn ldd_output_gives_library_paths() {
        let output = "\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f7b)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f7b)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f7b)
";
        assert_eq!(
            parse_ldd(output),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let mut out = Vec::new();
        write_cpio_entry(&mut out, 1, "init", &text("#!/bin/sh\n", 0o755));
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        // Mode: a regular file, 0755.
        assert_eq!(&out[14..22], b"000081ed");
        // File size 10, name size 5 ("init" and its NUL).
        assert_eq!(&out[54..62], b"0000000a");
        assert_eq!(&out[94..102], b"00000005");
        write_cpio_trailer(&mut out);
        assert_eq!(out.len() % 4, 0);
    }

    #[test]
    fn refusals_are_shortened_for_the_table() {
        assert_eq!(
            shorten(
                "this kernel (5.4.0) has no BPF ring buffer (Linux 5.8): profilerd needs Linux 5.17"
            ),
            "this kernel (5.4.0) has no BPF ring buffer (Linux 5.8)"
        );
        assert_eq!(shorten(&"x".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn the_chain_is_found_whole_and_in_order() {
        let folded = [
            "_start;__libc_start_main_impl;__libc_start_call_main;main;outer_fn;middle_fn;hot_leaf 120",
            "_start;main;outer_fn;hot_leaf 3",
            "workload 2",
            "garbage",
        ];
        assert_eq!(count_chain(&folded, &CHAIN), (120, 125));
    }

    #[test]
    fn serial_output_is_read_between_markers() {
        let serial = "\
[    1.0] booting
KERNEL-MATRIX-RELEASE: 5.10.0-46-amd64
KERNEL-MATRIX-DAEMON: exited 1
KERNEL-MATRIX-LOG-BEGIN
2026-11-29T00:00:00Z ERROR profilerd: this kernel (5.10.0-46-amd64) has no bpf_loop helper (Linux 5.17): profilerd needs Linux 5.17 or later
KERNEL-MATRIX-LOG-END
KERNEL-MATRIX-DONE
";
        assert_eq!(marker(serial, "RELEASE"), Some("5.10.0-46-amd64"));
        assert_eq!(marker(serial, "DAEMON"), Some("exited 1"));
        let log = section(serial, "LOG-BEGIN", "LOG-END");
        assert_eq!(log.len(), 1);
        assert!(refusal_text(log[0]).starts_with("this kernel (5.10.0-46-amd64) has no bpf_loop"));
        assert_eq!(version_of("5.10.0-46-amd64"), Some((5, 10)));
        assert_eq!(version_of("6.12.117+deb13-amd64"), Some((6, 12)));
        assert_eq!(version_of("?"), None);
    }

    fn kernel(package: &str) -> Kernel {
        Kernel {
            release_label: "Debian",
            package: package.to_owned(),
            version: "1".to_owned(),
            vmlinuz: PathBuf::from("/nonexistent"),
        }
    }

    #[test]
    fn boots_are_judged_by_version_and_by_what_the_daemon_said() {
        let log = Path::new("/nonexistent.log");
        // Firmware output before the first marker; the log's last line
        // without its newline.
        let refused_5_19 = "\
Booting from ROM...\x1b[2JKERNEL-MATRIX-RELEASE: 5.19.0-1-amd64
KERNEL-MATRIX-DAEMON: exited 1
KERNEL-MATRIX-LOG-BEGIN
2026-11-29T00:00:00Z  WARN profilerd: this kernel (5.19.0-1-amd64) has every BPF feature profilerd needs, but is older than the oldest it is tested on (Linux 6.1)
2026-11-29T00:00:01Z ERROR profilerd: cannot start sampling: this kernel (5.19.0-1-amd64) cannot verify profilerd's sampling programs. The verifier's last words: processed 1000001 insns KERNEL-MATRIX-LOG-END
KERNEL-MATRIX-DONE
";
        let outcome = judge(&kernel("linux-image-5.19.0-1-amd64"), refused_5_19, log);
        assert_eq!(outcome.verdict, Verdict::Pass);
        assert_eq!(
            outcome.check,
            Check::Refused(
                "this kernel (5.19.0-1-amd64) cannot verify profilerd's sampling programs. The \
                 verifier's last words: processed 1000001 insns"
                    .to_owned()
            )
        );

        let passed_6_12 = "\
KERNEL-MATRIX-RELEASE: 6.12.118+deb13-amd64
KERNEL-MATRIX-DAEMON: started
KERNEL-MATRIX-FOLDED-BEGIN
_start;__libc_start_main;main;outer_fn;middle_fn;hot_leaf 146
_start;__libc_start_main;main;outer_fn;middle_fn;hot_leaf;irq_[k] 1
KERNEL-MATRIX-FOLDED-END
KERNEL-MATRIX-OFFCPU-BEGIN
_start;__libc_start_main;main;outer_fn;middle_fn;nap_leaf;clock_nanosleep;[off-cpu: S] 98
KERNEL-MATRIX-OFFCPU-END
KERNEL-MATRIX-STATUS-BEGIN
  off-CPU:    recorded for 0 request(s), always none; 192 switches seen
KERNEL-MATRIX-STATUS-END
KERNEL-MATRIX-DONE
";
        let outcome = judge(
            &kernel("linux-image-6.12.118+deb13-amd64"),
            passed_6_12,
            log,
        );
        assert_eq!(outcome.verdict, Verdict::Pass, "{}", outcome.detail);
        assert_eq!((outcome.chain_samples, outcome.samples), (147, 147));
        assert_eq!(outcome.offcpu.describe(), "whole (98/98)");

        // Off-CPU without Python frames (6.1's verifier) passes, and says so.
        let limited = passed_6_12.replace(
            "192 switches seen",
            "192 switches seen; limited: this kernel cannot verify the off-CPU program that \
             walks Python frames",
        );
        let outcome = judge(&kernel("linux-image-6.1.0-57-amd64"), &limited, log);
        assert_eq!(outcome.verdict, Verdict::Pass, "{}", outcome.detail);
        assert_eq!(
            outcome.offcpu.describe(),
            "whole (98/98), without Python frames (verifier limit)"
        );

        // A supported kernel whose chain is broken fails, on CPU or off
        // it; off-CPU unavailable fails; a refusal fails.
        let broken = passed_6_12.replace("outer_fn;middle_fn;hot_leaf", "middle_fn;hot_leaf");
        let outcome = judge(&kernel("linux-image-6.12.118+deb13-amd64"), &broken, log);
        assert_eq!(outcome.verdict, Verdict::Fail);
        let broken = passed_6_12.replace("outer_fn;middle_fn;nap_leaf", "nap_leaf");
        let outcome = judge(&kernel("linux-image-6.12.118+deb13-amd64"), &broken, log);
        assert_eq!(outcome.verdict, Verdict::Fail);
        assert!(
            outcome.detail.contains("off-CPU: NOT whole"),
            "{}",
            outcome.detail
        );
        let unavailable = passed_6_12.replace(
            "recorded for 0 request(s), always none; 192 switches seen",
            "unavailable (the kernel refused the sched_switch BTF tracepoint)",
        );
        let outcome = judge(
            &kernel("linux-image-6.12.118+deb13-amd64"),
            &unavailable,
            log,
        );
        assert_eq!(outcome.verdict, Verdict::Fail);
        let refused = refused_5_19.replace("5.19.0-1-amd64", "6.1.0-57-amd64");
        let outcome = judge(&kernel("linux-image-6.1.0-57-amd64"), &refused, log);
        assert_eq!(outcome.verdict, Verdict::Fail);
    }

    /// The matrix judges by the daemon's own versions: they must agree.
    #[test]
    fn the_versions_match_the_daemons() -> Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("no workspace root")?;
        let requirements =
            fs::read_to_string(root.join("profiler-daemon/src/kernel/requirements.rs"))?;
        for (name, (major, minor)) in [
            ("OLDEST_TESTED", OLDEST_TESTED),
            ("OLDEST_SUPPORTED", OLDEST_SUPPORTED),
        ] {
            let declaration = format!(
                "pub const {name}: KernelVersion = KernelVersion::new({major}, {minor}, 0);"
            );
            assert!(
                requirements.contains(&declaration),
                "the daemon's requirements.rs has no `{declaration}`"
            );
        }
        Ok(())
    }
}
