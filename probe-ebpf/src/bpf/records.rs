//! The ring buffer to userspace, the drop counters, and what every record
//! starts with.

use aya_ebpf::bindings::BPF_RB_NO_WAKEUP;
use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::helpers::generated::bpf_ktime_get_ns;
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, PerCpuArray, RingBuf};
use leakscope_probe_ebpf::{LOST_REASONS, LostReason, RecordHeader, RecordKind};

/// Records to userspace. Sized by the loader (`--ring-buffer`).
#[map]
pub(super) static EVENTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Drop counters, indexed by [`LostReason`].
#[map]
pub(super) static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_REASONS, 0);

/// Every record the ring buffer refused, across CPUs (see
/// [`AllocEnterRecord::drops`]). Written only when a record is dropped;
/// read with an array lookup, which the verifier inlines.
#[map]
pub(super) static DROPS: Array<u64> = Array::with_max_entries(1, 0);

/// Not atomic: two CPUs dropping at once may count one, which is enough,
/// because readers only ask whether the counter moved.
#[inline(always)]
pub(super) fn count_drop() {
    if let Some(drops) = DROPS.get_ptr_mut(0) {
        // SAFETY: a valid, aligned u64 slot of an array map.
        unsafe { *drops = (*drops).wrapping_add(1) };
    }
}

#[inline(always)]
pub(super) fn drops() -> u64 {
    // SAFETY: a valid u64 slot of an array map.
    DROPS.get_ptr(0).map_or(0, |drops| unsafe { *drops })
}

/// Userspace drains on a timer, so no record needs to wake it up.
pub(super) const RB_FLAGS: u64 = BPF_RB_NO_WAKEUP as u64;

#[inline(always)]
pub(super) fn count_lost(reason: LostReason) {
    if reason == LostReason::RingFull {
        count_drop();
    }
    if let Some(counter) = LOST.get_ptr_mut(reason as u32) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *counter += 1 };
    }
}

#[inline(always)]
pub(super) fn header(kind: RecordKind) -> RecordHeader {
    // SAFETY: plain helper call.
    header_at(kind, unsafe { bpf_ktime_get_ns() })
}

#[inline(always)]
pub(super) fn header_at(kind: RecordKind, ts_ns: u64) -> RecordHeader {
    RecordHeader {
        kind: kind as u32,
        tid: bpf_get_current_pid_tgid() as u32,
        ts_ns,
    }
}

/// The stack pointer in `regs`.
#[inline(always)]
pub(super) fn sp(regs: *mut aya_ebpf::bindings::pt_regs) -> u64 {
    // SAFETY: uprobe programs may read their own context directly.
    unsafe { (*regs).rsp }
}
