//! One process's perf map as far as it is known: its file, how much of it
//! was read, the addresses waiting for a name or known to have none, the
//! names held, and which step the reader takes next for it.
//!
//! Owns that bookkeeping; it must not read files (`steps` does).

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    MAX_FILE_BYTES,
    perf_map::Found,
    steps::{NamesFile, Read, Step},
};
use crate::symbols::process_files::Refused;

/// A whole file is read again for new addresses at most this often per
/// process, and no more often than its size at [`PER_PROCESS_SCAN_RATE`]
/// bytes per second allows.
const MIN_SCAN_INTERVAL: Duration = Duration::from_secs(1);
const PER_PROCESS_SCAN_RATE: f64 = (4 << 20) as f64;

/// A file is looked at again for lines added at most this often.
pub(super) const TAIL_INTERVAL: Duration = Duration::from_millis(200);

/// A process without a perf map is looked at again this often while its
/// anonymous code is sampled (a JIT may create its map late).
const ABSENT_RETRY: Duration = Duration::from_secs(1);

/// Those waiting for names wait for a process only while what is left to
/// read of its file is at most this.
const QUICK_BYTES: u64 = 4 << 20;

/// Most addresses one process may have waiting, or known to have no name.
const MAX_ADDRESSES: usize = 16_384;

/// What a process, a held name (besides its own bytes) and an address
/// waiting are counted as.
const PROCESS_OVERHEAD: u64 = 512;
const NAME_OVERHEAD: u64 = 96;
const ADDRESS_OVERHEAD: u64 = 48;

/// Where the process's perf map stands.
pub(super) enum FileState {
    Unopened,
    Open(NamesFile),
    /// The process writes none (yet): looked for again after
    /// [`ABSENT_RETRY`].
    Absent(Instant),
    /// Not read (the reason is counted, see [`refused_reason`]).
    Refused,
}

/// A scan of the file up to `until` for addresses asked for after the
/// lines before were read.
struct Scan {
    at: u64,
    until: u64,
    addresses: BTreeMap<u64, ()>,
    found: BTreeMap<u64, Found>,
}

/// A held name: a function's code, its line's offset (a later line for
/// the same code wins) and when a sample last fell in it.
struct Named {
    end: u64,
    name: Arc<str>,
    offset: u64,
    used: Instant,
}

pub(super) struct ProcessNames {
    pub file: FileState,
    /// Bytes read from the start: every line before is matched against
    /// the addresses waiting and missing as it is read.
    read: u64,
    /// The file's size when last looked at.
    size: u64,
    /// Whether any line read so far names code: a file without one (a
    /// sparse file of zeros, say) is never scanned again.
    has_lines: bool,
    looked: Option<Instant>,
    /// Addresses asked for and not known yet, with the bytes read when
    /// they were asked (the lines before must be scanned for them).
    waiting: BTreeMap<u64, u64>,
    /// Addresses no line read so far names.
    missing: BTreeMap<u64, ()>,
    /// A missing address was asked for again: lines added since may name it.
    missing_asked: bool,
    scan: Option<Scan>,
    last_scan: Option<Instant>,
    names: BTreeMap<u64, Named>,
    name_bytes: u64,
    /// When its names were last asked for.
    pub used: Instant,
    /// In the reader's queue.
    pub queued: bool,
}

impl ProcessNames {
    pub fn new(now: Instant) -> Self {
        Self {
            file: FileState::Unopened,
            read: 0,
            size: 0,
            has_lines: false,
            looked: None,
            waiting: BTreeMap::new(),
            missing: BTreeMap::new(),
            missing_asked: false,
            scan: None,
            last_scan: None,
            names: BTreeMap::new(),
            name_bytes: 0,
            used: now,
            queued: false,
        }
    }

    /// The bytes it holds, as counted against the limit.
    pub fn bytes(&self) -> u64 {
        let scan = self
            .scan
            .as_ref()
            .map_or(0, |scan| scan.addresses.len() + scan.found.len());
        let addresses = (self.waiting.len() + self.missing.len() + scan) as u64;
        PROCESS_OVERHEAD
            + self.name_bytes
            + self.names.len() as u64 * NAME_OVERHEAD
            + addresses * ADDRESS_OVERHEAD
    }

    pub fn names_held(&self) -> usize {
        self.names.len()
    }

    /// The held name of the code at `address`.
    pub fn lookup(&mut self, address: u64, now: Instant) -> Option<Arc<str>> {
        let (_, named) = self.names.range_mut(..=address).next_back()?;
        (address < named.end).then(|| {
            named.used = now;
            named.name.clone()
        })
    }

    /// Asks for the name of `address`.
    pub fn want(&mut self, address: u64, now: Instant) {
        self.used = now;
        if matches!(self.file, FileState::Refused)
            || self.lookup(address, now).is_some()
            || self.waiting.contains_key(&address)
        {
            return;
        }
        if self.missing.contains_key(&address) {
            self.missing_asked = true;
        } else if self.waiting.len() < MAX_ADDRESSES {
            self.waiting.insert(address, self.read);
        }
    }

    fn tail_due(&self, now: Instant) -> bool {
        let interested = self.size > self.read || !self.waiting.is_empty() || self.missing_asked;
        self.read < MAX_FILE_BYTES
            && interested
            && (self.size > self.read
                || self
                    .looked
                    .is_none_or(|looked| now.duration_since(looked) >= TAIL_INTERVAL))
    }

    /// Whether a scan of the lines read before some addresses were asked
    /// for may start (or, with no line read, end at once).
    fn scan_due(&self, now: Instant) -> bool {
        self.scan.is_none()
            && self.waiting.values().any(|&from| from > 0)
            && (!self.has_lines || self.scan_allowed(now))
    }

    fn scan_allowed(&self, now: Instant) -> bool {
        let interval = MIN_SCAN_INTERVAL.max(Duration::from_secs_f64(
            self.read as f64 / PER_PROCESS_SCAN_RATE,
        ));
        self.last_scan
            .is_none_or(|last| now.duration_since(last) >= interval)
    }

    /// Whether the reader has a step to take for it now.
    pub fn has_work(&self, now: Instant) -> bool {
        match self.file {
            FileState::Refused => false,
            FileState::Unopened => true,
            FileState::Absent(since) => {
                !self.waiting.is_empty() && now.duration_since(since) >= ABSENT_RETRY
            }
            FileState::Open(_) => self.tail_due(now) || self.scan.is_some() || self.scan_due(now),
        }
    }

    /// Whether those waiting for its names should stop: every address
    /// asked for is known, or what is left to read is long, or waits for
    /// its rate.
    pub fn settled(&self, now: Instant) -> bool {
        match self.file {
            FileState::Refused | FileState::Absent(_) => true,
            FileState::Unopened => false,
            FileState::Open(_) => {
                if self.waiting.is_empty() && self.scan.is_none() {
                    return true;
                }
                let tail_left = self.size.min(MAX_FILE_BYTES).saturating_sub(self.read);
                let scan_left = match &self.scan {
                    Some(scan) => scan.until - scan.at,
                    None if self.waiting.values().any(|&from| from > 0) => {
                        if !self.scan_allowed(now) {
                            return true;
                        }
                        self.read
                    }
                    None => 0,
                };
                tail_left + scan_left > QUICK_BYTES
            }
        }
    }

    /// The next step for it: open its file, read the lines added, or go
    /// on with (or start) a scan.
    pub fn next_step(&mut self, now: Instant) -> Option<Step> {
        if !self.has_work(now) {
            return None;
        }
        let file = match &self.file {
            FileState::Refused => return None,
            FileState::Unopened | FileState::Absent(_) => return Some(Step::Open),
            FileState::Open(file) => file.clone(),
        };
        if self.tail_due(now) {
            self.looked = Some(now);
            // Every address that a line added may name: those waiting and
            // missing, those of the scan under way (the lines added are
            // later than any it reads), and the code already named (new
            // code over it replaces it).
            let mut addresses: BTreeMap<u64, ()> = self
                .waiting
                .keys()
                .chain(self.missing.keys())
                .chain(self.names.keys())
                .map(|&address| (address, ()))
                .collect();
            if let Some(scan) = &self.scan {
                addresses.extend(scan.addresses.keys().map(|&address| (address, ())));
            }
            return Some(Step::Tail {
                file,
                from: self.read,
                addresses,
            });
        }
        if self.scan.is_none() {
            self.start_scan(now);
        }
        let scan = self.scan.as_ref()?;
        Some(Step::Scan {
            file,
            from: scan.at,
            until: scan.until,
            addresses: scan.addresses.clone(),
        })
    }

    /// Starts a scan of the lines read before the addresses waiting were
    /// asked for.
    fn start_scan(&mut self, now: Instant) {
        if !self.scan_due(now) {
            return;
        }
        if !self.has_lines {
            let waiting = std::mem::take(&mut self.waiting);
            for address in waiting.into_keys() {
                self.note_missing(address);
            }
            return;
        }
        let until = self.waiting.values().copied().max().unwrap_or(0);
        let addresses: BTreeMap<u64, ()> = self
            .waiting
            .iter()
            .filter(|&(_, &from)| from > 0)
            .map(|(&address, _)| (address, ()))
            .collect();
        for address in addresses.keys() {
            self.waiting.remove(address);
        }
        self.scan = Some(Scan {
            at: 0,
            until,
            addresses,
            found: BTreeMap::new(),
        });
    }

    /// Takes in the outcome of opening its file.
    pub fn opened(&mut self, opened: Result<(NamesFile, u64), Refused>, now: Instant) {
        match opened {
            Ok((file, size)) => {
                self.file = FileState::Open(file);
                self.size = size;
                self.read = 0;
                self.looked = None;
            }
            Err(Refused::Missing) => self.file = FileState::Absent(now),
            Err(_) => self.refuse(),
        }
    }

    /// Stops reading its file.
    pub fn refuse(&mut self) {
        self.file = FileState::Refused;
        self.waiting.clear();
        self.missing.clear();
        self.scan = None;
    }

    /// Takes in the lines added since the last read.
    pub fn tail_read(&mut self, read: Read, now: Instant) {
        self.size = read.size;
        self.read += read.consumed;
        self.has_lines |= read.lines > 0;
        self.missing_asked = false;
        for (address, found) in read.found {
            let asked = self.waiting.remove(&address).is_some()
                | self.missing.remove(&address).is_some()
                | self
                    .scan
                    .as_mut()
                    .is_some_and(|scan| scan.addresses.remove(&address).is_some());
            if asked || self.names.contains_key(&address) {
                self.hold(found, now);
            }
        }
        // Addresses asked for before anything was read were matched
        // against every line once the end is read.
        if self.read >= self.size.min(MAX_FILE_BYTES) {
            let unread: Vec<u64> = self
                .waiting
                .iter()
                .filter(|&(_, &from)| from == 0)
                .map(|(&address, _)| address)
                .collect();
            for address in unread {
                self.waiting.remove(&address);
                self.note_missing(address);
            }
        }
    }

    /// Takes in a piece of a scan.
    pub fn scanned(&mut self, read: Read, now: Instant) {
        let Some(scan) = &mut self.scan else {
            return;
        };
        for (address, found) in read.found {
            let later = scan
                .found
                .get(&address)
                .is_none_or(|earlier| earlier.offset <= found.offset);
            if later && scan.addresses.contains_key(&address) {
                scan.found.insert(address, found);
            }
        }
        scan.at = (scan.at + read.consumed.max(1)).min(scan.until);
        if scan.at < scan.until {
            return;
        }
        let Some(scan) = self.scan.take() else {
            return;
        };
        self.last_scan = Some(now);
        for address in scan.addresses.keys() {
            match scan.found.get(address) {
                Some(found) => self.hold(found.clone(), now),
                None => self.note_missing(*address),
            }
        }
    }

    fn note_missing(&mut self, address: u64) {
        if self.missing.len() < MAX_ADDRESSES {
            self.missing.insert(address, ());
        }
    }

    /// Holds `found` as the name of its code, in place of the names of
    /// code it overlaps that earlier lines gave.
    fn hold(&mut self, found: Found, now: Instant) {
        let overlapping: Vec<u64> = self
            .names
            .range(..found.end)
            .rev()
            .take_while(|(_, named)| named.end > found.start)
            .map(|(&start, _)| start)
            .collect();
        if overlapping
            .iter()
            .any(|start| self.names[start].offset > found.offset)
        {
            return;
        }
        for start in overlapping {
            self.evict(start);
        }
        self.name_bytes += found.name.len() as u64;
        self.names.insert(
            found.start,
            Named {
                end: found.end,
                name: Arc::from(found.name),
                offset: found.offset,
                used: now,
            },
        );
    }

    /// When each held name was last used, by the start of its code.
    pub fn name_uses(&self) -> impl Iterator<Item = (Instant, u64)> + '_ {
        self.names.iter().map(|(&start, named)| (named.used, start))
    }

    /// Lets go of the name of the code at `start`; the bytes it held.
    pub fn evict(&mut self, start: u64) -> u64 {
        match self.names.remove(&start) {
            Some(named) => {
                self.name_bytes -= named.name.len() as u64;
                named.name.len() as u64 + NAME_OVERHEAD
            }
            None => 0,
        }
    }
}

/// The status report's name for why a file was not read.
pub(super) fn refused_reason(refused: &Refused) -> &'static str {
    match refused {
        Refused::Missing => "none",
        Refused::NotRegular(_) => "not_a_regular_file",
        Refused::Link => "symbolic_link",
        Refused::NotTheProcesssUser { .. } => "other_users_file",
        Refused::Replaced => "replaced",
        Refused::Filesystem(_) => "remote_filesystem",
        Refused::Io(_) => "unreadable",
    }
}
