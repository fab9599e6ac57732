//! The container image: `profilerd-<version>-oci.tar`, an OCI image layout
//! in a tar archive (what `podman load`, `skopeo copy oci-archive:…` and
//! `ctr import` read), written directly: one layer holding profilerd,
//! profilerctl, the shared libraries they load (as `ldd` finds them here)
//! and the example configuration, and nothing pulled from a registry.
//!
//! Owns the image's content and its JSON documents. It must not run a
//! container (see `checks`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::{Inputs, gzip};
use crate::install;
use crate::process;

/// The image's name (and tag: the version), as loaded.
pub const NAME: &str = "localhost/profilerd";
const CONFIG_PATH: &str = "etc/profilerd/profilerd.toml";

/// The image's file name for `version`.
pub fn file_name(version: &str) -> String {
    format!("profilerd-{version}-oci.tar")
}

/// What the image holds, path by path (relative to its root).
#[derive(Debug, Default)]
pub struct Content {
    pub files: BTreeMap<String, (Vec<u8>, u32)>,
    pub dirs: BTreeMap<String, u32>,
}

/// The built image: where it was written and its manifest's digest (what
/// a pod names it by).
pub struct Built {
    pub path: PathBuf,
    pub digest: String,
}

/// Writes the image of the (stripped) binaries in `binaries`; returns its
/// path and digest.
pub fn build(inputs: &Inputs, binaries: &Path) -> Result<Built> {
    let content = content(inputs, binaries)?;
    let layer_tar = layer(&content, inputs.epoch)?;
    let layer_gz = gzip(&layer_tar)?;
    let created = process::output(
        process::command("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ", "-d"])
            .arg(format!("@{}", inputs.epoch)),
    )?;
    let config = serde_json::to_vec(&json!({
        "created": created.trim(),
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/usr/bin/profilerd"],
            "Cmd": ["--config", format!("/{CONFIG_PATH}")],
            "Env": ["PATH=/usr/bin"],
            "StopSignal": "SIGTERM",
            "Labels": labels(&inputs.version),
        },
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer_tar)]},
        "history": [{
            "created": created.trim(),
            "created_by": "cargo xtask package",
        }],
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", &layer_gz)],
        "annotations": labels(&inputs.version),
    }))?;
    let digest = sha256(&manifest);
    let mut manifest_descriptor =
        descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
    manifest_descriptor["annotations"] = json!({
        "org.opencontainers.image.ref.name": format!("{NAME}:{}", inputs.version),
    });
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest_descriptor],
    }))?;

    let mut archive = Content::default();
    archive.dirs.insert("blobs".into(), 0o755);
    archive.dirs.insert("blobs/sha256".into(), 0o755);
    archive.files.insert(
        "oci-layout".into(),
        (br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(), 0o644),
    );
    archive.files.insert("index.json".into(), (index, 0o644));
    for blob in [config, manifest, layer_gz] {
        let name = format!("blobs/sha256/{}", hex_sha256(&blob));
        archive.files.insert(name, (blob, 0o644));
    }
    let path = inputs.out.join(file_name(&inputs.version));
    fs::write(&path, layer(&archive, inputs.epoch)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Built { path, digest })
}

/// The OCI annotations (and labels) naming the image.
fn labels(version: &str) -> serde_json::Value {
    json!({
        "org.opencontainers.image.title": "profilerd",
        "org.opencontainers.image.description":
            "always-on system-wide sampling profiler (eBPF); run with the host's pid namespace",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
    })
}

/// The image's files: the binaries, their libraries, the configuration,
/// the few files and directories a process expects.
fn content(inputs: &Inputs, binaries: &Path) -> Result<Content> {
    let mut content = Content::default();
    for dir in [
        "etc",
        "etc/profilerd",
        "run",
        "run/profilerd",
        "usr",
        "usr/bin",
        "var",
    ] {
        content.dirs.insert(dir.into(), 0o755);
    }
    content.dirs.insert("var/lib".into(), 0o755);
    content.dirs.insert("var/lib/profilerd".into(), 0o700);
    content.dirs.insert("tmp".into(), 0o1777);
    for name in install::BINARIES {
        let binary = binaries.join(name);
        let bytes =
            fs::read(&binary).with_context(|| format!("cannot read {}", binary.display()))?;
        content
            .files
            .insert(format!("usr/bin/{name}"), (bytes, 0o755));
        for library in shared_libraries(&binary)? {
            let bytes =
                fs::read(&library).with_context(|| format!("cannot read {}", library.display()))?;
            let inside = library
                .to_str()
                .context("a library's path is not UTF-8")?
                .trim_start_matches('/')
                .to_owned();
            add_parents(&mut content, &inside);
            content.files.insert(inside, (bytes, 0o755));
        }
    }
    let config = inputs.workspace_text("deploy/config.toml")?;
    content
        .files
        .insert(CONFIG_PATH.into(), (config.into_bytes(), 0o644));
    // Names for the uids and gids the daemon prints, and the admin group.
    content.files.insert(
        "etc/passwd".into(),
        (b"root:x:0:0:root:/root:/usr/sbin/nologin\n".to_vec(), 0o644),
    );
    content.files.insert(
        "etc/group".into(),
        (b"root:x:0:\nprofilerd:x:998:\n".to_vec(), 0o644),
    );
    Ok(content)
}

/// Every directory above `path`.
fn add_parents(content: &mut Content, path: &str) {
    let mut parent = Path::new(path).parent();
    while let Some(dir) = parent.filter(|dir| !dir.as_os_str().is_empty()) {
        if let Some(dir) = dir.to_str() {
            content.dirs.entry(dir.to_owned()).or_insert(0o755);
        }
        parent = dir.parent();
    }
}

/// The shared libraries `binary` loads, the dynamic loader included, as
/// `ldd` resolves them on this machine.
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let printed = process::output(process::command("ldd").arg(binary))
        .with_context(|| format!("ldd cannot list the libraries of {}", binary.display()))?;
    let mut libraries = Vec::new();
    for line in printed.lines().map(str::trim) {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", or the
        // loader "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file.
        let path = match line.split_once("=>") {
            Some((_, resolved)) => resolved.trim(),
            None => line,
        };
        let path = path.split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        } else if line.contains("not found") {
            bail!(
                "{} needs a library this machine lacks: {line}",
                binary.display()
            );
        }
    }
    Ok(libraries)
}

/// `content` as a tar archive: directories first, then files, in path
/// order, owned by root, dated `epoch`.
fn layer(content: &Content, epoch: u64) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(epoch);
        header
    };
    for (path, mode) in &content.dirs {
        let mut dir = header(tar::EntryType::Directory, *mode, 0);
        builder.append_data(&mut dir, format!("{path}/"), std::io::empty())?;
    }
    for (path, (bytes, mode)) in &content.files {
        let mut file = header(tar::EntryType::Regular, *mode, bytes.len() as u64);
        builder.append_data(&mut file, path, bytes.as_slice())?;
    }
    Ok(builder.into_inner()?)
}

/// An OCI descriptor of `blob`.
fn descriptor(media_type: &str, blob: &[u8]) -> serde_json::Value {
    json!({"mediaType": media_type, "digest": sha256(blob), "size": blob.len()})
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex_sha256(bytes))
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn layers_are_reproducible_and_list_directories_first() -> Result<()> {
        let mut content = Content::default();
        content
            .files
            .insert("usr/bin/x".into(), (b"x".to_vec(), 0o755));
        add_parents(&mut content, "usr/bin/x");
        let tar = layer(&content, 7)?;
        assert_eq!(tar, layer(&content, 7)?);
        let mut archive = tar::Archive::new(tar.as_slice());
        let names: Vec<String> = archive
            .entries()?
            .map(|entry| Ok(entry?.path()?.display().to_string()))
            .collect::<Result<_>>()?;
        assert_eq!(names, ["usr/", "usr/bin/", "usr/bin/x"]);
        Ok(())
    }

    #[test]
    fn the_loader_and_libc_are_found() -> Result<()> {
        let libraries = shared_libraries(Path::new("/bin/sh"))?;
        assert!(
            libraries
                .iter()
                .any(|library| library.to_string_lossy().contains("libc.so")),
            "{libraries:?}"
        );
        assert!(
            libraries
                .iter()
                .any(|library| library.to_string_lossy().contains("ld-linux")),
            "{libraries:?}"
        );
        Ok(())
    }
}
