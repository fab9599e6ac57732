//! Where a target process's allocator functions are: those of `malloc`'s
//! family (libc's, or jemalloc's, mimalloc's, tcmalloc's when linked or
//! preloaded, or those a static binary carries) in the files the process
//! has mapped executable, each as the file offset a uprobe attaches to
//! (a [`ProbeSite`], which the kernel layer attaches). Not to be confused
//! with `allocs/` (allocation profiling, which asks for them) or with the
//! tuning of the daemon's own allocator.
//!
//! Owns the reading of the process's mappings and of those files' symbol
//! tables; it must not attach anything.

use std::{collections::BTreeSet, io::Read as _, path::PathBuf};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, SymbolKind};
use procfs::process::{MMPermissions, MMapPath, Process};
use profiler_common::allocs::Function;

use crate::kernel::allocs::ProbeSite;

#[derive(Debug, thiserror::Error)]
pub enum AllocatorError {
    #[error("no process {0} (it may have exited)")]
    NoProcess(u32),
    #[error("cannot read the mappings of process {pid}: {reason}")]
    Maps { pid: u32, reason: String },
    #[error(
        "process {pid} ({command}) has no known allocator: none of the files it maps defines \
         `malloc` (a static binary without symbols, or one with its own allocator such as Go's, \
         cannot be profiled for allocations)"
    )]
    NoAllocator { pid: u32, command: String },
}

/// The most of a binary read to find its allocator functions.
const MAX_BINARY_BYTES: u64 = 1 << 30;

/// The allocator functions of process `pid`, in the order of its mappings
/// and of [`Function::SYMBOLS`]; one site per distinct address of a file
/// (glibc's `memalign` and `aligned_alloc` are one function).
pub fn find(pid: u32) -> Result<Vec<ProbeSite>, AllocatorError> {
    let process = Process::new(pid as i32).map_err(|_| AllocatorError::NoProcess(pid))?;
    let maps = process.maps().map_err(|err| match err {
        procfs::ProcError::NotFound(_) => AllocatorError::NoProcess(pid),
        err => AllocatorError::Maps {
            pid,
            reason: err.to_string(),
        },
    })?;
    let mut seen = BTreeSet::new();
    let mut sites = Vec::new();
    for map in maps {
        let MMapPath::Path(path) = &map.pathname else {
            continue;
        };
        if !map.perms.contains(MMPermissions::EXECUTE) || !seen.insert((map.dev, map.inode)) {
            continue;
        }
        let shown = path.to_string_lossy().into_owned();
        let file = PathBuf::from(format!("/proc/{pid}/root{shown}"));
        // Exactly the mapped file, opened safely (the process's user
        // chooses what lies at its path), and at most so much of it. A
        // file that cannot be read or parsed has no allocator we can find;
        // the process's others may.
        let identity = (super::mappings::device_number(map.dev), map.inode);
        let Ok(opened) = super::process_files::open_mapped(pid, map.address, path, identity) else {
            continue;
        };
        let mut data = Vec::new();
        if opened
            .take(MAX_BINARY_BYTES)
            .read_to_end(&mut data)
            .is_err()
        {
            continue;
        }
        sites.extend(sites_in(&data, &file, &shown));
    }
    if !sites.iter().any(|site| site.symbol == "malloc") {
        let command = process
            .stat()
            .map(|stat| stat.comm)
            .unwrap_or_else(|_| "?".to_owned());
        return Err(AllocatorError::NoAllocator { pid, command });
    }
    Ok(sites)
}

/// The allocator functions an ELF file defines (dynamic symbols first,
/// then the symbol table of a static binary).
fn sites_in(data: &[u8], file: &std::path::Path, path: &str) -> Vec<ProbeSite> {
    let Ok(elf) = object::File::parse(data) else {
        return Vec::new();
    };
    let mut offsets = BTreeSet::new();
    let mut sites = Vec::new();
    for &(symbol, function) in &Function::SYMBOLS {
        let address = elf
            .dynamic_symbols()
            .chain(elf.symbols())
            .find(|found| {
                found.is_definition()
                    && found.kind() == SymbolKind::Text
                    && found.name() == Ok(symbol)
            })
            .map(|found| found.address());
        let Some(offset) = address.and_then(|address| file_offset(&elf, address)) else {
            continue;
        };
        let offset = probe_offset(data, offset);
        if offsets.insert(offset) {
            sites.push(ProbeSite {
                file: file.to_owned(),
                path: path.to_owned(),
                symbol,
                function,
                offset,
            });
        }
    }
    sites
}

/// Where the probe of the function at `offset` in the file goes: its first
/// instruction, unless that is `test %rdi,%rdi` followed by a conditional
/// jump (glibc's `free`): the kernel cannot emulate the test, and
/// single-stepping it out of line costs several microseconds a call, so
/// the probe goes on the jump, which the kernel emulates. The test only
/// reads the first argument, so the probe sees it there all the same.
fn probe_offset(data: &[u8], offset: u64) -> u64 {
    let Some(code) = usize::try_from(offset)
        .ok()
        .and_then(|at| data.get(at..at + 5))
    else {
        return offset;
    };
    let test_rdi = code[..3] == [0x48, 0x85, 0xff];
    let jump =
        matches!(code[3], 0x70..=0x7f) || (code[3] == 0x0f && matches!(code[4], 0x80..=0x8f));
    if test_rdi && jump { offset + 3 } else { offset }
}

/// Where the code at virtual `address` is in the file.
fn file_offset(elf: &object::File<'_>, address: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let (start, size) = (segment.address(), segment.size());
        let (file_start, file_size) = segment.file_range();
        (start <= address && address < start + size && address - start < file_size)
            .then(|| file_start + (address - start))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_libc_malloc_and_free_at_distinct_offsets() {
        let sites = find(std::process::id()).expect("the test binary uses libc");
        let malloc = sites.iter().find(|site| site.symbol == "malloc").unwrap();
        let free = sites.iter().find(|site| site.symbol == "free").unwrap();
        assert_eq!(malloc.function, Function::Malloc);
        assert_eq!(free.function, Function::Free);
        assert_eq!(malloc.file, free.file);
        assert_ne!(malloc.offset, free.offset);
        assert!(malloc.path.contains("libc"), "{malloc:?}");
        let offsets: BTreeSet<_> = sites
            .iter()
            .map(|site| (site.file.clone(), site.offset))
            .collect();
        assert_eq!(
            offsets.len(),
            sites.len(),
            "one site per address: {sites:?}"
        );
    }

    #[test]
    fn a_leading_test_of_the_first_argument_is_stepped_over() {
        // test %rdi,%rdi; je +0xbf; push %rbp (glibc 2.36's free)
        let free = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55];
        assert_eq!(probe_offset(&free, 0), 3);
        let short_jump = [0x90, 0x48, 0x85, 0xff, 0x74, 0x10];
        assert_eq!(probe_offset(&short_jump, 1), 4);
        // push %r12; push %rbp (malloc): left as it is.
        let malloc = [0x41, 0x54, 0x55, 0x53, 0x48, 0x89];
        assert_eq!(probe_offset(&malloc, 0), 0);
        // A test not followed by a jump, and the end of the file.
        assert_eq!(probe_offset(&[0x48, 0x85, 0xff, 0x48, 0x89], 0), 0);
        assert_eq!(probe_offset(&free[..4], 0), 0);
    }

    #[test]
    fn a_missing_process_is_named() {
        let err = find(u32::MAX - 1).unwrap_err();
        assert!(matches!(err, AllocatorError::NoProcess(_)), "{err}");
    }
}
