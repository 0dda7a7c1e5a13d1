//! leakscope's uprobe programs: allocations, frees and rmcp lifecycle scopes.
//!
//! Allocation functions are probed twice: at entry (`*_enter`, remembers the size
//! per thread in `PENDING`) and at return (`*_exit`, reads the returned block,
//! walks the user stack by frame pointer, and sends an [`AllocRecord`]). `free`
//! needs only its entry. Lifecycle functions send a [`ScopeRecord`] at entry and
//! return; the uprobe cookie says which function it is.
//!
//! Rules for this file: the per-event path stays short (it runs inside every
//! malloc of the target), nothing blocks, and every drop is counted in `LOST`.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(not(target_arch = "bpf"))]
fn main() {
    // Host build: the programs below only exist for the BPF target.
}

#[cfg(target_arch = "bpf")]
mod programs {
    use aya_ebpf::EbpfContext as _;
    use aya_ebpf::bindings::{BPF_F_USER_STACK, BPF_RB_NO_WAKEUP};
    use aya_ebpf::helpers::generated::{bpf_get_attach_cookie, bpf_get_stack, bpf_ktime_get_ns};
    use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user};
    use aya_ebpf::macros::{map, uprobe, uretprobe};
    use aya_ebpf::maps::{LruHashMap, PerCpuArray, RingBuf};
    use aya_ebpf::programs::{ProbeContext, RetProbeContext};
    use leakscope_probe_ebpf::{
        AllocCall, AllocRecord, FreeRecord, LOST_REASONS, LostReason, MAX_STACK_DEPTH, PHASE_ENTER,
        PHASE_EXIT, PendingAlloc, RecordHeader, RecordKind, ScopeRecord,
    };

    /// Records to userspace. Sized by the loader (`--ring-buffer`).
    #[map]
    static EVENTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

    /// Allocation calls in progress, by thread id.
    #[map]
    static PENDING: LruHashMap<u32, PendingAlloc> = LruHashMap::with_max_entries(16384, 0);

    /// Drop counters, indexed by [`LostReason`].
    #[map]
    static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_REASONS, 0);

    /// Userspace drains on a timer, so no record needs to wake it up.
    const RB_FLAGS: u64 = BPF_RB_NO_WAKEUP as u64;

    #[inline(always)]
    fn count_lost(reason: LostReason) {
        if let Some(counter) = LOST.get_ptr_mut(reason as u32) {
            // SAFETY: per-CPU slot, no concurrent writer on this CPU.
            unsafe { *counter += 1 };
        }
    }

    #[inline(always)]
    fn header(kind: RecordKind) -> RecordHeader {
        RecordHeader {
            kind: kind as u32,
            tid: bpf_get_current_pid_tgid() as u32,
            // SAFETY: plain helper call.
            ts_ns: unsafe { bpf_ktime_get_ns() },
        }
    }

    #[inline(always)]
    fn tid() -> u32 {
        bpf_get_current_pid_tgid() as u32
    }

    /// Remembers an allocation call at its entry; a call nested inside one in
    /// progress on this thread only deepens it (see `PendingAlloc`).
    #[inline(always)]
    fn remember(call: AllocCall, size: u64, ptr_arg: u64) {
        let tid = tid();
        if let Some(outer) = PENDING.get_ptr_mut(&tid) {
            // SAFETY: this thread's own slot; only this thread touches it.
            unsafe { (*outer).depth += 1 };
            return;
        }
        let pending = PendingAlloc {
            size,
            ptr_arg,
            // SAFETY: plain helper call.
            entry_ts_ns: unsafe { bpf_ktime_get_ns() },
            call: call as u32,
            depth: 0,
        };
        if PENDING.insert(tid, pending, 0).is_err() {
            count_lost(LostReason::PendingFull);
        }
    }

    #[uprobe]
    pub fn malloc_enter(ctx: ProbeContext) -> u32 {
        remember(AllocCall::Malloc, ctx.arg::<u64>(0).unwrap_or(0), 0);
        0
    }

    #[uprobe]
    pub fn calloc_enter(ctx: ProbeContext) -> u32 {
        let count = ctx.arg::<u64>(0).unwrap_or(0);
        let each = ctx.arg::<u64>(1).unwrap_or(0);
        remember(AllocCall::Calloc, count.wrapping_mul(each), 0);
        0
    }

    #[uprobe]
    pub fn realloc_enter(ctx: ProbeContext) -> u32 {
        let old = ctx.arg::<u64>(0).unwrap_or(0);
        remember(AllocCall::Realloc, ctx.arg::<u64>(1).unwrap_or(0), old);
        0
    }

    /// `__rust_realloc(ptr, old_size, align, new_size)`.
    #[uprobe]
    pub fn rust_realloc_enter(ctx: ProbeContext) -> u32 {
        let old = ctx.arg::<u64>(0).unwrap_or(0);
        remember(AllocCall::Realloc, ctx.arg::<u64>(3).unwrap_or(0), old);
        0
    }

    /// `posix_memalign(void **memptr, size_t align, size_t size)`.
    #[uprobe]
    pub fn posix_memalign_enter(ctx: ProbeContext) -> u32 {
        let memptr = ctx.arg::<u64>(0).unwrap_or(0);
        remember(
            AllocCall::PosixMemalign,
            ctx.arg::<u64>(2).unwrap_or(0),
            memptr,
        );
        0
    }

    /// `aligned_alloc(align, size)` and `memalign(align, size)`.
    #[uprobe]
    pub fn aligned_alloc_enter(ctx: ProbeContext) -> u32 {
        remember(AllocCall::AlignedAlloc, ctx.arg::<u64>(1).unwrap_or(0), 0);
        0
    }

    /// Pops the pending call if this return is the outermost call's and it is
    /// one that `accepts`; a nested call's return only makes it shallower.
    #[inline(always)]
    fn take_pending(accepts: fn(u32) -> bool) -> Option<PendingAlloc> {
        let tid = tid();
        let slot = PENDING.get_ptr_mut(&tid)?;
        // SAFETY: this thread's own slot; the value is copied out before removal.
        let pending = unsafe {
            if (*slot).depth > 0 {
                (*slot).depth -= 1;
                return None;
            }
            *slot
        };
        if !accepts(pending.call) {
            return None;
        }
        let _ = PENDING.remove(&tid);
        Some(pending)
    }

    #[inline(always)]
    fn send_alloc(ctx: &RetProbeContext, kind: RecordKind, addr: u64, pending: &PendingAlloc) {
        let Some(mut entry) = EVENTS.reserve::<AllocRecord>(0) else {
            count_lost(LostReason::RingFull);
            return;
        };
        let record = entry.as_mut_ptr();
        // SAFETY: `record` points to a reserved, exclusively owned ring buffer slot;
        // every field is written before submit.
        unsafe {
            (*record).header = header(kind);
            (*record).addr = addr;
            (*record).size = pending.size;
            (*record).old_addr = if kind == RecordKind::Realloc {
                pending.ptr_arg
            } else {
                0
            };
            (*record).entry_ts_ns = pending.entry_ts_ns;
            let filled = bpf_get_stack(
                ctx.as_ptr(),
                core::ptr::addr_of_mut!((*record).stack).cast(),
                (MAX_STACK_DEPTH * 8) as u32,
                BPF_F_USER_STACK as u64,
            );
            if filled < 0 {
                count_lost(LostReason::Stack);
            }
            (*record).stack_bytes = filled;
        }
        entry.submit(RB_FLAGS);
    }

    /// Return of malloc, calloc, aligned_alloc and the Rust alloc shims.
    #[uretprobe]
    pub fn malloc_exit(ctx: RetProbeContext) -> u32 {
        let Some(pending) = take_pending(|call| {
            call == AllocCall::Malloc as u32
                || call == AllocCall::Calloc as u32
                || call == AllocCall::AlignedAlloc as u32
        }) else {
            return 0;
        };
        let addr: u64 = ctx.ret();
        send_alloc(&ctx, RecordKind::Alloc, addr, &pending);
        0
    }

    #[uretprobe]
    pub fn realloc_exit(ctx: RetProbeContext) -> u32 {
        let Some(pending) = take_pending(|call| call == AllocCall::Realloc as u32) else {
            return 0;
        };
        let addr: u64 = ctx.ret();
        send_alloc(&ctx, RecordKind::Realloc, addr, &pending);
        0
    }

    #[uretprobe]
    pub fn posix_memalign_exit(ctx: RetProbeContext) -> u32 {
        let Some(pending) = take_pending(|call| call == AllocCall::PosixMemalign as u32) else {
            return 0;
        };
        let status: i32 = ctx.ret();
        if status != 0 {
            return 0;
        }
        // SAFETY: reads the target's own `*memptr`, which posix_memalign just wrote.
        let addr = unsafe { bpf_probe_read_user(pending.ptr_arg as *const u64) }.unwrap_or(0);
        send_alloc(&ctx, RecordKind::Alloc, addr, &pending);
        0
    }

    /// `free(ptr)` and `__rust_dealloc(ptr, ..)`. May be attached past free's NULL
    /// check (see the probe's attach-offset decoding); `ptr` is still in rdi there.
    #[uprobe]
    pub fn free_enter(ctx: ProbeContext) -> u32 {
        let addr = ctx.arg::<u64>(0).unwrap_or(0);
        if addr == 0 {
            return 0;
        }
        match EVENTS.reserve::<FreeRecord>(0) {
            Some(mut entry) => {
                entry.write(FreeRecord {
                    header: header(RecordKind::Free),
                    addr,
                });
                entry.submit(RB_FLAGS);
            }
            None => count_lost(LostReason::RingFull),
        }
        0
    }

    #[inline(always)]
    fn send_scope(ctx_ptr: *mut core::ffi::c_void, phase: u32, arg: u64) {
        // SAFETY: plain helper call on our own context.
        let scope = unsafe { bpf_get_attach_cookie(ctx_ptr) } as u32;
        match EVENTS.reserve::<ScopeRecord>(0) {
            Some(mut entry) => {
                entry.write(ScopeRecord {
                    header: header(RecordKind::Scope),
                    scope,
                    phase,
                    arg,
                });
                entry.submit(RB_FLAGS);
            }
            None => count_lost(LostReason::RingFull),
        }
    }

    /// Entry of an rmcp lifecycle function; the cookie names it, `arg` is its first argument.
    #[uprobe]
    pub fn scope_enter(ctx: ProbeContext) -> u32 {
        send_scope(ctx.as_ptr(), PHASE_ENTER, ctx.arg::<u64>(0).unwrap_or(0));
        0
    }

    #[uretprobe]
    pub fn scope_exit(ctx: RetProbeContext) -> u32 {
        let ret: u64 = ctx.ret();
        send_scope(ctx.as_ptr(), PHASE_EXIT, ret);
        0
    }

    /// Benchmarks only (`--bare`): a uprobe that does nothing, for the cost floor.
    #[uprobe]
    pub fn noop_enter(_ctx: ProbeContext) -> u32 {
        0
    }

    /// Benchmarks only (`--bare`): a uretprobe that does nothing.
    #[uretprobe]
    pub fn noop_exit(_ctx: RetProbeContext) -> u32 {
        0
    }

    #[cfg(not(test))]
    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }

    /// GPL-compatible: bpf_probe_read_user and bpf_get_stack are GPL-only helpers.
    #[unsafe(link_section = "license")]
    #[unsafe(no_mangle)]
    static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
}
