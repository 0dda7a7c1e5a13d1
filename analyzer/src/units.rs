//! Units for people: how byte counts read in reports, charts and verdicts.

use leakscope_recording::sampling::Sampling;

/// Bytes in B / KiB / MiB / GiB / TiB.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    if n >= 1024.0 * GIB {
        format!("{:.1} TiB", n / (1024.0 * GIB))
    } else if n >= GIB {
        format!("{:.1} GiB", n / GIB)
    } else if n >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    } else if n >= 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{n:.0} B")
    }
}

/// A byte figure of a recording: exact, or in a sampled one an estimate
/// with its relative standard error (`~1.2 MiB ±14%`).
pub fn estimated_bytes(n: u64, sampling: Sampling) -> String {
    if !sampling.is_sampled() {
        return bytes(n);
    }
    match error_percent(n, sampling) {
        Some(error) => format!("~{} ±{error}%", bytes(n)),
        None => format!("~{}", bytes(n)),
    }
}

/// A count of blocks: exact, or estimated (`~500`) in a sampled recording.
pub fn estimated_count(n: u64, sampling: Sampling) -> String {
    if sampling.is_sampled() {
        format!("~{n}")
    } else {
        n.to_string()
    }
}

/// "keeps 1.2 MiB in 500 blocks", as the verdict and the report's links say it.
pub(crate) fn keeps(bytes: u64, blocks: u64, sampling: Sampling) -> String {
    format!(
        "keeps {} in {} blocks",
        estimated_bytes(bytes, sampling),
        estimated_count(blocks, sampling)
    )
}

/// The relative standard error of an estimate of `n` bytes, in whole
/// percent (`None` for nothing, whose error is unbounded).
fn error_percent(n: u64, sampling: Sampling) -> Option<u64> {
    let error = sampling.relative_error(n as f64);
    error.is_finite().then(|| (100.0 * error).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_say_so_with_their_error() {
        let sampled = Sampling::every_bytes(512 * 1024);
        assert_eq!(estimated_bytes(12_576, Sampling::Every), "12.3 KiB");
        assert_eq!(estimated_bytes(32 << 20, sampled), "~32.0 MiB ±13%");
        assert_eq!(estimated_count(49, sampled), "~49");
        assert_eq!(estimated_count(49, Sampling::Every), "49");
    }

    #[test]
    fn picks_the_unit_by_size() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(12_576), "12.3 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(4407 << 20), "4.3 GiB");
    }
}
