//! The user registers a sample's unwinding starts from (instruction,
//! stack and frame pointer): the tick's own when it interrupted user code,
//! else those the task saved when it entered the kernel; and whether a
//! tick interrupted user mode. x86-64 only: elsewhere they are unknown
//! (zeros), and the kernel walk finds nothing.
//!
//! Owns no map and no program; it only reads what it is given.

use aya_ebpf::programs::PerfEventContext;

/// The user registers unwinding starts from; zeros where unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegisters {
    /// The instruction pointer (x86-64: rip).
    pub ip: u64,
    /// The stack pointer (rsp).
    pub sp: u64,
    /// The frame pointer (rbp).
    pub bp: u64,
}

impl UserRegisters {
    /// Unknown: zeros.
    pub const UNKNOWN: Self = Self {
        ip: 0,
        sp: 0,
        bp: 0,
    };
}

/// The user registers unwinding starts from: the tick's own when it
/// interrupted user code, else those saved when the task entered the
/// kernel.
#[inline(always)]
pub fn user_registers(ctx: &PerfEventContext) -> UserRegisters {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        if interrupted_user_mode(ctx) {
            // SAFETY: the context of a perf_event program is a
            // bpf_perf_event_data, whose registers programs may read.
            return unsafe {
                let regs = &(*ctx.ctx).regs;
                UserRegisters {
                    ip: regs.rip,
                    sp: regs.rsp,
                    bp: regs.rbp,
                }
            };
        }
        saved_user_registers()
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        let _ = ctx;
        UserRegisters::UNKNOWN
    }
}

/// The user registers the current task saved when it entered the kernel.
#[inline(always)]
pub fn saved_user_registers() -> UserRegisters {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        use aya_ebpf::helpers::generated::{bpf_get_current_task_btf, bpf_task_pt_regs};
        // SAFETY: helpers that return the current task and its saved user
        // registers (the task is current, so both stay valid).
        let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
        registers_at(regs)
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        UserRegisters::UNKNOWN
    }
}

/// The registers in the `struct pt_regs` at `regs` (a kernel address, from
/// `bpf_task_pt_regs` or a probe's context).
#[inline(always)]
pub fn registers_at(regs: u64) -> UserRegisters {
    if regs == 0 {
        return UserRegisters::UNKNOWN;
    }
    #[cfg(bpf_target_arch = "x86_64")]
    {
        let read = |offset: u64| {
            // SAFETY: bpf_probe_read_kernel fails rather than faulting;
            // the offsets are those of x86-64's struct pt_regs (ABI).
            unsafe { aya_ebpf::helpers::bpf_probe_read_kernel((regs + offset) as *const u64) }
                .unwrap_or(0)
        };
        UserRegisters {
            ip: read(PT_REGS_IP),
            sp: read(PT_REGS_SP),
            bp: read(PT_REGS_BP),
        }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        UserRegisters::UNKNOWN
    }
}

/// Offsets in x86-64's `struct pt_regs` (arch/x86/include/asm/ptrace.h).
#[cfg(bpf_target_arch = "x86_64")]
const PT_REGS_BP: u64 = 4 * 8;
#[cfg(bpf_target_arch = "x86_64")]
const PT_REGS_IP: u64 = 16 * 8;
#[cfg(bpf_target_arch = "x86_64")]
const PT_REGS_SP: u64 = 19 * 8;

/// Whether the tick interrupted user-mode code (x86-64: the privilege level
/// in the saved code segment). Elsewhere, assume not: the kernel walk then
/// simply finds nothing.
#[inline(always)]
pub fn interrupted_user_mode(ctx: &PerfEventContext) -> bool {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        // SAFETY: the context of a perf_event program is a bpf_perf_event_data,
        // whose registers the verifier lets programs read.
        unsafe { (*ctx.ctx).regs.cs & 3 == 3 }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        let _ = ctx;
        false
    }
}
