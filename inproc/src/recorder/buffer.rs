//! The event buffer between the threads that record and the writer: fixed
//! size, behind one lock, never grown, so recording never allocates.

use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::mode::recording;
use crate::stack::DEPTH;

/// Events the buffer holds between two drains (~10 ms apart, or sooner once
/// it is half full). Each is 48 B, its stack apart.
const BUFFER_EVENTS: usize = 1 << 16;

/// Return addresses the buffer holds between two drains: 12 an event, on
/// average (a sampled recording's polls and frees have none; a recording of
/// every call walks most allocations, ~15-20 frames deep in a server).
const BUFFER_FRAMES: usize = BUFFER_EVENTS * 12;

/// How long a thread that finds the buffer full waits for the writer to take
/// it. Past that the writer is stalled (its reader stopped, a full disk): the
/// threads stop waiting and count what they drop, until it takes the buffer again.
const STALL: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawKind {
    Alloc,
    /// An allocation a sampled recording records whole (`Record::WholeAlloc`).
    WholeAlloc,
    /// A block recorded whole inside a session span's poll that waits
    /// unwritten (`Record::WholeAllocInPoll`); `old` is the span's key.
    WholeAllocInPoll,
    Free,
    Realloc,
    /// A session span was entered / exited; `addr` is its key.
    SpanEnter,
    SpanExit,
    /// The session worker's span closed; `addr` is its key.
    WorkerEnd,
    /// `addr` indexes the facts table: the session id of the innermost open span.
    SessionId,
    /// `addr` indexes the facts table: a session with this id was just created here.
    SessionCreated,
    /// `addr` is the monotonic time an application trace counts from.
    TraceOrigin,
    /// A tokio task's span (`runtime.spawn`) was made (with the spawner's
    /// stack), entered, exited or closed; `addr` is its key.
    TaskSpawned,
    TaskPoll,
    TaskPollEnd,
    TaskEnded,
}

/// An event as a thread pushes it; its stack (`depth` return addresses)
/// goes into the buffer's `frames`, not into the event.
///
/// Why apart: an event with its stack inline was ~240 B, and most events a
/// sampled recording makes (polls, frees, facts) have none: the two buffers
/// took 30 MiB of the target's memory, 18 MiB now. (It did not change a
/// cooperative server's throughput at saturation, measured side by side:
/// 0.83x either way, so the zeros were not what the recording cost there.)
#[derive(Clone, Copy)]
pub(crate) struct RawEvent {
    pub(super) kind: RawKind,
    pub(super) depth: u8,
    pub(super) tid: u32,
    pub(super) ts: u64,
    pub(super) addr: u64,
    pub(super) old: u64,
    pub(super) size: u64,
    /// Realloc: when it was entered (see `Record::Realloc::entry_ts`).
    pub(super) entry_ts: u64,
}

impl RawEvent {
    /// An event of this thread with no stack, made at `ts`.
    pub(super) fn at(kind: RawKind, addr: u64, ts: u64) -> Self {
        Self {
            kind,
            tid: tid(),
            ts,
            addr,
            old: 0,
            size: 0,
            entry_ts: 0,
            depth: 0,
        }
    }
}

/// What the threads push and the writer takes in one swap: the events, and
/// their stacks one after the other in the events' order.
pub(crate) struct Events {
    events: Vec<RawEvent>,
    frames: Vec<u64>,
}

impl Events {
    /// An empty buffer whose pages are all touched already.
    pub(super) fn new() -> Self {
        Self {
            events: touched(BUFFER_EVENTS),
            frames: touched(BUFFER_FRAMES),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether an event with `depth` frames still fits.
    fn fits(&self, depth: usize) -> bool {
        self.events.len() < self.events.capacity()
            && self.frames.len() + depth <= self.frames.capacity()
    }

    /// Whether either part is half full or more: the writer's cue.
    pub(super) fn half(&self) -> bool {
        self.events.len() >= self.events.capacity() / 2
            || self.frames.len() >= self.frames.capacity() / 2
    }

    fn full(&self) -> bool {
        !self.fits(DEPTH)
    }

    pub(super) fn clear(&mut self) {
        self.events.clear();
        self.frames.clear();
    }

    /// The events in the order pushed, each with its stack.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RawEvent, &[u64])> {
        let mut rest = &self.frames[..];
        self.events.iter().map(move |event| {
            let (frames, after) = rest.split_at(usize::from(event.depth).min(rest.len()));
            rest = after;
            (event, frames)
        })
    }
}

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's id, as events carry it.
pub(crate) fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::gettid() } as u32);
        }
        t.get()
    })
    .unwrap_or(0)
}

/// What the recording threads and the writer share, made once per process.
pub(super) struct Shared {
    pub(super) buffer: SpinLock<Events>,
    /// The writer waits on it (with `idle`) between drains; a thread that
    /// fills the buffer half (or whole) wakes it early.
    pub(super) drain: Condvar,
    pub(super) idle: Mutex<()>,
    /// Swaps the writer made, counted under their lock and notified
    /// on `swapped`: a thread that found the buffer full waits for the next.
    pub(super) swaps: Mutex<u64>,
    pub(super) swapped: Condvar,
    /// The writer did not take a full buffer within [`STALL`].
    pub(super) stalled: AtomicBool,
    /// The writer's spare buffer between two recordings: made (and its pages
    /// touched) once per process, so a recording started again does not page
    /// 9 MiB in while the application runs: a recording of 100,000 `Box`
    /// pairs started afresh took 135-150 ns a pair instead of 122-128.
    pub(super) spare: Mutex<Option<Events>>,
    /// Strings the events index (session ids), until the writer takes them.
    pub(super) facts: Mutex<Facts>,
    pub(super) lost: AtomicU64,
    /// Sampled blocks that could not be filed (the table of sampled blocks
    /// alive was full): made unsampled, so a leak of them would be missed.
    pub(super) sampled_full: AtomicU64,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// The shared state, once a recorder has made it.
#[inline]
pub(super) fn shared() -> Option<&'static Shared> {
    SHARED.get()
}

/// The shared state, made empty for a new recording: its own count of
/// dropped events, no facts of an earlier one.
pub(super) fn reset() -> &'static Shared {
    let shared = SHARED.get_or_init(|| Shared {
        buffer: SpinLock::new(Events::new()),
        drain: Condvar::new(),
        idle: Mutex::new(()),
        swaps: Mutex::new(0),
        swapped: Condvar::new(),
        stalled: AtomicBool::new(false),
        spare: Mutex::new(None),
        facts: Mutex::new(Facts::new()),
        lost: AtomicU64::new(0),
        sampled_full: AtomicU64::new(0),
    });
    shared.buffer.lock().clear();
    *lock(&shared.facts) = Facts::new();
    shared.lost.store(0, Ordering::SeqCst);
    shared.sampled_full.store(0, Ordering::SeqCst);
    shared.stalled.store(false, Ordering::SeqCst);
    shared
}

/// Events pushed and never written: 0 once a recording has finished (a
/// check for tests: the last swap must leave nothing behind).
#[doc(hidden)]
pub fn unwritten_events() -> usize {
    shared().map_or(0, |shared| shared.buffer.lock().len())
}

/// Adds an event, waiting for room when the buffer is full (as heaptrack's
/// pipe makes its target wait) rather than dropping it: a dropped free makes a
/// freed block look alive. Only a writer stalled past [`STALL`] drops events,
/// counted, so a stopped reader slows the process once, not on every call.
///
/// Whether recording is still on is read under the buffer's lock: the
/// writer's last swap is taken under it after recording is off, so no event
/// lands in the buffer after it, unread and uncounted.
///
/// `frames` is the event's stack, `event.depth` long.
pub(super) fn push(shared: &Shared, event: RawEvent, frames: &[u64]) -> bool {
    debug_assert_eq!(usize::from(event.depth), frames.len());
    if super::cost::skipped(super::cost::Part::Buffer) {
        return true;
    }
    let mut buffer = shared.buffer.lock();
    loop {
        if !recording() {
            return false;
        }
        if buffer.fits(frames.len()) {
            let was_half = buffer.half();
            buffer.events.push(event);
            buffer.frames.extend_from_slice(frames);
            if !was_half && buffer.half() {
                shared.drain.notify_one();
            }
            return true;
        }
        if shared.stalled.load(Ordering::Relaxed) {
            shared.lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        // Full: wait for the writer's next swap (counted, so that one made
        // between letting go of the buffer and waiting is not missed).
        let seen = *lock(&shared.swaps);
        drop(buffer);
        shared.drain.notify_one();
        let swaps = lock(&shared.swaps);
        let (swaps, waited) = shared
            .swapped
            .wait_timeout_while(swaps, STALL, |swaps| *swaps == seen)
            .unwrap_or_else(|e| e.into_inner());
        drop(swaps);
        buffer = shared.buffer.lock();
        if waited.timed_out() && buffer.full() {
            shared.stalled.store(true, Ordering::Relaxed);
        }
    }
}

/// The lock the event buffer is behind: a spin lock, not `std`'s mutex.
/// Every event recorded takes it, for the copy of one event (the writer,
/// for a swap of two vectors), and with `std`'s mutex (an atomic exchange
/// to let go, and a sleep in the kernel when taken) pushing an event was the
/// largest part of what a sampled recording cost a cooperative server's
/// threads at saturation (`perf`: the lock's two atomics were ~90% of
/// `push`, and its waits showed as context switches).
pub(super) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, held by one thread at
// a time (the flag, taken with Acquire and given back with Release).
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub(super) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Spins a little while another thread holds it (for a copy), then
    /// yields the core: the holder may have been preempted.
    pub(super) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard { lock: self }
    }
}

pub(super) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// An empty vector of room for `n`, whose pages are all touched already.
fn touched<T: Copy>(n: usize) -> Vec<T> {
    let mut buffer = Vec::<T>::with_capacity(n);
    // SAFETY: writes zeros within the buffer's capacity, which it owns; the
    // length stays 0, so nothing reads them as values.
    unsafe { std::ptr::write_bytes(buffer.as_mut_ptr(), 0, buffer.capacity()) };
    buffer
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The session ids the events index (`RawKind::SessionId`, `SessionCreated`:
/// an event carries a number, not a string), each kept until the writer
/// takes it, or until its event is dropped. A recording left on for hours
/// sees an id per session: kept all along, they grew with every session
/// recorded.
pub(super) struct Facts {
    /// The index of `waiting[0]`.
    first: u64,
    /// `None` once taken; taken ones at the front are let go.
    waiting: VecDeque<Option<String>>,
}

impl Facts {
    pub(super) const fn new() -> Self {
        Self {
            first: 0,
            waiting: VecDeque::new(),
        }
    }

    /// Keeps `id`; returns the index its event carries.
    pub(super) fn push(&mut self, id: String) -> u64 {
        self.waiting.push_back(Some(id));
        self.first + self.waiting.len() as u64 - 1
    }

    /// The id at `index`, which is no longer kept. An id is taken once:
    /// `None` after that, or for an index never given.
    pub(super) fn take(&mut self, index: u64) -> Option<String> {
        let at = usize::try_from(index.checked_sub(self.first)?).ok()?;
        let id = self.waiting.get_mut(at)?.take();
        while let Some(None) = self.waiting.front() {
            self.waiting.pop_front();
            self.first += 1;
        }
        id
    }

    /// Ids kept, taken or not (those behind one not yet taken).
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Events, Facts, RawEvent, RawKind};

    #[test]
    fn each_event_is_read_back_with_its_own_stack() {
        let mut events = Events::new();
        let pushed: [&[u64]; 4] = [&[1, 2, 3], &[], &[4], &[5, 6]];
        for (i, frames) in pushed.iter().enumerate() {
            let mut event = RawEvent::at(RawKind::Alloc, i as u64, 0);
            event.depth = frames.len() as u8;
            assert!(events.fits(frames.len()));
            events.events.push(event);
            events.frames.extend_from_slice(frames);
        }
        let read: Vec<(u64, Vec<u64>)> = events
            .iter()
            .map(|(event, frames)| (event.addr, frames.to_vec()))
            .collect();
        let expected: Vec<(u64, Vec<u64>)> = pushed
            .iter()
            .enumerate()
            .map(|(i, frames)| (i as u64, frames.to_vec()))
            .collect();
        assert_eq!(read, expected);
        events.clear();
        assert_eq!(events.iter().count(), 0);
        assert!(!events.half());
    }

    #[test]
    fn facts_are_let_go_once_taken_in_any_order() {
        let mut facts = Facts::new();
        let a = facts.push("a".into());
        let b = facts.push("b".into());
        let c = facts.push("c".into());
        // Events reach the writer out of order (two threads).
        assert_eq!(facts.take(b).as_deref(), Some("b"));
        assert_eq!(facts.kept(), 3, "`a` is still awaited");
        assert_eq!(facts.take(a).as_deref(), Some("a"));
        assert_eq!(facts.kept(), 1);
        assert_eq!(facts.take(a), None, "taken once");
        assert_eq!(facts.take(c).as_deref(), Some("c"));
        assert_eq!(facts.kept(), 0);
        // Indexes go on from where they were.
        assert_eq!(facts.push("d".into()), 3);
        assert_eq!(facts.take(99), None);
        assert_eq!(facts.take(3).as_deref(), Some("d"));
        // A day of sessions keeps nothing once written.
        for i in 0..100_000 {
            let index = facts.push(format!("session-{i}"));
            assert!(facts.take(index).is_some());
        }
        assert_eq!(facts.kept(), 0);
        // One never taken holds those after it: a dropped event's id is
        // taken back at once (`record_fact`).
        let held = facts.push("dropped".into());
        let later = facts.push("later".into());
        facts.take(later);
        assert_eq!(facts.kept(), 2);
        facts.take(held);
        assert_eq!(facts.kept(), 0);
    }
}
