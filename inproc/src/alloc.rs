//! The global allocator: any allocator underneath, plus a record of every call
//! while a recorder runs.

use std::alloc::{GlobalAlloc, Layout, System};

use super::recorder::cost::{Part, skipped};
use super::recorder::mode::{Mode, mode, recording};
use super::recorder::{
    RawKind, now_ns, own, record_memory, record_realloc, record_sampled_full, sampler,
};
use super::sampled;
use leakscope_recording::WHOLE_ALIGN;

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
        // SAFETY: forwarded contract; `block` was allocated by this allocator
        // with `layout`, and dhat frees a block it never saw through System.
        unsafe {
            move_block(
                block,
                layout,
                new_size,
                |new_layout| System.alloc(new_layout),
                || self.inner.dealloc(block, layout),
            )
        }
    }

    #[cold]
    unsafe fn alloc_slow(&self, layout: Layout, zeroed: bool, mode: Mode) -> *mut u8 {
        if mode == Mode::Forked || own::active() {
            // SAFETY: forwarded contract.
            return unsafe { self.own_alloc(layout, zeroed) };
        }
        // SAFETY: forwarded contract.
        let (block, outermost) = own::run(|| unsafe { self.inner_alloc(layout, zeroed) });
        if mode == Mode::On && outermost && !block.is_null() {
            record_memory(RawKind::Alloc, block as u64, 0, layout.size() as u64);
        }
        block
    }

    /// An allocation while a sampled recording runs: the countdown decides.
    /// An unsampled one costs the countdown and a branch over the inner
    /// allocator (and, over dhat, the flag that keeps dhat's own memory apart).
    #[inline]
    unsafe fn alloc_sampling(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        if self.own == Own::System && own::active() {
            // SAFETY: forwarded contract.
            return unsafe { self.own_alloc(layout, zeroed) };
        }
        if layout.align() >= WHOLE_ALIGN {
            // SAFETY: forwarded contract.
            return unsafe { self.alloc_whole(layout, zeroed) };
        }
        if !sampler::sample(layout.size()) {
            // SAFETY: forwarded contract.
            return match self.own {
                Own::Inner => unsafe { self.inner_alloc(layout, zeroed) },
                Own::System => own::run(|| unsafe { self.inner_alloc(layout, zeroed) }).0,
            };
        }
        if own::active() {
            // Leakscope's own memory is never recorded.
            // SAFETY: forwarded contract.
            return unsafe { self.own_alloc(layout, zeroed) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.alloc_sampled(layout, zeroed) }
    }

    /// The inner allocator's `alloc` or `alloc_zeroed`.
    #[inline]
    unsafe fn inner_alloc(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe {
            if zeroed {
                self.inner.alloc_zeroed(layout)
            } else {
                self.inner.alloc(layout)
            }
        }
    }

    /// Makes and records a block a sampled recording records whole
    /// (`Record::WholeAlloc`): one aligned to a cache-line pair or more,
    /// tokio's task cells and channels, of which sessions and tasks are made.
    /// Not over-aligned: its free is told by the layout's alignment, which
    /// every free is given.
    #[cold]
    unsafe fn alloc_whole(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        if own::active() {
            // SAFETY: forwarded contract.
            return unsafe { self.own_alloc(layout, zeroed) };
        }
        // SAFETY: forwarded contract.
        let (block, outermost) = own::run(|| unsafe { self.inner_alloc(layout, zeroed) });
        if outermost && !block.is_null() {
            record_memory(RawKind::WholeAlloc, block as u64, 0, layout.size() as u64);
        }
        block
    }

    /// Makes and records a sampled block: over-aligned, so its free is told
    /// from the pointer (see `sampled`). Falls back to an ordinary block,
    /// unrecorded, when the recording ended meanwhile or the table is full.
    #[cold]
    unsafe fn alloc_sampled(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        sampled::reserve();
        if recording() {
            let wide = sampled::layout(layout);
            // SAFETY: forwarded contract; `wide` only aligns more.
            let (block, _) = own::run(|| unsafe { self.inner_alloc(wide, zeroed) });
            if !block.is_null() {
                if sampled::insert(block) {
                    record_memory(RawKind::Alloc, block as u64, 0, layout.size() as u64);
                    return block;
                }
                // SAFETY: made just above with `wide`.
                own::run(|| unsafe { self.inner.dealloc(block, wide) });
                record_sampled_full();
            }
        }
        sampled::unreserve();
        // SAFETY: forwarded contract.
        own::run(|| unsafe { self.inner_alloc(layout, zeroed) }).0
    }

    /// Frees `block` as the inner allocator made it: with the over-aligned
    /// layout if it is a sampled block (taking it out of the table), else
    /// with `layout`. Returns whether it was sampled.
    #[inline]
    unsafe fn dealloc_as_made(&self, block: *mut u8, layout: Layout, forked: bool) -> bool {
        let sampled = sampled::may_be(block) && sampled::take(block);
        let layout = if sampled {
            sampled::layout(layout)
        } else {
            layout
        };
        // SAFETY: forwarded contract; a sampled block was made with the
        // over-aligned layout.
        unsafe {
            match (forked, self.own) {
                // dhat only wraps System, and must not be entered in a forked child.
                (true, Own::System) => System.dealloc(block, layout),
                _ => self.inner.dealloc(block, layout),
            }
        }
        sampled
    }

    /// The free of a page-aligned block while a sampled recording runs:
    /// recorded if it is a sampled block.
    #[cold]
    unsafe fn dealloc_maybe_sampled(&self, block: *mut u8, layout: Layout) {
        if sampled::contains(block) {
            // Recorded before the block goes back, so its address cannot be
            // reused first.
            record_memory(RawKind::Free, block as u64, 0, 0);
        }
        // SAFETY: forwarded contract.
        own::run(|| unsafe { self.dealloc_as_made(block, layout, false) });
    }

    /// A realloc of a sampled block in a forked child: moved by hand, from
    /// and to the memory the child may use (not dhat's, whose lock another
    /// thread of the parent may have held).
    #[cold]
    unsafe fn realloc_forked_sampled(
        &self,
        block: *mut u8,
        layout: Layout,
        new_size: usize,
    ) -> *mut u8 {
        // SAFETY: forwarded contract; `block` is a sampled block of this
        // allocator made with `layout` (over-aligned).
        unsafe {
            move_block(
                block,
                layout,
                new_size,
                |new_layout| self.own_alloc(new_layout, false),
                || {
                    self.dealloc_as_made(block, layout, true);
                },
            )
        }
    }

    /// A realloc in a sampled recording (or of a block a sampled recording
    /// made): what the old and the new block are decides. Neither sampled is
    /// the inner allocator's realloc, unrecorded; otherwise the block moves
    /// by hand (a new block, a copy, the old one freed as it was made), so
    /// that each keeps the layout it was made with.
    unsafe fn realloc_sampling(
        &self,
        block: *mut u8,
        layout: Layout,
        new_size: usize,
        mode: Mode,
    ) -> *mut u8 {
        let on = mode == Mode::On;
        // Recording every call, with a block a sampled recording made before.
        let every = on && !sampler::sampling();
        if on && !every && layout.align() >= WHOLE_ALIGN {
            // Recorded whole, old and new: moved by hand, so that the old
            // block's free is recorded before its address can be reused.
            let new_layout =
                // SAFETY: the caller's `new_size`, rounded up to `align`, does
                // not overflow (GlobalAlloc::realloc's contract).
                unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: forwarded contract; `new_size` is non-zero.
            let new = unsafe { self.alloc_whole(new_layout, false) };
            if !new.is_null() {
                // SAFETY: both blocks are valid for the smaller size, and
                // distinct (the old one is still allocated).
                unsafe { std::ptr::copy_nonoverlapping(block, new, layout.size().min(new_size)) };
                record_memory(RawKind::Free, block as u64, 0, 0);
                // SAFETY: `block` was made by this allocator with `layout`.
                own::run(|| unsafe { self.dealloc_as_made(block, layout, false) });
            }
            return new;
        }
        let old_sampled = sampled::may_be(block) && sampled::contains(block);
        let new_sampled = on && !every && sampler::sample(new_size);
        if !old_sampled && !new_sampled {
            // SAFETY: forwarded contract.
            return own::run(|| unsafe { self.inner.realloc(block, layout, new_size) }).0;
        }
        // SAFETY: the caller's `new_size`, rounded up to `align`, does not
        // overflow (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = if new_sampled {
            // SAFETY: forwarded contract; `new_size` is non-zero.
            unsafe { self.alloc_sampled(new_layout, false) }
        } else {
            // SAFETY: forwarded contract.
            own::run(|| unsafe { self.inner.alloc(new_layout) }).0
        };
        if new.is_null() {
            return new;
        }
        if every {
            record_memory(RawKind::Alloc, new as u64, 0, new_size as u64);
        }
        // SAFETY: both blocks are valid for the smaller size, and distinct
        // (the old one is still allocated).
        unsafe { std::ptr::copy_nonoverlapping(block, new, layout.size().min(new_size)) };
        if old_sampled && on {
            // Before the block goes back, so its address cannot be reused first.
            record_memory(RawKind::Free, block as u64, 0, 0);
        }
        // SAFETY: `block` was made by this allocator with `layout` (over-aligned if sampled).
        own::run(|| unsafe { self.dealloc_as_made(block, layout, false) });
        new
    }
}

// SAFETY: every method forwards to the inner allocator (or, for leakscope's
// own memory over dhat, to System, which dhat frees through), with the
// caller's arguments unchanged; recording only reads the results.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Alloc<A> {
    /// No recorder, or a sampled one whose countdown this block does not
    /// reach: the inner allocator, straight.
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mode = mode();
        if matches!(mode, Mode::Off | Mode::Lingering)
            || self.unsampled(mode, layout, layout.size())
        {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.alloc(layout) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.alloc_other(layout, mode) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let mode = mode();
        if matches!(mode, Mode::Off | Mode::Lingering)
            || self.unsampled(mode, layout, layout.size())
        {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.alloc_zeroed(layout) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.alloc_zeroed_other(layout, mode) }
    }

    /// No recorder, or a sampled one and a block that cannot be sampled
    /// (nor one it records whole).
    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let mode = mode();
        if mode == Mode::Off
            || (mode == Mode::On
                && self.own == Own::Inner
                && !sampled::may_be(block)
                && layout.align() < WHOLE_ALIGN
                && sampler::sampling())
        {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.dealloc(block, layout) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.dealloc_other(block, layout, mode) }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let mode = mode();
        if mode == Mode::Off || (!sampled::may_be(block) && self.unsampled(mode, layout, new_size))
        {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.realloc(block, layout, new_size) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.realloc_other(block, layout, new_size, mode) }
    }
}

impl<A: GlobalAlloc> Alloc<A> {
    /// Whether a call of `size` bytes (a block of `layout`'s alignment) goes
    /// to the inner allocator unrecorded for certain: a sampled recording
    /// runs, the block is not one it records whole, and this thread's
    /// countdown is its own and does not reach zero in the block (then the
    /// countdown is taken). Over dhat, never: its own memory is told apart first.
    #[inline]
    fn unsampled(&self, mode: Mode, layout: Layout, size: usize) -> bool {
        mode == Mode::On
            && self.own == Own::Inner
            && layout.align() < WHOLE_ALIGN
            && sampler::counted_down(size)
    }
}

/// Every call the fast paths of [`GlobalAlloc`] below do not take: out of
/// line, so that those keep to a few tests and a tail call into the inner
/// allocator (inlined, the callee-saved registers these need were pushed
/// and popped around every free, recording or not).
impl<A: GlobalAlloc> Alloc<A> {
    #[inline(never)]
    unsafe fn alloc_other(&self, layout: Layout, mode: Mode) -> *mut u8 {
        match mode {
            // SAFETY: forwarded contract.
            Mode::Off | Mode::Lingering => unsafe { self.inner.alloc(layout) },
            // SAFETY: forwarded contract.
            Mode::On if sampler::sampling() => unsafe { self.alloc_sampling(layout, false) },
            // SAFETY: forwarded contract.
            mode => unsafe { self.alloc_slow(layout, false, mode) },
        }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed_other(&self, layout: Layout, mode: Mode) -> *mut u8 {
        match mode {
            // SAFETY: forwarded contract.
            Mode::Off | Mode::Lingering => unsafe { self.inner.alloc_zeroed(layout) },
            // SAFETY: forwarded contract.
            Mode::On if sampler::sampling() => unsafe { self.alloc_sampling(layout, true) },
            // SAFETY: forwarded contract.
            mode => unsafe { self.alloc_slow(layout, true, mode) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc_other(&self, block: *mut u8, layout: Layout, mode: Mode) {
        match mode {
            // SAFETY: forwarded contract.
            Mode::Off => unsafe { self.inner.dealloc(block, layout) },
            // SAFETY: forwarded contract.
            Mode::Busy | Mode::Lingering => unsafe {
                self.dealloc_as_made(block, layout, false);
            },
            // SAFETY: forwarded contract.
            Mode::Forked => unsafe {
                self.dealloc_as_made(block, layout, true);
            },
            Mode::On if sampler::sampling() => {
                if layout.align() >= WHOLE_ALIGN {
                    // A block recorded whole (or made before the recording,
                    // whose free the analyzer passes over): recorded before
                    // it goes back, so its address cannot be reused first.
                    if !skipped(Part::Whole) {
                        record_memory(RawKind::Free, block as u64, 0, 0);
                    }
                    // SAFETY: forwarded contract.
                    own::run(|| unsafe { self.dealloc_as_made(block, layout, false) });
                    return;
                }
                if sampled::may_be(block) {
                    // SAFETY: forwarded contract.
                    unsafe { self.dealloc_maybe_sampled(block, layout) };
                    return;
                }
                // An unsampled block: what recording off costs, plus the
                // test above (and dhat's re-entry flag, over dhat).
                match self.own {
                    // SAFETY: forwarded contract.
                    Own::Inner => unsafe { self.inner.dealloc(block, layout) },
                    // SAFETY: forwarded contract.
                    Own::System => own::run(|| unsafe { self.inner.dealloc(block, layout) }).0,
                }
            }
            Mode::On => {
                // Recorded before the block goes back, so its address cannot be reused first.
                record_memory(RawKind::Free, block as u64, 0, 0);
                // SAFETY: forwarded contract (a block an earlier sampled
                // recording made goes back as it was made).
                own::run(|| unsafe { self.dealloc_as_made(block, layout, false) });
            }
        }
    }

    #[inline(never)]
    unsafe fn realloc_other(
        &self,
        block: *mut u8,
        layout: Layout,
        new_size: usize,
        mode: Mode,
    ) -> *mut u8 {
        if mode == Mode::Off {
            // SAFETY: forwarded contract.
            return unsafe { self.inner.realloc(block, layout, new_size) };
        }
        if mode == Mode::Forked {
            if sampled::may_be(block) && sampled::contains(block) {
                // SAFETY: forwarded contract.
                return unsafe { self.realloc_forked_sampled(block, layout, new_size) };
            }
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
        if mode == Mode::Lingering
            || mode == Mode::Busy
            || sampler::sampling()
            || (sampled::may_be(block) && sampled::contains(block))
        {
            // SAFETY: forwarded contract.
            return unsafe { self.realloc_sampling(block, layout, new_size, mode) };
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

/// A realloc by hand: a new block of `new_size` from `make`, what fits of
/// `block` (made with `layout`) copied into it, and the old one handed to
/// `give_back`; for blocks whose old and new homes differ. Returns null
/// (the old block untouched) when `make` fails.
///
/// # Safety
/// GlobalAlloc::realloc's contract for `block`, `layout` and `new_size`;
/// `make` returns null or a block valid for `new_size` bytes, and
/// `give_back` frees `block` as it was made.
unsafe fn move_block(
    block: *mut u8,
    layout: Layout,
    new_size: usize,
    make: impl FnOnce(Layout) -> *mut u8,
    give_back: impl FnOnce(),
) -> *mut u8 {
    // SAFETY: the caller's `new_size`, rounded up to `align`, does not
    // overflow (GlobalAlloc::realloc's contract).
    let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
    let new = make(new_layout);
    if !new.is_null() {
        // SAFETY: both blocks are valid for the smaller size, and distinct
        // (the old one is still allocated).
        unsafe { std::ptr::copy_nonoverlapping(block, new, layout.size().min(new_size)) };
        give_back();
    }
    new
}
