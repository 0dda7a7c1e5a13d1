//! What the allocator does with a call: the one value it reads on every call.

use std::sync::atomic::{AtomicU8, Ordering};

/// Read (relaxed) on every allocator call, so that with no recorder running
/// the allocator costs one load over the inner one and a production build
/// can carry it.
static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// No recorder: every call goes straight to the inner allocator.
    Off = 0,
    /// Recording: every call is recorded (or sampled), except leakscope's own.
    On = 1,
    /// A recorder is starting or finishing (or its writer failed): nothing is
    /// recorded, but leakscope's own memory is still set apart.
    Busy = 2,
    /// A child forked (without exec) from a recording process: recording is
    /// the parent's, and dhat's lock may be held by a thread the child lacks.
    Forked = 3,
}

#[inline]
pub(crate) fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        0 => Mode::Off,
        1 => Mode::On,
        2 => Mode::Busy,
        _ => Mode::Forked,
    }
}

pub(super) fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::SeqCst);
}

/// Off -> Busy, the start of a recorder; false when another one runs.
pub(super) fn claim() -> bool {
    MODE.compare_exchange(
        Mode::Off as u8,
        Mode::Busy as u8,
        Ordering::SeqCst,
        Ordering::SeqCst,
    )
    .is_ok()
}

/// Whether events are recorded now (read with the buffer's lock held by the
/// pushing thread: see `buffer::push`).
pub(super) fn recording() -> bool {
    MODE.load(Ordering::SeqCst) == Mode::On as u8
}

/// True in a child forked from a recording process: its allocations bypass
/// dhat too, whose spin lock another thread of the parent may have held at the
/// fork (it would never be released in the child).
#[inline]
pub(crate) fn forked_child() -> bool {
    mode() == Mode::Forked
}

/// A child forked without `exec` has no writer thread, and the buffer's lock may
/// have been held by a thread that does not exist in the child: recording there
/// would deadlock or fill a buffer nobody drains. The child stops recording at
/// once (the recording stays the parent's); registered once per process.
pub(super) fn stop_recording_in_forked_children() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        set_mode(Mode::Forked);
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}
