//! How a frame writes its records' times (since format 10): each as the
//! difference from the record before it in the frame, zigzag-coded, the
//! first from 0. A time is CLOCK_MONOTONIC nanoseconds (~7 bytes as a
//! varint); the difference to the record before takes 1 to 4, and zstd
//! finds more to share in it. On a sampled recording of session churn it
//! saved a fifth of the file (`cargo xtask bench --only always-on`).
//!
//! The coding is exact for any values: producers' times need not be
//! monotonic in record order, and `Record::TraceOrigin`'s time is a value
//! like any other.
//!
//! Since format 13 a sampled recording writes its times to the microsecond
//! (`Coding::time_unit_ns` in `coding`): the differences are of whole
//! microseconds, and a time reads back floored to one. The nanoseconds were
//! half of a day of session churn's compressed bytes (their low digits are
//! noise zstd cannot share), and a third came off it without them
//! (`scripts/day-bytes-model.py`); what the analyzer reads from a sampled
//! recording (ages, idle times, rates, a realloc's window) needs no finer
//! time. A recording of every call keeps nanoseconds: its trace shows each
//! poll.

use crate::Record;

/// Codes the times of a frame's `records` in place, as written, in units of
/// `unit` nanoseconds (1, or a sampled recording's 1,000).
pub(crate) fn encode(records: &mut [Record], unit: u64) {
    let mut previous = 0u64;
    for record in records {
        if let Some(ts) = record.ts_mut() {
            let now = *ts / unit;
            *ts = zigzag(now.wrapping_sub(previous) as i64);
            previous = now;
        }
    }
}

/// Undoes [`encode`] on a frame's decoded `records`: each time floored to
/// its `unit`.
pub(crate) fn decode(records: &mut [Record], unit: u64) {
    let mut previous = 0u64;
    for record in records {
        if let Some(ts) = record.ts_mut() {
            previous = previous.wrapping_add(unzigzag(*ts) as u64);
            *ts = previous.wrapping_mul(unit);
        }
    }
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndReason, Record};

    #[test]
    fn times_come_back_exactly_whatever_their_order() {
        let times = [
            5_000_000_123_456,
            5_000_000_123_400,
            0,
            u64::MAX,
            7,
            u64::MAX - 1,
        ];
        let original: Vec<Record> = times
            .iter()
            .map(|&ts| Record::End {
                ts,
                reason: EndReason::Finished,
            })
            .chain([Record::Stack {
                id: 1,
                frames: vec![1, 2],
            }])
            .collect();
        let mut coded = original.clone();
        encode(&mut coded, 1);
        assert_eq!(coded[1].ts(), Some(zigzag(-56)));
        decode(&mut coded, 1);
        assert_eq!(coded, original);
        for n in [0, 1, -1, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(n)), n);
        }
    }

    #[test]
    fn in_microseconds_times_come_back_floored_to_one() {
        let times = [
            5_000_000_123_456,
            5_000_000_123_999,
            5_000_000_122_001,
            999,
            0,
        ];
        let mut coded: Vec<Record> = times
            .iter()
            .map(|&ts| Record::End {
                ts,
                reason: EndReason::Finished,
            })
            .collect();
        encode(&mut coded, 1000);
        // The second is in the first's microsecond: no difference at all.
        assert_eq!(coded[1].ts(), Some(0));
        assert_eq!(coded[2].ts(), Some(zigzag(-1)));
        decode(&mut coded, 1000);
        let back: Vec<u64> = coded.iter().filter_map(Record::ts).collect();
        assert_eq!(
            back,
            [
                5_000_000_123_000,
                5_000_000_123_000,
                5_000_000_122_000,
                0,
                0
            ]
        );
    }
}
