//! Units for people: how byte counts read in reports, charts and verdicts.

/// Bytes in B / KiB / MiB.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / (1024.0 * 1024.0))
    } else if n >= 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else {
        format!("{n:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn picks_the_unit_by_size() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(12_576), "12.3 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
