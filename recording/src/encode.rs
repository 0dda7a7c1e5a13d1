//! A frame's records as postcard writes them, written by hand for the
//! records a producer makes by the thousand (allocations, frees, scopes,
//! task events, session facts).
//!
//! Why not postcard for all: serde's generic path puts each field through
//! its own varint buffer and `Vec::extend`, ~450 instructions for an
//! allocation and its free, on a thread of the target's in the cooperative
//! mode (callgrind, rmcp's stock service, sampled: ~4.5k instructions a
//! session of ~57k that recording cost). Here a record is coded into a stack
//! buffer and appended once. The bytes are postcard's exactly (a sequence's
//! length, each record's variant index, varints, an `Option` as 0 or 1 and
//! the value), so every reader, old or new, reads them unchanged; every
//! other record still goes through postcard, and a test compares the two on
//! every record kind.

use std::io;

use crate::{Phase, Record, ScopeKind, SessionFact, TaskEvent};

/// Postcard's variant index of each record coded here (and read by hand in
/// `decode`): its place in `Record`'s declaration (serde's, whatever a
/// discriminant says).
pub(crate) mod variant {
    pub(crate) const ALLOC: u8 = 0;
    pub(crate) const FREE: u8 = 1;
    pub(crate) const REALLOC: u8 = 2;
    pub(crate) const SCOPE: u8 = 3;
    pub(crate) const SESSION: u8 = 4;
    pub(crate) const TASK: u8 = 10;
    pub(crate) const WHOLE_ALLOC: u8 = 11;
    pub(crate) const WHOLE_ALLOC_IN_POLL: u8 = 12;
}

/// The longest record coded here (a realloc: 1 + 5 × 10 + 5 + 6 bytes).
const LONGEST: usize = 64;

/// Appends `records` to `out` as postcard's `Vec<Record>`.
pub(crate) fn records(records: &[Record], out: &mut Vec<u8>) -> io::Result<()> {
    let mut buf = Coded::new();
    buf.varint(records.len() as u64);
    out.extend_from_slice(buf.bytes());
    for record in records {
        if let Some(tail) = hot(record, &mut buf) {
            out.extend_from_slice(buf.bytes());
            out.extend_from_slice(tail);
        } else {
            let taken = std::mem::take(out);
            *out = postcard::to_extend(record, taken).map_err(io::Error::other)?;
        }
    }
    Ok(())
}

/// Codes `record` into `buf` when it is one of the kinds coded here; what
/// follows `buf` (a session fact's string) is returned, empty for the rest.
#[inline]
fn hot<'a>(record: &'a Record, buf: &mut Coded) -> Option<&'a [u8]> {
    buf.len = 0;
    match *record {
        Record::Session { ts, tid, ref fact } => {
            buf.byte(variant::SESSION);
            buf.varint(ts);
            buf.varint(tid.into());
            let (index, text) = match fact {
                SessionFact::Id(text) => (0, text),
                SessionFact::WorkerQuit(text) => (1, text),
                SessionFact::Created(text) => (2, text),
            };
            buf.byte(index);
            buf.varint(text.len() as u64);
            return Some(text.as_bytes());
        }
        Record::Alloc {
            ts,
            tid,
            addr,
            size,
            stack,
        }
        | Record::WholeAlloc {
            ts,
            tid,
            addr,
            size,
            stack,
        } => {
            buf.byte(if matches!(record, Record::Alloc { .. }) {
                variant::ALLOC
            } else {
                variant::WHOLE_ALLOC
            });
            buf.varint(ts);
            buf.varint(tid.into());
            buf.varint(addr);
            buf.varint(size);
            buf.option(stack);
        }
        Record::WholeAllocInPoll {
            ts,
            tid,
            addr,
            size,
            stack,
            span,
        } => {
            buf.byte(variant::WHOLE_ALLOC_IN_POLL);
            buf.varint(ts);
            buf.varint(tid.into());
            buf.varint(addr);
            buf.varint(size);
            buf.option(stack);
            buf.varint(span);
        }
        Record::Free { ts, tid, addr } => {
            buf.byte(variant::FREE);
            buf.varint(ts);
            buf.varint(tid.into());
            buf.varint(addr);
        }
        Record::Realloc {
            ts,
            tid,
            old,
            new,
            size,
            stack,
            entry_ts,
        } => {
            buf.byte(variant::REALLOC);
            buf.varint(ts);
            buf.varint(tid.into());
            buf.varint(old);
            buf.varint(new);
            buf.varint(size);
            buf.option(stack);
            buf.varint(entry_ts);
        }
        Record::Scope {
            ts,
            tid,
            kind,
            phase,
            arg,
        } => {
            buf.byte(variant::SCOPE);
            buf.varint(ts);
            buf.varint(tid.into());
            buf.byte(scope_kind(kind));
            buf.byte(match phase {
                Phase::Enter => 0,
                Phase::Exit => 1,
            });
            buf.varint(arg);
        }
        Record::Task {
            ts,
            tid,
            id,
            event,
            stack,
        } => {
            buf.byte(variant::TASK);
            buf.varint(ts);
            buf.varint(tid.into());
            buf.varint(id);
            buf.byte(match event {
                TaskEvent::Spawned => 0,
                TaskEvent::Ended => 1,
            });
            buf.option(stack);
        }
        _ => return None,
    }
    Some(&[])
}

/// A scope kind's variant index: its place in [`ScopeKind::ALL`], which
/// lists them in declaration order (the test below holds it to postcard's).
fn scope_kind(kind: ScopeKind) -> u8 {
    kind as u8
}

/// One record's bytes, on the stack.
struct Coded {
    bytes: [u8; LONGEST],
    len: usize,
}

impl Coded {
    fn new() -> Self {
        Self {
            bytes: [0; LONGEST],
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    /// LEB128, as postcard codes every integer wider than a byte.
    #[inline]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline]
    fn option(&mut self, v: Option<u32>) {
        match v {
            None => self.byte(0),
            Some(v) => {
                self.byte(1);
                self.varint(v.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record kind, hot or not, at values of every varint length:
    /// byte for byte what postcard writes.
    #[test]
    fn the_bytes_are_postcards() {
        let all = crate::tests::every_record();
        for n in [0, 1, all.len()] {
            let mut ours = vec![7];
            records(&all[..n], &mut ours).unwrap();
            let theirs = postcard::to_extend(&all[..n].to_vec(), vec![7]).unwrap();
            assert_eq!(ours, theirs, "first {n} records");
        }
        // Each alone too, so a difference names its record.
        for record in &all {
            let mut ours = Vec::new();
            records_one(record, &mut ours);
            assert_eq!(ours, postcard::to_stdvec(record).unwrap(), "{record:?}");
        }
    }

    fn records_one(record: &Record, out: &mut Vec<u8>) {
        let mut buf = Coded::new();
        if let Some(tail) = hot(record, &mut buf) {
            out.extend_from_slice(buf.bytes());
            out.extend_from_slice(tail);
        } else {
            *out = postcard::to_stdvec(record).unwrap();
        }
    }

    /// ScopeKind's discriminants are its places in the declaration (what
    /// `scope_kind` relies on).
    #[test]
    fn scope_kinds_are_in_declaration_order() {
        for (i, kind) in ScopeKind::ALL.into_iter().enumerate() {
            assert_eq!(scope_kind(kind) as usize, i);
            assert_eq!(postcard::to_stdvec(&kind).unwrap(), vec![i as u8]);
        }
    }
}
