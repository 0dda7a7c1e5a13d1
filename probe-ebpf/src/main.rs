//! leakscope's uprobe programs: allocations, frees and rmcp lifecycle scopes.
//!
//! Allocation functions are probed twice: at entry (`*_enter` sends an
//! [`AllocEnterRecord`] with the call's arguments) and at return (`*_exit`
//! walks the user stack by frame pointer and sends an [`AllocExitRecord`] with
//! the block and the stack). Userspace pairs the two by thread and stack pointer, and keeps only
//! a thread's outermost allocator call (see `leakscope-probe`'s `capture`).
//! `free` needs only its entry. Lifecycle functions send a [`ScopeRecord`] at
//! entry and return; the uprobe cookie says which function it is.
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
    use aya_ebpf::helpers::generated::{
        self, bpf_get_attach_cookie, bpf_get_stack, bpf_ktime_get_ns,
    };
    use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user};
    use aya_ebpf::macros::{map, uprobe, uretprobe};
    use aya_ebpf::maps::{Array, PerCpuArray, RingBuf};
    use aya_ebpf::programs::{ProbeContext, RetProbeContext};
    use leakscope_probe_ebpf::{
        ALLOC_FLAG_RUST, AllocCall, AllocEnterRecord, AllocExitRecord, FreeRecord, LOST_REASONS,
        LostReason, MAX_STACK_DEPTH, PHASE_ENTER, PHASE_EXIT, RecordHeader, RecordKind,
        SCOPE_RETURNS, STACK_WINDOW_BYTES, ScopeRecord, TRAMPOLINE_SLOT_MARK, scope_arg,
        trampoline,
    };

    /// Records to userspace. Sized by the loader (`--ring-buffer`).
    #[map]
    static EVENTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

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

    /// Drop counters, indexed by [`LostReason`].
    #[map]
    static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_REASONS, 0);

    /// Every record the ring buffer refused, across CPUs (see
    /// [`AllocEnterRecord::drops`]). Written only when a record is dropped;
    /// read with an array lookup, which the verifier inlines.
    #[map]
    static DROPS: Array<u64> = Array::with_max_entries(1, 0);

    /// The `[uprobes]` mapping of the target (see [`trampoline`]); zero until
    /// userspace has seen it.
    #[map]
    static UPROBE_TRAMPOLINE: Array<u64> = Array::with_max_entries(trampoline::SLOTS, 0);

    const WINDOW_WORDS: usize = STACK_WINDOW_BYTES / 8;

    /// Scratch space for the stack walk's window, one per CPU (a program runs
    /// on one CPU to its end, and 16 KiB is far beyond the 512-byte BPF stack).
    #[map]
    static WINDOW: PerCpuArray<[u64; WINDOW_WORDS]> = PerCpuArray::with_max_entries(1, 0);

    /// The last stack walk on a CPU: what it learnt of its thread's stack, and
    /// a count that tells a walk whether another one used the window meanwhile.
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Walker {
        /// Walks started on this CPU. A uprobe program runs with migration
        /// disabled, not preemption: a walk preempted by another thread's on
        /// the same CPU finds the count moved at its end, and its window
        /// overwritten, and leaves the stack to `bpf_get_stack`.
        walks: u64,
        /// The thread of the last walk that read the target's stack.
        tid: u32,
        _pad: u32,
        /// How far up that thread's stack walks have read (past the highest
        /// frame, or to the end of the last window read): memory the thread's stack mapping holds for as long
        /// as the thread lives, so readable from any of its frames below in one
        /// read that may cross pages. A thread id reused by a new thread makes
        /// it wrong, which only costs a failed read.
        top: u64,
    }

    #[map]
    static WALKER: PerCpuArray<Walker> = PerCpuArray::with_max_entries(1, 0);

    /// Not atomic: two CPUs dropping at once may count one, which is enough,
    /// because readers only ask whether the counter moved.
    #[inline(always)]
    fn count_drop() {
        if let Some(drops) = DROPS.get_ptr_mut(0) {
            // SAFETY: a valid, aligned u64 slot of an array map.
            unsafe { *drops = (*drops).wrapping_add(1) };
        }
    }

    #[inline(always)]
    fn drops() -> u64 {
        // SAFETY: a valid u64 slot of an array map.
        DROPS.get_ptr(0).map_or(0, |drops| unsafe { *drops })
    }

    /// Userspace drains on a timer, so no record needs to wake it up.
    const RB_FLAGS: u64 = BPF_RB_NO_WAKEUP as u64;

    #[inline(always)]
    fn count_lost(reason: LostReason) {
        if reason == LostReason::RingFull {
            count_drop();
        }
        if let Some(counter) = LOST.get_ptr_mut(reason as u32) {
            // SAFETY: per-CPU slot, no concurrent writer on this CPU.
            unsafe { *counter += 1 };
        }
    }

    #[inline(always)]
    fn header(kind: RecordKind) -> RecordHeader {
        // SAFETY: plain helper call.
        header_at(kind, unsafe { bpf_ktime_get_ns() })
    }

    #[inline(always)]
    fn header_at(kind: RecordKind, ts_ns: u64) -> RecordHeader {
        RecordHeader {
            kind: kind as u32,
            tid: bpf_get_current_pid_tgid() as u32,
            ts_ns,
        }
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

    /// The stack pointer in `regs`.
    #[inline(always)]
    fn sp(regs: *mut aya_ebpf::bindings::pt_regs) -> u64 {
        // SAFETY: uprobe programs may read their own context directly.
        unsafe { (*regs).rsp }
    }

    /// Sends an allocation call's entry: its arguments.
    #[inline(always)]
    fn send_enter(ctx: &ProbeContext, call: AllocCall, flags: u32, size: u64, ptr_arg: u64) {
        match EVENTS.reserve::<AllocEnterRecord>(0) {
            Some(mut entry) => {
                entry.write(AllocEnterRecord {
                    header: header_at(RecordKind::AllocEnter, entry_time(call)),
                    call: call as u32,
                    flags,
                    size,
                    ptr_arg,
                    sp: sp(ctx.regs),
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
            (*record)._pad = 0;
            (*record).addr = addr;
            (*record).sp = sp(ctx.regs);
            let stack = core::ptr::addr_of_mut!((*record).stack);
            let tid = (*record).header.tid;
            let filled = match walk_frame_pointers(ctx.regs, stack, tid) {
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
            (*record).stack_bytes = filled;
        }
        entry.submit(RB_FLAGS);
    }

    /// Fills `stack` as `bpf_get_stack(BPF_F_USER_STACK)` would on x86-64 (the
    /// instruction pointer, then the return address of each frame of the
    /// frame-pointer chain, until a frame cannot be read or the stack is full)
    /// and returns the bytes filled; `None` when `bpf_get_stack` must do it: the
    /// trampoline's range is not known yet (the walk could not tell its
    /// address from a return address), the chain goes down the stack, or
    /// another walk took the window meanwhile. Where a uretprobe's trampoline
    /// stands in for a return address, the stack has the slot it was read from,
    /// marked ([`TRAMPOLINE_SLOT_MARK`]), and userspace puts the real one back.
    ///
    /// Frames are read from a window of up to [`STACK_WINDOW_BYTES`] of the
    /// target's stack, read at the first frame and again at any frame outside
    /// it. Each read costs more than its bytes (see [`STACK_WINDOW_BYTES`]), so
    /// the first read goes as far up the stack as is known to be readable: up
    /// to what an earlier walk of the same thread read ([`Walker::top`]); other
    /// reads go to the end of the frame's page only. The page a frame is in is
    /// mapped, the next one may not be, and a read that faults costs more than
    /// the whole walk (the kernel's walk reads 16 bytes a frame for that reason).
    #[inline(always)]
    unsafe fn walk_frame_pointers(
        regs: *mut aya_ebpf::bindings::pt_regs,
        stack: *mut [u64; MAX_STACK_DEPTH],
        tid: u32,
    ) -> Option<i64> {
        // SAFETY (whole function): `regs` is the program's context, `stack` a
        // reserved ring-buffer slot, `window` and `walker` this CPU's slots;
        // user memory is only read through bpf_probe_read_user.
        let start = unsafe { *UPROBE_TRAMPOLINE.get_ptr(trampoline::START)? };
        let end = unsafe { *UPROBE_TRAMPOLINE.get_ptr(trampoline::END)? };
        if start == 0 {
            return None;
        }
        let window = WINDOW.get_ptr_mut(0)?;
        let walker = WALKER.get_ptr_mut(0)?;
        let walks = unsafe { (*walker).walks }.wrapping_add(1);
        unsafe { (*walker).walks = walks };
        // Known readable up to here (0: nothing known of this thread).
        let mut top = if unsafe { (*walker).tid } == tid {
            unsafe { (*walker).top }
        } else {
            0
        };
        unsafe { (*stack)[0] = (*regs).rip };
        let mut fp = unsafe { (*regs).rbp };
        // The window holds the target's bytes [base, limit). Only addresses
        // are kept from one frame to the next, not a length: a length's range
        // differs with how the window was read, and each range would be one
        // more state for the verifier to explore at every frame.
        let mut base = 0u64;
        let mut limit = 0u64;
        let mut filled = 1usize;
        while filled < MAX_STACK_DEPTH {
            // Where the kernel's walk would stop at its first read: the chain's
            // end (a null frame pointer) or a value that is no user address
            // (code built without frame pointers leaves any value in rbp).
            // Stopping here spares the failed read and the helper's zeroing
            // of the window that follows a failure.
            if fp < USER_START || fp > USER_END - 16 {
                break;
            }
            if fp < base || fp + 16 > limit || (fp - base) & 7 != 0 {
                // Up to what the thread is known to hold, else to the end of
                // the frame's page.
                let page = PAGE - (fp & (PAGE - 1));
                let mut len = if top > fp + page { top - fp } else { page };
                if len > STACK_WINDOW_BYTES as u64 {
                    len = STACK_WINDOW_BYTES as u64;
                }
                base = fp;
                limit = fp;
                if len >= 16 {
                    if read_window(window, fp, len) == 0 {
                        limit = fp + len;
                    } else if len > page {
                        // What an earlier walk read is gone (the thread id was
                        // reused, or the thread left its stack).
                        unsafe { (*walker).top = 0 };
                        return None;
                    } else {
                        // The frame's page cannot be read: nor can the frame.
                        break;
                    }
                }
            }
            let (next, ret) = if limit > base {
                let word = ((fp - base) >> 3) as usize & (WINDOW_WORDS - 1);
                unsafe { ((*window)[word], (*window)[(word + 1) & (WINDOW_WORDS - 1)]) }
            } else {
                // The frame straddles the end of its page.
                match unsafe { bpf_probe_read_user(fp as *const [u64; 2]) } {
                    Ok([next, ret]) => (next, ret),
                    Err(_) => break,
                }
            };
            // In place of a return address in the trampoline, where it was
            // read: userspace puts back the real one, which the probed
            // function's entry sent from that very slot (see `trampoline`).
            let frame = if ret >= start && ret < end {
                (fp + 8) | TRAMPOLINE_SLOT_MARK
            } else {
                ret
            };
            unsafe { (*stack)[filled & (MAX_STACK_DEPTH - 1)] = frame };
            filled += 1;
            // Callers' frames lie above their callees'. A chain that goes down
            // again is not one a frame-pointer build makes (rbp holding data, a
            // switch of stacks): the kernel walks it, however far it goes,
            // rather than this walk reading a window at every step.
            if filled < MAX_STACK_DEPTH && next <= fp && next >= USER_START {
                return None;
            }
            fp = next;
        }
        if unsafe { (*walker).walks } != walks {
            // Preempted by a walk that reused the window: frames may be another
            // thread's.
            return None;
        }
        // How far up the next walk of this thread reads: just past the frame
        // the chain went on to, if the window holds it (the stack was full),
        // else to the end of the last window, which was readable.
        // (`fp` may be any value here, where the loop stopped. Should `fp + 16`
        // wrap, `reach` is a small number, below any frame's page, which no
        // walk ever reads up to.)
        let reach = if fp >= base && fp + 16 <= limit {
            fp + 16
        } else {
            limit
        };
        if reach > top {
            top = reach;
        }
        if top != 0 {
            unsafe {
                (*walker).tid = tid;
                (*walker).top = top;
            }
        }
        Some((filled * 8) as i64)
    }

    /// One read of the target's `[from, from + len)` into the window: 0, or
    /// the helper's error (the window then holds zeros).
    #[inline(always)]
    fn read_window(window: *mut [u64; WINDOW_WORDS], from: u64, len: u64) -> i64 {
        // Also checked by the caller, but removing it here changes what LLVM
        // emits: the verifier then needs 77 k instructions to check
        // `malloc_exit`, not 64 k (`--bpf-stats`).
        if len < 16 {
            return -1;
        }
        // SAFETY: `window` is this CPU's slot of WINDOW_WORDS words and `len`
        // at most its size (the callers bound it); the helper reads user
        // memory without faulting.
        unsafe {
            generated::bpf_probe_read_user(
                window.cast(),
                len as u32,
                from as *const core::ffi::c_void,
            )
        }
    }

    const PAGE: u64 = 4096;
    /// The lowest address a process can map (`vm.mmap_min_addr`'s default):
    /// below it a read can only fault, and a fault costs a microsecond or more
    /// (code built without frame pointers often leaves a small integer in rbp).
    const USER_START: u64 = 0x10000;
    /// x86-64's `TASK_SIZE_MAX`: the end of user space (47-bit addresses).
    const USER_END: u64 = (1 << 47) - PAGE;

    #[uprobe]
    pub fn malloc_enter(ctx: ProbeContext) -> u32 {
        send_enter(
            &ctx,
            AllocCall::Malloc,
            0,
            ctx.arg::<u64>(0).unwrap_or(0),
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
        );
        0
    }

    #[uprobe]
    pub fn calloc_enter(ctx: ProbeContext) -> u32 {
        let count = ctx.arg::<u64>(0).unwrap_or(0);
        let each = ctx.arg::<u64>(1).unwrap_or(0);
        send_enter(&ctx, AllocCall::Calloc, 0, count.wrapping_mul(each), 0);
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

    /// `free(ptr)`. May be attached past free's NULL check (see the probe's
    /// attach-offset decoding); `ptr` is still in rdi there.
    #[uprobe]
    pub fn free_enter(ctx: ProbeContext) -> u32 {
        send_free(RecordKind::Free, ctx.arg::<u64>(0).unwrap_or(0));
        0
    }

    /// `__rust_dealloc(ptr, size, align)`.
    #[uprobe]
    pub fn rust_dealloc_enter(ctx: ProbeContext) -> u32 {
        send_free(RecordKind::RustFree, ctx.arg::<u64>(0).unwrap_or(0));
        0
    }

    #[inline(always)]
    fn send_free(kind: RecordKind, addr: u64) {
        if addr == 0 {
            return;
        }
        match EVENTS.reserve::<FreeRecord>(0) {
            Some(mut entry) => {
                entry.write(FreeRecord {
                    header: header(kind),
                    addr,
                });
                entry.submit(RB_FLAGS);
            }
            None => count_lost(LostReason::RingFull),
        }
    }

    #[inline(always)]
    fn send_scope(scope: u32, phase: u32, arg: u64, sp: u64, ret: u64) {
        match EVENTS.reserve::<ScopeRecord>(0) {
            Some(mut entry) => {
                entry.write(ScopeRecord {
                    header: header(RecordKind::Scope),
                    scope,
                    phase,
                    arg,
                    sp,
                    ret,
                });
                entry.submit(RB_FLAGS);
            }
            None => count_lost(LostReason::RingFull),
        }
    }

    /// The probe's cookie: the scope kind, and [`SCOPE_RETURNS`].
    #[inline(always)]
    fn scope_cookie(ctx_ptr: *mut core::ffi::c_void) -> u32 {
        // SAFETY: plain helper call on our own context.
        unsafe { bpf_get_attach_cookie(ctx_ptr) as u32 }
    }

    /// Entry of an rmcp lifecycle function; the cookie names it and which of
    /// its arguments `arg` is. A function with a return probe also sends its return
    /// address, which the trampoline hides from stack walks while it runs
    /// (its probe is at the first instruction, so the word at the stack
    /// pointer is that address; other entries may be past the prologue).
    #[uprobe]
    pub fn scope_enter(ctx: ProbeContext) -> u32 {
        let scope = scope_cookie(ctx.as_ptr());
        let sp = sp(ctx.regs);
        let ret = if scope & SCOPE_RETURNS != 0 {
            // SAFETY: reads the target's own stack, without faulting.
            unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0)
        } else {
            0
        };
        send_scope(
            scope,
            PHASE_ENTER,
            argument(ctx.regs, scope_arg(scope)),
            sp,
            ret,
        );
        0
    }

    /// Argument `index` (0 to 5) at a function's entry. Every register is
    /// read, each with a volatile load at its own constant offset, and the
    /// value is chosen after: the verifier refuses a read of the context at an
    /// offset computed at run time, which is what reading only the one asked
    /// for compiles to (LLVM folds the branches into one load).
    #[inline(always)]
    fn argument(regs: *mut aya_ebpf::bindings::pt_regs, index: u32) -> u64 {
        // SAFETY: uprobe programs may read their own context directly; every
        // offset is a constant field of pt_regs.
        let values = unsafe {
            [
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rdi)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rsi)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rdx)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rcx)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).r8)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).r9)),
            ]
        };
        match index {
            0 => values[0],
            1 => values[1],
            2 => values[2],
            3 => values[3],
            4 => values[4],
            _ => values[5],
        }
    }

    #[uretprobe]
    pub fn scope_exit(ctx: RetProbeContext) -> u32 {
        let ret: u64 = ctx.ret();
        send_scope(scope_cookie(ctx.as_ptr()), PHASE_EXIT, ret, sp(ctx.regs), 0);
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
