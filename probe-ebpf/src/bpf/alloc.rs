//! Allocation functions: an entry program per signature sends the call's
//! arguments, a return program the block and the caller's stack.

use aya_ebpf::EbpfContext as _;
use aya_ebpf::bindings::BPF_F_USER_STACK;
use aya_ebpf::helpers::generated::{bpf_get_stack, bpf_ktime_get_ns};
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user};
use aya_ebpf::macros::{map, uprobe, uretprobe};
use aya_ebpf::maps::Array;
use aya_ebpf::programs::{ProbeContext, RetProbeContext};
use leakscope_probe_ebpf::{
    ALLOC_FLAG_RUST, AllocCall, AllocEnterRecord, AllocExitRecord, LostReason, MAX_STACK_DEPTH,
    RecordKind,
};

use super::records::{EVENTS, RB_FLAGS, count_drop, count_lost, drops, header, header_at, sp};
use super::sample;
use super::unwind::{self, walk_tables};
use super::walk::walk_frame_pointers;

/// posix_memalign calls in progress: where the block's address will be
/// written (`memptr`), read at the return, in slot `tid % MEMPTR_SLOTS`.
/// The only per-call state the programs keep; the other allocation
/// functions return their block.
///
/// Why an array and not a hash map by thread id: a hash map's insert cost
/// `posix_memalign_enter` ~870 ns more than `malloc_enter` (~1,110 against
/// ~235 ns a run with `--bpf-stats`, on `fixture-server`), and its lookup
/// and delete more again at the return; an array's lookup is inlined by
/// the verifier. Two threads share a slot only if their ids are equal
/// modulo 16,384 and both are inside posix_memalign at once: the later
/// call takes the slot, and a return that finds another thread's id there
/// counts its block as lost (`pending-full`). A return that finds the
/// slot empty counts nothing: its entry ran before the programs attached
/// or after they began to detach (in any order), or it is nested in a
/// call of its own thread (a signal handler's), which the capture would
/// not record anyway.
#[map]
static MEMPTR: Array<PendingMemptr> = Array::with_max_entries(MEMPTR_SLOTS, 0);

const MEMPTR_SLOTS: u32 = 16384;

#[derive(Clone, Copy)]
#[repr(C)]
struct PendingMemptr {
    /// The calling thread (0: free).
    tid: u64,
    memptr: u64,
    /// `memptr_check(tid, memptr)`: two threads writing one slot at once
    /// can leave one's id with the other's `memptr`, which this tells.
    check: u64,
}

#[inline(always)]
fn memptr_check(tid: u64, memptr: u64) -> u64 {
    memptr ^ tid.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The time an allocation entry carries: realloc's alone (see
/// [`AllocEnterRecord`]).
#[inline(always)]
fn entry_time(call: AllocCall) -> u64 {
    if call == AllocCall::Realloc {
        // SAFETY: plain helper call.
        unsafe { bpf_ktime_get_ns() }
    } else {
        0
    }
}

/// Sends an allocation call's entry: its arguments (`align`: its alignment
/// argument, 0 for calls with none).
#[inline(always)]
fn send_enter(
    ctx: &ProbeContext,
    call: AllocCall,
    flags: u32,
    size: u64,
    ptr_arg: u64,
    align: u64,
) {
    let stack_pointer = sp(ctx.regs);
    let flags = if sample::sampling() {
        match sample::enter(call, size, stack_pointer, ptr_arg, align) {
            Some(sampled) => flags | sampled,
            None => return,
        }
    } else {
        flags
    };
    match EVENTS.reserve::<AllocEnterRecord>(0) {
        Some(mut entry) => {
            entry.write(AllocEnterRecord {
                header: header_at(RecordKind::AllocEnter, entry_time(call)),
                call: call as u32,
                flags,
                size,
                ptr_arg,
                sp: stack_pointer,
                drops: drops(),
            });
            entry.submit(RB_FLAGS);
        }
        None => count_lost(LostReason::RingFull),
    }
}

/// Sends an allocation call's return: which return probe, the block, and
/// the caller's stack. A return the ring buffer cannot take is not counted
/// as lost here: userspace counts the entry left without its return, so
/// that a call whose entry was dropped as well counts once.
#[inline(always)]
fn send_exit(ctx: &RetProbeContext, call: AllocCall, addr: u64) {
    let (flags, walk) = if sample::sampling() {
        match sample::exit(call.exit(), sp(ctx.regs), addr) {
            Some(exit) => (exit.flags, exit.walk),
            None => return,
        }
    } else {
        (0, true)
    };
    let Some(mut entry) = EVENTS.reserve::<AllocExitRecord>(0) else {
        count_drop();
        return;
    };
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points to a reserved, exclusively owned ring buffer slot;
    // every field is written before submit.
    unsafe {
        (*record).header = header(RecordKind::AllocExit);
        (*record).call = call as u32;
        (*record).flags = flags;
        (*record).addr = addr;
        (*record).sp = sp(ctx.regs);
        // A realloc whose new block is not sampled: userspace writes only the
        // old block's going and never reads a stack.
        (*record).stack_bytes = if walk { walk_stack(ctx, record) } else { 0 };
    }
    entry.submit(RB_FLAGS);
}

/// Walks the calling thread's stack into `record`'s frames: the bytes
/// filled, negative when the walk failed (counted as a lost stack).
///
/// # Safety
/// `record` points to a reserved, exclusively owned ring buffer slot whose
/// header is written.
#[inline(always)]
unsafe fn walk_stack(ctx: &RetProbeContext, record: *mut AllocExitRecord) -> i64 {
    // SAFETY: the caller's contract.
    unsafe {
        let stack = core::ptr::addr_of_mut!((*record).stack);
        let tid = (*record).header.tid;
        // By table when the loader gave the target's (a build without
        // frame pointers), else by frame pointer.
        let mappings = unwind::mappings();
        let walked = if mappings != 0 {
            walk_tables(ctx.regs, stack, tid, mappings)
        } else {
            walk_frame_pointers(ctx.regs, stack, tid)
        };
        let filled = match walked {
            Some(filled) => filled,
            None => bpf_get_stack(
                ctx.as_ptr(),
                stack.cast(),
                (MAX_STACK_DEPTH * 8) as u32,
                BPF_F_USER_STACK as u64,
            ),
        };
        if filled < 0 {
            count_lost(LostReason::Stack);
        }
        filled
    }
}

#[uprobe]
pub fn malloc_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Malloc,
        0,
        ctx.arg::<u64>(0).unwrap_or(0),
        0,
        0,
    );
    0
}

/// `__rust_alloc(size, align)` and `__rust_alloc_zeroed(size, align)`.
#[uprobe]
pub fn rust_alloc_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Malloc,
        ALLOC_FLAG_RUST,
        ctx.arg::<u64>(0).unwrap_or(0),
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    0
}

#[uprobe]
pub fn calloc_enter(ctx: ProbeContext) -> u32 {
    let count = ctx.arg::<u64>(0).unwrap_or(0);
    let each = ctx.arg::<u64>(1).unwrap_or(0);
    send_enter(&ctx, AllocCall::Calloc, 0, count.wrapping_mul(each), 0, 0);
    0
}

#[uprobe]
pub fn realloc_enter(ctx: ProbeContext) -> u32 {
    let old = ctx.arg::<u64>(0).unwrap_or(0);
    send_enter(
        &ctx,
        AllocCall::Realloc,
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
        old,
        0,
    );
    0
}

/// `__rust_realloc(ptr, old_size, align, new_size)`.
#[uprobe]
pub fn rust_realloc_enter(ctx: ProbeContext) -> u32 {
    let old = ctx.arg::<u64>(0).unwrap_or(0);
    send_enter(
        &ctx,
        AllocCall::Realloc,
        ALLOC_FLAG_RUST,
        ctx.arg::<u64>(3).unwrap_or(0),
        old,
        ctx.arg::<u64>(2).unwrap_or(0),
    );
    0
}

/// `posix_memalign(void **memptr, size_t align, size_t size)`.
#[uprobe]
pub fn posix_memalign_enter(ctx: ProbeContext) -> u32 {
    let memptr = ctx.arg::<u64>(0).unwrap_or(0);
    let tid = bpf_get_current_pid_tgid() as u32 as u64;
    if let Some(slot) = MEMPTR.get_ptr_mut(tid as u32 & (MEMPTR_SLOTS - 1)) {
        // SAFETY: a valid slot of an array map.
        unsafe {
            (*slot).tid = tid;
            (*slot).memptr = memptr;
            (*slot).check = memptr_check(tid, memptr);
        }
    }
    send_enter(
        &ctx,
        AllocCall::PosixMemalign,
        0,
        ctx.arg::<u64>(2).unwrap_or(0),
        memptr,
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    0
}

/// `aligned_alloc(align, size)` and `memalign(align, size)`.
#[uprobe]
pub fn aligned_alloc_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::AlignedAlloc,
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
        0,
        ctx.arg::<u64>(0).unwrap_or(0),
    );
    0
}

/// `mi_malloc_aligned(size, align)` and `mi_zalloc_aligned(size, align)`.
#[uprobe]
pub fn malloc_aligned_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Malloc,
        0,
        ctx.arg::<u64>(0).unwrap_or(0),
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    0
}

/// `mi_realloc_aligned(ptr, size, align)`.
#[uprobe]
pub fn realloc_aligned_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Realloc,
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(2).unwrap_or(0),
    );
    0
}

/// The alignment jemalloc's `*allocx` flags ask for (`MALLOCX_LG_ALIGN`, the
/// low 6 bits: its log2), 0 for none.
#[inline(always)]
fn mallocx_align(flags: u64) -> u64 {
    let lg = flags & 0x3f;
    if lg == 0 { 0 } else { 1u64 << lg }
}

/// `mallocx(size, flags)`.
#[uprobe]
pub fn mallocx_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Malloc,
        0,
        ctx.arg::<u64>(0).unwrap_or(0),
        0,
        mallocx_align(ctx.arg::<u64>(1).unwrap_or(0)),
    );
    0
}

/// `rallocx(ptr, size, flags)`.
#[uprobe]
pub fn rallocx_enter(ctx: ProbeContext) -> u32 {
    send_enter(
        &ctx,
        AllocCall::Realloc,
        0,
        ctx.arg::<u64>(1).unwrap_or(0),
        ctx.arg::<u64>(0).unwrap_or(0),
        mallocx_align(ctx.arg::<u64>(2).unwrap_or(0)),
    );
    0
}

/// Return of malloc, calloc, aligned_alloc and the Rust alloc shims.
#[uretprobe]
pub fn malloc_exit(ctx: RetProbeContext) -> u32 {
    send_exit(&ctx, AllocCall::Malloc, ctx.ret());
    0
}

#[uretprobe]
pub fn realloc_exit(ctx: RetProbeContext) -> u32 {
    send_exit(&ctx, AllocCall::Realloc, ctx.ret());
    0
}

#[uretprobe]
pub fn posix_memalign_exit(ctx: RetProbeContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32 as u64;
    let mut memptr = None;
    let mut taken = false;
    if let Some(slot) = MEMPTR.get_ptr_mut(tid as u32 & (MEMPTR_SLOTS - 1)) {
        // SAFETY: a valid slot of an array map.
        unsafe {
            let (owner, value, check) = ((*slot).tid, (*slot).memptr, (*slot).check);
            if owner == tid {
                (*slot).tid = 0;
            }
            if owner == tid && check == memptr_check(tid, value) {
                memptr = Some(value);
            } else {
                taken = owner != 0;
            }
        }
    }
    let status: i32 = ctx.ret();
    let addr = match memptr {
        // SAFETY: reads the target's own `*memptr`, which posix_memalign just wrote.
        Some(memptr) if status == 0 => {
            unsafe { bpf_probe_read_user(memptr as *const u64) }.unwrap_or(0)
        }
        _ => {
            // Another thread's call took the slot: the block is not known.
            if taken && status == 0 {
                count_lost(LostReason::PendingFull);
            }
            0
        }
    };
    send_exit(&ctx, AllocCall::PosixMemalign, addr);
    0
}
