//! Drawing what a reader can see: a recording left on for a day holds
//! millions of sessions and ~900 k live-byte samples (one per 100 ms), and a
//! chart or a trace of each one is hundreds of MB that no viewer draws (a
//! day's session churn made a 750 MB `trace.json` and 580 MB of SVG, and the
//! report 14 GB of memory). Charts and the trace take at most a few thousand
//! of them, evenly spaced, the first and the last kept; every figure (the
//! summary, the report's tables, the verdict) is still computed from all.

/// Points of a line or an area at most.
pub const MAX_POINTS: usize = 4000;

/// Markers (a session's birth, a worker's end) or a trace's session tracks
/// at most.
pub const MAX_MARKERS: usize = 2000;

/// At most `max` of `items` with their indices, evenly spaced, the first and
/// the last kept.
pub fn thinned<T>(items: &[T], max: usize) -> impl Iterator<Item = (usize, &T)> + Clone {
    let step = items.len().div_ceil(max.max(2) - 1).max(1);
    let last = items.len().saturating_sub(1);
    items
        .iter()
        .enumerate()
        .filter(move |(i, _)| i % step == 0 || *i == last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_ends_and_at_most_max() {
        let items: Vec<u32> = (0..10_001).collect();
        let kept: Vec<usize> = thinned(&items, 100).map(|(i, _)| i).collect();
        assert!(kept.len() <= 100, "{}", kept.len());
        assert_eq!(kept.first(), Some(&0));
        assert_eq!(kept.last(), Some(&10_000));
        let few = [1, 2, 3];
        assert_eq!(thinned(&few, 100).count(), 3, "fewer than max: all");
        assert_eq!(thinned::<u8>(&[], 100).count(), 0);
    }
}
