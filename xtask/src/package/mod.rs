//! `cargo xtask package`: what a machine installs instead of building —
//! a Debian package (`debian`) and an OCI image (`image`), both made from
//! the same built binaries — and the checks `cargo xtask test` runs on
//! them (`checks`).
//!
//! Owns the artifacts' names and the files both take from the workspace.
//! It must not build (see `commands`); it reads the built binaries.

pub mod checks;
pub mod debian;
pub mod image;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use flate2::{Compression, GzBuilder};

use crate::process;

/// What both artifacts are made from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The package's version (the workspace's, unless given).
    pub version: String,
    /// The directory holding the built `profilerd` and `profilerctl`.
    pub binaries: PathBuf,
    /// The workspace's root (deploy/ is read from there).
    pub workspace: PathBuf,
    /// Where the artifacts are written (target/package by default).
    pub out: PathBuf,
    /// The time written into the artifacts (file times, the changelog's
    /// date, the image's creation time): the last commit's, so that the
    /// same commit packs to the same bytes.
    pub epoch: u64,
}

impl Inputs {
    /// The workspace file `path` (relative to its root), as text.
    pub fn workspace_text(&self, path: &str) -> Result<String> {
        fs::read_to_string(self.workspace.join(path))
            .with_context(|| format!("cannot read {path} of the workspace"))
    }

    /// The built binary `name`.
    pub fn binary(&self, name: &str) -> Result<PathBuf> {
        let path = self.binaries.join(name);
        if !path.is_file() {
            bail!(
                "there is no built {name} at {} (`cargo xtask build --release` builds it)",
                path.display()
            );
        }
        Ok(path)
    }
}

/// What `cargo xtask package` writes.
pub struct Artifacts {
    pub deb: PathBuf,
    pub image: image::Built,
    pub daemonset: PathBuf,
}

/// Builds the Debian package, then the image of the same (stripped)
/// binaries, then the DaemonSet naming that image by digest.
pub fn build(inputs: &Inputs) -> Result<Artifacts> {
    check_version(&inputs.version)?;
    fs::create_dir_all(&inputs.out)
        .with_context(|| format!("cannot create {}", inputs.out.display()))?;
    let deb = debian::build(inputs)?;
    let image = image::build(inputs, &debian::staged_binaries(inputs))?;
    let daemonset = inputs.out.join("daemonset.yaml");
    let text = daemonset_naming(
        &inputs.workspace_text("deploy/kubernetes/daemonset.yaml")?,
        &inputs.version,
        &image.digest,
    )?;
    write_file(&daemonset, text.as_bytes(), 0o644)?;
    Ok(Artifacts {
        deb,
        image,
        daemonset,
    })
}

/// deploy/kubernetes/daemonset.yaml with its image named by `version`
/// and `digest` (a pod then runs exactly the image built).
pub fn daemonset_naming(daemonset: &str, version: &str, digest: &str) -> Result<String> {
    let prefix = format!("image: {}:", image::NAME);
    let mut named = 0;
    let lines: Vec<String> = daemonset
        .lines()
        .map(|line| match line.split_once(&prefix) {
            Some((indent, _)) => {
                named += 1;
                format!("{indent}{prefix}{version}@{digest}")
            }
            None => line.to_owned(),
        })
        .collect();
    if named != 1 {
        bail!(
            "deploy/kubernetes/daemonset.yaml must name its image once as `{prefix}VERSION` \
             (found {named})"
        );
    }
    Ok(lines.join("\n") + "\n")
}

/// A version as Debian and OCI tags accept it: digits, letters and
/// `.+~-`, starting with a digit.
pub fn check_version(version: &str) -> Result<()> {
    let well_formed = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+~".contains(c));
    if !well_formed {
        bail!(
            "version {version:?} is not a package version: digits first, then only letters, \
             digits and . + ~ (e.g. 0.1.0 or 0.2.0~rc1)"
        );
    }
    Ok(())
}

/// The last commit's time (seconds since the epoch), or SOURCE_DATE_EPOCH
/// when set (the reproducible-builds convention).
pub fn source_epoch(workspace: &Path) -> Result<u64> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={value} is not a number of seconds"));
    }
    let printed = process::output(process::command("git").current_dir(workspace).args([
        "log",
        "-1",
        "--format=%ct",
    ]))
    .context("cannot read the last commit's time (set SOURCE_DATE_EPOCH outside a git checkout)")?;
    printed
        .trim()
        .parse()
        .with_context(|| format!("git printed {printed:?} for the last commit's time"))
}

/// `bytes` gzipped at the best compression with no name and the time
/// zero in the header (as `gzip -9n` writes it): the same input gives the
/// same bytes.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::best());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// Writes `bytes` to `path` with `mode`, creating its directories.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))
}

/// An empty directory at `path` (removed first if it is there).
pub fn fresh_dir(path: &Path) -> Result<()> {
    if path.exists() {
        fs::remove_dir_all(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked() {
        for good in ["0.1.0", "0.1.0~test1", "1.2+deb12u1"] {
            assert!(check_version(good).is_ok(), "{good}");
        }
        for bad in ["", "v0.1", "0.1 0", "0.1/0", "0.1-1"] {
            assert!(check_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_daemonset_names_the_image_by_digest() -> Result<()> {
        let written = "spec:\n  containers:\n    - image: localhost/profilerd:0.1.0\n";
        let named = daemonset_naming(written, "0.2.0", "sha256:ab")?;
        assert_eq!(
            named,
            "spec:\n  containers:\n    - image: localhost/profilerd:0.2.0@sha256:ab\n"
        );
        assert!(daemonset_naming("spec: {}\n", "0.2.0", "sha256:ab").is_err());
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/daemonset.yaml"),
        )?;
        daemonset_naming(&shipped, "0.1.0", "sha256:ab")?;
        Ok(())
    }

    #[test]
    fn gzip_is_reproducible() -> Result<()> {
        let once = gzip(b"profilerd")?;
        assert_eq!(once, gzip(b"profilerd")?);
        // No time, no name: bytes 4..8 are the time.
        assert_eq!(once[4..8], [0, 0, 0, 0]);
        Ok(())
    }
}
