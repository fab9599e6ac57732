//! Storing walked stacks: once per distinct stack, under a 64-bit hash of
//! its frames, in the stacks map it is given (the current generation's);
//! a collision or a full map is a loss (the [`Counter`] the caller
//! counts), never a wrong stack.
//!
//! Owns no map; the programs hand theirs in.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose: a StackTrace by value \
              would not fit on the 512-byte BPF stack"
)]

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::generated::{bpf_get_stack, bpf_loop},
    maps::HashMap,
    programs::PerfEventContext,
};
use profiler_common::{Counter, MAX_STACK_DEPTH, StackTrace};

/// The kernel's EEXIST: the key is already in the map.
pub const EEXIST: i32 = 17;

pub struct StoredStack {
    /// Key in the stacks map; 0 when there is no stack of this kind.
    pub key: u64,
    /// It filled every slot: probably cut short at its root end.
    pub truncated: bool,
}

/// Walks the stack `ctx` interrupted (its user part when `user`, else its
/// kernel part) into `scratch` (room of the caller's, too big for the BPF
/// stack) and stores it in `stacks`.
#[inline(always)]
pub fn store_stack(
    ctx: &PerfEventContext,
    stacks: &HashMap<u64, StackTrace>,
    scratch: &mut StackTrace,
    user: bool,
) -> Result<StoredStack, Counter> {
    let flags = if user { BPF_F_USER_STACK as u64 } else { 0 };
    // SAFETY: `scratch.ips` holds MAX_STACK_DEPTH u64s, the most the
    // helper writes.
    let walked = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            scratch.ips.as_mut_ptr().cast::<c_void>(),
            (MAX_STACK_DEPTH * size_of::<u64>()) as u32,
            flags,
        )
    };
    if walked < 0 {
        return Err(Counter::LostStackWalkError);
    }
    let len = (walked as usize / size_of::<u64>()).min(MAX_STACK_DEPTH);
    store_walked(stacks, scratch, len, user)
}

/// Stores the `len` frames walked into `scratch` in `stacks` (once per
/// distinct stack), returning their key. The frames past `len` must be 0
/// (as `bpf_get_stack` leaves them): they are hashed and compared up to
/// the end of their [`CHUNK`].
#[inline(always)]
pub fn store_walked(
    stacks: &HashMap<u64, StackTrace>,
    scratch: &mut StackTrace,
    len: usize,
    user: bool,
) -> Result<StoredStack, Counter> {
    let len = len.min(MAX_STACK_DEPTH);
    if len == 0 {
        return Ok(StoredStack {
            key: 0,
            truncated: false,
        });
    }
    scratch.len = len as u32;
    let key = stack_hash(&scratch.ips, len, user);
    // Most stacks recur: look first, insert only what is new.
    if let Some(stored) = stacks.get_ptr(&key) {
        // Already stored: make sure it is the same stack, not a collision.
        // SAFETY: a live entry of the current generation; the daemon does
        // not touch it until the generation is flipped away.
        if !same_frames(unsafe { &*stored }, scratch, len) {
            return Err(Counter::LostStackCollision);
        }
    } else {
        match stacks.insert(&key, &*scratch, BPF_NOEXIST.into()) {
            Ok(()) => {}
            // Another CPU stored a stack under this hash meanwhile: the
            // same one, unless (rarer still) it collides.
            Err(err) if err == -EEXIST => {
                let same = match stacks.get_ptr(&key) {
                    // SAFETY: as above.
                    Some(stored) => same_frames(unsafe { &*stored }, scratch, len),
                    None => false,
                };
                if !same {
                    return Err(Counter::LostStackCollision);
                }
            }
            Err(_) => return Err(Counter::LostStackMapFull),
        }
    }
    Ok(StoredStack {
        key,
        truncated: len == MAX_STACK_DEPTH,
    })
}

/// Frames hashed and compared at a time, in one step of a `bpf_loop`.
/// The loops over a stack's chunks run under `bpf_loop`, whose step the
/// verifier checks once (until its states repeat, on newer kernels)
/// rather than once per chunk for each path through the rest of the
/// program: unrolled, the chunks of the user and kernel stacks of both
/// generations left the verifier a path per length to follow through
/// everything after them, past its million instructions on Linux 6.1.
const CHUNK: usize = 8;

/// Chunks in a stack of [`MAX_STACK_DEPTH`] frames.
const CHUNKS: usize = MAX_STACK_DEPTH.div_ceil(CHUNK);

/// Runs `step` under `bpf_loop` once per chunk of a whole stack (until it
/// returns 1), handing it `state`: a `Hashing` or a `Comparing`, as `step`
/// takes.
#[inline(always)]
fn for_each_chunk<T>(step: extern "C" fn(u32, *mut c_void) -> i64, state: &mut T) {
    // SAFETY: `step` takes a `T`, and `state` lives until bpf_loop returns.
    unsafe {
        bpf_loop(
            CHUNKS as u32,
            step as *mut c_void,
            (state as *mut T).cast::<c_void>(),
            0,
        )
    };
}

/// A step's chunk, unless it is past the stack's `chunks` (or the array).
#[inline(always)]
fn chunk_within(chunk: u32, chunks: u64) -> Option<usize> {
    let chunk = chunk as usize;
    (chunk < CHUNKS && (chunk as u64) < chunks).then_some(chunk)
}

/// The frame at `chunk`'s `index`; 0 past the end of the array.
#[inline(always)]
fn frame(ips: &[u64; MAX_STACK_DEPTH], chunk: usize, index: usize) -> u64 {
    ips.get(chunk * CHUNK + index).copied().unwrap_or(0)
}

/// A hash under way, on the program's stack for `bpf_loop`'s steps.
#[repr(C)]
struct Hashing {
    ips: *const [u64; MAX_STACK_DEPTH],
    /// Chunks to hash.
    chunks: u64,
    hash: u64,
}

/// A 64-bit hash of the frames, chunk by chunk up to `len`'s; never 0,
/// which means "no stack".
#[inline(always)]
fn stack_hash(ips: &[u64; MAX_STACK_DEPTH], len: usize, user: bool) -> u64 {
    let mut hashing = Hashing {
        ips,
        chunks: len.div_ceil(CHUNK) as u64,
        hash: 0x9e37_79b9_7f4a_7c15 ^ ((len as u64) << 1) ^ (user as u64),
    };
    for_each_chunk(hash_chunk, &mut hashing);
    if hashing.hash == 0 { 1 } else { hashing.hash }
}

/// One chunk of [`stack_hash`]; 1 to stop.
#[inline(never)]
extern "C" fn hash_chunk(chunk: u32, hashing: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the `Hashing` stack_hash gave it, whose
    // frames are a map value alive for the program's run.
    let hashing = unsafe { &mut *hashing.cast::<Hashing>() };
    let Some(chunk) = chunk_within(chunk, hashing.chunks) else {
        return 1;
    };
    // SAFETY: as above.
    let ips = unsafe { &*hashing.ips };
    let mut hash = hashing.hash;
    for index in 0..CHUNK {
        hash = mix(hash ^ frame(ips, chunk, index));
    }
    hashing.hash = hash;
    0
}

/// The finaliser of MurmurHash3: every input bit affects every output bit.
#[inline(always)]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A comparison under way, on the program's stack for `bpf_loop`'s steps.
#[repr(C)]
struct Comparing {
    stored: *const [u64; MAX_STACK_DEPTH],
    walked: *const [u64; MAX_STACK_DEPTH],
    /// Chunks to compare.
    chunks: u64,
    /// 1 once a frame differs.
    differs: u64,
}

/// Whether the stored stack holds the walked one's `len` frames, chunk by
/// chunk (the frames past `len` are 0 in both).
#[inline(always)]
fn same_frames(stored: &StackTrace, walked: &StackTrace, len: usize) -> bool {
    if stored.len as usize != len {
        return false;
    }
    let mut comparing = Comparing {
        stored: &stored.ips,
        walked: &walked.ips,
        chunks: len.div_ceil(CHUNK) as u64,
        differs: 0,
    };
    for_each_chunk(compare_chunk, &mut comparing);
    comparing.differs == 0
}

/// One chunk of [`same_frames`]; 1 to stop.
#[inline(never)]
extern "C" fn compare_chunk(chunk: u32, comparing: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the `Comparing` same_frames gave it, whose
    // frames are map values alive for the program's run.
    let comparing = unsafe { &mut *comparing.cast::<Comparing>() };
    let Some(chunk) = chunk_within(chunk, comparing.chunks) else {
        return 1;
    };
    // SAFETY: as above.
    let (stored, walked) = unsafe { (&*comparing.stored, &*comparing.walked) };
    for index in 0..CHUNK {
        if frame(stored, chunk, index) != frame(walked, chunk, index) {
            comparing.differs = 1;
            return 1;
        }
    }
    0
}
