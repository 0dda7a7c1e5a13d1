//! `free` and `__rust_dealloc`: only their entry, with the block.

use aya_ebpf::macros::uprobe;
use aya_ebpf::programs::ProbeContext;
use leakscope_probe_ebpf::{FreeRecord, LostReason, RecordKind};

use super::records::{EVENTS, RB_FLAGS, count_lost, header};
use super::sample;

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
    let kind = if sample::sampling() {
        match sample::free(kind, addr) {
            Some(kind) => kind,
            None => return,
        }
    } else {
        kind
    };
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
