//! Running child processes: every command gets the tools' PATH, has its exit
//! status checked, and is named in full when it fails. Also who we run as
//! (root or not) and how to get root (`sudo`).

use std::env;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::{bootstrap, web};

/// A command for `program` whose PATH starts with the bootstrapped tools'
/// directory (so cargo, rustc and aya-build find `bpf-linker`), told which
/// toolchain is the pinned nightly once bootstrap has found it.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PATH", child_path());
    if let Some(toolchain) = bootstrap::chosen_ebpf_toolchain() {
        cmd.env(bootstrap::EBPF_TOOLCHAIN_VAR, toolchain);
    }
    if let Some(dir) = web::chosen_viewer_dir() {
        cmd.env(web::WEB_VIEWER_VAR, dir);
    }
    cmd
}

/// `cargo`, the same one that runs this xtask when there is one.
pub fn cargo() -> Command {
    command(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `rustup run <toolchain> <program>`, never installing a missing toolchain.
pub fn rustup_run(toolchain: &str, program: &str) -> Command {
    let mut cmd = command("rustup");
    cmd.args(["run", toolchain, program])
        .env("RUSTUP_AUTO_INSTALL", "0");
    cmd
}

/// The PATH given to child processes: the tools' bin directory and the
/// cargo home's, then ours.
pub fn child_path() -> OsString {
    let first = [bootstrap::tools_bin(), bootstrap::cargo_home().join("bin")];
    let current = env::var_os("PATH").unwrap_or_default();
    let rest = env::split_paths(&current).filter(|dir| !first.contains(dir));
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in first.iter().cloned().chain(rest) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    // A directory containing ':' cannot be on a PATH; fall back to ours then.
    env::join_paths(dirs).unwrap_or(current)
}

/// The first executable called `name` on the children's PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    env::split_paths(&child_path())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Runs `cmd` with inherited stdio; fails unless it exits successfully.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", display(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", display(cmd));
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output; fails (quoting its standard
/// error) unless it exits successfully.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{}`", display(cmd)))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!(
            "`{}` failed ({}): {}",
            display(cmd),
            out.status,
            stderr.trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{}` printed non-UTF-8", display(cmd)))
}

/// Replaces this process with `cmd`, so signals (Ctrl-C) reach it directly.
/// Returns only if that failed.
pub fn exec(cmd: &mut Command) -> anyhow::Error {
    let err = cmd.exec();
    anyhow::Error::new(err).context(format!("could not execute `{}`", display(cmd)))
}

/// `cmd` as a shell-like line, with the environment it sets (but PATH).
pub fn display(cmd: &Command) -> String {
    let envs = cmd.get_envs().filter_map(|(key, value)| {
        let value = value?;
        (key != "PATH").then(|| format!("{}={}", key.to_string_lossy(), quote(value)))
    });
    let program = std::iter::once(quote(cmd.get_program()));
    let args = cmd.get_args().map(quote);
    envs.chain(program)
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=+:,@%".contains(c));
    if plain {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> Result<bool> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let uids = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .context("no Uid line in /proc/self/status")?;
    // Real, effective, saved, filesystem.
    let effective = uids
        .split_whitespace()
        .nth(1)
        .context("malformed Uid line in /proc/self/status")?;
    Ok(effective == "0")
}

/// How to get root for a child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// We are root already.
    Root,
    /// Not root, but `sudo` is there.
    Sudo,
}

/// How to run something as root, or an error saying to run as root when
/// there is no way (`why` says what needs root).
pub fn privilege(why: &str) -> Result<Privilege> {
    if is_root()? {
        Ok(Privilege::Root)
    } else if find_program("sudo").is_some() {
        Ok(Privilege::Sudo)
    } else {
        bail!("{why} needs root, and sudo is not installed: run this command as root")
    }
}

/// A command running `program` as root with the extra environment `envs`
/// (through `sudo env` when we are not root, so they survive sudo's reset).
pub fn as_root(privilege: Privilege, program: &str, envs: &[(&str, &str)]) -> Command {
    match privilege {
        Privilege::Root => {
            let mut cmd = command(program);
            cmd.envs(envs.iter().copied());
            cmd
        }
        Privilege::Sudo => {
            let mut cmd = command("sudo");
            cmd.arg("env");
            cmd.args(envs.iter().map(|(key, value)| format!("{key}={value}")));
            cmd.arg(program);
            cmd
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_what_the_shell_would_split() {
        let mut cmd = Command::new("cargo");
        cmd.args(["install", "a b", "it's", ""])
            .env("RUSTFLAGS", "-C x")
            .env("PATH", "/bin");
        assert_eq!(
            display(&cmd),
            r"RUSTFLAGS='-C x' cargo install 'a b' 'it'\''s' ''"
        );
    }

    #[test]
    fn children_find_the_tools_first() {
        let path = child_path();
        let first = env::split_paths(&path).next();
        assert_eq!(first, Some(bootstrap::tools_bin()));
    }
}
