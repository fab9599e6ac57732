//! The peek reports kept: one text file per peek under the state
//! directory, bounded by count and bytes, and the reports of this run in
//! memory for the API. The bounds are shared fairly between the users whose
//! processes were peeked: no user's reports take more than its share, and
//! when the archive is full the user holding the most loses its oldest
//! first, so one user's flood cannot push out the others' reports. The
//! reports of this run held in memory stay within the peeks' share of the
//! memory budget: past it, the oldest are let go of in memory (read back
//! from their files when asked for), or, kept in memory only, dropped.
//!
//! Owns the `peeks/` directory; it must not make reports.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use tracing::warn;

use super::peek_report::PeekReport;
use crate::profile::Owner;

/// Why a kept report could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("cannot read the kept peek report {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// A kept report, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekSummary {
    pub id: String,
    pub pid: u32,
    /// The header's first line, e.g. `Peek at process 12 (nginx): nginx -g`.
    pub title: String,
    pub triggered: SystemTime,
    pub bytes: u64,
    /// Who the process ran as; `None` for reports that do not say.
    pub owner: Option<Owner>,
}

struct Kept {
    summary: PeekSummary,
    /// Reports of this run; those of earlier runs are read back from disk.
    report: Option<Arc<PeekReport>>,
}

/// What the archive may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_reports: usize,
    pub max_bytes: u64,
    /// Most reports of one user's processes (and that share of the bytes).
    pub max_reports_per_user: usize,
    /// Most bytes of reports held in memory (0: no limit).
    pub max_memory_bytes: u64,
}

/// What a report held in memory costs, roughly: its text, and its threads'
/// trees as much again.
fn memory_bytes(report: &PeekReport) -> u64 {
    2 * report.text.len() as u64 + 512
}

impl Bounds {
    fn max_bytes_per_user(&self) -> u64 {
        let share = self.max_reports_per_user.min(self.max_reports) as u128;
        (u128::from(self.max_bytes) * share / self.max_reports.max(1) as u128) as u64
    }
}

/// The bounded set of kept reports.
pub struct Archive {
    /// `None` when the directory could not be made: reports are then kept
    /// in memory only (and said so at start-up).
    directory: Option<PathBuf>,
    bounds: Bounds,
    /// By id, which sorts by trigger time.
    kept: BTreeMap<String, Kept>,
    /// Reports let go of in memory (or dropped) to stay within
    /// `max_memory_bytes`.
    unloaded: u64,
}

impl Archive {
    /// Opens (creating it if needed) `directory` and lists the reports
    /// earlier runs left there.
    pub fn open(directory: &Path, bounds: Bounds) -> Self {
        let mut archive = Self {
            directory: None,
            bounds,
            kept: BTreeMap::new(),
            unloaded: 0,
        };
        if let Err(err) = create_private_dir(directory) {
            warn!(
                directory = %directory.display(),
                "cannot create the peek report directory: {err}; peek reports are kept in \
                 memory only (set state_dir to a writable directory)"
            );
            return archive;
        }
        archive.directory = Some(directory.to_owned());
        if let Ok(entries) = fs::read_dir(directory) {
            for entry in entries.flatten() {
                let path = entry.path();
                if let Some(summary) = read_summary(&path) {
                    archive.kept.insert(
                        summary.id.clone(),
                        Kept {
                            summary,
                            report: None,
                        },
                    );
                }
            }
        }
        archive.enforce_bounds();
        archive
    }

    /// Keeps `report`, on disk when possible; drops the oldest reports
    /// beyond the bounds. Returns false when the report could not be
    /// written to disk (it is then kept in memory only, for this run).
    pub fn keep(&mut self, report: Arc<PeekReport>) -> bool {
        let bytes = report.text.len() as u64;
        let mut written = true;
        if let Some(directory) = &self.directory {
            let path = directory.join(format!("{}.txt", report.id));
            if let Err(err) = write_atomically(&path, report.text.as_bytes()) {
                written = false;
                warn!(
                    path = %path.display(),
                    "cannot write the peek report: {err}; it is kept in memory until the \
                     daemon stops (make room on that disk, or set state_dir elsewhere)"
                );
            }
        }
        let summary = PeekSummary {
            id: report.id.clone(),
            pid: report.pid,
            title: report.text.lines().nth(1).unwrap_or_default().to_owned(),
            triggered: report.triggered,
            bytes,
            owner: report.owner,
        };
        self.kept.insert(
            report.id.clone(),
            Kept {
                summary,
                report: Some(report),
            },
        );
        self.enforce_bounds();
        written
    }

    /// Every kept report, oldest first.
    pub fn list(&self) -> Vec<PeekSummary> {
        self.kept
            .values()
            .map(|kept| kept.summary.clone())
            .collect()
    }

    /// A kept report: this run's whole, an earlier run's as its text.
    pub fn get(&self, id: &str) -> Option<Result<Arc<PeekReport>, ArchiveError>> {
        let kept = self.kept.get(id)?;
        if let Some(report) = &kept.report {
            return Some(Ok(report.clone()));
        }
        let path = self.directory.as_ref()?.join(format!("{id}.txt"));
        Some(
            fs::read_to_string(&path)
                .map(|text| Arc::new(PeekReport::from_text(&kept.summary, text)))
                .map_err(|source| ArchiveError::Read { path, source }),
        )
    }

    /// Bytes of reports held in memory, and reports let go of in memory
    /// (or dropped) to stay within the bound since start.
    pub fn memory(&self) -> (u64, u64) {
        let held = self
            .kept
            .values()
            .filter_map(|kept| kept.report.as_deref())
            .map(memory_bytes)
            .sum();
        (held, self.unloaded)
    }

    /// Changes the bounds (configuration reload); the reports beyond them
    /// go at once.
    pub fn set_bounds(&mut self, bounds: Bounds) {
        self.bounds = bounds;
        self.enforce_bounds();
    }

    /// Drops reports until the bounds hold: first the oldest of a user over
    /// its share, then the oldest of the user that holds the most; then
    /// lets go of the oldest in memory until those held fit.
    fn enforce_bounds(&mut self) {
        self.enforce_counts();
        let limit = self.bounds.max_memory_bytes;
        if limit == 0 {
            return;
        }
        let (mut held, _) = self.memory();
        // Oldest first (ids sort by trigger time); the newest stays.
        let ids: Vec<String> = self.kept.keys().cloned().collect();
        for id in ids.iter().take(ids.len().saturating_sub(1)) {
            if held <= limit {
                break;
            }
            let on_disk = self.directory.is_some();
            let Some(kept) = self.kept.get_mut(id) else {
                continue;
            };
            let Some(report) = kept.report.take() else {
                continue;
            };
            held -= memory_bytes(&report);
            self.unloaded += 1;
            if !on_disk {
                self.kept.remove(id);
            }
        }
    }

    fn enforce_counts(&mut self) {
        loop {
            let mut users: HashMap<Option<u32>, (usize, u64)> = HashMap::new();
            for kept in self.kept.values() {
                let user = users.entry(owner_uid(&kept.summary)).or_default();
                user.0 += 1;
                user.1 += kept.summary.bytes;
            }
            let (count, bytes) = users.values().fold((0, 0), |(count, bytes), user| {
                (count + user.0, bytes + user.1)
            });
            let per_user_bytes = self.bounds.max_bytes_per_user();
            let over_share = users.iter().find(|&(_, &(count, bytes))| {
                count > self.bounds.max_reports_per_user || (bytes > per_user_bytes && count > 1)
            });
            let victim = match over_share {
                Some((&user, _)) => user,
                None if count > self.bounds.max_reports => {
                    match users.iter().max_by_key(|(_, user)| user.0) {
                        Some((&user, _)) => user,
                        None => return,
                    }
                }
                None if bytes > self.bounds.max_bytes && count > 1 => {
                    match users.iter().max_by_key(|(_, user)| user.1) {
                        Some((&user, _)) => user,
                        None => return,
                    }
                }
                None => return,
            };
            let Some(id) = self
                .kept
                .iter()
                .find(|(_, kept)| owner_uid(&kept.summary) == victim)
                .map(|(id, _)| id.clone())
            else {
                return;
            };
            self.kept.remove(&id);
            if let Some(directory) = &self.directory {
                let _ = fs::remove_file(directory.join(format!("{id}.txt")));
            }
        }
    }
}

/// Whose share a report counts against: its process's user (`None` for a
/// report that does not say).
fn owner_uid(summary: &PeekSummary) -> Option<u32> {
    summary.owner.map(|owner| owner.uid)
}

fn create_private_dir(directory: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
}

/// Writes through a temporary file, so a crash never leaves half a report;
/// a failed write (a full disk, say) removes what it wrote.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    let written = fs::File::create(&temporary).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_data()?;
        fs::rename(&temporary, path)
    });
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}

/// The summary of a report file `<id>.txt` left by an earlier run.
fn read_summary(path: &Path) -> Option<PeekSummary> {
    if path.extension()? != "txt" {
        return None;
    }
    let id = path.file_stem()?.to_str()?.to_owned();
    let (triggered, pid) = super::parse_id(&id)?;
    let metadata = fs::metadata(path).ok()?;
    let text = fs::read_to_string(path).ok()?;
    let title = text.lines().nth(1).unwrap_or_default().to_owned();
    Some(PeekSummary {
        id,
        pid,
        title,
        triggered,
        bytes: metadata.len(),
        owner: super::peek_report::parse_owner_line(&text),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// A report of `uid`'s process, `bytes` long, triggered at `second`.
    fn report(second: u64, uid: u32, bytes: usize) -> Arc<PeekReport> {
        let triggered = UNIX_EPOCH + Duration::from_secs(1_790_000_000 + second);
        let summary = PeekSummary {
            id: format!("{second:04}-{uid}"),
            pid: uid,
            title: String::new(),
            triggered,
            bytes: bytes as u64,
            owner: Some(Owner {
                uid,
                gid: uid,
                protected: false,
            }),
        };
        Arc::new(PeekReport::from_text(&summary, "x".repeat(bytes)))
    }

    fn kept_of(archive: &Archive, uid: u32) -> usize {
        archive
            .list()
            .iter()
            .filter(|summary| summary.owner.is_some_and(|owner| owner.uid == uid))
            .count()
    }

    fn archive(
        max_reports: usize,
        max_bytes: u64,
        per_user: usize,
    ) -> (tempfile::TempDir, Archive) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let bounds = Bounds {
            max_reports,
            max_bytes,
            max_reports_per_user: per_user,
            max_memory_bytes: 0,
        };
        let archive = Archive::open(&dir.path().join("peeks"), bounds);
        (dir, archive)
    }

    #[test]
    fn a_flood_of_one_user_pushes_out_only_its_own() {
        let (_dir, mut archive) = archive(10, 1 << 20, 4);
        archive.keep(report(0, 0, 10));
        archive.keep(report(1, 0, 10));
        for second in 2..50 {
            archive.keep(report(second, 65534, 10));
        }
        assert_eq!(kept_of(&archive, 0), 2, "root's reports stay");
        assert_eq!(kept_of(&archive, 65534), 4, "nobody keeps its share");
        // Its newest.
        assert!(
            archive
                .list()
                .iter()
                .any(|summary| summary.id == "0049-65534")
        );
    }

    #[test]
    fn when_full_the_biggest_holder_loses_its_oldest() {
        let (_dir, mut archive) = archive(6, 1 << 20, 6);
        for second in 0..4 {
            archive.keep(report(second, 1, 10));
        }
        for second in 4..7 {
            archive.keep(report(second, 2, 10));
        }
        assert_eq!((kept_of(&archive, 1), kept_of(&archive, 2)), (3, 3));
        assert!(!archive.list().iter().any(|summary| summary.id == "0000-1"));
    }

    #[test]
    fn bytes_are_shared_too() {
        // 1000 bytes in all, 10 reports, 2 a user: 200 bytes a user.
        let (_dir, mut archive) = archive(10, 1000, 2);
        archive.keep(report(0, 0, 150));
        archive.keep(report(1, 5, 150));
        archive.keep(report(2, 5, 150));
        assert_eq!(kept_of(&archive, 5), 1, "over its 200 bytes");
        assert_eq!(kept_of(&archive, 0), 1);
    }

    #[test]
    fn reports_are_read_back_with_their_owner() {
        for owner in [
            Owner {
                uid: 33,
                gid: 34,
                protected: true,
            },
            Owner {
                uid: 33,
                gid: 34,
                protected: false,
            },
            // Root's: said plainly, not as "setuid or not dumpable".
            Owner {
                uid: 0,
                gid: 0,
                protected: true,
            },
        ] {
            let line = super::super::peek_report::owner_line(owner);
            assert_eq!(
                line.contains("setuid"),
                owner.uid != 0 && owner.protected,
                "{line}"
            );
            assert_eq!(kept_and_reopened(owner), Some(owner), "{line}");
        }
    }

    fn kept_and_reopened(owner: Owner) -> Option<Owner> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let bounds = Bounds {
            max_reports: 10,
            max_bytes: 1 << 20,
            max_reports_per_user: 10,
            max_memory_bytes: 0,
        };
        let path = dir.path().join("peeks");
        let text = format!(
            "====\nPeek at process 7 (x)\n{}\nTriggered at ...\n",
            super::super::peek_report::owner_line(owner)
        );
        let mut written = PeekReport::from_text(
            &PeekSummary {
                id: "20261121T201512.123Z-7-0".to_owned(),
                pid: 7,
                title: String::new(),
                triggered: UNIX_EPOCH,
                bytes: 0,
                owner: Some(owner),
            },
            text,
        );
        written.id = "20261121T201512.123Z-7-0".to_owned();
        Archive::open(&path, bounds).keep(Arc::new(written));
        let reopened = Archive::open(&path, bounds);
        reopened.list()[0].owner
    }
}
