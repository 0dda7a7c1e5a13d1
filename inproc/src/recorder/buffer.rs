//! The event buffer between the threads that record and the writer: fixed
//! size, behind one mutex, never grown, so recording never allocates.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::mode::recording;
use crate::stack::DEPTH;

/// Events the buffer holds between two drains (~10 ms apart, or sooner once
/// it is half full). Each is ~240 B.
const BUFFER_EVENTS: usize = 1 << 16;

/// How long a thread that finds the buffer full waits for the writer to take
/// it. Past that the writer is stalled (its reader stopped, a full disk): the
/// threads stop waiting and count what they drop, until it takes the buffer again.
const STALL: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawKind {
    Alloc,
    /// An allocation a sampled recording records whole (`Record::WholeAlloc`).
    WholeAlloc,
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

#[derive(Clone, Copy)]
pub(crate) struct RawEvent {
    pub(super) kind: RawKind,
    pub(super) tid: u32,
    pub(super) ts: u64,
    pub(super) addr: u64,
    pub(super) old: u64,
    pub(super) size: u64,
    /// Realloc: when it was entered (see `Record::Realloc::entry_ts`).
    pub(super) entry_ts: u64,
    pub(super) depth: u8,
    pub(super) frames: [u64; DEPTH],
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
            frames: [0; DEPTH],
        }
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
    pub(super) buffer: Mutex<Vec<RawEvent>>,
    /// The writer waits on it between drains; a thread that fills the buffer
    /// half (or whole) wakes it early.
    pub(super) drain: Condvar,
    /// Notified by the writer after each swap: threads waiting for room.
    pub(super) swapped: Condvar,
    /// The writer did not take a full buffer within [`STALL`].
    pub(super) stalled: AtomicBool,
    /// The writer's spare buffer between two recordings: made (and its pages
    /// touched) once per process, so a recording started again does not page
    /// 15 MiB in while the application runs: a recording of 100,000 `Box`
    /// pairs started afresh took 135-150 ns a pair instead of 122-128.
    pub(super) spare: Mutex<Option<Vec<RawEvent>>>,
    /// Strings the events index (session ids), cleared at each start.
    pub(super) facts: Mutex<Vec<String>>,
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
        buffer: Mutex::new(event_buffer()),
        drain: Condvar::new(),
        swapped: Condvar::new(),
        stalled: AtomicBool::new(false),
        spare: Mutex::new(None),
        facts: Mutex::new(Vec::new()),
        lost: AtomicU64::new(0),
        sampled_full: AtomicU64::new(0),
    });
    lock(&shared.buffer).clear();
    lock(&shared.facts).clear();
    shared.lost.store(0, Ordering::SeqCst);
    shared.sampled_full.store(0, Ordering::SeqCst);
    shared.stalled.store(false, Ordering::SeqCst);
    shared
}

/// Events pushed and never written: 0 once a recording has finished (a
/// check for tests: the last swap must leave nothing behind).
#[doc(hidden)]
pub fn unwritten_events() -> usize {
    shared().map_or(0, |shared| lock(&shared.buffer).len())
}

/// Adds an event, waiting for room when the buffer is full (as heaptrack's
/// pipe makes its target wait) rather than dropping it: a dropped free makes a
/// freed block look alive. Only a writer stalled past [`STALL`] drops events,
/// counted, so a stopped reader slows the process once, not on every call.
///
/// Whether recording is still on is read under the buffer's lock: the
/// writer's last swap is taken under it after recording is off, so no event
/// lands in the buffer after it, unread and uncounted.
pub(super) fn push(shared: &Shared, event: RawEvent) {
    let mut buffer = lock(&shared.buffer);
    loop {
        if !recording() {
            return;
        }
        let len = buffer.len();
        if len < buffer.capacity() {
            buffer.push(event);
            if len + 1 == buffer.capacity() / 2 {
                shared.drain.notify_one();
            }
            return;
        }
        if shared.stalled.load(Ordering::Relaxed) {
            shared.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        shared.drain.notify_one();
        let (again, waited) = shared
            .swapped
            .wait_timeout(buffer, STALL)
            .unwrap_or_else(|e| e.into_inner());
        buffer = again;
        if waited.timed_out() && buffer.len() == buffer.capacity() {
            shared.stalled.store(true, Ordering::Relaxed);
        }
    }
}

/// An empty event buffer whose pages are all touched already.
pub(super) fn event_buffer() -> Vec<RawEvent> {
    let mut buffer = Vec::<RawEvent>::with_capacity(BUFFER_EVENTS);
    // SAFETY: writes zeros within the buffer's capacity, which it owns; the
    // length stays 0, so nothing reads them as events.
    unsafe { std::ptr::write_bytes(buffer.as_mut_ptr(), 0, buffer.capacity()) };
    buffer
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
