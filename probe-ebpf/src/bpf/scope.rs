//! rmcp's and tokio's lifecycle functions: entry and return, the uprobe
//! cookie saying which function it is and which argument to send.

use aya_ebpf::EbpfContext as _;
use aya_ebpf::helpers::generated::bpf_get_attach_cookie;
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user};
use aya_ebpf::macros::{uprobe, uretprobe};
use aya_ebpf::programs::{ProbeContext, RetProbeContext};
use leakscope_probe_ebpf::{
    LostReason, PHASE_ENTER, PHASE_EXIT, RETURN_SP_OFFSET, RecordKind, SCOPE_RETURNS, ScopeRecord,
    scope_arg, split_scope,
};

use super::records::{EVENTS, RB_FLAGS, count_lost, header, sp};
use super::sample;
use super::unwind;

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
    if sample::sampling() && scope & SCOPE_RETURNS != 0 {
        sample::window(split_scope(scope).0, true);
    }
    let sp = sp(ctx.regs);
    let ret = if scope & SCOPE_RETURNS != 0 {
        // SAFETY: reads the target's own stack, without faulting.
        let ret = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
        if unwind::mappings() != 0 {
            unwind::call_entered(bpf_get_current_pid_tgid() as u32, sp, ret);
        }
        ret
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
    let scope = scope_cookie(ctx.as_ptr());
    if sample::sampling() {
        sample::window(split_scope(scope).0, false);
    }
    let sp = sp(ctx.regs);
    if unwind::mappings() != 0 {
        unwind::call_returned(
            bpf_get_current_pid_tgid() as u32,
            sp.wrapping_sub(RETURN_SP_OFFSET),
        );
    }
    send_scope(scope, PHASE_EXIT, ret, sp, 0);
    0
}
