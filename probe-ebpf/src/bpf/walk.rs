//! The user stack, walked by frame pointer into a record (see
//! [`walk_frame_pointers`]).

use aya_ebpf::helpers::bpf_probe_read_user;
use aya_ebpf::helpers::generated;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, PerCpuArray};
use leakscope_probe_ebpf::{MAX_STACK_DEPTH, STACK_WINDOW_BYTES, TRAMPOLINE_SLOT_MARK, trampoline};

/// The `[uprobes]` mapping of the target (see [`trampoline`]); zero until
/// userspace has seen it.
#[map]
pub(super) static UPROBE_TRAMPOLINE: Array<u64> = Array::with_max_entries(trampoline::SLOTS, 0);

pub(super) const WINDOW_WORDS: usize = STACK_WINDOW_BYTES / 8;

/// Scratch space for the stack walk's window, one per CPU (a program runs
/// on one CPU to its end, and 16 KiB is far beyond the 512-byte BPF stack).
#[map]
pub(super) static WINDOW: PerCpuArray<[u64; WINDOW_WORDS]> = PerCpuArray::with_max_entries(1, 0);

/// The last stack walk on a CPU: what it learnt of its thread's stack, and
/// a count that tells a walk whether another one used the window meanwhile.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Walker {
    /// Walks started on this CPU. A uprobe program runs with migration
    /// disabled, not preemption: a walk preempted by another thread's on
    /// the same CPU finds the count moved at its end, and its window
    /// overwritten, and leaves the stack to `bpf_get_stack`.
    pub(super) walks: u64,
    /// The thread of the last walk that read the target's stack.
    pub(super) tid: u32,
    _pad: u32,
    /// How far up that thread's stack walks have read (past the highest
    /// frame, or to the end of the last window read): memory the thread's stack mapping holds for as long
    /// as the thread lives, so readable from any of its frames below in one
    /// read that may cross pages. A thread id reused by a new thread makes
    /// it wrong, which only costs a failed read.
    pub(super) top: u64,
}

#[map]
pub(super) static WALKER: PerCpuArray<Walker> = PerCpuArray::with_max_entries(1, 0);

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
pub(super) unsafe fn walk_frame_pointers(
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
        let frame = if trampoline::seen(start, end, ret) == trampoline::Seen::It {
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
pub(super) fn read_window(window: *mut [u64; WINDOW_WORDS], from: u64, len: u64) -> i64 {
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
        generated::bpf_probe_read_user(window.cast(), len as u32, from as *const core::ffi::c_void)
    }
}

pub(super) const PAGE: u64 = 4096;
/// The lowest address a process can map (`vm.mmap_min_addr`'s default):
/// below it a read can only fault, and a fault costs a microsecond or more
/// (code built without frame pointers often leaves a small integer in rbp).
pub(super) const USER_START: u64 = 0x10000;
/// x86-64's `TASK_SIZE_MAX`: the end of user space (47-bit addresses).
pub(super) const USER_END: u64 = (1 << 47) - PAGE;
