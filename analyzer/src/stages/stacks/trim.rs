//! Trimming: the allocator's own frames come off a stack's inner end, so a
//! site is named by the code that asked for the memory.

use wildmatch::WildMatch;

use crate::stages::symbolize::Frame;

/// Frames of the allocator itself, trimmed from a stack's inner end. Names are
/// demangled without hash; inlined frames carry DWARF's short names.
const ALLOCATOR_FRAMES: &[&str] = &[
    // libc's malloc family.
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    // rustc's allocator shims and std's default behind them (`__rust_alloc`,
    // `__rdl_alloc`, `__rg_alloc`, ...), under either spelling.
    "__rustc::__rust_alloc*",
    "__rustc::__rust_realloc",
    "__rustc::__rust_dealloc",
    "__rustc::__rdl_*",
    "__rustc::__rg_*",
    "__rust_alloc*",
    "__rust_realloc",
    "__rdl_*",
    "__rg_*",
    "alloc::alloc::*",
    "<alloc::alloc::Global as core::alloc::Allocator>::*",
    "alloc::raw_vec::*",
    // Any `#[global_allocator]`: std's System, jemalloc's, mimalloc's, and a
    // wrapper of the program's own (`<Counting as GlobalAlloc>::alloc`).
    "<* as core::alloc::global::GlobalAlloc>::*",
    "<* as core::alloc::GlobalAlloc>::*",
    // jemalloc (tikv-jemallocator's prefixed build, or an unprefixed one),
    // mimalloc and snmalloc internals.
    "tikv_jemallocator::*",
    "tikv_jemalloc_sys::*",
    "_rjem_*",
    "je_*",
    "imalloc*",
    "ialloc*",
    "mimalloc::*",
    "libmimalloc_sys::*",
    "mi_*",
    "_mi_*",
    "snmalloc_rs::*",
    "snmalloc::*",
    "sn_rust_*",
    "std::sys::alloc::*",
    "std::sys::pal::*::alloc::*",
    "*::aligned_malloc",
    "aligned_malloc",
    "alloc",
    "alloc_zeroed",
    "alloc_impl*",
    "allocate*",
    "try_allocate_in*",
    "box_new*",
    "do_alloc*",
    "new_uninitialized*",
    "grow_amortized*",
    "grow_one*",
    "finish_grow*",
    "exchange_malloc*",
    "dhat::*",
    "<dhat::Alloc as *",
    // The in-process recorder's unwinder (builds without frame pointers).
    "backtrace::*",
    "_Unwind_*",
    "leakscope_inproc::*",
    "<leakscope_inproc::*",
];

/// Whether `name` is a frame of the allocator itself ([`ALLOCATOR_FRAMES`]).
pub fn is_allocator_frame(name: &str) -> bool {
    static PATTERNS: std::sync::OnceLock<Trimmer> = std::sync::OnceLock::new();
    PATTERNS
        .get_or_init(Trimmer::new)
        .patterns
        .iter()
        .any(|p| p.matches(name))
}

/// Trims allocator frames from the inner end of a stack.
pub struct Trimmer {
    patterns: Vec<WildMatch>,
}

impl Trimmer {
    pub fn new() -> Self {
        Self {
            patterns: ALLOCATOR_FRAMES.iter().map(|p| WildMatch::new(p)).collect(),
        }
    }

    /// How many frames at the inner end are the allocator's. At least one frame
    /// is kept: an allocator-only stack still says something.
    pub fn allocator_frames(&self, frames: &[Frame]) -> usize {
        let inner = frames
            .iter()
            .take_while(|f| self.patterns.iter().any(|p| p.matches(&f.function)))
            .count();
        inner.min(frames.len().saturating_sub(1))
    }

    pub fn trim(&self, mut frames: Vec<Frame>) -> Vec<Frame> {
        frames.drain(..self.allocator_frames(&frames));
        frames
    }
}
