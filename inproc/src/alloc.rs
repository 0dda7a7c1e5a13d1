//! The global allocator: dhat's, plus a record of every call.

use std::alloc::{GlobalAlloc, Layout, System};

use super::recorder::{
    RawKind, forked_child, inside_recorder, now_ns, record_memory, record_realloc, untracked,
};

/// `#[global_allocator] static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;`
///
/// Delegates to `dhat::Alloc` (so dhat's profiles and `dhat::HeapStats` keep
/// working) and records each call while a [`Recorder`](super::Recorder) runs.
///
/// Memory that is leakscope's own (the recorder's buffers, its writer thread,
/// the session layer's bookkeeping) or dhat's own is neither recorded nor
/// profiled: it comes straight from `System`, so neither the recording nor
/// `dhat::HeapStats` charge it to the application. Frees always go through dhat,
/// which ignores blocks it never saw.
pub struct Alloc;

// SAFETY: every method forwards to dhat::Alloc, a correct GlobalAlloc, with the
// caller's arguments unchanged; recording only reads the results.
unsafe impl GlobalAlloc for Alloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if inside_recorder() || forked_child() {
            // SAFETY: forwarded contract.
            return unsafe { System.alloc(layout) };
        }
        // SAFETY: forwarded contract.
        let (block, outermost) = untracked(|| unsafe { dhat::Alloc.alloc(layout) });
        if outermost && !block.is_null() {
            record_memory(RawKind::Alloc, block as u64, 0, layout.size() as u64);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if inside_recorder() || forked_child() {
            // SAFETY: forwarded contract.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: forwarded contract.
        let (block, outermost) = untracked(|| unsafe { dhat::Alloc.alloc_zeroed(layout) });
        if outermost && !block.is_null() {
            record_memory(RawKind::Alloc, block as u64, 0, layout.size() as u64);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if forked_child() {
            // SAFETY: forwarded contract (dhat only wraps System).
            return unsafe { System.dealloc(block, layout) };
        }
        // Recorded before the block goes back, so its address cannot be reused first.
        record_memory(RawKind::Free, block as u64, 0, 0);
        // SAFETY: forwarded contract.
        untracked(|| unsafe { dhat::Alloc.dealloc(block, layout) });
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if inside_recorder() || forked_child() {
            // Only leakscope's own blocks are resized inside the recorder.
            // SAFETY: forwarded contract.
            return unsafe { System.realloc(block, layout, new_size) };
        }
        // The old block goes back inside realloc: another thread may be handed
        // its address before this realloc is recorded. The entry time tells.
        let entered = now_ns();
        // SAFETY: forwarded contract.
        let (new, outermost) =
            untracked(|| unsafe { dhat::Alloc.realloc(block, layout, new_size) });
        if outermost && !new.is_null() {
            record_realloc(new as u64, block as u64, new_size as u64, entered);
        }
        new
    }
}
