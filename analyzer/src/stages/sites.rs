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

use crate::stages::stacks::Trimmer;
use leakscope_recording::StackId;

use crate::model::Category;
use crate::model::sites::*;
use crate::stages::accounting::Block;
use crate::stages::stacks::Stacks;

/// Live blocks of one stack: (allocated at, activity, size, its session's
/// worker is gone, the blocks it stands for).
type StackBlocks = (Category, Vec<(u64, u64, u64, bool, f64)>);
/// A site being merged, with its blocks' (allocated at, activity, size, the
/// blocks it stands for).
type SiteBlocks = (Site, Vec<(u64, u64, u64, f64)>);

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
            .push((block.ts, block.seq, block.size, *worker_gone, block.weight));
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
                    samples: 0,
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
        for (ts, seq, size, worker_gone, weight) in blocks {
            site.retained_bytes += size;
            site.samples += 1;
            if worker_gone {
                site.session_bytes += size;
            }
            site.first_alloc_ns = site.first_alloc_ns.min(ts);
            site.last_alloc_ns = site.last_alloc_ns.max(ts);
            times.push((ts, seq, size, weight));
        }
    }
    let mut sites: Vec<Site> = by_frames
        .into_values()
        .map(|(mut site, mut blocks)| {
            site.blocks = blocks.iter().map(|b| b.3).sum::<f64>().round() as u64;
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
    // Ties broken by what the recording fixes (the oldest block's time, the
    // stack's id), never by the hash map's order: one recording, one report.
    sites.sort_by(|a, b| {
        b.session_bytes
            .cmp(&a.session_bytes)
            .then(b.retained_bytes.cmp(&a.retained_bytes))
            .then_with(|| a.frames.len().cmp(&b.frames.len()))
            .then(a.first_alloc_ns.cmp(&b.first_alloc_ns))
            .then(a.stack.cmp(&b.stack))
    });
    sites
}

impl Rest {
    /// `samples`: the accounting's, which say what was live when.
    pub fn of<'a>(
        live: impl IntoIterator<Item = &'a (Block, bool)>,
        allocations: u64,
        samples: &[crate::model::Sample],
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
                continue;
            }
            rest.survivors += 1;
            rest.sampled |= block.weight >= STAND_IN_WEIGHT;
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
    ///
    /// From samples, a rest is called bounded only from as many samples as
    /// growth needs ([`MIN_BLOCKS`]): a leak sampled 5 times over a recording
    /// has no sample in its second half one time in twelve, and would read
    /// as bounded (`analyzer/tests/detection_time.rs` found it).
    pub fn settled(&self) -> bool {
        self.allocations >= MIN_SETTLED_ALLOCATIONS
            && self.enough_survivors()
            // A sample or two alive weigh nothing against half-way: their
            // stacks' freeing is the evidence then.
            && (self.few_samples()
                || self.early_bytes + self.late_bytes
                    <= self.live_at_half + self.live_at_half / 4 + SETTLED_SLACK_BYTES)
    }

    /// Samples standing for others survive, fewer than growth needs
    /// ([`MIN_BLOCKS`]): what was live half-way is no measure of them.
    pub fn few_samples(&self) -> bool {
        self.sampled && self.survivors < MIN_BLOCKS
    }

    /// Whether the survivors are enough to judge: always in a recording of
    /// every call; from samples, at least [`MIN_BLOCKS`] of them, or so few
    /// against what their stacks allocated (at most [`MAX_SURVIVING_SHARE`])
    /// that their stacks clearly free what they make: a cache that keeps its
    /// newest 16 entries of 2400 leaves one sample alive and 144 freed, a leak
    /// keeps every sample it has.
    ///
    /// Or so little (under [`MIN_LEAK_BYTES`]) that no leak would be claimed
    /// from it whatever it does: CI saw a map's first small table, one sample
    /// allocated once at the start (at `T` = 8 KiB), read "1 sample too few".
    pub fn enough_survivors(&self) -> bool {
        !self.sampled
            || self.survivors >= MIN_BLOCKS
            || (self.surviving_blocks as f64)
                <= MAX_SURVIVING_SHARE * self.allocated_at_survivors as f64
            || self.early_bytes + self.late_bytes < MIN_LEAK_BYTES
    }

    /// Fills [`surviving_blocks`](Self::surviving_blocks) and
    /// [`allocated_at_survivors`](Self::allocated_at_survivors) from the
    /// `live` blocks of [`Rest::of`] and what each stack allocated.
    pub fn weigh_survivors<'a>(
        &mut self,
        live: impl IntoIterator<Item = &'a (Block, bool)>,
        allocated_at: impl Fn(Option<leakscope_recording::StackId>) -> f64,
    ) {
        let total = self.allocations.max(1) as f64;
        let mut stacks = std::collections::HashSet::new();
        let mut surviving = 0.0;
        for (block, _) in live {
            if block.seq as f64 / total <= 1.0 - IN_FLIGHT_SHARE {
                surviving += block.weight;
                stacks.insert(block.stack);
            }
        }
        self.surviving_blocks = surviving.round() as u64;
        self.allocated_at_survivors =
            stacks.into_iter().map(allocated_at).sum::<f64>().round() as u64;
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

#[cfg(test)]
mod tests;
