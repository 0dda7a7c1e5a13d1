//! Sampled recordings: which allocations a producer records when it samples,
//! and what each recorded one stands for.
//!
//! The method is the one production heap profilers use (jemalloc's `prof`,
//! tcmalloc, Go's `MemProfileRate`, Android's heapprofd): sampling points fall
//! on the stream of allocated bytes as a Poisson process of mean spacing `T`
//! bytes. Each thread counts down the bytes to its next point ([`Countdown`]);
//! an allocation that crosses it is recorded, and the next point is drawn
//! afresh from an exponential of mean `T` (memoryless, so where the point fell
//! inside the block does not matter). A block of `s` bytes is then recorded
//! with probability `1 - exp(-s/T)`, and an unsampled allocation costs a
//! subtraction and a branch.
//!
//! Each sample is weighted by itself ([`Sampling::weight`]): it stands for
//! `1 / (1 - exp(-s/T))` blocks and `s / (1 - exp(-s/T))` bytes. Summing the
//! sampled bytes first and unbiasing the sum afterwards is wrong (a site's
//! blocks need not be of one size); jemalloc's internals document says why.
//! The relative error of a site's estimate of `B` bytes is about `sqrt(T/B)`
//! ([`Sampling::relative_error`]).
//!
//! Lifecycles (sessions, tasks) are never sampled: their counts and states
//! stay exact, only the bytes charged to them become estimates.

use serde::{Deserialize, Serialize};

/// How a recording chose the allocations it holds (stored in its header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sampling {
    /// Every allocation and free is recorded: figures are exact.
    #[default]
    Every,
    /// Allocations sampled by bytes, one sampling point every `mean` bytes on
    /// average; frees are recorded for sampled blocks only.
    Bytes { mean: u64 },
}

/// What one recorded allocation stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weight {
    /// Blocks like it.
    pub count: f64,
    /// Bytes of blocks like it.
    pub bytes: f64,
}

/// jemalloc's and Go's default: ~2 samples per MiB allocated.
pub const DEFAULT_MEAN_BYTES: u64 = 512 * 1024;

impl Sampling {
    /// Sampling every `mean` bytes; a mean of 0 or 1 records every call.
    pub fn every_bytes(mean: u64) -> Self {
        if mean <= 1 {
            Sampling::Every
        } else {
            Sampling::Bytes { mean }
        }
    }

    /// The mean spacing in bytes, `None` when every call is recorded.
    pub fn mean_bytes(self) -> Option<u64> {
        match self {
            Sampling::Every => None,
            Sampling::Bytes { mean } => Some(mean),
        }
    }

    pub fn is_sampled(self) -> bool {
        self != Sampling::Every
    }

    /// The chance that a block of `size` bytes is recorded.
    pub fn probability(self, size: u64) -> f64 {
        match self {
            Sampling::Every => 1.0,
            // -expm1(-x) = 1 - exp(-x), exact for small x too.
            Sampling::Bytes { mean } => -(-(size.max(1) as f64) / mean as f64).exp_m1(),
        }
    }

    /// What a recorded block of `size` bytes stands for: itself when every
    /// call is recorded, else `1/p` blocks and `size/p` bytes.
    pub fn weight(self, size: u64) -> Weight {
        let p = self.probability(size);
        Weight {
            count: 1.0 / p,
            bytes: size as f64 / p,
        }
    }

    /// The relative standard error of an estimate of `bytes` bytes (about
    /// `sqrt(T/B)` for blocks much smaller than `T`); 0 when exact.
    pub fn relative_error(self, bytes: f64) -> f64 {
        match self {
            Sampling::Every => 0.0,
            Sampling::Bytes { mean } if bytes > 0.0 => (mean as f64 / bytes).sqrt(),
            Sampling::Bytes { .. } => f64::INFINITY,
        }
    }

    /// "every call" or "sampled every 512 KiB", for reports.
    pub fn describe(self) -> String {
        match self {
            Sampling::Every => "every call".to_owned(),
            Sampling::Bytes { mean } if mean % 1024 == 0 => {
                format!("sampled every {} KiB on average", mean / 1024)
            }
            Sampling::Bytes { mean } => format!("sampled every {mean} bytes on average"),
        }
    }
}

/// A thread's countdown of bytes to its next sampling point.
///
/// `sample` is the whole per-allocation cost of an unsampled call: a
/// subtraction and a branch; only a sampled call draws the next point.
#[derive(Debug, Clone, Copy)]
pub struct Countdown {
    /// Bytes still to allocate before the next point (may go negative
    /// inside `sample`).
    left: i64,
    mean: u64,
    rng: u64,
}

impl Countdown {
    /// A countdown of mean `mean` bytes (at least 2), seeded by `seed` (the
    /// thread id and the time do: threads must not share a sequence).
    pub fn new(mean: u64, seed: u64) -> Self {
        let mut countdown = Self {
            left: 0,
            mean: mean.max(2),
            // xorshift's state must not be 0.
            rng: splitmix(seed) | 1,
        };
        countdown.left = countdown.spacing();
        countdown
    }

    /// Whether an allocation of `size` bytes is sampled.
    #[inline]
    pub fn sample(&mut self, size: u64) -> bool {
        self.left -= size.max(1) as i64;
        if self.left > 0 {
            return false;
        }
        self.left = self.spacing();
        true
    }

    pub fn mean(&self) -> u64 {
        self.mean
    }

    /// Draws the next spacing between sampling points: an exponential of
    /// mean `mean`, at least 1 byte (for a producer that keeps its own count
    /// of bytes left, as the in-process allocator does in a thread-local).
    #[cold]
    pub fn spacing(&mut self) -> i64 {
        // xorshift64*: fast, and good enough for spacing samples.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        // Uniform in (0, 1]: ln is finite.
        let uniform = (bits + 1) as f64 / (1u64 << 53) as f64;
        let spacing = -uniform.ln() * self.mean as f64;
        (spacing as i64).clamp(1, i64::MAX / 2)
    }
}

fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block is sampled with probability `1 - exp(-s/T)`, whatever its size
    /// against `T`: the countdown's share of sampled blocks matches it.
    #[test]
    fn blocks_are_sampled_with_the_poisson_probability() {
        let sampling = Sampling::every_bytes(64 * 1024);
        for size in [16u64, 4096, 64 * 1024, 1 << 20] {
            let mut countdown = Countdown::new(64 * 1024, size);
            let n = 400_000u64;
            let sampled = (0..n).filter(|_| countdown.sample(size)).count() as f64;
            let expected = sampling.probability(size);
            let share = sampled / n as f64;
            // 5 standard errors of a binomial share, plus rounding.
            let tolerance = 5.0 * (expected * (1.0 - expected) / n as f64).sqrt() + 1e-4;
            assert!(
                (share - expected).abs() <= tolerance,
                "size {size}: sampled {share:.5}, expected {expected:.5}"
            );
        }
    }

    /// Weighting each sample by itself estimates a mix of sizes without bias:
    /// the estimate of known totals is within its expected error.
    #[test]
    fn weighted_samples_estimate_known_totals() {
        let mean = 32 * 1024;
        let sampling = Sampling::every_bytes(mean);
        let mut countdown = Countdown::new(mean, 7);
        let sizes = [24u64, 96, 1000, 16 * 1024, 200 * 1024];
        let (mut true_bytes, mut true_count) = (0f64, 0f64);
        let (mut bytes, mut count) = (0f64, 0f64);
        for i in 0..300_000usize {
            let size = sizes[i % sizes.len()];
            true_bytes += size as f64;
            true_count += 1.0;
            if countdown.sample(size) {
                let weight = sampling.weight(size);
                bytes += weight.bytes;
                count += weight.count;
            }
        }
        let bytes_error = (bytes - true_bytes).abs() / true_bytes;
        let count_error = (count - true_count).abs() / true_count;
        assert!(bytes_error < 0.02, "bytes off by {bytes_error:.4}");
        assert!(count_error < 0.05, "count off by {count_error:.4}");
    }

    #[test]
    fn every_call_weighs_one() {
        let weight = Sampling::Every.weight(100);
        assert_eq!(
            weight,
            Weight {
                count: 1.0,
                bytes: 100.0
            }
        );
        assert_eq!(Sampling::every_bytes(1), Sampling::Every);
        assert_eq!(Sampling::every_bytes(0), Sampling::Every);
    }
}
