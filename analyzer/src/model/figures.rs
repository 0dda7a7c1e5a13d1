//! What the accounting stage measures: per category over the recording, and
//! the live bytes sampled over time.

use super::PerCategory;

#[derive(Debug, Clone, Copy, Default)]
pub struct CategoryTotals {
    pub allocated: u64,
    pub reclaimed: u64,
    pub live_at_end: u64,
    /// Live at the end and belonging to a session whose worker is gone.
    pub retained: u64,
}

/// Live bytes at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub t_s: f64,
    pub live: PerCategory<u64>,
    pub reclaimed_total: u64,
    /// Allocations the recording had made by then (the activity clock).
    pub allocs: u64,
}
