//! Design 2 of user-stack unwinding, kept as a measured prototype: the
//! user stack walked in the kernel with rows compiled from the binaries'
//! `.eh_frame` (the OpenTelemetry profiler's design), aggregated in the
//! kernel. Only the benchmark (and the prototype's test) loads
//! `sample_unwind_tables` and fills its maps; the daemon unwinds stack
//! copies instead (BENCHMARKS.md says why). It must stay within one
//! program: no tail calls, bounded loops only.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference, as in the sampler: copies only \
              cost BPF stack space"
)]

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{map, perf_event},
    maps::{Array, HashMap, PerCpuArray},
    programs::PerfEventContext,
};
use profiler_common::{
    StackTrace,
    unwind_table::{Key, MAX_FRAMES, MAX_MAPPINGS, Process, Row, SEARCH_STEPS, cfa},
};

use profiler_ebpf::{
    registers::{UserRegisters, interrupted_user_mode, user_registers},
    stacks::{store_stack, store_walked},
};

/// Sizes are placeholders: the benchmark sizes the maps at load time.
#[map]
static UNWIND_PROCESSES: HashMap<u32, Process> = HashMap::with_max_entries(64, 0);
#[map]
static UNWIND_ROWS: Array<Row> = Array::with_max_entries(1, 0);
#[map]
static UNWIND_STACKS: HashMap<u64, StackTrace> = HashMap::with_max_entries(1024, 0);
#[map]
static UNWIND_COUNTS: HashMap<Key, u64> = HashMap::with_max_entries(1024, 0);
/// Per-CPU room for the user (0) and kernel (1) stacks.
#[map]
static UNWIND_SCRATCH: PerCpuArray<StackTrace> = PerCpuArray::with_max_entries(2, 0);

#[perf_event]
pub fn sample_unwind_tables(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let pid = (pid_tgid >> 32) as u32;
    let Some(process) = UNWIND_PROCESSES.get_ptr(&pid) else {
        return 0;
    };
    let (Some(user), Some(kernel)) = (UNWIND_SCRATCH.get_ptr_mut(0), UNWIND_SCRATCH.get_ptr_mut(1))
    else {
        return 0;
    };
    // SAFETY: live map entries; the scratch entries belong to this CPU and
    // this run, the process entry is only replaced between runs.
    let (process, user, kernel) = unsafe { (&*process, &mut *user, &mut *kernel) };
    let (len, ended) = walk(&ctx, process, user);
    let user_stack = store_walked(&UNWIND_STACKS, user, len, true).map_or(0, |stored| stored.key);
    let kernel_stack = if interrupted_user_mode(&ctx) {
        0
    } else {
        store_stack(&ctx, &UNWIND_STACKS, kernel, false).map_or(0, |stored| stored.key)
    };
    let key = Key {
        pid,
        tid: pid_tgid as u32,
        user_stack,
        kernel_stack,
        ended: u32::from(ended),
        _pad: 0,
    };
    if let Some(count) = UNWIND_COUNTS.get_ptr_mut(&key) {
        // SAFETY: a live entry, written only by its own thread's ticks.
        unsafe { *count += 1 };
    } else {
        let _ = UNWIND_COUNTS.insert(&key, &1, BPF_NOEXIST.into());
    }
    0
}

/// Walks the user stack into `stack`: its length and how the walk ended.
/// The frames past it are 0, as `store_walked` needs (those past
/// [`MAX_FRAMES`] are never written).
#[inline(always)]
fn walk(ctx: &PerfEventContext, process: &Process, stack: &mut StackTrace) -> (usize, u8) {
    stack.ips[..MAX_FRAMES].fill(0);
    let UserRegisters {
        mut ip,
        mut sp,
        mut bp,
    } = user_registers(ctx);
    let mut len = 0;
    let mut ended = cfa::TOO_DEEP;
    for frame in 0..MAX_FRAMES {
        if ip == 0 {
            ended = cfa::BAD_FRAME;
            break;
        }
        stack.ips[frame] = ip;
        len = frame + 1;
        // A return address points past its call instruction.
        let lookup = if frame == 0 { ip } else { ip - 1 };
        let Some(row) = find_row(process, lookup) else {
            ended = cfa::NO_INFO;
            break;
        };
        let frame_address = match row.cfa {
            cfa::SP => sp.wrapping_add_signed(i64::from(row.cfa_offset)),
            cfa::BP => bp.wrapping_add_signed(i64::from(row.cfa_offset)),
            cfa::PLT => sp + if ip & 15 >= 11 { 16 } else { 8 },
            other => {
                ended = other;
                break;
            }
        };
        // SAFETY: bpf_probe_read_user fails rather than faulting.
        let Ok(return_address) =
            (unsafe { bpf_probe_read_user((frame_address - 8) as *const u64) })
        else {
            ended = cfa::BAD_FRAME;
            break;
        };
        if row.bp_offset != 0 {
            let at = frame_address.wrapping_add_signed(i64::from(row.bp_offset));
            // SAFETY: as above.
            match unsafe { bpf_probe_read_user(at as *const u64) } {
                Ok(saved) => bp = saved,
                Err(_) => {
                    ended = cfa::BAD_FRAME;
                    break;
                }
            }
        }
        sp = frame_address;
        ip = return_address;
    }
    (len, ended)
}

/// The row covering `address` in the process's mappings, if any.
#[inline(always)]
fn find_row(process: &Process, address: u64) -> Option<Row> {
    let mut found = None;
    for i in 0..MAX_MAPPINGS {
        if i as u32 >= process.count {
            break;
        }
        let mapping = &process.mappings[i];
        if address >= mapping.start && address < mapping.end {
            found = Some(mapping);
            break;
        }
    }
    let mapping = found?;
    let target = address - mapping.bias;
    let mut first = mapping.first_row;
    let mut remaining = mapping.rows;
    if remaining == 0 {
        return None;
    }
    // The last row whose pc is at or below the target.
    for _ in 0..SEARCH_STEPS {
        if remaining <= 1 {
            break;
        }
        let half = remaining / 2;
        let middle = first + half;
        if UNWIND_ROWS.get(middle)?.pc <= target {
            first = middle;
        }
        remaining -= half;
    }
    let row = *UNWIND_ROWS.get(first)?;
    (row.pc <= target).then_some(row)
}
