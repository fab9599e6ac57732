//! Names of JIT-compiled code from `/tmp/perf-PID.map` files, the
//! convention of `node --perf-basic-prof`, the JVM's perf agents, .NET
//! (`DOTNET_PerfMapEnabled=1`), Julia and Python 3.12's `-X perf`: one
//! line per function, `START SIZE name` (start and size in hex).
//!
//! The file is read in the process's own mount namespace (through
//! `/proc/PID/root`, under the process's own pid in its pid namespace), so
//! a container's file is the one used, and read again as it grows. This
//! module owns the parsed entries; it must not read anything else of the
//! process.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{Read as _, Seek as _, SeekFrom},
    path::PathBuf,
    sync::Arc,
};

/// Largest perf map read (a runaway JIT must not fill the daemon).
const MAX_BYTES: u64 = 64 << 20;

/// A process's perf map, as read so far.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    /// Start → (end, name); a later line for the same start wins (code
    /// compiled again at the same address).
    entries: BTreeMap<u64, (u64, Arc<str>)>,
    /// Bytes parsed so far (whole lines only).
    parsed: u64,
}

impl PerfMap {
    /// The perf map of a live process, if it writes one.
    pub fn of_process(pid: u32) -> Option<Self> {
        let namespace_pid = namespace_pid(pid).unwrap_or(pid);
        let path = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{namespace_pid}.map"));
        if !path.is_file() {
            return None;
        }
        let mut map = Self {
            path,
            entries: BTreeMap::new(),
            parsed: 0,
        };
        map.refresh();
        Some(map)
    }

    /// Reads the lines added since the last read (nothing once the process
    /// is gone: what was read stays).
    pub fn refresh(&mut self) {
        let Ok(mut file) = File::open(&self.path) else {
            return;
        };
        let Ok(len) = file.metadata().map(|metadata| metadata.len()) else {
            return;
        };
        if len <= self.parsed || self.parsed >= MAX_BYTES {
            return;
        }
        if file.seek(SeekFrom::Start(self.parsed)).is_err() {
            return;
        }
        let mut text = String::new();
        let wanted = len.min(MAX_BYTES) - self.parsed;
        if file.take(wanted).read_to_string(&mut text).is_err() {
            return;
        }
        // Only whole lines: the writer may be in the middle of one.
        let Some(end) = text.rfind('\n') else {
            return;
        };
        self.parse(&text[..=end]);
        self.parsed += end as u64 + 1;
    }

    fn parse(&mut self, text: &str) {
        for line in text.lines() {
            let mut fields = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let parse = |hex: &str| u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (parse(start), parse(size)) else {
                continue;
            };
            self.entries.insert(
                start,
                (start.saturating_add(size), Arc::from(name.trim_end())),
            );
        }
    }

    /// The function at `address`, if the map names one.
    pub fn lookup(&self, address: u64) -> Option<Arc<str>> {
        let (_, (end, name)) = self.entries.range(..=address).next_back()?;
        (address < *end).then(|| name.clone())
    }
}

/// The process's pid in its own pid namespace (the last `NSpid` field).
fn namespace_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> PerfMap {
        let mut map = PerfMap {
            path: PathBuf::new(),
            entries: BTreeMap::new(),
            parsed: 0,
        };
        map.parse(text);
        map
    }

    #[test]
    fn names_addresses_inside_an_entry_only() {
        let map = map("7f0000001000 40 JS:*hot /a.js:1:1\n7f0000002000 10 LazyCompile:cold\n");
        assert_eq!(
            map.lookup(0x7f00_0000_1000).as_deref(),
            Some("JS:*hot /a.js:1:1")
        );
        assert_eq!(
            map.lookup(0x7f00_0000_103f).as_deref(),
            Some("JS:*hot /a.js:1:1")
        );
        assert_eq!(map.lookup(0x7f00_0000_1040), None);
        assert_eq!(
            map.lookup(0x7f00_0000_2008).as_deref(),
            Some("LazyCompile:cold")
        );
        assert_eq!(map.lookup(0x10), None);
    }

    #[test]
    fn later_code_at_the_same_address_wins_and_bad_lines_are_skipped() {
        let map = map("1000 10 old\nnonsense\n1000 zz bad\n1000 20 new\n");
        assert_eq!(map.lookup(0x1018).as_deref(), Some("new"));
        assert_eq!(map.entries.len(), 1);
    }

    #[test]
    fn reads_the_file_of_this_process_as_it_grows() {
        let pid = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&path, "1000 10 first\n2000 1").unwrap();
        let mut map = PerfMap::of_process(pid).expect("the file is found");
        assert_eq!(map.lookup(0x1004).as_deref(), Some("first"));
        assert_eq!(map.lookup(0x2004), None, "half a line is not read");
        std::fs::write(&path, "1000 10 first\n2000 10 second\n").unwrap();
        map.refresh();
        assert_eq!(map.lookup(0x2004).as_deref(), Some("second"));
        std::fs::remove_file(&path).unwrap();
    }
}
