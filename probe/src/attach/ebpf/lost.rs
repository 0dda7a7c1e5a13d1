//! The kernel's drop counters, turned into `Lost` records as they grow.

use std::io::Write;

use anyhow::Result;
use leakscope_probe_ebpf::{LOST_REASONS, LostReason};
use leakscope_recording::{Record, monotonic_ns};

use crate::capture::Capture;

/// What the kernel's cumulative drop counters said last time.
#[derive(Debug, Default)]
pub struct LostCounters {
    seen: [u64; LOST_REASONS as usize],
}

impl LostCounters {
    /// What grew since the last call, given the counters' cumulative `totals`.
    pub fn deltas(&mut self, totals: [u64; LOST_REASONS as usize]) -> Vec<(LostReason, u64)> {
        let mut grown = Vec::new();
        for reason in LostReason::ALL {
            let index = reason as usize;
            let delta = totals[index].saturating_sub(self.seen[index]);
            if delta > 0 {
                self.seen[index] = totals[index];
                grown.push((reason, delta));
            }
        }
        grown
    }
}

/// Appends a `Lost` record for every drop counter that grew since the last call.
pub(super) fn write_lost<W: Write>(
    lost: &aya::maps::PerCpuArray<aya::maps::MapData, u64>,
    seen: &mut LostCounters,
    capture: &mut Capture<W>,
) -> Result<()> {
    let mut totals = [0u64; LOST_REASONS as usize];
    for reason in LostReason::ALL {
        totals[reason as usize] = lost.get(&(reason as u32), 0)?.iter().sum();
    }
    for (reason, delta) in seen.deltas(totals) {
        if reason != LostReason::Stack {
            capture.stats.lost += delta;
        }
        capture.writer.push(Record::Lost {
            ts: monotonic_ns(),
            reason: reason.into(),
            count: delta,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final read after detach must not count again what the periodic
    /// reads already wrote (it used to start from zero and double the total).
    #[test]
    fn lost_counters_report_only_growth() {
        let mut seen = LostCounters::default();
        assert_eq!(
            seen.deltas([5, 0, 2]),
            vec![(LostReason::RingFull, 5), (LostReason::Stack, 2)]
        );
        assert_eq!(
            seen.deltas([5, 0, 2]),
            vec![],
            "nothing new, nothing written"
        );
        assert_eq!(
            seen.deltas([7, 1, 3]),
            vec![
                (LostReason::RingFull, 2),
                (LostReason::PendingFull, 1),
                (LostReason::Stack, 1)
            ]
        );
    }
}
