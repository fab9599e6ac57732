//! `.eh_frame` compiled into the rows the design-2 prototype walks in the
//! kernel (`kernel::unwind_tables`): one row per change of the rules that
//! find the caller's frame, sorted by address, with a row saying "no
//! information" where no FDE covers the code; and a process's code
//! mappings registered with the prototype, their binaries' rows written
//! once. Only with the `unwind-tables-prototype` feature.
//!
//! Owns only that compilation; the daemon's own unwinding (`unwinder`)
//! reads the sections with framehop and never needs these rows.

use std::{fs::File, sync::Arc};

use anyhow::{Context as _, Result};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection as _, X86_64,
};
use procfs::process::{MMPermissions, MMapPath, Process};
use profiler_common::unwind_table::{Mapping, Row, cfa};

use super::UnwindSections;
use crate::kernel::unwind_tables::UnwindTablePrototype;

/// Compiles the unwind rows of every binary `pid` maps (once per binary,
/// for the whole prototype) and lets the prototype walk its stacks.
pub fn add_process(prototype: &mut UnwindTablePrototype, pid: u32) -> Result<()> {
    let maps = Process::new(pid as i32)
        .and_then(|process| process.maps())
        .with_context(|| format!("reading the mappings of process {pid}"))?;
    let mut mappings = Vec::new();
    for map in maps {
        if !map.perms.contains(MMPermissions::EXECUTE) {
            continue;
        }
        let (start, end) = map.address;
        let sections = match &map.pathname {
            MMapPath::Path(_) => {
                let path = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
                let file = File::open(&path).with_context(|| format!("opening {path}"))?;
                Arc::new(UnwindSections::read(file))
            }
            MMapPath::Vdso => match UnwindSections::vdso() {
                Some(vdso) => vdso,
                None => continue,
            },
            _ => continue,
        };
        let Some(bias) = sections.load_bias(start, map.offset) else {
            continue;
        };
        let key = (
            (u64::from(map.dev.0 as u32) << 32) | u64::from(map.dev.1 as u32),
            map.inode,
        );
        let (first_row, rows) = prototype.binary_rows(key, || compile(&sections))?;
        mappings.push(Mapping {
            start,
            end,
            bias,
            first_row,
            rows,
        });
    }
    prototype.set_process(pid, &mappings)
}

/// The rows of a binary's `.eh_frame` (none when it has none).
pub fn compile(sections: &UnwindSections) -> Vec<Row> {
    let Some((address, data)) = sections.eh_frame() else {
        return Vec::new();
    };
    let mut rows = fde_rows(address, data);
    rows.sort_by_key(|row| (row.pc, row.cfa == cfa::NO_INFO));
    // One row per address (a function's first row wins over the end marker
    // of the one before it), and none that repeats its predecessor's rules.
    rows.dedup_by_key(|row| row.pc);
    rows.dedup_by(|later, earlier| same_rules(later, earlier));
    rows
}

fn same_rules(a: &Row, b: &Row) -> bool {
    (a.cfa, a.cfa_offset, a.bp_offset) == (b.cfa, b.cfa_offset, b.bp_offset)
}

fn fde_rows(address: u64, data: &[u8]) -> Vec<Row> {
    let eh_frame = EhFrame::new(data, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(address);
    let mut context = Box::new(UnwindContext::new());
    let mut rows = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    // A damaged entry ends the section: what was read so far stays.
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) =
            partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
        else {
            continue;
        };
        let Ok(mut table) = fde.rows(&eh_frame, &bases, &mut context) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            rows.push(rule_row(
                row.start_address(),
                row.cfa(),
                row.register(X86_64::RA),
                row.register(X86_64::RBP),
            ));
        }
        rows.push(Row {
            pc: fde.end_address(),
            cfa: cfa::NO_INFO,
            ..Row::default()
        });
    }
    rows
}

fn rule_row<T: gimli::ReaderOffset>(
    pc: u64,
    frame: &CfaRule<T>,
    return_address: Option<RegisterRule<T>>,
    bp: Option<RegisterRule<T>>,
) -> Row {
    let mut row = Row {
        pc,
        cfa: cfa::NO_INFO,
        ..Row::default()
    };
    match return_address {
        Some(RegisterRule::Undefined) => {
            row.cfa = cfa::END;
            return row;
        }
        // x86-64: the return address is just below the CFA.
        None | Some(RegisterRule::Offset(-8)) => {}
        Some(_) => return row,
    }
    match frame {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(offset) = i32::try_from(*offset) else {
                return row;
            };
            row.cfa_offset = offset;
            row.cfa = match *register {
                X86_64::RSP => cfa::SP,
                X86_64::RBP => cfa::BP,
                _ => return row,
            };
        }
        // The only expressions compilers emit for x86-64 code are the PLT's.
        CfaRule::Expression(_) => row.cfa = cfa::PLT,
    }
    match bp {
        None | Some(RegisterRule::SameValue) => {}
        Some(RegisterRule::Offset(offset)) => match i16::try_from(offset) {
            Ok(offset) if offset != 0 => row.bp_offset = offset,
            _ => row.cfa = cfa::NO_INFO,
        },
        Some(_) => row.cfa = cfa::NO_INFO,
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_compiles_to_sorted_rows_that_end_at_start() {
        let Some(libc) = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
        else {
            panic!("no libc.so.6 where Debian keeps it");
        };
        let sections = UnwindSections::read(std::fs::File::open(libc).unwrap());
        let rows = compile(&sections);
        assert!(rows.len() > 1000, "{} rows", rows.len());
        assert!(rows.windows(2).all(|pair| pair[0].pc < pair[1].pc));
        let walkable = rows
            .iter()
            .filter(|row| matches!(row.cfa, cfa::SP | cfa::BP))
            .count();
        assert!(
            walkable * 10 > rows.len() * 8,
            "{walkable} of {}",
            rows.len()
        );
        assert!(rows.iter().any(|row| row.cfa == cfa::BP));
        assert!(rows.iter().any(|row| row.bp_offset == -16));
    }
}
