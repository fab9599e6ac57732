//! Reading and emptying a BPF hash map in a few system calls
//! (`BPF_MAP_LOOKUP_AND_DELETE_BATCH`, Linux 5.6+), which aya does not
//! offer: draining entry by entry costs three system calls per entry.
//!
//! This module owns the one raw `bpf(2)` call of the daemon and nothing
//! else; callers fall back on aya's per-entry iteration when the kernel
//! refuses it.

use std::{
    io,
    mem::size_of,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{
    Pod,
    maps::{HashMap, IterableMap as _, MapData},
};

/// `BPF_MAP_LOOKUP_AND_DELETE_BATCH` from linux/bpf.h.
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Entries read per system call. A hash bucket never holds this many, so
/// the kernel never answers ENOSPC.
const CHUNK: usize = 512;

/// Reads and deletes every entry of `map`, appending them to `entries`.
/// Fails (having read nothing) when the kernel lacks batch operations; may
/// fail partway on other errors, keeping what it read.
pub fn take_all<K: Pod, V: Pod>(
    map: &mut HashMap<MapData, K, V>,
    entries: &mut Vec<(K, V)>,
) -> io::Result<()> {
    let fd = map.map().fd().as_fd().as_raw_fd();
    let mut keys: Vec<K> = Vec::with_capacity(CHUNK);
    let mut values: Vec<V> = Vec::with_capacity(CHUNK);
    // The kernel's opaque position in the map, a bucket number for hash maps.
    let mut position = [0_u64; 1];
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { position.as_ptr() as u64 },
            out_batch: position.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: fd as u32,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` points at buffers with room for CHUNK keys and
        // values of the map's key and value types (the aya map checked the
        // sizes when it was made), and at an 8-byte batch token; the kernel
        // writes at most `count` entries and updates `count`.
        let result = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_AND_DELETE_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>(),
            )
        };
        let error = (result < 0).then(io::Error::last_os_error);
        let filled = (attr.count as usize).min(CHUNK);
        // SAFETY: the kernel initialized the first `filled` keys and values.
        unsafe {
            keys.set_len(filled);
            values.set_len(filled);
        }
        entries.extend(keys.drain(..).zip(values.drain(..)));
        match error {
            None => first = false,
            // The end of the map: this call's entries were the last.
            Some(error) if error.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Some(error) => return Err(error),
        }
    }
}
