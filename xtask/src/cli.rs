//! The command line: `cargo xtask <command>`.
//!
//! A new task is a new variant of [`Command`] (with its own `Args` struct when
//! it takes options) plus its function in `commands`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, run, test and lint profilerd",
    long_about = "Build, run, test and lint profilerd.\n\n\
        Every command first installs what a fresh machine lacks, once: rust-src for the \
        nightly toolchain and a bpf-linker built against the nightly's own LLVM (and, for \
        `test`, the test suite's system packages). Later runs only check them.",
    after_help = "Environment:\n  \
        PROFILERD_TOOLS_ROOT  where bpf-linker is installed (its bin/ is put first on the \
        PATH of every command run); default $CARGO_HOME, else ~/.cargo"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build profilerd and profilerctl (the daemon embeds the eBPF programs).
    Build(BuildArgs),
    /// Build profilerd and run it in the foreground as root.
    ///
    /// Without root, the built daemon is run through `sudo -E`.
    Run(RunArgs),
    /// Run the whole test suite as root (the integration tests load eBPF programs).
    ///
    /// Checks the kernel's requirements first, and installs the test
    /// dependencies (gcc must be there; `go`, for `go tool pprof`, is installed
    /// from Debian's golang-go when missing). Without root, the test binaries
    /// are built as you and run through `sudo -E`.
    Test(TestArgs),
    /// Measure profilerd against no profiler, perf and bpftrace (as root).
    ///
    /// Builds the release daemon, installs perf and bpftrace when missing,
    /// and prints one table per question (overhead, own CPU, memory, losses,
    /// query latency, symbolization); writes target/bench/results.json and,
    /// for a full run, BENCHMARKS.md. A full run takes about half an hour.
    Bench(BenchArgs),
    /// Check formatting and run clippy (host crates, then the eBPF crate for its own target).
    Lint,
    /// Only install what building (and with --test-deps, testing) needs, then stop.
    Bootstrap(BootstrapArgs),
    /// Build the release and install profilerd, profilerctl, the systemd unit
    /// and the example configuration (as root).
    ///
    /// Binaries go to PREFIX/bin, the unit (its ExecStart pointing there) to
    /// /etc/systemd/system/profilerd.service, the example configuration to
    /// /etc/profilerd/profilerd.toml unless a configuration is there already
    /// (it is never overwritten). Everything goes under DESTDIR when given.
    /// Prints the commands that enable the service; runs none of them.
    Install(InstallArgs),
    /// Build the Debian package and the OCI image from the release build.
    ///
    /// Writes target/package/profilerd_VERSION_amd64.deb (binaries, unit,
    /// sysusers and tmpfiles entries, the configuration as a conffile,
    /// completions and man pages, maintainer scripts),
    /// target/package/profilerd-VERSION-oci.tar (an OCI image layout: the
    /// binaries and the libraries they load, nothing pulled from a
    /// registry) and target/package/daemonset.yaml (deploy/kubernetes's,
    /// naming that image by its digest). Needs dpkg-deb, dpkg-shlibdeps
    /// and strip (Debian's dpkg, dpkg-dev and binutils).
    Package(PackageArgs),
    /// Remove what `install` installed (same --prefix and --destdir).
    ///
    /// A configuration that differs from the example, and the state
    /// directory (peek reports), are kept unless --purge.
    Uninstall(UninstallArgs),
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Build with the release profile.
    #[arg(long)]
    pub release: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Build and run the debug profile instead of the release one.
    #[arg(long)]
    pub debug: bool,
    /// Arguments for profilerd, after `--` (e.g. `cargo xtask run -- --help`).
    #[arg(last = true, value_name = "PROFILERD_ARGS")]
    pub args: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Only the package checks: build the Debian package and the image of
    /// the debug build, lint, install, upgrade and purge the package in a
    /// scratch root, run the daemon from it and from the image. A full
    /// run (no arguments) ends with them.
    #[arg(long)]
    pub packages: bool,
    /// Only the kernel matrix: boot Debian's kernels (11's 5.10, 12's 6.1,
    /// 13's, testing's) under qemu with an initramfs made here, run the
    /// release daemon on each and judge its requirements check and a
    /// known call chain; writes target/kernels/results.md (docs/kernels.md).
    #[arg(long, conflicts_with_all = ["packages", "cargo_args"])]
    pub kernels: bool,
    /// Arguments appended to `cargo test --workspace --exclude profiler-ebpf`,
    /// after `--` (e.g. `cargo xtask test -- --test cli -- --nocapture`).
    /// With `-p`/`--package` among them, only those packages are tested.
    #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
    pub cargo_args: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A reduced run (under three minutes), as a smoke test; it does not
    /// rewrite BENCHMARKS.md.
    #[arg(long)]
    pub quick: bool,
    /// Ask one question only (overhead, designs, unwind_info, scale,
    /// scale-hour, render, symbolization, peek, offcpu, allocs, soak or python); it
    /// replaces only its own tables in BENCHMARKS.md. A full run skips
    /// scale-hour (report latency over an hour's window), which takes over
    /// an hour, and soak (the daemon left on beside a busy machine's churn
    /// for half an hour, then ten minutes at a smaller budget).
    #[arg(long, value_name = "QUESTION")]
    pub only: Option<String>,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Installation prefix; the binaries go to PREFIX/bin.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Staging root prepended to every installed path (for packaging).
    #[arg(long, value_name = "DIR", env = "DESTDIR")]
    pub destdir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PackageArgs {
    /// The packages' version; default: the workspace's.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Package the debug build instead of the release one (for the tests:
    /// no release build needed).
    #[arg(long)]
    pub debug: bool,
    /// Where the artifacts are written; default: target/package.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// The prefix given to `install`.
    #[arg(long, value_name = "DIR", default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// The staging root given to `install`.
    #[arg(long, value_name = "DIR", env = "DESTDIR")]
    pub destdir: Option<PathBuf>,
    /// Also remove a changed configuration and the state directory.
    #[arg(long)]
    pub purge: bool,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// Also install the test suite's dependencies.
    #[arg(long)]
    pub test_deps: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn arguments_after_the_separator_pass_through() {
        let cli = Cli::parse_from(["xtask", "test", "--", "--test", "cli", "--", "--nocapture"]);
        let Command::Test(args) = cli.command else {
            panic!("expected the test command");
        };
        assert_eq!(args.cargo_args, ["--test", "cli", "--", "--nocapture"]);

        let cli = Cli::parse_from(["xtask", "run", "--debug", "--", "--socket", "/tmp/s"]);
        let Command::Run(args) = cli.command else {
            panic!("expected the run command");
        };
        assert!(args.debug);
        assert_eq!(args.args, ["--socket", "/tmp/s"]);
    }

    #[test]
    fn install_defaults_to_usr_local() {
        let cli = Cli::parse_from(["xtask", "install"]);
        let Command::Install(args) = cli.command else {
            panic!("expected the install command");
        };
        assert_eq!(args.prefix, PathBuf::from("/usr/local"));
        let cli = Cli::parse_from(["xtask", "uninstall", "--destdir", "/tmp/d", "--purge"]);
        let Command::Uninstall(args) = cli.command else {
            panic!("expected the uninstall command");
        };
        assert_eq!(args.destdir, Some(PathBuf::from("/tmp/d")));
        assert!(args.purge);
    }
}
