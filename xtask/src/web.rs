//! The web view's flame graph viewer: d3-flame-graph and the d3 it runs
//! on, fetched from the npm registry at pinned versions, checked against
//! their pinned integrity hashes and unpacked under the target directory,
//! where profiler-daemon's build script embeds them (the daemon serves
//! them; the page loads nothing from the internet).
//!
//! Owns the pins and the download; it must not build anything.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;

use crate::process;

/// Tells profiler-daemon's build script where the viewer's files are.
pub const WEB_VIEWER_VAR: &str = "PROFILERD_WEB_VIEWER";

/// An npm package of the viewer: its version, the `dist.integrity` the
/// registry gives for it (`npm view NAME@VERSION dist.integrity`), and the
/// files taken from its tarball (path in the tarball, name served).
struct NpmPackage {
    name: &'static str,
    version: &'static str,
    integrity: &'static str,
    files: &'static [(&'static str, &'static str)],
}

/// The viewer's packages. To move a pin, change the version and the
/// integrity together.
const VIEWER: &[NpmPackage] = &[
    NpmPackage {
        name: "d3",
        version: "7.9.0",
        integrity: "sha512-e1U46jVP+w7Iut8Jt8ri1YsPOvFpg46k+K8TpCb0P+zjCkjkPnV7WzfDJzMHy1LnA+wj5pLT1wjO901gLXeEhA==",
        files: &[("package/dist/d3.min.js", "d3.min.js")],
    },
    NpmPackage {
        name: "d3-flame-graph",
        version: "5.0.0",
        integrity: "sha512-ALZQ4at8Dex8HCoj9D5p5TY6gLNEc2vAZAy+NKO/6GLEfhYJmGxYuRClO6RPoplndyOHxQTPipdlGeMggkjtnQ==",
        files: &[
            (
                "package/dist/d3-flamegraph.umd.min.js",
                "d3-flamegraph.min.js",
            ),
            ("package/dist/d3-flamegraph.css", "d3-flamegraph.css"),
        ],
    },
];

/// The npm registry the packages come from.
const REGISTRY: &str = "https://registry.npmjs.org";

static VIEWER_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The viewer's directory once [`viewer`] has made it, for the build.
pub fn chosen_viewer_dir() -> Option<&'static Path> {
    VIEWER_DIR.get().map(PathBuf::as_path)
}

/// Makes sure the viewer's files are under `target_dir` (downloaded and
/// checked once per pin) and returns their directory.
pub fn viewer(target_dir: &Path) -> Result<&'static Path> {
    if let Some(dir) = chosen_viewer_dir() {
        return Ok(dir);
    }
    let dir = target_dir.join("web-viewer").join(pins_name());
    let complete = VIEWER
        .iter()
        .flat_map(|package| package.files)
        .all(|(_, name)| dir.join(name).is_file());
    if !complete {
        fetch_all(&dir)?;
    }
    println!("ok: the web view's flame graph viewer ({})", dir.display());
    Ok(VIEWER_DIR.get_or_init(|| dir))
}

/// A directory name that changes with every pin.
fn pins_name() -> String {
    VIEWER
        .iter()
        .map(|package| format!("{}-{}", package.name, package.version))
        .collect::<Vec<_>>()
        .join("+")
}

fn fetch_all(dir: &Path) -> Result<()> {
    let partial = dir.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .with_context(|| format!("removing {}", partial.display()))?;
    }
    std::fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    for package in VIEWER {
        fetch(package, &partial)?;
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&partial, dir)
        .with_context(|| format!("moving {} to {}", partial.display(), dir.display()))
}

/// Downloads `package`'s tarball into `dir`, checks its integrity and
/// unpacks its files there.
fn fetch(package: &NpmPackage, dir: &Path) -> Result<()> {
    let NpmPackage { name, version, .. } = package;
    let url = format!("{REGISTRY}/{name}/-/{name}-{version}.tgz");
    let tarball = dir.join(format!("{name}-{version}.tgz"));
    println!("==> fetching {name}@{version} from the npm registry (one time)");
    process::run(
        process::command("curl")
            .args(["--fail", "--silent", "--show-error", "--location"])
            .args(["--retry", "3", "--max-time", "120", "--output"])
            .arg(&tarball)
            .arg(&url),
    )
    .with_context(|| {
        format!("downloading {url} (the web view's viewer; is the npm registry reachable?)")
    })?;
    check_integrity(&tarball, package)?;
    let mut untar = process::command("tar");
    untar.arg("-xzf").arg(&tarball).arg("-C").arg(dir);
    untar.args(package.files.iter().map(|(inside, _)| inside));
    process::run(&mut untar).with_context(|| format!("unpacking {}", tarball.display()))?;
    for (inside, served) in package.files {
        std::fs::rename(dir.join(inside), dir.join(served))
            .with_context(|| format!("taking {inside} out of {}", tarball.display()))?;
    }
    std::fs::remove_dir_all(dir.join("package")).ok();
    std::fs::remove_file(&tarball).ok();
    Ok(())
}

/// Refuses a tarball whose SHA-512 is not the pinned integrity's.
fn check_integrity(tarball: &Path, package: &NpmPackage) -> Result<()> {
    let expected = expected_sha512(package.integrity)
        .with_context(|| format!("the pinned integrity of {} is malformed", package.name))?;
    let printed = process::output(process::command("sha512sum").arg(tarball))
        .context("hashing the downloaded tarball (sha512sum, from coreutils)")?;
    let actual = printed.split_whitespace().next().unwrap_or_default();
    if !actual.eq_ignore_ascii_case(&expected) {
        bail!(
            "{}@{} from the registry does not match its pinned integrity {} (its SHA-512 is \
             {actual}); the download was altered or the pin is wrong: do not use it",
            package.name,
            package.version,
            package.integrity
        );
    }
    Ok(())
}

/// The hex SHA-512 of an SRI string `sha512-<base64>`.
fn expected_sha512(integrity: &str) -> Result<String> {
    let encoded = integrity
        .strip_prefix("sha512-")
        .context("it does not start with sha512-")?;
    let digest = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .context("it is not base64")?;
    if digest.len() != 64 {
        bail!("it holds {} bytes, not SHA-512's 64", digest.len());
    }
    Ok(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pin_is_a_sha512() {
        for package in VIEWER {
            assert_eq!(expected_sha512(package.integrity).unwrap().len(), 128);
        }
        assert!(expected_sha512("sha1-abc").is_err());
    }
}
