//! Per-site totals: blocks still live at the end, grouped by call site, with how
//! they grew. These are the preset-free **findings**: they need no lifecycle
//! signal, so they work on any server, rmcp or not.
//!
//! A site is a symbolized stack with the allocator's own frames trimmed from its
//! inner end (`malloc`, `__rdl_alloc`, `alloc::alloc::*`, `RawVec` growth, the
//! in-process wrapper...), so two stacks that differ only inside the allocator, or
//! only in return addresses within one line, are one site.
//!
//! **Growth** is read from the blocks that survive to the end: the cumulative
//! bytes of a site's surviving blocks, by the time each was allocated, fitted
//! with a line. A site that keeps a block per request grows linearly over the
//! whole recording; a startup cache is one step. A **leak candidate** grows
//! linearly (r² >= [`MIN_LINEARITY`]) over most of the recording, with enough
//! blocks to tell (>= [`MIN_BLOCKS`]).

use std::collections::HashMap;

use leakscope_recording::StackId;
use wildmatch::WildMatch;

use crate::accounting::Block;
use crate::attribute::Category;
use crate::stacks::Stacks;
use crate::symbolize::Frame;

/// A leak candidate keeps at least this many blocks...
pub const MIN_BLOCKS: u64 = 10;
/// ...allocated over at least this share of the recording...
pub const MIN_SPAN_SHARE: f64 = 0.5;
/// ...whose cumulative bytes follow a line this well (r²).
pub const MIN_LINEARITY: f64 = 0.9;

/// Frames of the allocator itself, trimmed from a stack's inner end. Names are
/// demangled without hash; inlined frames carry DWARF's short names.
const ALLOCATOR_FRAMES: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "__rustc::__rust_alloc*",
    "__rustc::__rust_realloc",
    "__rustc::__rdl_*",
    "__rust_alloc*",
    "__rust_realloc",
    "__rdl_*",
    "__rg_*",
    "alloc::alloc::*",
    "<alloc::alloc::Global as core::alloc::Allocator>::*",
    "alloc::raw_vec::*",
    "<std::alloc::System as core::alloc::global::GlobalAlloc>::*",
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
    "leakscope_inproc::*",
    "<leakscope_inproc::*",
];

/// Live blocks of one stack: (allocated at, size, its session's worker is gone).
type StackBlocks = (Category, Vec<(u64, u64, bool)>);
/// A site being merged, with its blocks' (allocated at, size).
type SiteBlocks = (Site, Vec<(u64, u64)>);

/// A call site still holding memory at the end.
#[derive(Debug, Clone)]
pub struct Site {
    /// One of the stacks merged into this site (for the flame graph's order).
    pub stack: Option<StackId>,
    /// Symbolized frames, innermost first, allocator frames trimmed.
    pub frames: Vec<Frame>,
    pub category: Category,
    /// Index in `frames` of the frame whose rule chose the category.
    pub decided_by: Option<usize>,
    /// Bytes live at the end.
    pub retained_bytes: u64,
    pub blocks: u64,
    /// Of `retained_bytes`, those of sessions whose worker is gone.
    pub session_bytes: u64,
    /// Fitted growth of the surviving blocks' bytes over the recording.
    pub growth_bytes_per_s: f64,
    /// How well a line fits that growth (r², 0 when there is no spread in time).
    pub linearity: f64,
    /// When the oldest and newest surviving blocks were allocated.
    pub first_alloc_ns: u64,
    pub last_alloc_ns: u64,
}

impl Site {
    /// A site whose surviving bytes grew linearly over most of the recording:
    /// allocated and never given back, at a steady rate.
    pub fn is_leak_candidate(&self, start_ns: u64, end_ns: u64) -> bool {
        let duration = end_ns.saturating_sub(start_ns).max(1) as f64;
        let span = self.last_alloc_ns.saturating_sub(self.first_alloc_ns) as f64;
        self.blocks >= MIN_BLOCKS
            && self.growth_bytes_per_s > 0.0
            && span / duration >= MIN_SPAN_SHARE
            && self.linearity >= MIN_LINEARITY
    }
}

/// Groups live blocks (with whether their session's worker is gone) by call site:
/// most session-retained bytes first, then most live bytes.
pub fn sites<'a>(
    live: impl IntoIterator<Item = &'a (Block, bool)>,
    stacks: &mut Stacks,
) -> Vec<Site> {
    // Cheap first pass by stack id; then one symbolization per distinct stack.
    let mut by_stack: HashMap<Option<StackId>, StackBlocks> = HashMap::new();
    for (block, worker_gone) in live {
        by_stack
            .entry(block.stack)
            .or_insert_with(|| (block.category, Vec::new()))
            .1
            .push((block.ts, block.size, *worker_gone));
    }
    let trim = Trimmer::new();
    let mut by_frames: HashMap<Vec<String>, SiteBlocks> = HashMap::new();
    for (stack, (category, blocks)) in by_stack {
        let frames = trim.trim(stacks.frames(stack));
        let key: Vec<String> = frames.iter().map(|f| f.function.clone()).collect();
        let (site, times) = by_frames.entry(key).or_insert_with(|| {
            let decided_by = stacks.decided_by(&frames);
            (
                Site {
                    stack,
                    frames,
                    category,
                    decided_by,
                    retained_bytes: 0,
                    blocks: 0,
                    session_bytes: 0,
                    growth_bytes_per_s: 0.0,
                    linearity: 0.0,
                    first_alloc_ns: u64::MAX,
                    last_alloc_ns: 0,
                },
                Vec::new(),
            )
        });
        for (ts, size, worker_gone) in blocks {
            site.retained_bytes += size;
            site.blocks += 1;
            if worker_gone {
                site.session_bytes += size;
            }
            site.first_alloc_ns = site.first_alloc_ns.min(ts);
            site.last_alloc_ns = site.last_alloc_ns.max(ts);
            times.push((ts, size));
        }
    }
    let mut sites: Vec<Site> = by_frames
        .into_values()
        .map(|(mut site, mut times)| {
            (site.growth_bytes_per_s, site.linearity) = growth(&mut times);
            site
        })
        .collect();
    sites.sort_by(|a, b| {
        b.session_bytes
            .cmp(&a.session_bytes)
            .then(b.retained_bytes.cmp(&a.retained_bytes))
            .then_with(|| a.frames.len().cmp(&b.frames.len()))
    });
    sites
}

/// Slope (bytes/s) and r² of a least-squares line through the cumulative bytes
/// of `(alloc ts, size)` blocks in time order.
fn growth(blocks: &mut [(u64, u64)]) -> (f64, f64) {
    if blocks.len() < 2 {
        return (0.0, 0.0);
    }
    blocks.sort_unstable();
    let t0 = blocks[0].0;
    let mut cumulative = 0u64;
    let points: Vec<(f64, f64)> = blocks
        .iter()
        .map(|(ts, size)| {
            cumulative += size;
            ((ts - t0) as f64 / 1e9, cumulative as f64)
        })
        .collect();
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx <= f64::EPSILON || syy <= f64::EPSILON {
        return (0.0, 0.0);
    }
    (sxy / sxx, (sxy * sxy) / (sxx * syy))
}

/// Trims allocator frames from the inner end of a stack.
pub(crate) struct Trimmer {
    patterns: Vec<WildMatch>,
}

impl Trimmer {
    pub(crate) fn new() -> Self {
        Self {
            patterns: ALLOCATOR_FRAMES.iter().map(|p| WildMatch::new(p)).collect(),
        }
    }

    /// How many frames at the inner end are the allocator's. At least one frame
    /// is kept: an allocator-only stack still says something.
    pub(crate) fn allocator_frames(&self, frames: &[Frame]) -> usize {
        let inner = frames
            .iter()
            .take_while(|f| self.patterns.iter().any(|p| p.matches(&f.function)))
            .count();
        inner.min(frames.len().saturating_sub(1))
    }

    fn trim(&self, mut frames: Vec<Frame>) -> Vec<Frame> {
        frames.drain(..self.allocator_frames(&frames));
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Rules;

    fn block(ts: u64, size: u64, stack: Option<StackId>) -> Block {
        Block {
            ts,
            size,
            category: Category::Other,
            stack,
            session: None,
        }
    }

    #[test]
    fn groups_by_stack_with_session_bytes_first() {
        let live = vec![
            (block(0, 10, Some(1)), false),
            (block(0, 10, Some(1)), false),
            (block(0, 5, Some(2)), true),
            (block(0, 1, None), false),
        ];
        let mut stacks = Stacks::new(Rules::builtin());
        // Distinct (unknown) addresses: distinct sites.
        stacks.add(1, vec![0x10]);
        stacks.add(2, vec![0x20]);
        let sites = sites(&live, &mut stacks);
        assert_eq!(sites.len(), 3);
        assert_eq!((sites[0].stack, sites[0].session_bytes), (Some(2), 5));
        assert_eq!((sites[1].retained_bytes, sites[1].blocks), (20, 2));
    }

    #[test]
    fn identical_symbolized_stacks_are_one_site() {
        let mut stacks = Stacks::new(Rules::builtin());
        stacks.add(1, vec![0x10, 0x30]);
        stacks.add(2, vec![0x10, 0x30]);
        let live = vec![
            (block(0, 10, Some(1)), false),
            (block(0, 7, Some(2)), false),
        ];
        let sites = sites(&live, &mut stacks);
        assert_eq!(sites.len(), 1);
        assert_eq!((sites[0].retained_bytes, sites[0].blocks), (17, 2));
    }

    #[test]
    fn allocator_frames_are_trimmed_from_the_inner_end() {
        let frame = |name: &str| Frame {
            function: name.into(),
            location: None,
        };
        let trimmed = Trimmer::new().trim(vec![
            frame("alloc::alloc::alloc"),
            frame("alloc_impl_runtime"),
            frame("alloc_impl"),
            frame("do_alloc<alloc::alloc::Global>"),
            frame("__rustc::__rdl_alloc"),
            frame("my_server::cache::insert"),
            frame("alloc::alloc::alloc"),
            frame("main"),
        ]);
        let names: Vec<&str> = trimmed.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(
            names,
            ["my_server::cache::insert", "alloc::alloc::alloc", "main"]
        );
    }

    #[test]
    fn steady_growth_is_a_candidate_and_a_step_is_not() {
        let s = 1_000_000_000;
        let mut steady: Vec<(u64, u64)> = (0..20).map(|i| (i * s, 100)).collect();
        let (slope, r2) = growth(&mut steady);
        assert!((slope - 100.0).abs() < 1.0, "{slope}");
        assert!(r2 > 0.99, "{r2}");
        let mut step: Vec<(u64, u64)> = (0..20).map(|_| (5 * s, 100)).collect();
        assert_eq!(growth(&mut step), (0.0, 0.0));
    }
}
