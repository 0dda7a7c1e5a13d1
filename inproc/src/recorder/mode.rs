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
    /// No recorder, but blocks a sampled recording made may be alive: they
    /// are over-aligned, and a free tests its pointer (see `sampled`) so the
    /// inner allocator gets each block back with the layout it was made with.
    Lingering = 4,
}

#[inline]
pub(crate) fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        0 => Mode::Off,
        1 => Mode::On,
        2 => Mode::Busy,
        3 => Mode::Forked,
        _ => Mode::Lingering,
    }
}

pub(super) fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::SeqCst);
}

/// Off (or Lingering) -> Busy, the start of a recorder; false when another
/// one runs. Returns the mode to go back to should the start fail.
pub(super) fn claim() -> Option<Mode> {
    [Mode::Off, Mode::Lingering].into_iter().find(|&idle| {
        MODE.compare_exchange(
            idle as u8,
            Mode::Busy as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
    })
}

/// The mode of a process that no recorder runs in: Off, or Lingering while
/// sampled blocks may be alive. Called after Busy is set, so a thread about
/// to make a sampled block either is counted here or sees the recording gone.
pub(super) fn idle() -> Mode {
    if crate::sampled::alive() == 0 {
        Mode::Off
    } else {
        Mode::Lingering
    }
}

/// Whether events are recorded now (read with the buffer's lock held by the
/// pushing thread: see `buffer::push`; and after counting a sampled block
/// about to be made: see `sampled::reserve`).
pub(crate) fn recording() -> bool {
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
