//! "Leakscope's own work": one thread-local flag, set while a thread runs the
//! recorder (or is its writer thread, or runs inside the inner allocator).
//! What a thread allocates while it is set is leakscope's own memory (or the
//! inner allocator's bookkeeping), never the application's: it is not
//! recorded, and the allocator takes it from its own source.

use std::cell::Cell;

thread_local! {
    /// Const-initialized, so reading it never allocates.
    static OWN: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread does leakscope's own work. Also true while
/// thread-locals are torn down, when nothing can be recorded anyway.
#[inline]
pub(crate) fn active() -> bool {
    OWN.try_with(Cell::get).unwrap_or(true)
}

/// Runs `f` as leakscope's own work. Returns its result and whether this is
/// the outermost such call on the thread (the one whose allocation to record).
#[inline]
pub(crate) fn run<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let outermost = enter();
    let result = f();
    if outermost {
        leave();
    }
    (result, outermost)
}

/// [`run`] without the flag's history: nothing is recorded from inside `f`, so
/// record events before or after it.
pub(crate) fn quietly<R>(f: impl FnOnce() -> R) -> R {
    run(f).0
}

/// Marks this thread as leakscope's own for the rest of its life (the writer,
/// the control thread, the application trace's writer).
pub(crate) fn mark_thread() {
    let _ = OWN.try_with(|flag| flag.set(true));
}

/// Sets the flag; true when it was not set before (this call must [`leave`]).
#[inline]
pub(super) fn enter() -> bool {
    OWN.try_with(|flag| !flag.replace(true)).unwrap_or(false)
}

#[inline]
pub(super) fn leave() {
    let _ = OWN.try_with(|flag| flag.set(false));
}
