//! What the allocator and the session layer call to record an event.

use std::sync::atomic::{AtomicU64, Ordering};

use leakscope_recording::monotonic_ns;

use leakscope_recording::coalesce::PollsKept;

use super::buffer::{RawEvent, RawKind, Shared, lock, push, shared, tid};
use super::cost::{Part, skipped};
use super::mode::{Mode, mode};
use super::{own, polls};
use crate::stack::{DEPTH, walk};

/// Runs `f` unless recording is off or this thread is doing leakscope's own
/// work already (what it records then would be leakscope's).
#[inline]
fn guarded(f: impl FnOnce(&Shared)) {
    if mode() != Mode::On {
        return;
    }
    let Some(shared) = shared() else {
        return;
    };
    if !own::enter() {
        return;
    }
    f(shared);
    own::leave();
}

/// Pushes an event of this thread: after the poll entries it is inside of
/// that wait (see `polls`).
fn record(shared: &Shared, event: RawEvent, frames: &[u64]) -> bool {
    polls::write_waiting(shared);
    push(shared, event, frames)
}

/// An event with no stack.
fn event(kind: RawKind, addr: u64, old: u64, size: u64) -> RawEvent {
    RawEvent {
        kind,
        tid: tid(),
        ts: monotonic_ns(),
        addr,
        old,
        size,
        entry_ts: 0,
        depth: 0,
    }
}

/// Records an event with this thread's stack, walked here. A block recorded
/// whole inside a session span's poll that waits stands for that poll too
/// (`polls::write_waiting_around_whole`).
fn record_walked(shared: &Shared, kind: RawKind, addr: u64, old: u64, size: u64, entry_ts: u64) {
    let mut frames = [0u64; DEPTH];
    let depth = walk(&mut frames);
    let mut event = event(kind, addr, old, size);
    event.entry_ts = entry_ts;
    event.depth = depth as u8;
    if kind == RawKind::WholeAlloc {
        if let Some(span) = polls::write_waiting_around_whole(shared) {
            event.kind = RawKind::WholeAllocInPoll;
            event.old = span;
        }
        push(shared, event, &frames[..depth]);
        return;
    }
    record(shared, event, &frames[..depth]);
}

/// Called by the allocator: an allocation, a free (before the block goes back) or a realloc.
///
/// A free is pushed without the polls waiting around it: the analyzer pairs
/// a free with its block by address and reads nothing else of it (not its
/// thread's open scopes), so it does not make a poll hold anything. In a
/// sampled recording most frees recorded are those of blocks recorded whole
/// (tokio's task cells and channels), made in polls that hold nothing else:
/// written out for the free, each such poll cost its entry and its end.
pub(crate) fn record_memory(kind: RawKind, addr: u64, old: u64, size: u64) {
    if kind == RawKind::WholeAlloc && skipped(Part::Whole) {
        return;
    }
    guarded(|shared| {
        if kind == RawKind::Free {
            push(shared, event(kind, addr, old, size), &[]);
        } else {
            record_walked(shared, kind, addr, old, size, 0);
        }
    });
}

/// Called by the allocator after a realloc that was entered at `entry_ts`.
pub(crate) fn record_realloc(new: u64, old: u64, size: u64, entry_ts: u64) {
    guarded(|shared| record_walked(shared, RawKind::Realloc, new, old, size, entry_ts));
}

/// The clock of every record, for a realloc's entry time.
pub(crate) fn now_ns() -> u64 {
    monotonic_ns()
}

/// Called by the session layer: a session span's end, a task's.
pub(crate) fn record_scope(kind: RawKind, key: u64) {
    guarded(|shared| {
        record(shared, event(kind, key, 0, 0), &[]);
    });
}

/// Called by the session layer: a poll of a task or a session span is
/// entered (`TaskPoll`, `SpanEnter`).
pub(crate) fn record_poll(kind: RawKind, key: u64) {
    guarded(|shared| polls::enter(shared, kind, key));
}

/// Called by the session layer: the poll entered last with this key ends
/// (`TaskPollEnd`, `SpanExit`); `kept` is its object's polls so far.
pub(crate) fn record_poll_end(kind: RawKind, key: u64, kept: &mut PollsKept) {
    guarded(|shared| polls::exit(shared, kind, key, kept));
}

/// Called by the session layer: a tokio task was spawned here (its span `key`
/// was just made); the stack says by whom.
pub(crate) fn record_task_spawned(key: u64) {
    guarded(|shared| record_walked(shared, RawKind::TaskSpawned, key, 0, 0, 0));
}

/// Called by the session layer: the session id of the innermost open span on this thread.
/// The id string and the growth of the facts table are allocated as
/// leakscope's own work, so they are never recorded: the recorder's memory is
/// not the application's.
pub(crate) fn record_session_id(id: &str) {
    record_fact(RawKind::SessionId, id);
}

/// A session with this id was just created on this thread (see `SessionFact::Created`).
pub(crate) fn record_session_created(id: &str) {
    record_fact(RawKind::SessionCreated, id);
}

fn record_fact(kind: RawKind, id: &str) {
    if skipped(Part::Facts) || skipped(Part::Buffer) {
        return;
    }
    guarded(|shared| {
        let index = lock(&shared.facts).push(id.to_owned());
        if !record(shared, event(kind, index, 0, 0), &[]) {
            // Dropped: nobody will take it.
            lock(&shared.facts).take(index);
        }
    });
}

/// Time zero of the application trace (`chrome_layer`), 0 when there is none:
/// a recorder started later writes it first.
static TRACE_ORIGIN: AtomicU64 = AtomicU64::new(0);

/// An application trace counts its time from `ts` (monotonic ns): written into
/// the running recording, and into every recording started later.
#[cfg_attr(not(feature = "chrome"), allow(dead_code))]
pub(crate) fn set_trace_origin(ts: u64) {
    TRACE_ORIGIN.store(ts, Ordering::SeqCst);
    guarded(|shared| {
        record(shared, event(RawKind::TraceOrigin, ts, 0, 0), &[]);
    });
}

/// The application trace's time zero, 0 when there is none.
pub(super) fn trace_origin() -> u64 {
    TRACE_ORIGIN.load(Ordering::SeqCst)
}

/// Called by the allocator: a sampling point fell in a block that could not
/// be filed among the sampled blocks alive, so it was made unsampled; the
/// recording says how many (`lost`, reason `sampled-full`).
pub(crate) fn record_sampled_full() {
    if let Some(shared) = shared() {
        shared.sampled_full.fetch_add(1, Ordering::Relaxed);
    }
}
