//! Source files read for the web view's source heatmap, under the rules
//! that keep a daemon running as root from reading files for others.
//!
//! A source file's name comes from the debug information of a binary that
//! any user can build, and the page that asks is not a local user, so a
//! file is read only when all of these hold, and otherwise the reason is
//! said with what to do:
//! - `http_source_dirs` is set (empty, the default, reads nothing) and the
//!   file's path, absolute, resolves (symbolic links followed) to a path
//!   under one of its directories;
//! - every directory above the file is searchable, and the file readable,
//!   by every user (`o+x`, `o+r`): what is shown is what any local user
//!   could read anyway;
//! - it is a regular file (checked before it is opened, and on the opened
//!   file: a FIFO or a device is never read, nor left blocking), opened
//!   without following any symbolic link (one swapped in after the path
//!   was resolved makes the open fail) and without becoming a terminal's
//!   controlling process;
//! - it is at most [`MAX_SOURCE_BYTES`]; no more than its size is read (a
//!   pseudo-file of `/proc` or `/sys` says 0 and gives nothing).
//!
//! Reads run on tokio's blocking pool, at most [`MAX_READS`] at once, each
//! within [`READ_TIMEOUT`] (a slow or hung file system costs the request
//! that long, then its reason).
//!
//! Owns that policy and the reads; it must not count samples nor choose
//! which lines are shown (see `transport::http::source`).

use std::{
    io::Read as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, Stat};
use tokio::sync::Semaphore;

/// The largest source file read.
pub const MAX_SOURCE_BYTES: u64 = 8 << 20;

/// Source files read at once; more requests wait (within the timeout).
pub const MAX_READS: usize = 4;

/// How long a read (and the wait for its turn) may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads source files for the web view under `http_source_dirs`.
#[derive(Clone, Debug)]
pub struct SourceFiles {
    dirs: Arc<[PathBuf]>,
    /// Where to change `http_source_dirs`, for the reasons.
    config: Arc<str>,
    reads: Arc<Semaphore>,
}

impl SourceFiles {
    /// A reader of the files under `dirs` (absolute, validated with the
    /// configuration), set in the configuration file `config` (`None`: no
    /// file, the defaults and flags).
    pub fn new(dirs: Vec<PathBuf>, config: Option<&Path>) -> Self {
        let config = match config {
            Some(file) => format!("in {}", file.display()),
            None => {
                "in the daemon's configuration file (or its --http-source-dirs flag)".to_owned()
            }
        };
        Self {
            dirs: dirs.into(),
            config: config.into(),
            reads: Arc::new(Semaphore::new(MAX_READS)),
        }
    }

    /// The directories files are read under.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The text of the source file `path` (invalid UTF-8 replaced), or why
    /// it is not read: what happened and what to do.
    pub async fn read(&self, path: &str) -> Result<String, String> {
        if self.dirs.is_empty() {
            return Err(format!(
                "the daemon reads no source file for the web view while http_source_dirs is \
                 empty (its default: it runs as root, and file names come from any program's \
                 debug information); to show {path}, add its directory to http_source_dirs {} \
                 and restart profilerd",
                self.config
            ));
        }
        let waited = tokio::time::timeout(READ_TIMEOUT, self.reads.clone().acquire_owned());
        let Ok(Ok(turn)) = waited.await else {
            return Err(format!(
                "{MAX_READS} source files were being read for longer than {} s (a slow file \
                 system?); reload in a moment",
                READ_TIMEOUT.as_secs()
            ));
        };
        let (dirs, config, owned) = (self.dirs.clone(), self.config.clone(), path.to_owned());
        let read = tokio::task::spawn_blocking(move || {
            // Held until the read ends, even past the timeout: a hung file
            // system holds up at most MAX_READS of the blocking pool.
            let _turn = turn;
            read_checked(Path::new(&owned), &dirs, &config)
        });
        match tokio::time::timeout(READ_TIMEOUT, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(err)) => Err(format!("reading {path} failed: {err}")),
            Err(_) => {
                tracing::warn!(path, "reading a source file for the web view timed out");
                Err(format!(
                    "reading {path} took longer than {} s (a slow or hung file system?)",
                    READ_TIMEOUT.as_secs()
                ))
            }
        }
    }
}

/// Reads `path` if the module's rules let it be read (`dirs` set in
/// `config`, for the reasons).
fn read_checked(path: &Path, dirs: &[PathBuf], config: &str) -> Result<String, String> {
    let shown = path.display();
    if !path.is_absolute() {
        return Err(format!(
            "the debug information names {shown}, a path relative to where the program was \
             built; the daemon reads only absolute paths"
        ));
    }
    let canonical = std::fs::canonicalize(path).map_err(|err| {
        let hidden = ["/home", "/root", "/tmp", "/run/user"]
            .iter()
            .any(|dir| path.starts_with(dir));
        match hidden {
            // The systemd unit's ProtectHome= and PrivateTmp=.
            true => format!(
                "{shown} cannot be found ({err}): moved since it was built, or hidden from \
                 the daemon (its systemd unit hides /home and /root and has a /tmp of its own; \
                 see ProtectHome= in docs/operations.md)"
            ),
            false => format!("{shown} cannot be found ({err}): moved since it was built?"),
        }
    })?;
    let resolved = match canonical == path {
        true => String::new(),
        false => format!(" (a link to {})", canonical.display()),
    };
    // The directories resolved too (one may be a link), now: they may have
    // been made since the daemon started.
    let roots: Vec<PathBuf> = (dirs.iter())
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect();
    if !roots.iter().any(|root| canonical.starts_with(root)) {
        let dirs: Vec<String> = dirs.iter().map(|dir| dir.display().to_string()).collect();
        return Err(format!(
            "{shown}{resolved} is outside http_source_dirs ({}); to show it, add its directory \
             to http_source_dirs {config} and restart profilerd",
            dirs.join(", ")
        ));
    }
    for dir in canonical.ancestors().skip(1) {
        let stat = rustix::fs::statat(CWD, dir, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|err| format!("cannot look at {}: {err}", dir.display()))?;
        if stat.st_mode & 0o001 == 0 {
            return Err(format!(
                "{} is not searchable by every user (mode {:o}), so {shown} is not shown to \
                 the web view: the daemon shows only what any local user could read (chmod \
                 o+x the directory)",
                dir.display(),
                stat.st_mode & 0o7777
            ));
        }
    }
    let before = rustix::fs::statat(CWD, &canonical, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|err| format!("cannot look at {shown}: {err}"))?;
    readable(&before, &shown.to_string())?;
    let file = rustix::fs::openat2(
        CWD,
        &canonical,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|err| format!("cannot open {shown}: {err}"))?;
    let stat = rustix::fs::fstat(&file).map_err(|err| format!("cannot look at {shown}: {err}"))?;
    readable(&stat, &shown.to_string())?;
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    let mut bytes = Vec::new();
    std::fs::File::from(file)
        .take(size.min(MAX_SOURCE_BYTES))
        .read_to_end(&mut bytes)
        .map_err(|err| format!("cannot read {shown}: {err}"))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether a file of `stat` may be read: a regular file, readable by every
/// user, at most [`MAX_SOURCE_BYTES`]; else why not.
fn readable(stat: &Stat, shown: &str) -> Result<(), String> {
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(format!(
            "{shown} is not a regular file (a {}); the daemon reads only regular files",
            match kind {
                FileType::Directory => "directory",
                FileType::Fifo => "FIFO",
                FileType::CharacterDevice | FileType::BlockDevice => "device",
                FileType::Socket => "socket",
                FileType::Symlink => "symbolic link",
                _ => "file of another kind",
            }
        ));
    }
    if stat.st_mode & 0o004 == 0 {
        return Err(format!(
            "{shown} is not readable by every user (mode {:o}): the daemon shows only what any \
             local user could read (chmod o+r it)",
            stat.st_mode & 0o7777
        ));
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > MAX_SOURCE_BYTES {
        return Err(format!(
            "{shown} is {:.1} MiB, more than the {} MiB the daemon reads for the web view",
            size as f64 / f64::from(1 << 20),
            MAX_SOURCE_BYTES >> 20
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::PermissionsExt as _};

    use super::*;

    /// A directory of sources (`shown`, world-searchable) beside another
    /// (`elsewhere`), and a reader of `shown`.
    struct Sources {
        _dir: tempfile::TempDir,
        shown: PathBuf,
        elsewhere: PathBuf,
        reader: SourceFiles,
    }

    fn sources() -> Sources {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let (shown, elsewhere) = (dir.path().join("shown"), dir.path().join("elsewhere"));
        for each in [&shown, &elsewhere] {
            fs::create_dir(each).unwrap();
            fs::set_permissions(each, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let reader = SourceFiles::new(vec![shown.clone()], Some(Path::new("/etc/p.toml")));
        Sources {
            _dir: dir,
            shown,
            elsewhere,
            reader,
        }
    }

    fn write(path: &Path, text: &str, mode: u32) -> String {
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        path.display().to_string()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn refusal(reader: &SourceFiles, path: &str) -> String {
        match runtime().block_on(reader.read(path)) {
            Ok(text) => panic!("{path} was read: {text:?}"),
            Err(reason) => reason,
        }
    }

    #[test]
    fn a_world_readable_file_under_the_directories_is_read() {
        let sources = sources();
        let path = write(&sources.shown.join("a.c"), "int main;\n", 0o644);
        let text = runtime().block_on(sources.reader.read(&path)).unwrap();
        assert_eq!(text, "int main;\n");
        // Under a directory below them too, named through `..`.
        fs::create_dir(sources.shown.join("sub")).unwrap();
        let below = write(&sources.shown.join("sub/b.c"), "b", 0o644);
        assert_eq!(
            runtime().block_on(sources.reader.read(&below)).unwrap(),
            "b"
        );
        let around = format!("{}/sub/../a.c", sources.shown.display());
        assert!(runtime().block_on(sources.reader.read(&around)).is_ok());
    }

    #[test]
    fn nothing_is_read_without_source_directories() {
        let sources = sources();
        let path = write(&sources.shown.join("a.c"), "x", 0o644);
        let none = SourceFiles::new(Vec::new(), None);
        let reason = refusal(&none, &path);
        assert!(
            reason.contains("http_source_dirs is empty")
                && reason.contains("add its directory to http_source_dirs in the daemon's"),
            "{reason}"
        );
    }

    #[test]
    fn files_outside_the_directories_are_refused_links_included() {
        let sources = sources();
        let outside = write(&sources.elsewhere.join("secret.c"), "secret", 0o644);
        let reason = refusal(&sources.reader, &outside);
        assert!(
            reason.contains("is outside http_source_dirs")
                && reason.contains("in /etc/p.toml and restart"),
            "{reason}"
        );
        // A link under the directories to a file outside them.
        let link = sources.shown.join("link.c");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let reason = refusal(&sources.reader, &link.display().to_string());
        assert!(
            reason.contains(&format!("(a link to {outside})")) && reason.contains("outside"),
            "{reason}"
        );
        // Out through `..`, and a name that only starts like a directory.
        let up = format!("{}/../elsewhere/secret.c", sources.shown.display());
        assert!(refusal(&sources.reader, &up).contains("outside"));
        let sibling = sources.shown.with_file_name("shown-not");
        fs::create_dir(&sibling).unwrap();
        let near = write(&sibling.join("x.c"), "x", 0o644);
        assert!(refusal(&sources.reader, &near).contains("outside"));
        // A relative path, whatever it would resolve to.
        assert!(refusal(&sources.reader, "shown/x.c").contains("relative"));
        let missing = format!("{}/gone.c", sources.shown.display());
        assert!(refusal(&sources.reader, &missing).contains("cannot be found"));
    }

    #[test]
    fn only_world_readable_regular_files_of_8_mib_at_most_are_read() {
        let sources = sources();
        let private = write(&sources.shown.join("private.c"), "x", 0o600);
        assert!(refusal(&sources.reader, &private).contains("not readable by every user"));
        // A FIFO is refused at once: nothing blocks on a writer.
        let fifo = sources.shown.join("fifo.c");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
        let started = std::time::Instant::now();
        let reason = refusal(&sources.reader, &fifo.display().to_string());
        assert!(reason.contains("not a regular file (a FIFO)"), "{reason}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let dir = sources.shown.join("dir.c");
        fs::create_dir(&dir).unwrap();
        assert!(refusal(&sources.reader, &dir.display().to_string()).contains("a directory"));
        let large = sources.shown.join("large.c");
        let file = fs::File::create(&large).unwrap();
        file.set_len(MAX_SOURCE_BYTES + 1).unwrap();
        fs::set_permissions(&large, fs::Permissions::from_mode(0o644)).unwrap();
        let reason = refusal(&sources.reader, &large.display().to_string());
        assert!(reason.contains("more than the 8 MiB"), "{reason}");
        file.set_len(MAX_SOURCE_BYTES).unwrap();
        let read = runtime().block_on(sources.reader.read(&large.display().to_string()));
        assert_eq!(
            read.map(|text| text.len()).ok(),
            Some(MAX_SOURCE_BYTES as usize)
        );
    }

    #[test]
    fn a_directory_closed_to_other_users_keeps_its_files_unread() {
        let sources = sources();
        let closed = sources.shown.join("closed");
        fs::create_dir(&closed).unwrap();
        let path = write(&closed.join("a.c"), "x", 0o644);
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o750)).unwrap();
        let reason = refusal(&sources.reader, &path);
        assert!(
            reason.contains("is not searchable by every user"),
            "{reason}"
        );
    }
}
