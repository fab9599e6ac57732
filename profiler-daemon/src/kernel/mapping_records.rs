//! Memory maps as the kernel makes them: a side-band perf event on every
//! CPU (a software "dummy" event that counts nothing) whose ring buffer
//! receives a `PERF_RECORD_MMAP2` for every executable mapping any process
//! makes, and a `PERF_RECORD_COMM` flagged as an exec for every exec, the
//! moment they happen. A program that lives a millisecond is gone before
//! any pass can read `/proc/PID/maps`; its records are still here. The
//! route `perf record` and samply take for the same reason.
//!
//! Owns the perf events and their rings (each `(1 + 2^n)` pages mapped
//! read-write, as the kernel wants for a reader that says how far it read)
//! and the parsing of their records; it must not decide what a record
//! means for a process's memory map (the process table does).

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr::NonNull,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use perf_event_open_sys::bindings as perf;

/// Bytes of the rings, shared among the CPUs (each gets a power of two of
/// pages, between [`MIN_PAGES`] and [`MAX_PAGES`]): a storm of a thousand
/// execs a second writes about 1 MB a second, read at every unwinding
/// pass (a few each second at the least).
const RINGS_BYTES: usize = 1 << 20;
const MIN_PAGES: usize = 8;
const MAX_PAGES: usize = 64;

/// One record, as the kernel wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingRecord {
    /// Process `pid` mapped code: `start..end` of the file `path` (or a
    /// name in brackets, `[vdso]`; `//anon` for anonymous code) from
    /// `file_offset` on, the file being device `device`, inode `inode`.
    Mapped {
        pid: u32,
        time_ns: u64,
        start: u64,
        end: u64,
        file_offset: u64,
        device: u64,
        inode: u64,
        path: Arc<str>,
    },
    /// Process `pid` exec'd the program `command` (its comm): the
    /// mappings after this are the new program's.
    Exec {
        pid: u32,
        time_ns: u64,
        command: Arc<str>,
    },
}

impl MappingRecord {
    pub fn time_ns(&self) -> u64 {
        match self {
            Self::Mapped { time_ns, .. } | Self::Exec { time_ns, .. } => *time_ns,
        }
    }
}

/// Why the records cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum MappingRecordsError {
    #[error(
        "perf_event_open of the memory-map records on CPU {cpu} failed: {source}; programs \
         that exit within ~25 ms show as [unmapped] (the daemon needs CAP_PERFMON or root)"
    )]
    Open { cpu: u32, source: std::io::Error },
    #[error("mapping the ring of memory-map records on CPU {cpu} failed: {source}")]
    Map { cpu: u32, source: std::io::Error },
}

/// The side-band events of every CPU and their rings.
pub struct MappingRecords {
    rings: Vec<Ring>,
    /// Records the kernel dropped because a ring was full.
    lost: u64,
    /// A record crossing a ring's end, put back together.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for MappingRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappingRecords")
            .field("rings", &self.rings.len())
            .field("lost", &self.lost)
            .finish()
    }
}

impl MappingRecords {
    /// Opens a side-band event on each of `cpus`, its ring mapped.
    pub fn open(cpus: &[u32]) -> Result<Self, MappingRecordsError> {
        let pages = pages_per_cpu(cpus.len());
        let rings = cpus
            .iter()
            .map(|&cpu| Ring::open(cpu, pages))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rings,
            lost: 0,
            scratch: Vec::new(),
        })
    }

    /// Bytes of the rings (kernel memory mapped into the daemon).
    pub fn bytes(&self) -> u64 {
        self.rings.iter().map(|ring| ring.mapped as u64).sum()
    }

    /// Records the kernel dropped, its rings full, since the start.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Appends every record written since the last read, in the order the
    /// kernel wrote them (the rings of all CPUs merged by time).
    pub fn read(&mut self, records: &mut Vec<MappingRecord>) {
        let first = records.len();
        for ring in &mut self.rings {
            self.lost += ring.read(&mut self.scratch, records);
        }
        records[first..].sort_by_key(MappingRecord::time_ns);
    }

    /// The size [`MappingRecords::bytes`] will have on `cpus` CPUs, for
    /// the memory budget before they are opened.
    pub fn bytes_for(cpus: usize) -> u64 {
        (cpus * (1 + pages_per_cpu(cpus)) * page_size()) as u64
    }
}

fn page_size() -> usize {
    rustix::param::page_size()
}

/// Data pages of each CPU's ring: a power of two.
fn pages_per_cpu(cpus: usize) -> usize {
    (RINGS_BYTES / page_size() / cpus.max(1))
        .clamp(MIN_PAGES, MAX_PAGES)
        .next_power_of_two()
        .min(MAX_PAGES)
}

/// One CPU's event and its mapped ring.
struct Ring {
    /// The event; closed after the mapping is undone (field order).
    _event: OwnedFd,
    /// The first page (the kernel's `perf_event_mmap_page`), then the data.
    base: NonNull<u8>,
    mapped: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value alone; the kernel writes into
// it concurrently whatever thread reads it, through the atomics below.
unsafe impl Send for Ring {}

impl Ring {
    fn open(cpu: u32, pages: usize) -> Result<Self, MappingRecordsError> {
        let mut attr = perf::perf_event_attr {
            type_: perf::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<perf::perf_event_attr>() as u32,
            config: u64::from(perf::PERF_COUNT_SW_DUMMY),
            sample_type: u64::from(perf::PERF_SAMPLE_TIME),
            ..Default::default()
        };
        // `mmap` turns the records on, `mmap2` gives them the file's device
        // and inode (code mappings only: no `mmap_data`).
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_sample_id_all(1);
        // Nobody polls the rings: no wake-ups to send.
        attr.set_watermark(1);
        attr.__bindgen_anon_2.wakeup_watermark = u32::MAX;
        // SAFETY: `attr` is a whole, zero-initialised perf_event_attr of the
        // size it says; it asks for records of every process on one CPU.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &mut attr,
                -1,
                cpu as i32,
                -1,
                libc::c_ulong::from(perf::PERF_FLAG_FD_CLOEXEC),
            )
        };
        if fd < 0 {
            return Err(MappingRecordsError::Open {
                cpu,
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        let mapped = (1 + pages) * page_size();
        // SAFETY: a new shared mapping of the event's ring, of the size the
        // kernel requires (1 + 2^n pages); nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                event.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(MappingRecordsError::Map {
                cpu,
                source: std::io::Error::last_os_error(),
            });
        }
        let base = NonNull::new(base.cast::<u8>()).expect("mmap does not map page 0");
        // SAFETY: the first page of the mapping is the kernel's
        // perf_event_mmap_page; the data's place and size are set once.
        let (data_offset, data_size) = unsafe {
            let page = base.cast::<perf::perf_event_mmap_page>().as_ptr();
            ((*page).data_offset as usize, (*page).data_size as usize)
        };
        let (data_offset, data_size) = match (data_offset, data_size) {
            (0, _) | (_, 0) => (page_size(), pages * page_size()),
            found => found,
        };
        Ok(Self {
            _event: event,
            base,
            mapped,
            data_offset,
            data_size,
        })
    }

    /// The head (written by the kernel) and tail (by the reader).
    fn positions(&self) -> (&AtomicU64, &AtomicU64) {
        let page = self.base.cast::<perf::perf_event_mmap_page>().as_ptr();
        // SAFETY: both fields are aligned u64 in the mapped first page, which
        // lives as long as `self`; the kernel and this reader share them only
        // through atomic accesses (acquire the head, release the tail).
        unsafe {
            (
                AtomicU64::from_ptr(&raw mut (*page).data_head),
                AtomicU64::from_ptr(&raw mut (*page).data_tail),
            )
        }
    }

    /// Parses the records written since the last read into `records`;
    /// returns the number the kernel says it lost.
    fn read(&mut self, scratch: &mut Vec<u8>, records: &mut Vec<MappingRecord>) -> u64 {
        let (head, tail) = self.positions();
        let end = head.load(Ordering::Acquire);
        let mut at = tail.load(Ordering::Relaxed);
        // SAFETY: the data area lies within the mapping, which lives as long
        // as `self`; the kernel writes only past `end` until the tail moves.
        let data = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset), self.data_size)
        };
        let mut lost = 0;
        while end.saturating_sub(at) >= HEADER_BYTES as u64 {
            let record = wrapped(data, at, HEADER_BYTES, scratch);
            let kind = u32::from_ne_bytes(record[0..4].try_into().expect("4 bytes"));
            let misc = u16::from_ne_bytes(record[4..6].try_into().expect("2 bytes"));
            let size = u16::from_ne_bytes(record[6..8].try_into().expect("2 bytes")) as usize;
            if size < HEADER_BYTES || end - at < size as u64 {
                break;
            }
            let record = wrapped(data, at, size, scratch);
            match parse(kind, misc, record) {
                Some(Parsed::Record(record)) => records.push(record),
                Some(Parsed::Lost(count)) => lost += count,
                None => {}
            }
            at += size as u64;
        }
        tail.store(at, Ordering::Release);
        lost
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, undone once; nothing refers
        // to it any more.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.mapped);
        }
    }
}

const HEADER_BYTES: usize = 8;

/// The `len` bytes at `at` of the ring `data` (wrapping at its end),
/// copied into `scratch` only when they wrap.
fn wrapped<'a>(data: &'a [u8], at: u64, len: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    let start = (at % data.len() as u64) as usize;
    if start + len <= data.len() {
        return &data[start..start + len];
    }
    scratch.clear();
    scratch.extend_from_slice(&data[start..]);
    scratch.extend_from_slice(&data[..len - (data.len() - start)]);
    scratch
}

enum Parsed {
    Record(MappingRecord),
    Lost(u64),
}

/// One record (its header included), with `sample_id_all` and
/// `PERF_SAMPLE_TIME`: its time is its last 8 bytes.
fn parse(kind: u32, misc: u16, record: &[u8]) -> Option<Parsed> {
    let u32_at = |at: usize| {
        record
            .get(at..at + 4)
            .map(|bytes| u32::from_ne_bytes(bytes.try_into().expect("4 bytes")))
    };
    let u64_at = |at: usize| {
        record
            .get(at..at + 8)
            .map(|bytes| u64::from_ne_bytes(bytes.try_into().expect("8 bytes")))
    };
    let time_ns = u64_at(record.len().checked_sub(8)?)?;
    let text_at = |at: usize| -> Option<Arc<str>> {
        let bytes = record.get(at..record.len() - 8)?;
        let text = bytes.split(|&byte| byte == 0).next()?;
        Some(String::from_utf8_lossy(text).into())
    };
    match kind {
        perf::PERF_RECORD_MMAP2 => {
            // A build id in place of the device and inode: not asked for.
            if u32::from(misc) & perf::PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                return None;
            }
            let (start, len) = (u64_at(16)?, u64_at(24)?);
            Some(Parsed::Record(MappingRecord::Mapped {
                pid: u32_at(8)?,
                time_ns,
                start,
                end: start.checked_add(len)?,
                file_offset: u64_at(32)?,
                device: rustix::fs::makedev(u32_at(40)?, u32_at(44)?),
                inode: u64_at(48)?,
                path: text_at(72)?,
            }))
        }
        perf::PERF_RECORD_COMM if u32::from(misc) & perf::PERF_RECORD_MISC_COMM_EXEC != 0 => {
            Some(Parsed::Record(MappingRecord::Exec {
                pid: u32_at(8)?,
                time_ns,
                command: text_at(16)?,
            }))
        }
        perf::PERF_RECORD_LOST => Some(Parsed::Lost(u64_at(16)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8], time_ns: u64) -> Vec<u8> {
        let size = HEADER_BYTES + body.len() + 8;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&misc.to_ne_bytes());
        bytes.extend_from_slice(&(size as u16).to_ne_bytes());
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(&time_ns.to_ne_bytes());
        bytes
    }

    #[test]
    fn an_mmap2_record_gives_the_mapping_and_its_file() {
        let mut body = Vec::new();
        for value in [42u32, 43] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        for value in [0x7f00_0000_1000u64, 0x2000, 0x1000] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        for value in [8u32, 1] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        for value in [1234u64, 0] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        for value in [5u32, 2] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        body.extend_from_slice(b"/usr/bin/true\0\0\0");
        let bytes = record(perf::PERF_RECORD_MMAP2, 0, &body, 99);
        let Some(Parsed::Record(parsed)) = parse(perf::PERF_RECORD_MMAP2, 0, &bytes) else {
            panic!("an mmap2 record parses");
        };
        assert_eq!(
            parsed,
            MappingRecord::Mapped {
                pid: 42,
                time_ns: 99,
                start: 0x7f00_0000_1000,
                end: 0x7f00_0000_3000,
                file_offset: 0x1000,
                device: rustix::fs::makedev(8, 1),
                inode: 1234,
                path: "/usr/bin/true".into(),
            }
        );
    }

    #[test]
    fn only_comm_records_of_an_exec_are_taken() {
        let mut body = Vec::new();
        for value in [7u32, 7] {
            body.extend_from_slice(&value.to_ne_bytes());
        }
        body.extend_from_slice(b"true\0\0\0\0");
        let exec = perf::PERF_RECORD_MISC_COMM_EXEC as u16;
        let bytes = record(perf::PERF_RECORD_COMM, exec, &body, 5);
        assert!(matches!(
            parse(perf::PERF_RECORD_COMM, exec, &bytes),
            Some(Parsed::Record(MappingRecord::Exec { pid: 7, time_ns: 5, ref command })) if &**command == "true"
        ));
        // A thread renamed (prctl): not an exec.
        assert!(parse(perf::PERF_RECORD_COMM, 0, &bytes).is_none());
    }

    #[test]
    fn a_record_across_the_ring_s_end_is_put_back_together() {
        let data: Vec<u8> = (0..16).collect();
        let mut scratch = Vec::new();
        assert_eq!(wrapped(&data, 4, 4, &mut scratch), &[4, 5, 6, 7]);
        assert_eq!(
            wrapped(&data, 30, 4, &mut scratch),
            &[14, 15, 0, 1],
            "position 30 of a 16-byte ring is 14"
        );
    }

    #[test]
    fn rings_share_a_megabyte_in_powers_of_two() {
        let pages = pages_per_cpu(2);
        assert!(pages.is_power_of_two() && (MIN_PAGES..=MAX_PAGES).contains(&pages));
        assert_eq!(pages_per_cpu(1024), MIN_PAGES);
    }
}
