//! What a recording's survivors come to: live blocks by call site ([`Site`])
//! and what survives against what was live half-way ([`Rest`]), with the
//! thresholds that give them meaning (the sites stage fills them,
//! `stages/sites.rs`; the verdict reads them).

use leakscope_recording::StackId;
use leakscope_recording::frames::{own_frame, short_name};

use super::{Category, Frame};

/// A leak candidate keeps at least this many blocks...
pub const MIN_BLOCKS: u64 = 10;
/// ...allocated over at least this share of the recording's activity (its
/// allocations, in order)...
pub const MIN_SPAN_SHARE: f64 = 0.5;
/// ...whose cumulative bytes follow a line this well (r²).
pub const MIN_LINEARITY: f64 = 0.9;

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
    /// Blocks live at the end (estimated, in a sampled recording).
    pub blocks: u64,
    /// Of those, the blocks the recording holds: all of them, or the samples
    /// the estimate comes from (what the evidence for a verdict is).
    pub samples: u64,
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
        self.samples >= MIN_BLOCKS
            && self.activity_span >= MIN_SPAN_SHARE
            && self.linearity >= MIN_LINEARITY
    }
}

/// A sample stands for others when its block was recorded with a chance of
/// a half or less. A larger block (a map's table past the sampling mean) is
/// recorded nearly every time: it is the block itself, judged as in a
/// recording of every call. CI found the difference: a cache's fix kept one
/// 16.9 KiB table, allocated once at a one-off resize (weight 1.56), and read
/// undecided as "1 sample too few".
pub const STAND_IN_WEIGHT: f64 = 2.0;

/// Of the recording's activity (its allocations, in order), the last share
/// whose survivors count as in flight at the end (requests being served).
pub const IN_FLIGHT_SHARE: f64 = 0.05;

/// The frame that best names a site, shortened: the one whose rule chose its
/// category, else the program's innermost own frame (how frames read is
/// `leakscope_recording::frames`', shared with the probe's status line).
pub fn site_name(site: &Site) -> String {
    site.decided_by
        .and_then(|i| site.frames.get(i))
        .map(|f| f.function.as_str())
        .or_else(|| own_frame(site.frames.iter().map(|f| f.function.as_str())))
        .map(short_name)
        .unwrap_or_else(|| "[unknown stack]".into())
}

/// Fewer allocations than this (a couple of dozen requests' worth) say too
/// little of where a recording's survivors come from to call them settled.
pub const MIN_SETTLED_ALLOCATIONS: u64 = 100;

/// From samples too few to weigh the rest's growth, the share of what their
/// stacks allocated that may survive for the rest to count as freed.
pub const MAX_SURVIVING_SHARE: f64 = 0.1;

/// Bytes a settled rest may have grown by since half the activity, beyond
/// a quarter of what was live then.
pub const SETTLED_SLACK_BYTES: u64 = 4096;

/// The least a leak is claimed from (the verdict's rule): a rest smaller than
/// this is not one to name whatever it does next.
pub const MIN_LEAK_BYTES: u64 = 32 * 1024;

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
    /// Blocks surviving (in-flight ones aside), and whether any of them is a
    /// sample standing for others ([`STAND_IN_WEIGHT`]).
    pub survivors: u64,
    pub sampled: bool,
    /// In a sampled recording: the blocks the survivors stand for, and the
    /// blocks allocated at their stacks over the recording (estimates,
    /// rounded; see [`Rest::weigh_survivors`]).
    pub surviving_blocks: u64,
    pub allocated_at_survivors: u64,
}
