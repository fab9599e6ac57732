//! Installs, once, what a fresh machine lacks to build and test profilerd:
//! the pinned nightly toolchain with rust-src, a bpf-linker built against
//! that nightly's own libLLVM, and the test suite's system packages.
//!
//! Each step checks first and prints a `==>` line only when it does
//! something, so a second run is quick and says one `ok` line per group.
//! The recipe is the one in shared/notes/ebpf-toolchain.md.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use crate::process;

/// A nightly toolchain, pinned by the commit its rustc was built from.
pub struct PinnedNightly {
    /// The rustup channel that ships it, installed when no installed
    /// toolchain is this nightly.
    pub channel: &'static str,
    /// `commit-hash` in its `rustc -vV`: what identifies it, whatever name
    /// rustup gives it on a machine (`nightly`, `nightly-<date>`, a link).
    pub commit_hash: &'static str,
    /// Its LLVM version, the one bpf-linker is built against.
    pub llvm: &'static str,
}

/// The nightly that compiles the eBPF crate. Pinned because bpf-linker is
/// built against this nightly's libLLVM: an unpinned `nightly` that moves
/// breaks the eBPF build on a fresh machine. To move the pin, change this
/// and run `cargo xtask build`: bpf-linker is rebuilt for the new LLVM.
pub const EBPF_NIGHTLY: PinnedNightly = PinnedNightly {
    channel: "nightly-2026-05-20",
    commit_hash: "e50aa6fba4e63ab34c72bf9acfd2c307c1155d1a",
    llvm: "22.1.4",
};

/// The environment variable that tells the daemon's build script (through
/// aya-build) which installed toolchain is [`EBPF_NIGHTLY`].
pub const EBPF_TOOLCHAIN_VAR: &str = "PROFILERD_EBPF_TOOLCHAIN";

/// The installed toolchain found to be [`EBPF_NIGHTLY`], once
/// [`ebpf_toolchain`] has run; every child process is told its name.
static EBPF_TOOLCHAIN: OnceLock<String> = OnceLock::new();

/// The name of the installed pinned nightly, if [`ebpf_toolchain`] found it.
pub fn chosen_ebpf_toolchain() -> Option<&'static str> {
    EBPF_TOOLCHAIN.get().map(String::as_str)
}

/// The bpf-linker release installed, and the LLVM majors it can be built for
/// (its `llvm-<major>` features).
const BPF_LINKER_VERSION: &str = "0.13.0";
const BPF_LINKER_LLVM_MAJORS: &[u32] = &[21, 22, 23];

/// Overrides where bpf-linker is installed (`<root>/bin/bpf-linker`).
const TOOLS_ROOT_VAR: &str = "PROFILERD_TOOLS_ROOT";

/// Where bpf-linker is installed: `$PROFILERD_TOOLS_ROOT`, else the cargo
/// home.
pub fn tools_root() -> PathBuf {
    env::var_os(TOOLS_ROOT_VAR)
        .filter(|value| !value.is_empty())
        .map(|root| {
            let root = PathBuf::from(root);
            std::path::absolute(&root).unwrap_or(root)
        })
        .unwrap_or_else(cargo_home)
}

/// `$CARGO_HOME`, else `~/.cargo`: where rustup's proxies and `cargo
/// install`ed programs live.
pub fn cargo_home() -> PathBuf {
    let home = env::var_os("CARGO_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            env::home_dir()
                .unwrap_or_else(|| PathBuf::from("/root"))
                .join(".cargo")
        });
    std::path::absolute(&home).unwrap_or(home)
}

/// The directory put first on every child process's PATH.
pub fn tools_bin() -> PathBuf {
    tools_root().join("bin")
}

/// Makes sure the eBPF crate can be built: the pinned nightly with rust-src,
/// and a bpf-linker on PATH that uses that nightly's LLVM. Returns the name
/// of the installed toolchain that is the pinned nightly.
pub fn ebpf_toolchain() -> Result<&'static str> {
    if let Some(name) = chosen_ebpf_toolchain() {
        return Ok(name);
    }
    let name = match find_pinned_nightly()? {
        Some(name) => name,
        None => install_pinned_nightly()?,
    };
    let nightly = Nightly::inspect(&name)?;
    ensure_component(&name, "rust-src").with_context(|| {
        format!("rust-src for the {name} toolchain is needed to build `core` for the BPF target")
    })?;
    let linker = ensure_bpf_linker(&nightly)?;
    println!(
        "ok: eBPF toolchain ({name}, rustc {}, LLVM {}, rust-src; {})",
        &EBPF_NIGHTLY.commit_hash[..9],
        nightly.llvm_major,
        linker.display()
    );
    Ok(EBPF_TOOLCHAIN.get_or_init(|| name).as_str())
}

/// The installed toolchain whose rustc is [`EBPF_NIGHTLY`]'s commit: the
/// pinned channel's name first, then the other nightlies, then the rest.
fn find_pinned_nightly() -> Result<Option<String>> {
    let listed = process::output(process::command("rustup").args(["toolchain", "list"]))
        .context("listing the installed toolchains (is rustup installed?)")?;
    let mut names: Vec<&str> = listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    names.sort_by_key(|name| {
        (
            !name.starts_with(EBPF_NIGHTLY.channel),
            !name.starts_with("nightly"),
        )
    });
    for name in names {
        // A toolchain that does not run is not the pinned one.
        let Ok(version) = process::output(process::rustup_run(name, "rustc").arg("-vV")) else {
            continue;
        };
        if is_pinned_rustc(&version) {
            return Ok(Some(name.to_owned()));
        }
    }
    Ok(None)
}

/// Whether `rustc -vV` output is [`EBPF_NIGHTLY`]'s rustc.
fn is_pinned_rustc(rustc_version: &str) -> bool {
    rustc_version
        .lines()
        .filter_map(|line| line.strip_prefix("commit-hash:"))
        .any(|hash| hash.trim() == EBPF_NIGHTLY.commit_hash)
}

/// Installs the pinned channel with rustup, where rustup can download it.
fn install_pinned_nightly() -> Result<String> {
    let channel = EBPF_NIGHTLY.channel;
    println!("==> installing the {channel} toolchain for the eBPF build (one time)");
    let mut install = process::command("rustup");
    install
        .args(["toolchain", "install", channel, "--profile", "minimal"])
        .args(["--component", "rust-src"]);
    process::run(&mut install).with_context(|| {
        format!(
            "the eBPF crate is built with a pinned nightly: rustc {} ({channel}, LLVM {}), and \
             no installed toolchain is that one (`rustup toolchain list`; `rustup run NAME \
             rustc -vV` shows each one's commit-hash) and rustup could not install it. \
             Install that nightly, or move the pin to an installed nightly: change \
             EBPF_NIGHTLY in xtask/src/bootstrap.rs and run `cargo xtask build`",
            EBPF_NIGHTLY.commit_hash, EBPF_NIGHTLY.llvm
        )
    })?;
    Ok(channel.to_owned())
}

/// What bpf-linker must be built against: the nightly's LLVM.
struct Nightly {
    /// `<sysroot>/lib`, which holds the nightly's libLLVM.
    sysroot_lib: PathBuf,
    /// That library's file name, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`.
    libllvm: String,
    /// The LLVM major version, e.g. 22.
    llvm_major: u32,
}

impl Nightly {
    fn inspect(toolchain: &str) -> Result<Self> {
        let version = process::output(process::rustup_run(toolchain, "rustc").arg("-vV"))
            .with_context(|| format!("the {toolchain} toolchain does not run"))?;
        let llvm_major = llvm_major(&version)?;
        let sysroot =
            process::output(process::rustup_run(toolchain, "rustc").args(["--print", "sysroot"]))?;
        let sysroot_lib = Path::new(sysroot.trim()).join("lib");
        let libllvm = libllvm_file(&sysroot_lib)?;
        Ok(Self {
            sysroot_lib,
            libllvm,
            llvm_major,
        })
    }
}

/// The LLVM major from `rustc -vV` (`LLVM version: 22.1.4` → 22).
fn llvm_major(rustc_version: &str) -> Result<u32> {
    let version = rustc_version
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version:"))
        .context("`rustc +nightly -vV` names no LLVM version")?
        .trim();
    let major = version.split('.').next().unwrap_or_default();
    major
        .parse()
        .with_context(|| format!("unexpected LLVM version `{version}` from `rustc +nightly -vV`"))
}

/// The file name of the shared libLLVM in a toolchain's lib directory.
fn libllvm_file(lib: &Path) -> Result<String> {
    let entries = fs::read_dir(lib).with_context(|| format!("reading {}", lib.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("libLLVM") && name.contains(".so"))
        .collect();
    // `libLLVM.so.<version>` is the real file; prefer it over other spellings.
    names.sort_by_key(|name| (!name.starts_with("libLLVM.so."), name.clone()));
    names.into_iter().next().with_context(|| {
        format!(
            "the nightly toolchain has no shared libLLVM in {}, so bpf-linker cannot be \
             built against it",
            lib.display()
        )
    })
}

/// Installs a rustup component for a toolchain unless it is there.
pub fn ensure_component(toolchain: &str, component: &str) -> Result<()> {
    if has_component(toolchain, component)? {
        return Ok(());
    }
    println!("==> installing {component} for the {toolchain} toolchain (one time)");
    process::run(process::command("rustup").args([
        "component",
        "add",
        component,
        "--toolchain",
        toolchain,
    ]))
}

/// Whether a toolchain has a rustup component installed.
pub fn has_component(toolchain: &str, component: &str) -> Result<bool> {
    let installed = process::output(process::command("rustup").args([
        "component",
        "list",
        "--toolchain",
        toolchain,
        "--installed",
    ]))?;
    // Host-specific components are listed with the host triple appended.
    let host_specific = format!("{component}-");
    Ok(installed
        .lines()
        .map(str::trim)
        .any(|line| line == component || line.starts_with(&host_specific)))
}

/// Returns the usable bpf-linker, building one into the tools root when the
/// one the children would find is missing or uses another LLVM.
fn ensure_bpf_linker(nightly: &Nightly) -> Result<PathBuf> {
    if let Some(found) = process::find_program("bpf-linker") {
        match check_bpf_linker(&found, &nightly.libllvm) {
            Ok(()) => return Ok(found),
            Err(reason) => println!("==> replacing {}: it {reason}", found.display()),
        }
    }
    install_bpf_linker(nightly)?;
    let installed = tools_bin().join("bpf-linker");
    check_bpf_linker(&installed, &nightly.libllvm).map_err(|reason| {
        anyhow::anyhow!(
            "the bpf-linker just installed ({}) {reason}",
            installed.display()
        )
    })?;
    Ok(installed)
}

/// Why the bpf-linker at `path` cannot link the eBPF crate, if it cannot:
/// it must run, and be linked against the nightly's libLLVM file.
fn check_bpf_linker(path: &Path, libllvm: &str) -> std::result::Result<(), String> {
    if let Err(err) = process::output(process::command(path).arg("--version")) {
        return Err(format!("does not run ({err:#})"));
    }
    if links_against(path, libllvm) {
        Ok(())
    } else {
        Err(format!("is not linked against the nightly's {libllvm}"))
    }
}

/// Whether `ldd` resolves `libllvm` for `binary` (or, without a working
/// ldd, whether the binary names it at all).
fn links_against(binary: &Path, libllvm: &str) -> bool {
    match process::command("ldd").arg(binary).output() {
        Ok(out) => {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|line| line.contains(libllvm) && !line.contains("not found"))
        }
        Err(_) => fs::read(binary).is_ok_and(|bytes| {
            bytes
                .windows(libllvm.len())
                .any(|window| window == libllvm.as_bytes())
        }),
    }
}

/// `cargo install`s bpf-linker into the tools root, linked (with an rpath)
/// against the nightly's own libLLVM, as the notes' recipe does.
fn install_bpf_linker(nightly: &Nightly) -> Result<()> {
    let major = nightly.llvm_major;
    if !BPF_LINKER_LLVM_MAJORS.contains(&major) {
        bail!(
            "the nightly toolchain uses LLVM {major}, but bpf-linker {BPF_LINKER_VERSION} \
             can only be built for LLVM {BPF_LINKER_LLVM_MAJORS:?}: use a nightly with one \
             of those, or pin a bpf-linker release supporting LLVM {major} in \
             xtask/src/bootstrap.rs"
        );
    }
    let lib = nightly.sysroot_lib.to_str().with_context(|| {
        format!(
            "the nightly's lib directory {} is not UTF-8",
            nightly.sysroot_lib.display()
        )
    })?;
    if lib.contains(char::is_whitespace) {
        bail!(
            "the nightly's lib directory `{lib}` contains whitespace, which RUSTFLAGS cannot carry"
        );
    }
    let rustflags = format!(
        "-C link-arg=-L{lib} -C link-arg=-l:{libllvm} -C link-arg=-Wl,-rpath,{lib}",
        libllvm = nightly.libllvm
    );
    let root = tools_root();

    println!(
        "==> building bpf-linker against nightly's LLVM {major} (one time, takes a minute or two)"
    );
    let started = Instant::now();
    let mut install = process::cargo();
    install
        .args(["install", "bpf-linker", "--locked"])
        .args(["--version", BPF_LINKER_VERSION])
        .args(["--no-default-features", "--features"])
        .arg(format!("llvm-{major},no-llvm-linking"))
        .arg("--root")
        .arg(&root)
        // Rebuild even when cargo's records say this version is installed:
        // we only get here when the binary on PATH is missing or unusable.
        .arg("--force")
        .env("RUSTFLAGS", rustflags)
        // These would win over RUSTFLAGS or put the build in the project's target dir.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    process::run(&mut install).context(
        "building bpf-linker failed; it needs crates.io and a C toolchain (cc), and links \
         against the nightly's libLLVM",
    )?;
    println!(
        "==> bpf-linker installed in {} ({}s)",
        root.join("bin").display(),
        started.elapsed().as_secs()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_llvm_major() -> Result<()> {
        let version = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\n\
                       host: x86_64-unknown-linux-gnu\n\
                       release: 1.97.0-nightly\n\
                       LLVM version: 22.1.4\n";
        assert_eq!(llvm_major(version)?, 22);
        assert!(llvm_major("rustc 1.0\n").is_err());
        assert!(llvm_major("LLVM version: x.1\n").is_err());
        Ok(())
    }

    #[test]
    fn knows_the_pinned_nightly_by_its_commit() {
        let pinned = format!(
            "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\n\
             commit-hash: {}\n\
             LLVM version: {}\n",
            EBPF_NIGHTLY.commit_hash, EBPF_NIGHTLY.llvm
        );
        assert!(is_pinned_rustc(&pinned));
        let other = pinned.replace(EBPF_NIGHTLY.commit_hash, "0123456789abcdef");
        assert!(!is_pinned_rustc(&other));
        assert!(!is_pinned_rustc("rustc 1.95.0\n"));
    }

    #[test]
    fn finds_the_shared_libllvm() -> Result<()> {
        let dir = env::temp_dir().join(format!("xtask-libllvm-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        assert!(libllvm_file(&dir).is_err());
        for name in [
            "librustc_driver-1234.so",
            "libLLVM.so.22.1-rust-1.97.0-nightly",
        ] {
            fs::write(dir.join(name), b"")?;
        }
        let found = libllvm_file(&dir);
        fs::remove_dir_all(&dir)?;
        assert_eq!(found?, "libLLVM.so.22.1-rust-1.97.0-nightly");
        Ok(())
    }

    #[test]
    fn rejects_a_bpf_linker_that_does_not_use_the_nightly_llvm() {
        // `true` runs fine but links no libLLVM at all.
        let Some(not_a_linker) = process::find_program("true") else {
            return;
        };
        let reason = check_bpf_linker(&not_a_linker, "libLLVM.so.22.1-rust-1.97.0-nightly");
        assert_eq!(
            reason,
            Err(
                "is not linked against the nightly's libLLVM.so.22.1-rust-1.97.0-nightly"
                    .to_owned()
            )
        );
        let missing = check_bpf_linker(Path::new("/nonexistent/bpf-linker"), "libLLVM.so");
        assert!(missing.is_err_and(|reason| reason.starts_with("does not run")));
    }
}
