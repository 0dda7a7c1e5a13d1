//! A frame's records read by hand for the kinds [`crate::encode`] writes by
//! hand (allocations, frees, reallocs, scopes, task events, session facts); every other
//! record, and any byte these do not read as postcard would, is read by
//! postcard itself.
//!
//! Why: serde's generic path (a visitor per sequence element, each field
//! through its own varint reader) was ~20% of the probe's CPU relaying a
//! cooperative server's sampled stream at saturation (`perf`), where the
//! probe's CPU is throughput the server loses on a machine they share; and
//! it is most of the analyzer's time reading a day's recording. What is read
//! here is what postcard reads from the same bytes, record for record: a
//! test compares the two on every record kind at every varint length, and
//! on bytes cut short or malformed.

use crate::encode::variant;
use crate::{Phase, Record, ScopeKind, SessionFact, TaskEvent};

/// The length postcard writes before a list (a varint), and how many bytes
/// it takes.
pub(crate) fn list_length(plain: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in plain.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Reads a `Vec<Record>` as postcard wrote it, `count` long (its length
/// prefix, read by the caller, is `prefix` bytes).
pub(crate) fn records(plain: &[u8], prefix: usize, count: usize) -> Result<Vec<Record>, String> {
    let mut rest = plain
        .get(prefix..)
        .ok_or("a frame's record count is unreadable")?;
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let (record, after) = match hot(rest) {
            Some(read) => read,
            None => postcard::take_from_bytes::<Record>(rest).map_err(|e| e.to_string())?,
        };
        records.push(record);
        rest = after;
    }
    Ok(records)
}

/// The record at the start of `bytes` and what follows it, when it is one of
/// the kinds read here and its bytes are what `encode` writes; `None` for
/// anything else (postcard reads it, or says what is wrong).
#[inline]
fn hot(bytes: &[u8]) -> Option<(Record, &[u8])> {
    let mut r = Bytes(bytes);
    let record = match r.byte()? {
        v @ (variant::ALLOC | variant::WHOLE_ALLOC) => {
            let (ts, tid, addr, size, stack) = (r.u64()?, r.u32()?, r.u64()?, r.u64()?, r.stack()?);
            if v == variant::ALLOC {
                Record::Alloc {
                    ts,
                    tid,
                    addr,
                    size,
                    stack,
                }
            } else {
                Record::WholeAlloc {
                    ts,
                    tid,
                    addr,
                    size,
                    stack,
                }
            }
        }
        variant::SESSION => {
            let (ts, tid) = (r.u64()?, r.u32()?);
            let index = r.byte()?;
            let len = usize::try_from(r.u64()?).ok()?;
            if len > r.0.len() {
                return None;
            }
            let (text, rest) = r.0.split_at(len);
            r.0 = rest;
            let text = std::str::from_utf8(text).ok()?.to_owned();
            Record::Session {
                ts,
                tid,
                fact: match index {
                    0 => SessionFact::Id(text),
                    1 => SessionFact::WorkerQuit(text),
                    2 => SessionFact::Created(text),
                    _ => return None,
                },
            }
        }
        variant::WHOLE_ALLOC_IN_POLL => Record::WholeAllocInPoll {
            ts: r.u64()?,
            tid: r.u32()?,
            addr: r.u64()?,
            size: r.u64()?,
            stack: r.stack()?,
            span: r.u64()?,
        },
        variant::FREE => Record::Free {
            ts: r.u64()?,
            tid: r.u32()?,
            addr: r.u64()?,
        },
        variant::REALLOC => Record::Realloc {
            ts: r.u64()?,
            tid: r.u32()?,
            old: r.u64()?,
            new: r.u64()?,
            size: r.u64()?,
            stack: r.stack()?,
            entry_ts: r.u64()?,
        },
        variant::SCOPE => Record::Scope {
            ts: r.u64()?,
            tid: r.u32()?,
            kind: *ScopeKind::ALL.get(usize::from(r.byte()?))?,
            phase: match r.byte()? {
                0 => Phase::Enter,
                1 => Phase::Exit,
                _ => return None,
            },
            arg: r.u64()?,
        },
        variant::TASK => Record::Task {
            ts: r.u64()?,
            tid: r.u32()?,
            id: r.u64()?,
            event: match r.byte()? {
                0 => TaskEvent::Spawned,
                1 => TaskEvent::Ended,
                _ => return None,
            },
            stack: r.stack()?,
        },
        _ => return None,
    };
    Some((record, r.0))
}

/// What is left to read.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// A LEB128 of at most `max` bytes, whose last byte may hold
    /// `last_bits` bits, as postcard reads one; `None` for any other
    /// (postcard then says it is wrong).
    #[inline]
    fn varint(&mut self, max: usize, last_bits: u32) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..max {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return (i + 1 < max || u32::from(b) >> last_bits == 0).then_some(value);
            }
        }
        None
    }

    #[inline]
    fn u64(&mut self) -> Option<u64> {
        // Ten bytes at most; the tenth holds the 64th bit only.
        self.varint(10, 1)
    }

    #[inline]
    fn u32(&mut self) -> Option<u32> {
        // Five bytes at most; the fifth holds the top 4 bits.
        self.varint(5, 4).map(|v| v as u32)
    }

    /// An `Option<u32>`: `Some(None)` for none, `None` when unreadable.
    #[inline]
    fn stack(&mut self) -> Option<Option<u32>> {
        match self.byte()? {
            0 => Some(None),
            1 => Some(Some(self.u32()?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::every_record;

    /// What postcard reads from `bytes`, and what this module reads.
    fn both(bytes: &[u8]) -> (Result<Vec<Record>, String>, Result<Vec<Record>, String>) {
        let theirs = postcard::from_bytes::<Vec<Record>>(bytes).map_err(|e| e.to_string());
        let ours = match list_length(bytes) {
            // (Capped as the reader caps it, before any record is read.)
            Some((count, prefix)) => records(bytes, prefix, (count as usize).min(1 << 20)),
            None => Err("unreadable count".into()),
        };
        (theirs, ours)
    }

    #[test]
    fn it_reads_what_postcard_reads() {
        let all = every_record();
        let bytes = postcard::to_stdvec(&all).unwrap();
        let (theirs, ours) = both(&bytes);
        assert_eq!(ours.unwrap(), theirs.unwrap());
        assert_eq!(both(&bytes).1.unwrap(), all);
    }

    /// Cut anywhere, or with any byte changed, it fails where postcard fails
    /// and otherwise reads the same records.
    #[test]
    fn cut_or_damaged_it_fails_where_postcard_fails() {
        let all = every_record();
        let bytes = postcard::to_stdvec(&all[..40]).unwrap();
        for cut in 0..bytes.len() {
            let (theirs, ours) = both(&bytes[..cut]);
            assert_eq!(ours.is_ok(), theirs.is_ok(), "cut at {cut}");
        }
        // And the kinds past the first 40, each alone.
        for record in &all[40..] {
            let bytes = postcard::to_stdvec(&vec![record.clone()]).unwrap();
            for cut in 0..bytes.len() {
                let (theirs, ours) = both(&bytes[..cut]);
                assert_eq!(ours.is_ok(), theirs.is_ok(), "{record:?} cut at {cut}");
            }
            damage(&bytes);
        }
        damage(&bytes);
    }

    /// Each byte of `bytes` set to six values: equal records, or both fail.
    fn damage(bytes: &[u8]) {
        for at in 0..bytes.len() {
            for value in [0x00, 0x01, 0x02, 0x7f, 0x80, 0xff] {
                let mut damaged = bytes.to_vec();
                damaged[at] = value;
                let (theirs, ours) = both(&damaged);
                match (theirs, ours) {
                    (Ok(theirs), Ok(ours)) => assert_eq!(ours, theirs, "byte {at} = {value:#x}"),
                    (Err(_), Err(_)) => {}
                    (theirs, ours) => {
                        panic!("byte {at} = {value:#x}: postcard {theirs:?}, here {ours:?}")
                    }
                }
            }
        }
    }
}
