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
//! bytes of a site's surviving blocks, fitted with a line. In time, that is the
//! site's growth in bytes/s (what the report shows). By the target's activity
//! (how many allocations it had made when each block was: [`Block::seq`]), it
//! is what tells a leak: a site that keeps a block (or a fixed group) per
//! request or event grows linearly with activity, however bursty the load
//! was in time, while a startup cache is one step. A **leak candidate** grows
//! linearly with activity (r² >= [`MIN_LINEARITY`]) over most of it (>=
//! [`MIN_SPAN_SHARE`] of the recording's allocations), with enough blocks to
//! tell (>= [`MIN_BLOCKS`]): a few dozen requests are enough, however short
//! the recording.

use std::collections::HashMap;

use leakscope_recording::StackId;
use wildmatch::WildMatch;

use crate::accounting::Block;
use crate::attribute::Category;
use crate::stacks::Stacks;
use crate::symbolize::Frame;

/// A leak candidate keeps at least this many blocks...
pub const MIN_BLOCKS: u64 = 10;
/// ...allocated over at least this share of the recording's activity (its
/// allocations, in order)...
pub const MIN_SPAN_SHARE: f64 = 0.5;
/// ...whose cumulative bytes follow a line this well (r²).
pub const MIN_LINEARITY: f64 = 0.9;

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

/// Live blocks of one stack: (allocated at, activity, size, its session's worker is gone).
type StackBlocks = (Category, Vec<(u64, u64, u64, bool)>);
/// A site being merged, with its blocks' (allocated at, activity, size).
type SiteBlocks = (Site, Vec<(u64, u64, u64)>);

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
    /// Fitted growth of the surviving blocks' bytes over the recording's time.
    pub growth_bytes_per_s: f64,
    /// How well a line fits the surviving bytes against the target's activity
    /// (r², 0 when there is no spread).
    pub linearity: f64,
    /// When the oldest and newest surviving blocks were allocated.
    pub first_alloc_ns: u64,
    pub last_alloc_ns: u64,
    /// Of the recording's allocations, the share made between the site's
    /// oldest and newest surviving blocks.
    pub activity_span: f64,
}

impl Site {
    /// A site whose surviving bytes grew linearly with the target's activity
    /// over most of it: allocated and never given back, at a steady rate per
    /// request or event.
    pub fn is_leak_candidate(&self) -> bool {
        self.blocks >= MIN_BLOCKS
            && self.activity_span >= MIN_SPAN_SHARE
            && self.linearity >= MIN_LINEARITY
    }
}

/// Groups live blocks (with whether their session's worker is gone) by call site:
/// most session-retained bytes first, then most live bytes. `allocations`:
/// how many the recording made (the activity clock's end).
pub fn sites<'a>(
    live: impl IntoIterator<Item = &'a (Block, bool)>,
    allocations: u64,
    stacks: &mut Stacks,
) -> Vec<Site> {
    // Cheap first pass by stack id; then one symbolization per distinct stack.
    let mut by_stack: HashMap<Option<StackId>, StackBlocks> = HashMap::new();
    for (block, worker_gone) in live {
        by_stack
            .entry(block.stack)
            .or_insert_with(|| (block.category, Vec::new()))
            .1
            .push((block.ts, block.seq, block.size, *worker_gone));
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
                    activity_span: 0.0,
                },
                Vec::new(),
            )
        });
        for (ts, seq, size, worker_gone) in blocks {
            site.retained_bytes += size;
            site.blocks += 1;
            if worker_gone {
                site.session_bytes += size;
            }
            site.first_alloc_ns = site.first_alloc_ns.min(ts);
            site.last_alloc_ns = site.last_alloc_ns.max(ts);
            times.push((ts, seq, size));
        }
    }
    let mut sites: Vec<Site> = by_frames
        .into_values()
        .map(|(mut site, mut blocks)| {
            let mut by_time: Vec<(u64, u64)> = blocks.iter().map(|b| (b.0, b.2)).collect();
            site.growth_bytes_per_s = growth(&mut by_time, 1e9).0;
            let mut by_activity: Vec<(u64, u64)> = blocks.drain(..).map(|b| (b.1, b.2)).collect();
            site.linearity = growth(&mut by_activity, 1.0).1;
            let (first, last) = (
                by_activity.first().map_or(0, |b| b.0),
                by_activity.last().map_or(0, |b| b.0),
            );
            site.activity_span = last.saturating_sub(first) as f64 / allocations.max(1) as f64;
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

/// Of the recording's activity (its allocations, in order), the last share
/// whose survivors count as in flight at the end (requests being served).
pub const IN_FLIGHT_SHARE: f64 = 0.05;

/// Fewer allocations than this (a couple of dozen requests' worth) say too
/// little of where a recording's survivors come from to call them settled.
pub const MIN_SETTLED_ALLOCATIONS: u64 = 100;

/// Bytes a settled rest may have grown by since half the activity, beyond
/// a quarter of what was live then.
pub const SETTLED_SLACK_BYTES: u64 = 4096;

/// What survives of the allocations a recording saw, against what was live
/// half-way through the target's activity: what tells a bounded rest (a
/// cache filled at the first requests, or one that keeps its newest N
/// entries) from growth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rest {
    /// Bytes surviving from the first half of the activity.
    pub early_bytes: u64,
    /// From the second half, but for its last [`IN_FLIGHT_SHARE`].
    pub late_bytes: u64,
    /// From the last [`IN_FLIGHT_SHARE`]: in flight when the recording ended.
    pub in_flight_bytes: u64,
    /// The recording's allocations.
    pub allocations: u64,
    /// Bytes of the recording's blocks live when half its allocations had
    /// been made.
    pub live_at_half: u64,
}

impl Rest {
    /// `samples`: the accounting's, which say what was live when.
    pub fn of<'a>(
        live: impl IntoIterator<Item = &'a (Block, bool)>,
        allocations: u64,
        samples: &[crate::accounting::Sample],
    ) -> Self {
        let live_at_half = samples
            .iter()
            .find(|s| s.allocs.saturating_mul(2) >= allocations)
            .map_or(0, |s| s.live.iter().sum());
        let mut rest = Rest {
            allocations,
            live_at_half,
            ..Rest::default()
        };
        let total = allocations.max(1) as f64;
        for (block, _) in live {
            let at = block.seq as f64 / total;
            if at <= 0.5 {
                rest.early_bytes += block.size;
            } else if at <= 1.0 - IN_FLIGHT_SHARE {
                rest.late_bytes += block.size;
            } else {
                rest.in_flight_bytes += block.size;
            }
        }
        rest
    }

    pub fn total(&self) -> u64 {
        self.early_bytes + self.late_bytes + self.in_flight_bytes
    }

    /// Bounded and not growing: enough activity to tell, and what survives
    /// (in-flight blocks aside) is no more than what was live half-way
    /// through, plus a quarter and [`SETTLED_SLACK_BYTES`]. A leak of a
    /// block per request has about doubled since then.
    pub fn settled(&self) -> bool {
        self.allocations >= MIN_SETTLED_ALLOCATIONS
            && self.early_bytes + self.late_bytes
                <= self.live_at_half + self.live_at_half / 4 + SETTLED_SLACK_BYTES
    }
}

/// Slope (bytes per `unit` of x) and r² of a least-squares line through the
/// cumulative bytes of `(x, size)` blocks in x order (x: nanoseconds, or the
/// activity clock); sorts `blocks`.
fn growth(blocks: &mut [(u64, u64)], unit: f64) -> (f64, f64) {
    if blocks.len() < 2 {
        return (0.0, 0.0);
    }
    blocks.sort_unstable();
    let x0 = blocks[0].0;
    let mut cumulative = 0u64;
    let points: Vec<(f64, f64)> = blocks
        .iter()
        .map(|(x, size)| {
            cumulative += size;
            ((x - x0) as f64 / unit, cumulative as f64)
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
            seq: ts,
            size,
            category: Category::Other,
            stack,
            session: None,
            task: None,
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
        let sites = sites(&live, 4, &mut stacks);
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
        let sites = sites(&live, 2, &mut stacks);
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

    /// A live block of `size` bytes, the `seq`-th allocation of the recording.
    fn nth(seq: u64, size: u64) -> (Block, bool) {
        let mut block = block(0, size, None);
        block.seq = seq;
        (block, false)
    }

    #[test]
    fn a_warm_up_is_settled_and_growth_is_not() {
        // What was live half-way through the activity (allocation 1000 of 2000).
        let half = |live: u64| {
            let mut sample = crate::accounting::Sample {
                t_s: 1.0,
                live: Default::default(),
                reclaimed_total: 0,
                allocs: 1000,
            };
            sample.live[Category::Other] = live;
            vec![sample]
        };
        // A cache filled by the first requests, and a request in flight at the end.
        let warm = [nth(10, 1000), nth(20, 1000), nth(1990, 1000)];
        let rest = Rest::of(&warm, 2000, &half(2000));
        assert_eq!(
            (rest.early_bytes, rest.late_bytes, rest.in_flight_bytes),
            (2000, 0, 1000)
        );
        assert!(rest.settled());
        let little = Rest {
            allocations: MIN_SETTLED_ALLOCATIONS - 1,
            ..rest
        };
        assert!(!little.settled(), "too little activity to tell");
        // A cache that keeps its newest 16 entries: all late, none growing.
        let newest: Vec<(Block, bool)> = (0..16).map(|i| nth(1700 + i * 10, 1000)).collect();
        assert!(Rest::of(&newest, 2000, &half(16_000)).settled());
        // A block kept per request, all along: twice what was live at half-way.
        let growing: Vec<(Block, bool)> = (1..=20).map(|i| nth(i * 95, 1000)).collect();
        assert!(!Rest::of(&growing, 2000, &half(10_000)).settled());
    }

    #[test]
    fn steady_growth_is_a_candidate_and_a_step_is_not() {
        let s = 1_000_000_000;
        let mut steady: Vec<(u64, u64)> = (0..20).map(|i| (i * s, 100)).collect();
        let (slope, r2) = growth(&mut steady, 1e9);
        assert!((slope - 100.0).abs() < 1.0, "{slope}");
        assert!(r2 > 0.99, "{r2}");
        let mut step: Vec<(u64, u64)> = (0..20).map(|_| (5 * s, 100)).collect();
        assert_eq!(growth(&mut step, 1e9), (0.0, 0.0));
    }
}
