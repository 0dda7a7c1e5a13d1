//! Return addresses hidden by uretprobes: while a lifecycle function with a
//! return probe runs, the kernel's trampoline stands in for its return
//! address on the stack. Its entry sent the real one; stacks recorded
//! meanwhile get it back here.

use std::io;

use leakscope_probe_ebpf::{
    AllocExitRecord, MAX_STACK_DEPTH, RETURN_SP_OFFSET, ScopeRecord, TRAMPOLINE_SLOT_MARK,
};
use leakscope_recording::{Phase, StackId};

use super::Capture;

/// A call of a lifecycle function with a return probe, entered and not yet
/// returned: while it runs, the kernel's trampoline stands in for `ret` on
/// the stack.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingReturn {
    /// The stack pointer at entry (pointing to the return address).
    sp: u64,
    ret: u64,
}

/// More open lifecycle calls on one thread than any real nesting: entries
/// whose returns were lost pile up here, and the oldest are let go.
const MAX_PENDING_RETURNS: usize = 64;

/// Threads with open lifecycle calls beyond this are forgotten at once (threads
/// that ended inside one, or whose returns were lost).
const MAX_THREADS_PENDING: usize = 65_536;

impl<W: io::Write> Capture<W> {
    /// Keeps the thread's open calls of a function with a return probe. A call
    /// is matched with its return by stack pointer; calls deeper than the one
    /// entered or returned from have returned already (their records were
    /// dropped), and are let go.
    pub(super) fn track_return(&mut self, record: &ScopeRecord, phase: Phase) {
        let tid = record.header.tid;
        if self.pending_returns.len() >= MAX_THREADS_PENDING
            && !self.pending_returns.contains_key(&tid)
        {
            self.pending_returns.clear();
        }
        let open = self.pending_returns.entry(tid).or_default();
        match phase {
            Phase::Enter => {
                open.retain(|call| call.sp > record.sp);
                if open.len() == MAX_PENDING_RETURNS {
                    open.remove(0);
                }
                open.push(PendingReturn {
                    sp: record.sp,
                    ret: record.ret,
                });
            }
            Phase::Exit => {
                let entry_sp = record.sp.wrapping_sub(RETURN_SP_OFFSET);
                open.retain(|call| call.sp > entry_sp);
            }
        }
        if open.is_empty() {
            self.pending_returns.remove(&tid);
        }
    }

    /// The id of this record's stack (the writer writes a `Stack` record the first time).
    pub(super) fn stack_id(&mut self, record: &AllocExitRecord) -> io::Result<Option<StackId>> {
        if record.stack_bytes <= 0 {
            return Ok(None);
        }
        let filled = (record.stack_bytes as usize / 8).min(MAX_STACK_DEPTH);
        let mut stack = record.stack;
        let mut frames: &[u64] = &stack[..filled];
        if frames.iter().any(|&frame| self.is_trampoline(frame)) {
            let kept = self.restore_returns(record.header.tid, record.sp, &mut stack[..filled]);
            frames = &stack[..kept];
        }
        while let [rest @ .., 0] = frames {
            frames = rest;
        }
        let known = self.writer.stacks();
        let id = self.writer.stack(frames)?;
        if let Some(id) = id
            && self.writer.stacks() > known
        {
            self.live.stack(id, frames);
        }
        Ok(id)
    }

    /// Whether a stack frame stands for a return address the kernel's
    /// trampoline took: marked by the programs' walk with the slot it was read
    /// from, or the trampoline's own address (in a stack from `bpf_get_stack`,
    /// on kernels that do not put the real address back themselves).
    fn is_trampoline(&self, frame: u64) -> bool {
        frame & TRAMPOLINE_SLOT_MARK != 0
            || self
                .trampoline
                .as_ref()
                .is_some_and(|range| range.contains(&frame))
    }

    /// Puts the real return addresses in `frames` (innermost first) where the
    /// trampoline stands, for an allocation that returned with stack pointer
    /// `sp`. A marked frame names the slot its return address was read from,
    /// which is the stack pointer of exactly one open call's entry: its return
    /// address goes there. A bare trampoline address takes the innermost open
    /// call above the allocation not yet used, as the kernel pairs them.
    /// Returns how many frames to keep: all, or those below the first
    /// trampoline no open call accounts for.
    fn restore_returns(&mut self, tid: u32, sp: u64, frames: &mut [u64]) -> usize {
        let open = self
            .pending_returns
            .get(&tid)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Open calls before this index (outermost first) are left for bare
        // trampoline addresses, which go outward.
        let mut next = open.len();
        let mut kept = frames.len();
        for (i, slot_or_frame) in frames.iter_mut().enumerate() {
            let frame = *slot_or_frame;
            if !self.is_trampoline(frame) {
                continue;
            }
            let found = if frame & TRAMPOLINE_SLOT_MARK != 0 {
                let slot = frame & !TRAMPOLINE_SLOT_MARK;
                open.iter().rposition(|call| call.sp == slot)
            } else {
                open[..next].iter().rposition(|call| call.sp > sp)
            };
            match found {
                Some(at) if open[at].ret != 0 => {
                    *slot_or_frame = open[at].ret;
                    next = at;
                }
                _ => {
                    kept = i;
                    break;
                }
            }
        }
        if kept < frames.len() && !self.frame_pointers_omitted {
            self.stats.trampolines_unresolved += 1;
        }
        kept
    }
}
