//! Which allocations a sampled recording records: each thread counts down the
//! bytes it allocates to its next sampling point (`leakscope_recording::sampling`
//! has the method and the weights). An unsampled allocation costs this
//! countdown and a branch: no stack walk, no lock, no buffer.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use leakscope_recording::sampling::{Countdown, Sampling};

/// The running recording's mean spacing in bytes; 0 when it records every call.
static MEAN: AtomicU64 = AtomicU64::new(0);
/// Bumped at each recording's start: a thread's countdown from an earlier
/// recording (maybe of another mean) is drawn afresh, or its first point
/// would be placed by the old mean.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// The fast path's part of a thread's state: bytes left to the next point, and
/// the recording it was drawn for.
#[derive(Clone, Copy)]
struct Left {
    bytes: i64,
    epoch: u32,
}

thread_local! {
    static LEFT: Cell<Left> = const { Cell::new(Left { bytes: 0, epoch: 0 }) };
    /// The slow path's part: the random sequence the spacings come from.
    static DRAWS: Cell<Option<Countdown>> = const { Cell::new(None) };
}

/// Sets how the next recording samples (called while no recording runs).
pub(super) fn configure(sampling: Sampling) {
    MEAN.store(sampling.mean_bytes().unwrap_or(0), Ordering::SeqCst);
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Whether the running recording samples (rather than records every call).
#[inline]
pub(crate) fn sampling() -> bool {
    MEAN.load(Ordering::Relaxed) != 0
}

/// Which recording runs (or ran last): changes at each start.
#[inline]
pub(crate) fn epoch() -> u32 {
    EPOCH.load(Ordering::Relaxed)
}

/// The allocator's fast path: takes `size` bytes off this thread's countdown
/// and returns true when it stays above zero and was drawn for the running
/// recording; otherwise returns false and changes nothing ([`sample`]
/// decides, out of line). A recording of every call never draws a
/// countdown, so its epoch never matches and every call goes on to be
/// recorded.
#[inline]
pub(crate) fn counted_down(size: usize) -> bool {
    let epoch = EPOCH.load(Ordering::Relaxed);
    LEFT.try_with(|left| {
        let mut now = left.get();
        now.bytes -= size.max(1) as i64;
        let counted = now.epoch == epoch && now.bytes > 0;
        if counted {
            left.set(now);
        }
        counted
    })
    .unwrap_or(false)
}

/// Whether an allocation of `size` bytes is recorded, in a sampled recording.
#[inline]
pub(crate) fn sample(size: usize) -> bool {
    let epoch = EPOCH.load(Ordering::Relaxed);
    LEFT.try_with(|left| {
        let mut now = left.get();
        if now.epoch != epoch {
            return crossed(left, size, epoch, true);
        }
        now.bytes -= size.max(1) as i64;
        if now.bytes > 0 {
            left.set(now);
            return false;
        }
        crossed(left, size, epoch, false)
    })
    .unwrap_or(false)
}

/// A sampling point fell in this block (or the countdown is an earlier
/// recording's, `stale`, and is drawn afresh first).
#[cold]
fn crossed(left: &Cell<Left>, size: usize, epoch: u32, stale: bool) -> bool {
    let mean = MEAN.load(Ordering::Relaxed).max(2);
    let mut draws = DRAWS.try_with(Cell::get).ok().flatten();
    let countdown = match &mut draws {
        Some(countdown) if countdown.mean() == mean => countdown,
        _ => draws.insert(Countdown::new(mean, seed())),
    };
    let sampled = if stale {
        let bytes = countdown.spacing() - size.max(1) as i64;
        if bytes > 0 {
            left.set(Left { bytes, epoch });
            false
        } else {
            true
        }
    } else {
        true
    };
    if sampled {
        // Memoryless: where the point fell inside the block does not matter;
        // the next is a fresh spacing past its end.
        left.set(Left {
            bytes: countdown.spacing(),
            epoch,
        });
    }
    let _ = DRAWS.try_with(|cell| cell.set(draws));
    sampled
}

/// Threads must not share a sequence: the thread id and the time.
fn seed() -> u64 {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    tid.rotate_left(32) ^ leakscope_recording::monotonic_ns()
}
