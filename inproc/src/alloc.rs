//! The global allocator: any allocator underneath, plus a record of every call
//! while a recorder runs.

use std::alloc::{GlobalAlloc, Layout, System};

use super::recorder::mode::{Mode, mode};
use super::recorder::own;
use super::recorder::{RawKind, now_ns, record_memory, record_realloc};

/// leakscope's global allocator over `A`: records each call while a
/// [`Recorder`](super::Recorder) runs, and otherwise costs one relaxed load
/// per call over `A`, so a production build can carry it and have recording
/// switched on while it runs ([`listen`](super::listen), then
/// `leakscope-probe attach --pid PID`).
///
/// ```
/// // A heap-profile test, over dhat (dhat's profiles and `dhat::HeapStats`
/// // keep working):
/// #[global_allocator]
/// static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;
/// ```
///
/// ```
/// // A production server, over the allocator it already uses:
/// #[global_allocator]
/// static ALLOC: leakscope_inproc::Alloc<std::alloc::System> =
///     leakscope_inproc::Alloc::new(std::alloc::System);
/// ```
///
/// Memory that is leakscope's own (the recorder's buffers, its writer thread,
/// the session layer's bookkeeping) is never recorded. Over dhat it also comes
/// straight from `System`, so `dhat::HeapStats` does not charge it to the
/// application either (dhat frees the blocks it never saw through `System`).
pub struct Alloc<A: GlobalAlloc = dhat::Alloc> {
    inner: A,
    /// Where leakscope's own memory comes from.
    own: Own,
}

/// Where [`Alloc`] takes leakscope's own memory from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Own {
    /// The inner allocator (any allocator frees only what it made).
    Inner,
    /// `System`: the inner allocator is dhat, which must not count it and
    /// hands the blocks it never saw back to `System`.
    System,
}

/// `Alloc` over dhat, as a value: `static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;`
#[allow(non_upper_case_globals)]
pub const Alloc: Alloc = Alloc {
    inner: dhat::Alloc,
    own: Own::System,
};

impl<A: GlobalAlloc> Alloc<A> {
    /// leakscope's allocator over `inner` (`System`, `tikv_jemallocator::Jemalloc`,
    /// `mimalloc::MiMalloc`, ...).
    pub const fn new(inner: A) -> Self {
        Self {
            inner,
            own: Own::Inner,
        }
    }

    /// Allocates leakscope's own memory.
    #[inline]
    unsafe fn own_alloc(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe {
            match (self.own, zeroed) {
                (Own::System, false) => System.alloc(layout),
                (Own::System, true) => System.alloc_zeroed(layout),
                (Own::Inner, false) => self.inner.alloc(layout),
                (Own::Inner, true) => self.inner.alloc_zeroed(layout),
            }
        }
    }

    /// Resizes one of leakscope's own blocks over dhat: the new block comes
    /// from `System`, and the old one goes back through dhat, which forgets
    /// it if it had it. A block leakscope keeps may have been made through
    /// dhat (a writer buffer first grown on the thread that started the
    /// recorder, outside it): `System.realloc` freed it behind dhat's back,
    /// and dhat later panicked (`assertion failed: matches!(old, None)`)
    /// when the address came back (`heap_profile_fixed.rs`).
    #[cold]
    unsafe fn own_realloc_over_dhat(
        &self,
        block: *mut u8,
        layout: Layout,
        new_size: usize,
    ) -> *mut u8 {
        // SAFETY: the caller's `new_size`, rounded up to `align`, does not
        // overflow (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: forwarded contract; `new_size` is non-zero.
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and distinct;
            // `block` was allocated by this allocator with `layout`. dhat
            // frees a block it never saw through System.
            unsafe {
                std::ptr::copy_nonoverlapping(block, new, layout.size().min(new_size));
                self.inner.dealloc(block, layout);
            }
        }
        new
    }

    #[cold]
    unsafe fn alloc_slow(&self, layout: Layout, zeroed: bool, mode: Mode) -> *mut u8 {
        if mode == Mode::Forked || own::active() {
            // SAFETY: forwarded contract.
            return unsafe { self.own_alloc(layout, zeroed) };
        }
        // SAFETY: forwarded contract.
        let (block, outermost) = own::run(|| unsafe {
            if zeroed {
                self.inner.alloc_zeroed(layout)
            } else {
                self.inner.alloc(layout)
            }
        });
        if mode == Mode::On && outermost && !block.is_null() {
            record_memory(RawKind::Alloc, block as u64, 0, layout.size() as u64);
        }
        block
    }
}

// SAFETY: every method forwards to the inner allocator (or, for leakscope's
// own memory over dhat, to System, which dhat frees through), with the
// caller's arguments unchanged; recording only reads the results.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Alloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match mode() {
            // SAFETY: forwarded contract.
            Mode::Off => unsafe { self.inner.alloc(layout) },
            // SAFETY: forwarded contract.
            mode => unsafe { self.alloc_slow(layout, false, mode) },
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match mode() {
            // SAFETY: forwarded contract.
            Mode::Off => unsafe { self.inner.alloc_zeroed(layout) },
            // SAFETY: forwarded contract.
            mode => unsafe { self.alloc_slow(layout, true, mode) },
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match mode() {
            // SAFETY: forwarded contract.
            Mode::Off | Mode::Busy => unsafe { self.inner.dealloc(block, layout) },
            Mode::Forked => match self.own {
                // SAFETY: forwarded contract (dhat only wraps System).
                Own::System => unsafe { System.dealloc(block, layout) },
                // SAFETY: forwarded contract.
                Own::Inner => unsafe { self.inner.dealloc(block, layout) },
            },
            Mode::On => {
                // Recorded before the block goes back, so its address cannot be reused first.
                record_memory(RawKind::Free, block as u64, 0, 0);
                // SAFETY: forwarded contract.
                own::run(|| unsafe { self.inner.dealloc(block, layout) });
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let mode = mode();
        if mode == Mode::Off {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.realloc(block, layout, new_size) };
        }
        if mode == Mode::Forked {
            // SAFETY: forwarded contract (dhat only wraps System, and must not
            // be entered in a forked child).
            return unsafe {
                match self.own {
                    Own::System => System.realloc(block, layout, new_size),
                    Own::Inner => self.inner.realloc(block, layout, new_size),
                }
            };
        }
        if own::active() {
            // Only leakscope's own blocks are resized inside the recorder.
            // SAFETY: forwarded contract.
            return unsafe {
                match self.own {
                    Own::System => self.own_realloc_over_dhat(block, layout, new_size),
                    Own::Inner => self.inner.realloc(block, layout, new_size),
                }
            };
        }
        // The old block goes back inside realloc: another thread may be handed
        // its address before this realloc is recorded. The entry time tells.
        let entered = now_ns();
        // SAFETY: forwarded contract.
        let (new, outermost) = own::run(|| unsafe { self.inner.realloc(block, layout, new_size) });
        if mode == Mode::On && outermost && !new.is_null() {
            record_realloc(new as u64, block as u64, new_size as u64, entered);
        }
        new
    }
}
