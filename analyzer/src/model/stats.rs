//! The statistics every output quotes the same way: one percentile, one
//! median, and the spreads `summary.json` gives of per-object figures.

use serde::{Deserialize, Serialize};

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (the upper one of an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A per-object byte figure over objects (sessions, tasks): its p50, p90,
/// largest and sum.
#[derive(Debug, Serialize, Deserialize, Default, Clone, PartialEq, Eq)]
pub struct Retained {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
    pub total: u64,
}

impl Retained {
    pub fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        Self {
            p50: percentile(&values, 50.0),
            p90: percentile(&values, 90.0),
            max: values.last().copied().unwrap_or(0),
            total: values.iter().sum(),
        }
    }
}

/// Seconds objects have been idle: p50 and the longest.
#[derive(Debug, Serialize, Deserialize, Default, Clone, Copy, PartialEq)]
pub struct IdleSpread {
    pub p50: f64,
    pub max: f64,
}

impl IdleSpread {
    /// From idle times in nanoseconds.
    pub fn of_ns(mut ns: Vec<u64>) -> Self {
        ns.sort_unstable();
        Self {
            p50: percentile(&ns, 50.0) as f64 / 1e9,
            max: ns.last().copied().unwrap_or(0) as f64 / 1e9,
        }
    }
}

/// A byte figure's p50, p90 and largest.
#[derive(Debug, Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 50.0), 5);
        assert_eq!(percentile(&v, 90.0), 9);
        assert_eq!(percentile(&v, 100.0), 10);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn the_median_of_nothing_is_zero() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }
}
