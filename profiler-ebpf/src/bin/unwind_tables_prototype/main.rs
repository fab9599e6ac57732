//! Design 2 of user-stack unwinding, kept as a measured prototype in an
//! object of its own: `sample_unwind_tables` (see `program`). Built only
//! with the `unwind-tables-prototype` feature, for the benchmark and the
//! prototype's own test: the object the daemon ships (`profiler`) never
//! holds it. It must not block, allocate or log on the hot path.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod program;

#[cfg(not(target_arch = "bpf"))]
fn main() {
    // Host builds compile this binary too; there is nothing to run.
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects programs that can reach this; it exists to satisfy no_std.
    loop {}
}

/// The kernel only lends GPL-only helpers (stack walking among them) to
/// programs under a GPL-compatible licence.
#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
