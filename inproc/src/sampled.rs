//! Sampled blocks, and how a free recognizes one without a lookup per free.
//!
//! A sampled recording records the free of a sampled block only; every other
//! free must cost what it costs with recording off. As jemalloc does, a
//! sampled block is over-aligned ([`ALIGN`], a page): a free whose pointer is
//! not page-aligned is not of a sampled block, and is passed on with one
//! test. Only a page-aligned pointer is looked up, in a fixed table of the
//! sampled blocks alive ([`take`]): large blocks (jemalloc gives blocks of
//! 16 KiB and more whole pages) and the few small ones that happen to start a
//! page. The alternatives cost every free: a header before each block, or a
//! lookup of every pointer (~10 ns a free in the OpenTelemetry profiler's
//! measurements).
//!
//! The price is memory: a small block aligned to a page takes a page, ~4 KiB
//! for each sampled block alive; at the default mean of 512 KiB that is ~0.8%
//! of the live heap.
//!
//! The table is lock-free (open addressing, linear probing, tombstones): a
//! child forked while another thread held a lock could never take it, and
//! frees there must still find their blocks. A slot once used is never empty
//! again, so a lookup stops at the first empty slot. The inner allocator
//! must be given back the layout a block was made with, so a sampled block
//! is freed with the over-aligned layout ([`layout`]) even after the
//! recording ends: until then the allocator's mode stays `Lingering` while
//! any is alive ([`alive`]).

use std::alloc::Layout;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// The alignment of a sampled block: a page.
pub(crate) const ALIGN: usize = 4096;

/// Slots of the table: sampled blocks alive at once, at most (64 Ki blocks
/// stand for ~32 GiB of heap at the default mean); 512 KiB of address space,
/// paged in as used.
const SLOTS: usize = 1 << 16;
/// Slots a lookup or an insert probes at most.
const PROBES: usize = 64;
const EMPTY: u64 = 0;
/// A freed slot (a page-aligned address is never 1).
const TOMBSTONE: u64 = 1;

static TABLE: [AtomicU64; SLOTS] = [const { AtomicU64::new(EMPTY) }; SLOTS];

/// Counters before the table, by a second hash of the address: the sampled
/// blocks alive whose address counts here. A lookup of an address whose
/// counter is 0 ends at once. Without them every page-aligned free that is
/// not a sampled block's (tokio's 128-aligned cells and channels start a
/// page one time in 32) probed the table to its first empty slot, and a
/// slot once used is never empty again: a recording left on for hours
/// (~700k sampled blocks fill every slot's history) would have each such
/// free probe all [`PROBES`] slots. Such frees are common: glibc hands a
/// freed sampled block's page-aligned chunk to the next allocation of its
/// size (`perf` on `fixture-server-cooperative` at saturation: serde's and
/// rmcp's small frees), so the counters are few (64 KiB, that stay in the
/// cache): many blocks alive share one, and the table answers those. A
/// counter that reaches 255 stays there (it only says "maybe").
const FILTER_BITS: u32 = 16;
static FILTER: [AtomicU8; 1 << FILTER_BITS] = [const { AtomicU8::new(0) }; 1 << FILTER_BITS];

fn filter(block: u64) -> &'static AtomicU8 {
    let index = (block >> 12).wrapping_mul(0xd6e8_feb8_6659_fd93) >> (64 - FILTER_BITS);
    &FILTER[index as usize]
}

/// Whether a sampled block alive may be at `block`: false for certain when
/// its counter is 0.
fn may_be_alive(block: u64) -> bool {
    filter(block).load(Ordering::Relaxed) != 0
}

fn count_in(block: u64) {
    let _ = filter(block).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n < u8::MAX).then_some(n + 1)
    });
}

fn count_out(block: u64) {
    let _ = filter(block).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n != 0 && n < u8::MAX).then_some(n - 1)
    });
}
/// Sampled blocks made and not yet freed (or about to be made: see
/// [`reserve`]).
static ALIVE: AtomicU64 = AtomicU64::new(0);

/// The layout a sampled block of `layout` is made with.
#[inline]
pub(crate) fn layout(layout: Layout) -> Layout {
    // SAFETY: `ALIGN` is a power of two no smaller than the layout's, and a
    // size that fit the smaller alignment rounded up fits this one (callers
    // pass layouts the allocator was given, whose size is far below isize::MAX).
    unsafe { Layout::from_size_align_unchecked(layout.size(), layout.align().max(ALIGN)) }
}

/// Whether `block` may be a sampled block: the one test every free pays.
#[inline]
pub(crate) fn may_be(block: *mut u8) -> bool {
    (block as usize) & (ALIGN - 1) == 0
}

/// Sampled blocks alive, or about to be.
pub(crate) fn alive() -> u64 {
    ALIVE.load(Ordering::SeqCst)
}

/// Counts a sampled block about to be made. Paired with the recorder's stop
/// (which sets the mode, then reads [`alive`]): the caller reads the mode
/// after this and makes the block only if it is still `On`, so either the
/// stop sees it counted (and keeps frees looking) or the caller sees the
/// recording gone (and makes an ordinary block).
pub(crate) fn reserve() {
    ALIVE.fetch_add(1, Ordering::SeqCst);
}

/// Gives back a [`reserve`] no block was made for.
pub(crate) fn unreserve() {
    ALIVE.fetch_sub(1, Ordering::SeqCst);
}

fn home(block: u64) -> usize {
    ((block >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize & (SLOTS - 1)
}

/// Files a sampled block (reserved before); false when its slots are full:
/// the caller frees it, makes an ordinary block instead, and counts it
/// (a `lost` record, reason `sampled-full`).
pub(crate) fn insert(block: *mut u8) -> bool {
    let key = block as u64;
    let start = home(key);
    for probe in 0..PROBES {
        let slot = &TABLE[(start + probe) & (SLOTS - 1)];
        let seen = slot.load(Ordering::Acquire);
        if (seen == EMPTY || seen == TOMBSTONE)
            && slot
                .compare_exchange(seen, key, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // Before the block is handed out, so its free finds it counted.
            count_in(key);
            return true;
        }
    }
    false
}

/// Whether `block` is a sampled block; if it is, it is taken out of the
/// table (it is being freed) and no longer counted alive.
pub(crate) fn take(block: *mut u8) -> bool {
    let key = block as u64;
    if !may_be_alive(key) {
        return false;
    }
    let start = home(key);
    for probe in 0..PROBES {
        let slot = &TABLE[(start + probe) & (SLOTS - 1)];
        match slot.load(Ordering::Acquire) {
            EMPTY => return false,
            seen if seen == key => {
                if slot
                    .compare_exchange(key, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    count_out(key);
                    ALIVE.fetch_sub(1, Ordering::SeqCst);
                    return true;
                }
                // Only the block's one free takes it: nothing else changes it.
                return false;
            }
            _ => {}
        }
    }
    false
}

/// Whether `block` is a sampled block, without taking it (a realloc that
/// keeps it decides after).
pub(crate) fn contains(block: *mut u8) -> bool {
    let key = block as u64;
    if !may_be_alive(key) {
        return false;
    }
    let start = home(key);
    for probe in 0..PROBES {
        match TABLE[(start + probe) & (SLOTS - 1)].load(Ordering::Acquire) {
            EMPTY => return false,
            seen if seen == key => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is the process's: one test at a time uses it.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A block is found until it is taken, once; unsampled pointers are not
    /// found, page-aligned or not.
    #[test]
    fn sampled_blocks_are_found_once() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let blocks: Vec<*mut u8> = (1..200u64).map(|i| (i << 20) as *mut u8).collect();
        for &block in &blocks {
            reserve();
            assert!(insert(block));
        }
        for &block in &blocks {
            assert!(may_be(block));
            assert!(contains(block));
        }
        assert!(!contains((5u64 << 32) as *mut u8));
        assert!(!may_be(((1u64 << 20) + 16) as *mut u8));
        for &block in &blocks {
            assert!(take(block));
            assert!(!take(block), "taken once");
        }
        // Slots freed are used again.
        reserve();
        assert!(insert(blocks[0]));
        assert!(take(blocks[0]));
    }

    /// Once every slot has held a block, a lookup of an address that is no
    /// sampled block still ends at once, at its counter: every counter the
    /// blocks raised went back to 0 when they were taken.
    #[test]
    fn a_table_whose_slots_all_were_used_still_answers_misses_at_once() {
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let blocks: Vec<*mut u8> = (1..=SLOTS as u64 * 2)
            .map(|i| ((i << 24) | (7 << 12)) as *mut u8)
            .collect();
        for chunk in blocks.chunks(1000) {
            for &block in chunk {
                reserve();
                if !insert(block) {
                    unreserve();
                }
            }
            for &block in chunk {
                take(block);
            }
        }
        assert!(blocks.iter().all(|&b| !may_be_alive(b as u64)));
        assert!(!contains(blocks[5]));
        // A block alive is still found behind its counter.
        reserve();
        assert!(insert(blocks[9]));
        assert!(may_be_alive(blocks[9] as u64));
        assert!(contains(blocks[9]));
        assert!(take(blocks[9]));
        assert!(!may_be_alive(blocks[9] as u64));
    }
}
