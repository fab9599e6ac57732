//! Files opened on behalf of a process: the binaries it maps and the perf
//! map it writes. The process may be hostile: its user chooses what lies
//! at those paths (a FIFO, a link to a root-only file, a device, a file on
//! a FUSE mount whose server never answers), so every file is opened
//!
//! - inside the process's own root (`openat2` with `RESOLVE_IN_ROOT`), so
//!   neither `..` nor an absolute link leads out of its mount namespace,
//!   and never through a link in its last component (`O_NOFOLLOW`);
//! - without blocking (`O_NONBLOCK`: opening a FIFO does not wait for a
//!   writer) and only when it is a regular file (`fstat`);
//! - only when it is what it should be: a binary is the very file the
//!   process maps (its device and inode), a perf map belongs to the
//!   process's own user;
//! - a perf map only on a local filesystem (the mount table of the
//!   process says which), since a FUSE or network filesystem may make any
//!   open or read wait for good.
//!
//! Owns those checks; it must not parse what it opens.

use std::{
    fs::File,
    os::fd::{AsFd, OwnedFd},
    path::Path,
};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::tasks::TaskCredentials;

/// Why a file of a process was not opened.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Refused {
    #[error("it does not exist, or the process is gone")]
    Missing,
    #[error("it is a {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("it is a symbolic link")]
    Link,
    #[error("it belongs to user {owner}, not to the process's user {uid}")]
    NotTheProcesssUser { owner: u32, uid: u32 },
    #[error("it is not the file the process maps (it was replaced)")]
    Replaced,
    #[error("it is on a {0} filesystem, which may not answer (only local filesystems are read)")]
    Filesystem(String),
    #[error("it cannot be opened: {0}")]
    Io(String),
}

impl Refused {
    fn from_errno(err: rustix::io::Errno) -> Self {
        match err {
            rustix::io::Errno::NOENT | rustix::io::Errno::SRCH | rustix::io::Errno::NOTDIR => {
                Self::Missing
            }
            rustix::io::Errno::LOOP => Self::Link,
            err => Self::Io(err.to_string()),
        }
    }
}

/// Flags of every open: read only, no controlling terminal, no waiting,
/// no link in the last component.
fn open_flags() -> OFlags {
    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::NOFOLLOW
}

/// Opens `path` (absolute, as the process sees it) inside the root of
/// process `pid`, as a regular file.
pub fn open_in_root(pid: u32, path: &Path) -> Result<(File, rustix::fs::Stat), Refused> {
    let root = rustix::fs::open(
        format!("/proc/{pid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Refused::from_errno)?;
    let relative = path.strip_prefix("/").unwrap_or(path);
    let fd = rustix::fs::openat2(
        &root,
        relative,
        open_flags(),
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(Refused::from_errno)?;
    regular(fd)
}

/// Opens the mapped binary of process `pid` at `start..end`, known by
/// `path`, which must be the file of device and inode `identity`: through
/// `/proc/PID/map_files` (exactly the mapped file, even deleted or in
/// another mount namespace; it needs CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE), else by its path inside the process's root.
pub fn open_mapped(
    pid: u32,
    (start, end): (u64, u64),
    path: &Path,
    identity: (u64, u64),
) -> Result<File, Refused> {
    let mapped = rustix::fs::open(
        format!("/proc/{pid}/map_files/{start:x}-{end:x}"),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(Refused::from_errno)
    .and_then(regular);
    let (file, stat) = match mapped {
        Ok(opened) => opened,
        Err(Refused::NotRegular(kind)) => return Err(Refused::NotRegular(kind)),
        Err(_) => open_in_root(pid, path)?,
    };
    if (stat.st_dev, stat.st_ino) != identity {
        return Err(Refused::Replaced);
    }
    Ok(file)
}

/// Opens a binary that a process now gone mapped (known from the kernel's
/// records of its memory maps), by `path` in the daemon's own root: only
/// on a local filesystem (as the daemon's mount table says), only as a
/// regular file, and only when it is the file of device and inode
/// `identity` (a process in another mount namespace named a path of its
/// own: whatever lies at that path here is not taken for it).
pub fn open_left_behind(path: &Path, identity: (u64, u64)) -> Result<File, Refused> {
    let filesystem = filesystem_of("self", path)?;
    if !LOCAL_FILESYSTEMS.contains(&filesystem.as_str()) {
        return Err(Refused::Filesystem(filesystem));
    }
    let fd = rustix::fs::open(path, open_flags(), Mode::empty()).map_err(Refused::from_errno)?;
    let (file, stat) = regular(fd)?;
    if (stat.st_dev, stat.st_ino) != identity {
        return Err(Refused::Replaced);
    }
    Ok(file)
}

/// Opens the file a process writes for others to read (its perf map),
/// `path` as the process sees it: inside its root, on a local
/// filesystem, owned by one of the process's user ids.
pub fn open_written_by(pid: u32, path: &Path) -> Result<File, Refused> {
    let filesystem = filesystem_of(&pid.to_string(), path)?;
    if !LOCAL_FILESYSTEMS.contains(&filesystem.as_str()) {
        return Err(Refused::Filesystem(filesystem));
    }
    let credentials = TaskCredentials::read(pid).ok_or(Refused::Missing)?;
    let (file, stat) = open_in_root(pid, path)?;
    if !(credentials.uids.contains(&stat.st_uid) || credentials.filesystem_uid == stat.st_uid) {
        return Err(Refused::NotTheProcesssUser {
            owner: stat.st_uid,
            uid: credentials.uids[1],
        });
    }
    Ok(file)
}

/// The file, if it is a regular one.
fn regular(fd: OwnedFd) -> Result<(File, rustix::fs::Stat), Refused> {
    let stat = rustix::fs::fstat(fd.as_fd()).map_err(Refused::from_errno)?;
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => return Ok((File::from(fd), stat)),
        FileType::Directory => "directory",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Symlink => "symbolic link",
        FileType::Unknown => "file of unknown type",
    };
    Err(Refused::NotRegular(kind))
}

/// Filesystems whose opens and reads never wait on another process or
/// the network.
const LOCAL_FILESYSTEMS: &[&str] = &[
    "tmpfs", "ramfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "overlay", "f2fs", "zfs", "bcachefs",
    "jfs", "reiserfs", "nilfs2",
];

/// The most of a process's mount table read (a process may make
/// thousands of mounts in a namespace of its own).
const MOUNTINFO_LIMIT: u64 = 4 << 20;

/// The type of the filesystem `path` lies on, as process `pid` (a number,
/// or `self`) sees it: that of its mount whose mount point is the longest
/// prefix of `path`.
fn filesystem_of(pid: &str, path: &Path) -> Result<String, Refused> {
    use std::io::Read as _;
    let mut text = String::new();
    File::open(format!("/proc/{pid}/mountinfo"))
        .map_err(|_| Refused::Missing)?
        .take(MOUNTINFO_LIMIT)
        .read_to_string(&mut text)
        .map_err(|err| Refused::Io(err.to_string()))?;
    filesystem_in(&text, path).ok_or(Refused::Missing)
}

/// The filesystem type of `path` in the mount table `mountinfo`: the last
/// mount (mounts stack) whose mount point holds it.
fn filesystem_in(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for line in mountinfo.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
        let mut fields = line.split(' ');
        let Some(point) = fields.nth(4) else {
            continue;
        };
        let Some(kind) = line
            .split(" - ")
            .nth(1)
            .and_then(|tail| tail.split(' ').next())
        else {
            continue;
        };
        let point = unescape_octal(point);
        if !path.starts_with(&point) {
            continue;
        }
        let depth = Path::new(&point).components().count();
        if best.is_none_or(|(deepest, _)| depth >= deepest) {
            best = Some((depth, kind));
        }
    }
    best.map(|(_, kind)| kind.to_owned())
}

/// Mount points in mountinfo escape space, tab, newline and backslash as
/// `\ooo`.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = bytes.get(at + 1..at + 4).filter(|digits| {
            bytes[at] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match escaped {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                out.push(value as u8);
                at += 4;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn finds_the_filesystem_of_the_deepest_mount_holding_a_path() {
        let mountinfo = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:21 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw
26 25 0:40 / /tmp/fuse\\040dir rw - fuse.sshfs host: rw
27 22 0:41 / /tmpx rw - fuse.sshfs host: rw
";
        let of = |path: &str| filesystem_in(mountinfo, Path::new(path));
        assert_eq!(of("/tmp/perf-1.map").as_deref(), Some("tmpfs"));
        assert_eq!(
            of("/tmp/fuse dir/perf-1.map").as_deref(),
            Some("fuse.sshfs")
        );
        assert_eq!(of("/tmpx/perf-1.map").as_deref(), Some("fuse.sshfs"));
        assert_eq!(of("/usr/bin/true").as_deref(), Some("ext4"));
        // A later mount on the same point hides the earlier one.
        let stacked = format!("{mountinfo}28 25 0:42 / /tmp rw - fuse.evil x rw\n");
        assert_eq!(
            filesystem_in(&stacked, Path::new("/tmp/perf-1.map")).as_deref(),
            Some("fuse.evil")
        );
    }

    #[test]
    fn opens_regular_files_only_and_never_through_a_link() {
        let pid = std::process::id();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("file");
        std::fs::write(&file, "text").expect("written");
        let (_, stat) = open_in_root(pid, &file).expect("a regular file opens");
        let metadata = std::fs::metadata(&file).expect("stat");
        assert_eq!((stat.st_dev, stat.st_ino), (metadata.dev(), metadata.ino()));

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("linked");
        assert_eq!(open_in_root(pid, &link).unwrap_err(), Refused::Link);

        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600))
            .expect("a FIFO is made");
        // Opening it does not wait for a writer, and it is refused.
        assert_eq!(
            open_in_root(pid, &fifo).unwrap_err(),
            Refused::NotRegular("FIFO")
        );
        assert_eq!(
            open_in_root(pid, Path::new("/dev/null")).unwrap_err(),
            Refused::NotRegular("character device")
        );
        assert_eq!(
            open_in_root(pid, &dir.path().join("none")).unwrap_err(),
            Refused::Missing
        );
    }

    #[test]
    fn a_written_file_must_be_the_processs_users_and_a_mapped_one_the_same_file() {
        let pid = std::process::id();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("perf.map");
        std::fs::write(&file, "1000 10 f\n").expect("written");
        // The tests run as root: root's file is the process's own.
        open_written_by(pid, &file).expect("the process's own file opens");
        rustix::fs::chown(&file, Some(rustix::process::Uid::from_raw(65534)), None)
            .expect("chown (the tests run as root)");
        assert_eq!(
            open_written_by(pid, &file).unwrap_err(),
            Refused::NotTheProcesssUser {
                owner: 65534,
                uid: 0
            }
        );
        let metadata = std::fs::metadata(&file).expect("stat");
        let identity = (metadata.dev(), metadata.ino());
        open_mapped(pid, (0, 0), &file, identity).expect("the same file opens");
        let other = dir.path().join("other");
        std::fs::write(&other, "x").expect("written");
        assert_eq!(
            open_mapped(pid, (0, 0), &other, identity).unwrap_err(),
            Refused::Replaced
        );
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_octal("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape_octal("/a\\04"), "/a\\04");
    }
}
