//! The tasks themselves: one function per `cargo xtask` command, each
//! bootstrapping what it needs before running cargo in the workspace root.

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command as Child;

use anyhow::{Context as _, Result, bail};

use crate::cli::{
    BenchArgs, BootstrapArgs, BuildArgs, Command, InstallArgs, PackageArgs, RunArgs, TestArgs,
    UninstallArgs,
};
use crate::process::{self, Privilege};
use crate::{bootstrap, deps, install, kernel, kernels, layers, package, web};

/// The eBPF crate: built for its own target only (by the daemon's build script).
const EBPF_PACKAGE: &str = "profiler-ebpf";
const EBPF_TARGET: &str = "bpfel-unknown-none";
/// The package holding the `profilerd` binary.
const DAEMON_PACKAGE: &str = "profiler-daemon";
/// The package holding the `profilerctl` binary.
const CLI_PACKAGE: &str = "profilerctl";
const DAEMON_BIN: &str = "profilerd";
/// The feature that builds design 2's unwind-table prototype (its own eBPF
/// object, never shipped): the benchmark measures it, so `bench` turns it
/// on, and `lint` checks the code with it as well as without.
const PROTOTYPE_FEATURE: &str = "unwind-tables-prototype";

pub fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Build(args) => build(args),
        Command::Run(args) => run(args),
        Command::Test(args) => test(args),
        Command::Bench(args) => bench(args),
        Command::Lint => lint(),
        Command::Bootstrap(args) => bootstrap(args),
        Command::Install(args) => install(args),
        Command::Package(args) => package(args),
        Command::Uninstall(args) => uninstall(args),
    }
}

/// A cargo build profile.
#[derive(Debug, Clone, Copy)]
enum Profile {
    Debug,
    Release,
}

impl Profile {
    fn from_release_flag(release: bool) -> Self {
        if release { Self::Release } else { Self::Debug }
    }

    /// Its directory under the target directory.
    fn dir(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Release => "release",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir())
    }
}

fn build(args: BuildArgs) -> Result<()> {
    bootstrap::ebpf_toolchain()?;
    build_daemon(Profile::from_release_flag(args.release))
}

fn run(args: RunArgs) -> Result<()> {
    let profile = Profile::from_release_flag(!args.debug);
    // Before building: no point in building what cannot be run.
    let privilege = process::privilege("running profilerd (it loads eBPF programs)")?;
    bootstrap::ebpf_toolchain()?;
    build_daemon(profile)?;

    let daemon = target_dir()?.join(profile.dir()).join(DAEMON_BIN);
    if !daemon.is_file() {
        bail!("cargo built no {} (looked for it there)", daemon.display());
    }
    let mut cmd = match privilege {
        Privilege::Root => process::command(&daemon),
        Privilege::Sudo => {
            println!("==> not root: running profilerd through sudo -E");
            let mut sudo = process::command("sudo");
            sudo.arg("-E").arg(&daemon);
            sudo
        }
    };
    cmd.args(&args.args);
    println!("==> {}", process::display(&cmd));
    Err(process::exec(&mut cmd))
}

fn test(args: TestArgs) -> Result<()> {
    if args.kernels {
        bootstrap::ebpf_toolchain()?;
        build_daemon(Profile::Release)?;
        let target = target_dir()?;
        return kernels::matrix(
            &target.join(Profile::Release.dir()),
            &target.join("kernels"),
        );
    }
    let privilege =
        process::privilege("the test suite (its integration tests load eBPF programs)")?;
    kernel::check()?;
    bootstrap::ebpf_toolchain()?;
    deps::test_deps()?;
    let python = deps::python_clients(&target_dir()?)?;
    let web_driver = deps::web_test_driver(&workspace_root()?, &target_dir()?)?;
    // The end-to-end tests run profilerctl, a package of its own.
    build_daemon(Profile::Debug)?;

    let mut cmd = workspace_cargo()?;
    cmd.arg("test");
    cmd.env("PROFILERD_TEST_PYTHON", python);
    cmd.env("PROFILERD_TEST_NODE_MODULES", web_driver);
    if !names_packages(&args.cargo_args) {
        cmd.args(["--workspace", "--exclude", EBPF_PACKAGE]);
    }
    if privilege == Privilege::Sudo {
        // Build as the user (no root-owned files in target/), run as root.
        println!("==> not root: the test binaries will run through sudo -E");
        cmd.arg("--config").arg(sudo_runner_config(&host_triple()?));
    }
    cmd.args(&args.cargo_args);
    if !args.packages {
        println!("==> {}", process::display(&cmd));
        process::run(&mut cmd)?;
    }
    // The package checks, after the whole suite (not after a filtered run).
    if args.packages || args.cargo_args.is_empty() {
        deps::package_deps()?;
        deps::package_check_deps()?;
        let inputs = package_inputs(
            Profile::Debug,
            None,
            Some(target_dir()?.join("package-check")),
        )?;
        package::checks::run(&inputs)?;
    }
    Ok(())
}

fn bench(args: BenchArgs) -> Result<()> {
    let privilege = process::privilege("the benchmark (it loads eBPF programs)")?;
    kernel::check()?;
    bootstrap::ebpf_toolchain()?;
    deps::bench_deps()?;
    // The symbolization question reads the daemon's debug build: a large
    // binary with full debug information.
    build_daemon(Profile::Debug)?;

    let mut cmd = workspace_cargo()?;
    cmd.args(["bench", "--package", DAEMON_PACKAGE, "--bench", "profilerd"])
        .args(["--features", PROTOTYPE_FEATURE]);
    if privilege == Privilege::Sudo {
        println!("==> not root: the benchmark will run through sudo -E");
        cmd.arg("--config").arg(sudo_runner_config(&host_triple()?));
    }
    let command = if args.quick {
        "cargo xtask bench --quick"
    } else {
        "cargo xtask bench"
    };
    cmd.arg("--").args(["--command", command]);
    cmd.arg("--symbolize-binary")
        .arg(target_dir()?.join(Profile::Debug.dir()).join(DAEMON_BIN));
    if args.quick {
        cmd.arg("--quick");
    }
    if let Some(question) = &args.only {
        cmd.args(["--only", question]);
    }
    println!("==> {}", process::display(&cmd));
    process::run(&mut cmd)
}

fn lint() -> Result<()> {
    let mut fmt = workspace_cargo()?;
    fmt.args(["fmt", "--all", "--check"]);
    println!("==> {}", process::display(&fmt));
    process::run(&mut fmt).context("formatting differs: `cargo fmt --all` fixes it")?;

    let library = workspace_root()?.join("profiler-daemon/src");
    println!(
        "==> import cycles between the top-level modules of {}",
        library.display()
    );
    let layers = layers::check(&library)?;
    println!("    none; from the bottom up: {}", layers.join(", "));

    // Checking the daemon runs its build script, which builds the eBPF crate.
    let nightly = bootstrap::ebpf_toolchain()?;
    web::viewer(&target_dir()?)?;
    let mut host = workspace_cargo()?;
    host.args(["clippy", "--workspace", "--exclude", EBPF_PACKAGE])
        .args(["--all-targets", "--", "-D", "warnings"]);
    println!("==> {}", process::display(&host));
    process::run(&mut host)?;
    // The prototype's code (and the benchmark question and test that use
    // it) compiles only with its feature.
    let mut prototype = workspace_cargo()?;
    prototype
        .args(["clippy", "--package", DAEMON_PACKAGE, "--all-targets"])
        .args(["--features", PROTOTYPE_FEATURE, "--", "-D", "warnings"]);
    println!("==> {}", process::display(&prototype));
    process::run(&mut prototype)?;

    if let Err(err) = bootstrap::ensure_component(nightly, "clippy") {
        println!(
            "note: skipping clippy for {EBPF_PACKAGE}: the {nightly} toolchain has no clippy ({err:#})"
        );
        return Ok(());
    }
    let mut ebpf = in_workspace(process::rustup_run(nightly, "cargo"))?;
    // With the prototype's feature: its object is one more binary.
    ebpf.args(["clippy", "--package", EBPF_PACKAGE, "--target", EBPF_TARGET])
        .args(["--features", PROTOTYPE_FEATURE])
        .args(["-Z", "build-std=core", "--", "-D", "warnings"]);
    println!("==> {}", process::display(&ebpf));
    process::run(&mut ebpf)
}

fn bootstrap(args: BootstrapArgs) -> Result<()> {
    bootstrap::ebpf_toolchain()?;
    if args.test_deps {
        deps::test_deps()?;
    }
    Ok(())
}

fn install(args: InstallArgs) -> Result<()> {
    let layout = install::Layout::new(&args.prefix, args.destdir.as_deref())?;
    if layout.destdir.is_none() && !process::is_root()? {
        bail!(
            "installing into {} and /etc needs root: run `cargo xtask install` as root, or \
             pass --destdir DIR to stage the files under DIR",
            args.prefix.display()
        );
    }
    bootstrap::ebpf_toolchain()?;
    build_daemon(Profile::Release)?;
    let root = workspace_root()?;
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path))
            .with_context(|| format!("cannot read {path} of the workspace"))
    };
    let (unit, config) = (
        read("deploy/profilerd.service")?,
        read("deploy/config.toml")?,
    );
    let done = install::install(
        &layout,
        &install::Sources {
            binaries: target_dir()?.join(Profile::Release.dir()),
            unit: &unit,
            config: &config,
        },
    )?;
    for line in done {
        println!("==> {line}");
    }
    println!("Next, as root:");
    for step in install::next_steps_after_install(&layout) {
        println!("  {step}");
    }
    Ok(())
}

fn package(args: PackageArgs) -> Result<()> {
    let profile = Profile::from_release_flag(!args.debug);
    bootstrap::ebpf_toolchain()?;
    deps::package_deps()?;
    build_daemon(profile)?;
    let inputs = package_inputs(profile, args.version, args.out)?;
    println!(
        "==> packaging profilerd {} ({profile}) into {}",
        inputs.version,
        inputs.out.display()
    );
    let built = package::build(&inputs)?;
    println!("==> {}", built.deb.display());
    println!(
        "==> {} ({})",
        built.image.path.display(),
        built.image.digest
    );
    println!("==> {}", built.daemonset.display());
    println!("Install the package: apt install {}", built.deb.display());
    println!(
        "Load the image: podman load -i {} (or skopeo copy oci-archive:… to a registry)",
        built.image.path.display()
    );
    Ok(())
}

/// What `package` makes its artifacts of: `profile`'s binaries, into
/// `out` (default target/package).
fn package_inputs(
    profile: Profile,
    version: Option<String>,
    out: Option<PathBuf>,
) -> Result<package::Inputs> {
    let workspace = workspace_root()?;
    Ok(package::Inputs {
        version: version.unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned()),
        binaries: target_dir()?.join(profile.dir()),
        out: match out {
            Some(out) => std::path::absolute(out)?,
            None => target_dir()?.join("package"),
        },
        epoch: package::source_epoch(&workspace)?,
        workspace,
    })
}

fn uninstall(args: UninstallArgs) -> Result<()> {
    let layout = install::Layout::new(&args.prefix, args.destdir.as_deref())?;
    if layout.destdir.is_none() && service_in_use() {
        bail!(
            "the profilerd service is enabled or running: stop and disable it first \
             (`systemctl disable --now profilerd`), then uninstall"
        );
    }
    let config = std::fs::read_to_string(workspace_root()?.join("deploy/config.toml"))
        .context("cannot read deploy/config.toml of the workspace")?;
    for line in install::uninstall(&layout, &config, args.purge)? {
        println!("==> {line}");
    }
    println!("Next, as root:");
    for step in install::next_steps_after_uninstall() {
        println!("  {step}");
    }
    Ok(())
}

/// Whether systemd runs here and has the profilerd service enabled or
/// active.
fn service_in_use() -> bool {
    if !Path::new("/run/systemd/system").is_dir() {
        return false;
    }
    ["is-enabled", "is-active"].into_iter().any(|query| {
        process::command("systemctl")
            .args([query, "--quiet", "profilerd.service"])
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// `cargo build` of profilerd and profilerctl for `profile`.
fn build_daemon(profile: Profile) -> Result<()> {
    web::viewer(&target_dir()?)?;
    let mut cmd = workspace_cargo()?;
    cmd.args([
        "build",
        "--package",
        DAEMON_PACKAGE,
        "--package",
        CLI_PACKAGE,
        "--bins",
    ]);
    if let Profile::Release = profile {
        cmd.arg("--release");
    }
    println!("==> building profilerd and profilerctl ({profile})");
    process::run(&mut cmd)
}

/// The workspace's root directory (this crate's parent).
fn workspace_root() -> Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .context("the xtask crate has no parent directory")
}

/// `cargo` run in the workspace root (see [`in_workspace`]).
fn workspace_cargo() -> Result<Child> {
    in_workspace(process::cargo())
}

/// `cmd` run in the workspace root, with a relative target directory from
/// the environment made absolute so it still means what it meant here.
fn in_workspace(mut cmd: Child) -> Result<Child> {
    cmd.current_dir(workspace_root()?);
    if let Some((var, dir)) = target_dir_from_env() {
        cmd.env(var, std::path::absolute(&dir).unwrap_or(dir));
    }
    Ok(cmd)
}

/// The target directory cargo builds into.
fn target_dir() -> Result<PathBuf> {
    match target_dir_from_env() {
        Some((_, dir)) => Ok(std::path::absolute(&dir).unwrap_or(dir)),
        None => Ok(workspace_root()?.join("target")),
    }
}

fn target_dir_from_env() -> Option<(&'static str, PathBuf)> {
    ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR"]
        .into_iter()
        .find_map(|var| {
            let dir = env::var_os(var).filter(|dir| !dir.is_empty())?;
            Some((var, PathBuf::from(dir)))
        })
}

/// Whether `cargo test` arguments choose packages themselves.
fn names_packages(args: &[OsString]) -> bool {
    args.iter()
        .take_while(|arg| *arg != "--")
        .filter_map(|arg| arg.to_str())
        .any(|arg| arg.starts_with("-p") || arg.starts_with("--package"))
}

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> Result<String> {
    let version = process::output(process::command("rustc").arg("-vV"))?;
    version
        .lines()
        .find_map(|line| line.strip_prefix("host:"))
        .map(|host| host.trim().to_owned())
        .context("`rustc -vV` names no host")
}

/// A `--config` value making cargo run the host's test binaries through
/// `sudo -E`, keeping our PATH (sudo resets it) so tests find gcc and go.
fn sudo_runner_config(host: &str) -> String {
    let mut runner = vec!["sudo".to_owned(), "-E".to_owned()];
    if let Some(path) = process::child_path().to_str() {
        runner.extend(["env".to_owned(), format!("PATH={path}")]);
    }
    let runner: Vec<String> = runner.iter().map(|word| toml_string(word)).collect();
    format!(
        "target.{}.runner=[{}]",
        toml_string(host),
        runner.join(", ")
    )
}

/// `value` as a TOML basic string.
fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsStr::new).map(OsStr::to_owned).collect()
    }

    #[test]
    fn sees_when_test_arguments_choose_packages() {
        assert!(names_packages(&args(&["-p", "xtask"])));
        assert!(names_packages(&args(&["-pxtask"])));
        assert!(names_packages(&args(&["--package=xtask", "--lib"])));
        assert!(!names_packages(&args(&["--test", "cli", "--", "-p"])));
        assert!(!names_packages(&[]));
    }

    #[test]
    fn runner_config_is_valid_toml() {
        let config = sudo_runner_config("x86_64-unknown-linux-gnu");
        assert!(config.starts_with(r#"target."x86_64-unknown-linux-gnu".runner=["sudo", "-E""#));
        assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(toml_string("tab\t"), r#""tab\u0009""#);
    }

    #[test]
    fn the_workspace_root_holds_the_workspace_manifest() -> Result<()> {
        assert!(workspace_root()?.join("Cargo.toml").is_file());
        Ok(())
    }
}
