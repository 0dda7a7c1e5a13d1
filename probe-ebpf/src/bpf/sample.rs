//! Sampled recordings in the kernel: which allocator calls reach userspace.
//!
//! With a mean `T` set (`SAMPLING`, by the loader; 0 records every call),
//! each CPU counts down the bytes its threads allocate to the next sampling
//! point, as `leakscope_recording::sampling` describes: a call that crosses it
//! is recorded (its entry, its stack walk at the return, its block filed in
//! `SAMPLED`), and the next spacing is picked from `SPACINGS`, quantiles of
//! an exponential of mean `T` that userspace fills (BPF has no floating
//! point). Per CPU rather than per thread: a program runs on one CPU to its
//! end, the array lookup is inlined, and each CPU's byte stream is sampled as
//! a Poisson process all the same.
//!
//! Only a thread's outermost allocator call counts, so a global allocator
//! that wraps libc (shim, then `malloc` inside it) or glibc's
//! `realloc(NULL, n)` (a tail call into `malloc`) counts its bytes once:
//! `CALLS` keeps each thread's open outermost call, in a slot by thread id
//! (an array's lookup is inlined; a hash map's update is the dearest helper
//! a uprobe calls). A free is recorded only for a block in `SAMPLED`, until
//! the map has once been full (see `SAMPLED_BLOCKS`): from then on every
//! free is sent, those of blocks not in the map as `UnfiledFree`, for
//! userspace to match against the blocks it was sent unfiled.

use aya_ebpf::bindings::BPF_F_NO_PREALLOC;
use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::helpers::generated::bpf_get_prandom_u32;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, PerCpuArray};
use leakscope_probe_ebpf::{
    ALLOC_FLAG_NEW_UNSAMPLED, ALLOC_FLAG_OLD_UNFILED, ALLOC_FLAG_WHOLE, AllocCall,
    BIRTH_SCOPE_KINDS, EXIT_FLAG_UNFILED, RETURN_SP_OFFSET, RecordKind, SAMPLED_BLOCKS,
    SPACING_SLOTS, WHOLE_ALIGN,
};

/// The recording's mean spacing in bytes; 0: every call is recorded.
#[map]
static SAMPLING: Array<u64> = Array::with_max_entries(1, 0);

/// Spacings to pick the next sampling point from (see the module docs).
#[map]
static SPACINGS: Array<u64> = Array::with_max_entries(SPACING_SLOTS, 0);

/// Bytes left to the next sampling point, per CPU.
#[map]
static COUNTDOWN: PerCpuArray<i64> = PerCpuArray::with_max_entries(1, 0);

const CALL_SLOTS: u32 = 16384;

/// Each thread's open outermost allocator call, in slot `tid % CALL_SLOTS`.
#[map]
static CALLS: Array<OpenCall> = Array::with_max_entries(CALL_SLOTS, 0);

/// Each thread's open birth windows (see `BIRTH_SCOPE_KINDS`), in slot
/// `tid % CALL_SLOTS`: (tid, depth).
#[map]
static WINDOWS: Array<[u32; 2]> = Array::with_max_entries(CALL_SLOTS, 0);

/// Sampled blocks alive: only their frees are recorded. Not preallocated
/// (see `SAMPLED_BLOCKS`; the loader may size it otherwise).
#[map]
static SAMPLED: HashMap<u64, u8> =
    HashMap::with_max_entries(SAMPLED_BLOCKS, BPF_F_NO_PREALLOC as u32);

/// Nonzero once `SAMPLED` could not take a block: from then on every free
/// and every realloc is sent (see the module docs). Never cleared: a clear
/// by userspace once it holds no unfiled block could race a new one.
#[map]
static OVERFLOWED: Array<u32> = Array::with_max_entries(1, 0);

#[derive(Clone, Copy)]
#[repr(C)]
struct OpenCall {
    /// The calling thread (0: the slot is free).
    tid: u32,
    /// The return probe its return goes through (an `AllocCall` family).
    exit: u32,
    /// Its entry's stack pointer.
    sp: u64,
    /// realloc: the block it resizes.
    old: u64,
    /// 0: not recorded; else 1 | the entry's flags << 1.
    recorded: u32,
    _pad: u32,
}

/// Whether this recording samples.
#[inline(always)]
pub(super) fn sampling() -> bool {
    SAMPLING.get(0).is_some_and(|mean| *mean != 0)
}

/// At an allocator call's entry in a sampled recording: `None` when it is
/// not recorded (nested in an open call of its thread, or not sampled),
/// else the flags its entry record carries. `align` is the call's alignment
/// argument (0 for those with none): a block aligned to [`WHOLE_ALIGN`] or
/// more is recorded whole ([`ALLOC_FLAG_WHOLE`]).
#[inline(always)]
pub(super) fn enter(call: AllocCall, size: u64, sp: u64, old: u64, align: u64) -> Option<u32> {
    let tid = bpf_get_current_pid_tgid() as u32;
    let slot = CALLS.get_ptr_mut(tid & (CALL_SLOTS - 1))?;
    // SAFETY: a valid slot of an array map.
    let open = unsafe { *slot };
    // A call entered below an open one of its thread (or at its very frame:
    // a tail call) is nested in it.
    if open.tid == tid && open.sp >= sp {
        return None;
    }
    // Inside a session's birth window everything is recorded (see
    // `BIRTH_SCOPE_KINDS`): the countdown is not touched, so the sample
    // outside stays a sample.
    let whole = align >= WHOLE_ALIGN;
    let new_sampled = whole || in_window(tid) || crossed(size);
    let resizes = call == AllocCall::Realloc && old != 0;
    let old_filed = resizes && {
        // SAFETY: a lookup in a hash map the programs own.
        unsafe { SAMPLED.get(&old) }.is_some()
    };
    // Once the map has been full, any other block resized may be one
    // userspace filed.
    let old_unfiled = if resizes && !old_filed && overflowed() {
        ALLOC_FLAG_OLD_UNFILED
    } else {
        0
    };
    let flags = if whole {
        Some(ALLOC_FLAG_WHOLE | old_unfiled)
    } else if new_sampled {
        Some(old_unfiled)
    } else if old_filed || old_unfiled != 0 {
        Some(ALLOC_FLAG_NEW_UNSAMPLED | old_unfiled)
    } else {
        None
    };
    let old_sampled = old_filed || old_unfiled != 0;
    // SAFETY: a valid slot of an array map, this thread's.
    unsafe {
        *slot = OpenCall {
            tid,
            exit: call.exit() as u32,
            sp,
            old: if old_sampled { old } else { 0 },
            recorded: flags.map_or(0, |f| 1 | (f << 1)),
            _pad: 0,
        };
    }
    flags
}

/// What a sampled recording sends at a recorded call's return.
pub(super) struct Exit {
    /// Its return record's flags.
    pub(super) flags: u32,
    /// Whether the caller's stack is walked: not for a realloc of a sampled
    /// block into one that is not sampled, whose return tells userspace only
    /// that the old block went (and, once the map has been full, for every
    /// such realloc of any block: a walk each would be the dearest part).
    pub(super) walk: bool,
}

/// At a return in a sampled recording: `None` when the call is not recorded
/// (not its thread's outermost, or not sampled), else what its return record
/// carries. Files the new block among the sampled ones
/// ([`EXIT_FLAG_UNFILED`] when the map cannot take it), and takes out the
/// block a realloc resized.
#[inline(always)]
pub(super) fn exit(call: AllocCall, sp: u64, addr: u64) -> Option<Exit> {
    let tid = bpf_get_current_pid_tgid() as u32;
    let slot = CALLS.get_ptr_mut(tid & (CALL_SLOTS - 1))?;
    // SAFETY: a valid slot of an array map.
    let open = unsafe { *slot };
    if open.tid != tid || open.sp.wrapping_add(RETURN_SP_OFFSET) != sp || open.exit != call as u32 {
        // A nested call's return, or one whose entry ran before the probes.
        return None;
    }
    // SAFETY: this thread's slot.
    unsafe { (*slot).tid = 0 };
    if open.recorded == 0 {
        return None;
    }
    if open.old != 0 && addr != 0 {
        let _ = SAMPLED.remove(&open.old);
    }
    let new_sampled = (open.recorded >> 1) & ALLOC_FLAG_NEW_UNSAMPLED == 0;
    if new_sampled && addr != 0 && SAMPLED.insert(&addr, &1, 0).is_err() {
        // Full (or the kernel could not allocate an entry): set before the
        // block is handed out, so that its free, on any thread, is sent.
        if let Some(flag) = OVERFLOWED.get_ptr_mut(0) {
            // SAFETY: a valid slot of an array map.
            unsafe { *flag = 1 };
        }
        return Some(Exit {
            flags: EXIT_FLAG_UNFILED,
            walk: true,
        });
    }
    Some(Exit {
        flags: 0,
        walk: new_sampled,
    })
}

/// At a free of `kind` (`Free` or `RustFree`) in a sampled recording: the
/// record to send, if any: `kind` for a sampled block (then no longer
/// filed), `UnfiledFree` for any other once the map has been full.
#[inline(always)]
pub(super) fn free(kind: RecordKind, addr: u64) -> Option<RecordKind> {
    if SAMPLED.remove(&addr).is_ok() {
        Some(kind)
    } else if overflowed() {
        Some(RecordKind::UnfiledFree)
    } else {
        None
    }
}

/// Whether `SAMPLED` has once been full.
#[inline(always)]
fn overflowed() -> bool {
    OVERFLOWED.get(0).is_some_and(|flag| *flag != 0)
}

/// Whether `tid` is inside a session's birth window.
#[inline(always)]
fn in_window(tid: u32) -> bool {
    WINDOWS
        .get(tid & (CALL_SLOTS - 1))
        .is_some_and(|w| w[0] == tid && w[1] > 0)
}

/// A lifecycle function of `kind` was entered (`enter`) or returned: a
/// birth window opens or closes on this thread.
#[inline(always)]
pub(super) fn window(kind: u32, enter: bool) {
    if !BIRTH_SCOPE_KINDS.contains(&kind) {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(slot) = WINDOWS.get_ptr_mut(tid & (CALL_SLOTS - 1)) else {
        return;
    };
    // SAFETY: this thread's slot of an array map.
    unsafe {
        let [owner, depth] = *slot;
        let depth = if owner == tid { depth } else { 0 };
        *slot = if enter {
            [tid, depth.saturating_add(1)]
        } else {
            [tid, depth.saturating_sub(1)]
        };
    }
}

/// Counts `size` bytes down; true when they cross a sampling point (the next
/// is then drawn).
#[inline(always)]
fn crossed(size: u64) -> bool {
    let Some(left) = COUNTDOWN.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's slot.
    let now = unsafe { *left } - size.max(1) as i64;
    if now > 0 {
        // SAFETY: this CPU's slot.
        unsafe { *left = now };
        return false;
    }
    // SAFETY: plain helper call.
    let pick = unsafe { bpf_get_prandom_u32() } & (SPACING_SLOTS - 1);
    let spacing = SPACINGS.get(pick).copied().unwrap_or(1).max(1);
    // SAFETY: this CPU's slot.
    unsafe { *left = spacing as i64 };
    true
}
