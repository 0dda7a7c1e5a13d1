//! Pairing an allocation's entry with its return, per thread by stack
//! pointer, and keeping only a thread's outermost allocator call (see the
//! module docs of [`super`]).

use std::io;

use leakscope_probe_ebpf::{
    ALLOC_FLAG_NEW_UNSAMPLED, ALLOC_FLAG_OLD_UNFILED, ALLOC_FLAG_RUST, ALLOC_FLAG_WHOLE, AllocCall,
    AllocEnterRecord, AllocExitRecord, EXIT_FLAG_UNFILED, FreeRecord, RETURN_SP_OFFSET,
};
use leakscope_recording::{Record, monotonic_ns};

use super::Capture;

/// Allocator calls in progress on one thread, outermost first.
pub(super) type InProgress = Vec<AllocEnterRecord>;

/// More calls in progress on one thread than any real nesting: entries whose
/// returns were lost pile up here, and the oldest are let go.
const MAX_NESTED_CALLS: usize = 16;

/// Threads with calls in progress beyond this are forgotten at once (their
/// returns were lost: a thread with a call in progress is inside the allocator).
pub(super) const MAX_THREADS_IN_PROGRESS: usize = 65_536;

/// A call still open this long before a nested call began is not really
/// open: its return was dropped. Allocator calls take microseconds; this
/// leaves room for a thread descheduled inside one.
pub(super) const STALE_CALL_NS: u64 = 1_000_000_000;

impl<W: io::Write> Capture<W> {
    pub(super) fn enter(&mut self, mut enter: AllocEnterRecord) {
        if enter.header.ts_ns == 0 {
            // The kernel times realloc's entries only (see `AllocEnterRecord`);
            // the others are timed on arrival, a drain period late at most
            // unless the ring buffer is backed up: late enough to judge a call
            // open for a second, and never earlier than the call.
            enter.header.ts_ns = monotonic_ns();
        }
        if self.in_progress.len() >= MAX_THREADS_IN_PROGRESS
            && !self.in_progress.contains_key(&enter.header.tid)
        {
            let stale = self.in_progress.values().map(|c| c.len() as u64).sum();
            self.in_progress.clear();
            self.lost_returns(enter.header.ts_ns, stale);
        }
        let calls = self.in_progress.entry(enter.header.tid).or_default();
        // Open calls this one cannot be nested in had their returns dropped: one
        // deeper than it (a lower stack pointer), or one still open although a
        // record was dropped since it began, or long ago.
        let before = calls.len();
        calls.retain(|open| {
            open.sp >= enter.sp
                && open.drops == enter.drops
                && enter.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS
        });
        let mut stale = (before - calls.len()) as u64;
        if calls.len() == MAX_NESTED_CALLS {
            calls.remove(0);
            stale += 1;
        }
        calls.push(enter);
        self.lost_returns(enter.header.ts_ns, stale);
    }

    /// Allocator calls whose returns the ring buffer dropped: each is an
    /// allocation not recorded. (The kernel counts a dropped entry itself, and
    /// not a dropped return, so that a call whose two records were both dropped
    /// counts once.)
    pub(super) fn lost_returns(&mut self, ts: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.stats.lost += count;
        self.stats.unpaired += count;
        let _ = self.writer.push(Record::Lost {
            ts,
            reason: leakscope_recording::LostReason::RingFull,
            count,
        });
    }

    /// A return: pairs it with its entry and records the block if the call was
    /// its thread's outermost.
    pub(super) fn exit(&mut self, exit: &AllocExitRecord) -> io::Result<()> {
        let tid = exit.header.tid;
        let Some(calls) = self.in_progress.get_mut(&tid) else {
            // Its entry was dropped (and counted by the kernel).
            self.stats.unpaired += 1;
            return Ok(());
        };
        let entry_sp = exit.sp.wrapping_sub(RETURN_SP_OFFSET);
        // Innermost first: the entry of this return. Calls entered after it
        // (deeper) were nested in it and lost their returns.
        let Some(at) = calls.iter().rposition(|c| c.sp == entry_sp) else {
            self.stats.unpaired += 1;
            return Ok(());
        };
        self.stats.unpaired += (calls.len() - at - 1) as u64;
        calls.truncate(at + 1);
        let enter = calls.pop().expect("rposition found it");
        // What is left are the calls this one is nested in (their entries
        // checked that), unless one has been open implausibly long.
        let before = calls.len();
        calls.retain(|open| exit.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS);
        let stale = (before - calls.len()) as u64;
        let outermost = calls.is_empty();
        if outermost {
            self.in_progress.remove(&tid);
        }
        self.lost_returns(exit.header.ts_ns, stale);
        let call = AllocCall::from_u32(enter.call);
        if !outermost || call.map(AllocCall::exit) != AllocCall::from_u32(exit.call) {
            return Ok(());
        }
        let (ts, size, addr) = (exit.header.ts_ns, enter.size, exit.addr);
        // The block a realloc resized, if it is one the recording knows: once
        // the kernel's map of sampled blocks has been full, a realloc of any
        // block it does not hold is sent, and only those the kernel sent
        // unfiled are ours.
        let old = if enter.flags & ALLOC_FLAG_OLD_UNFILED != 0
            && (addr == 0 || !self.unfiled.remove(&enter.ptr_arg))
        {
            0
        } else {
            enter.ptr_arg
        };
        if addr != 0 {
            self.file(addr, exit.flags & EXIT_FLAG_UNFILED != 0);
        }
        if enter.flags & ALLOC_FLAG_NEW_UNSAMPLED != 0 {
            // A sampled recording's realloc of a sampled block into one that
            // was not sampled: only the old block's going is recorded.
            if addr == 0 || old == 0 {
                return Ok(());
            }
            self.live.free(&mut self.stats, enter.ptr_arg);
            self.stats.frees += 1;
            self.stats.events += 1;
            return self.writer.push(Record::Free {
                ts,
                tid,
                addr: enter.ptr_arg,
            });
        }
        let stack = self.stack_id(exit)?;
        if enter.flags & ALLOC_FLAG_WHOLE != 0 {
            // Recorded whole (a block aligned for a task cell or a channel):
            // it stands for itself, and so does its free.
            if addr == 0 {
                return Ok(());
            }
            if call == Some(AllocCall::Realloc) && old != 0 {
                self.live.free(&mut self.stats, enter.ptr_arg);
                self.stats.frees += 1;
                self.stats.events += 1;
                // (Aligned blocks are seldom resized: the old one's free is
                // written at the return, without realloc's entry-time check;
                // a free of it inside the call is not written: `passed_on`.)
                self.writer.push(Record::Free {
                    ts,
                    tid,
                    addr: enter.ptr_arg,
                })?;
            }
            self.stats.allocs += 1;
            self.live.alloc_whole(&mut self.stats, addr, size, stack);
            self.stats.events += 1;
            return self.writer.push(Record::WholeAlloc {
                ts,
                tid,
                addr,
                size,
                stack,
            });
        }
        let event = match call {
            Some(AllocCall::Realloc) => {
                self.live.free(&mut self.stats, old);
                Record::Realloc {
                    ts,
                    tid,
                    old,
                    new: addr,
                    size,
                    stack,
                    entry_ts: enter.header.ts_ns,
                }
            }
            // A failed posix_memalign wrote nothing: there is no block.
            Some(AllocCall::PosixMemalign) if addr == 0 => return Ok(()),
            _ => Record::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            },
        };
        self.note_alloc(tid, addr, size, stack);
        self.stats.events += 1;
        self.writer.push(event)
    }

    /// Whether a libc `free` is the global allocator's own, made for a Rust
    /// shim call already recorded: the block `__rust_dealloc` just gave back
    /// on this thread (`rust_freed`), or a free inside a shim call still open
    /// on it (a realloc that moved the block). Also the old block's free
    /// inside a realloc recorded whole (`mi_realloc_aligned` calls `mi_free`
    /// itself): its return writes that free, once.
    pub(super) fn passed_on(&self, free: &FreeRecord, rust_freed: Option<u64>) -> bool {
        if rust_freed == Some(free.addr) {
            return true;
        }
        self.in_progress.get(&free.header.tid).is_some_and(|calls| {
            calls.iter().any(|open| {
                let whole_realloc_of_it = open.flags & ALLOC_FLAG_WHOLE != 0
                    && open.call == AllocCall::Realloc as u32
                    && open.ptr_arg == free.addr;
                (open.flags & ALLOC_FLAG_RUST != 0 || whole_realloc_of_it)
                    && free.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS
            })
        })
    }
}
