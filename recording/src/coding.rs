//! How a recording's records are coded in a frame beyond their fields, as
//! its format version and header say: what the writer does to a frame's
//! records before it encodes them, and the reader undoes after. Each of
//! these depends on both the version and the header (a sampled recording
//! is coded differently since format 13), so they are decided here once,
//! for the writer and the reader alike.

use crate::{Header, Record, ScopeKind};

/// How a recording's records are coded (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coding {
    /// Times are written as differences from the record before (format 10
    /// on; see `timestamps`), in units of [`Coding::time_unit_ns`].
    pub delta_times: bool,
    /// The unit times are written in, in nanoseconds: a sampled recording's
    /// are microseconds since format 13, others nanoseconds. A time read
    /// back is floored to it.
    pub time_unit_ns: u64,
    /// A task poll's end is written without its header (`arg` 0): it ends
    /// the innermost task poll open on its thread, which is all the
    /// analyzer reads of it, and repeated its entry's 7 bytes (a sampled
    /// recording, format 13 on).
    pub bare_poll_ends: bool,
    /// The frames are the flushes of one zstd stream, not a zstd frame
    /// each (a sampled recording, format 13 on): a second's records share
    /// what the seconds before them wrote.
    pub streamed: bool,
}

impl Coding {
    /// How a recording of format `version` with `header` is coded.
    pub fn of(version: u32, header: &Header) -> Self {
        let sampled = version >= 13 && header.sampling.is_sampled();
        Self {
            delta_times: version >= 10,
            time_unit_ns: if sampled { 1000 } else { 1 },
            bare_poll_ends: sampled,
            streamed: sampled,
        }
    }

    /// What the writer does to a frame's records before it encodes them.
    pub(crate) fn write(&self, records: &mut [Record]) {
        if self.bare_poll_ends {
            bare_poll_ends(records);
        }
        if self.delta_times {
            crate::timestamps::encode(records, self.time_unit_ns);
        }
    }

    /// What the reader does to a frame's decoded records: undoes
    /// [`Coding::write`] (a poll end's header stays 0).
    pub(crate) fn read(&self, records: &mut [Record]) {
        if self.delta_times {
            crate::timestamps::decode(records, self.time_unit_ns);
        }
    }
}

/// Writes each task poll's end without its header (see
/// [`Coding::bare_poll_ends`]).
pub(crate) fn bare_poll_ends(records: &mut [Record]) {
    for record in records {
        if let Record::Scope {
            kind: ScopeKind::TaskPollEnd,
            arg,
            ..
        } = record
        {
            *arg = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::Sampling;

    /// The writer and the reader take their coding from here alone: a
    /// format-12 sampled file reads in nanoseconds, one zstd frame a frame.
    #[test]
    fn a_sampled_recording_is_coded_apart_from_format_13_on() {
        let mut header = crate::tests::header();
        header.sampling = Sampling::Bytes { mean: 512 * 1024 };
        let sampled = Coding::of(13, &header);
        assert_eq!(sampled.time_unit_ns, 1000);
        assert!(sampled.delta_times && sampled.bare_poll_ends && sampled.streamed);
        let older = Coding::of(12, &header);
        assert_eq!(older.time_unit_ns, 1);
        assert!(older.delta_times && !older.bare_poll_ends && !older.streamed);
        assert!(!Coding::of(9, &header).delta_times);
        header.sampling = Sampling::Every;
        let every = Coding::of(13, &header);
        assert_eq!(every.time_unit_ns, 1);
        assert!(every.delta_times && !every.bare_poll_ends && !every.streamed);
    }
}
