//! leakscope's recording: one file format for every producer (the eBPF probe,
//! the in-process mode) and the analyzer. This crate is the contract between them
//! (like `console-api` between tokio-console's recorder and viewer): nobody else
//! declares these types. It needs no aya, no build script and no nightly.
//!
//! * [`event`](Header): what a recording says: its [`Header`] and its [`Record`]s.
//! * [`RecordingWriter`]: appends framed, checksummed batches, deduplicating stacks.
//! * [`RecordingReader`]: reads them back, tolerating a torn tail.
//! * [`target`]: what a producer learns about the process it records (mappings, build-ids).
//! * [`preset`]: which functions and spans of a target mark a session's lifecycle.
//! * [`demangle`]: the one way names are demangled, so presets and rules match alike.
//!
//! ```text
//! file   = MAGIC (8 bytes) | format version (u32 LE) | frame(Header) | frame(Vec<Record>)*
//! frame  = payload length (u32 LE) | CRC-32 of payload (u32 LE) | payload (postcard)
//! ```
//! Producers append frames and flush them as they go, so a producer killed at any
//! moment leaves a readable prefix: the reader stops at the first frame that is
//! short or fails its checksum and reports a [`Tail::Torn`] instead of an error.
//! The format version sits outside the frames so a reader can refuse a newer file
//! before decoding anything. `docs/recording-format.md` is the reference.

pub mod coalesce;
mod coding;
pub mod control;
mod decode;
mod demangle;
mod encode;
mod event;
pub mod frame_pointers;
pub mod frames;
mod header;
mod legacy;
pub mod output;
pub mod preset;
pub mod printable;
mod reader;
pub mod sampling;
pub mod segments;
pub mod target;
mod timestamps;
mod writer;

pub use demangle::demangle;
pub use event::{
    EndReason, LostReason, Mapping, Phase, Record, ScopeKind, SessionFact, StackId, TaskEvent,
    WHOLE_ALIGN,
};
pub use frame_pointers::{FramePointers, StackWalk};
pub use header::{
    AllocLayer, ClockOrigin, Header, Identity, Producer, ScopeFunction, Segment, Settings,
    monotonic_ns,
};
pub use reader::{
    MAX_FRAME_RECORDS, ReadError, RecordingReader, Tail, decode_budget, record_budget,
};
pub use writer::RecordingWriter;

/// First bytes of every recording.
pub const MAGIC: [u8; 8] = *b"LSREC\0\r\n";

/// Bumped on any incompatible change of the framing or of [`Header`]/[`Record`].
///
/// * 1: the first format.
/// * 2: [`Header::rmcp_version`] (was a `rmcp version: X` note),
///   [`Settings::missing_scopes`], [`Settings::scope_functions`],
///   `Record::Realloc::entry_ts` and
///   `SessionFact::Created`. Version 1 files still read (see `legacy`).
/// * 3: `Record::TraceOrigin` (appended: a version 2 file reads as is).
/// * 4: records frames are zstd-compressed (the header frame is not).
/// * 5: [`Header::frame_pointers`]; `AllocLayer::RustShimsAndLibc`. Versions
///   2 to 4 read as is, with frame pointers unknown.
/// * 6: scope kinds `task-poll` and `task-poll-end` (tokio's task polls) and
///   `Record::Task` (appended; in-process task spawns and ends). Version 5
///   reads as is.
/// * 7: `LostReason::Malformed` (appended: records the kernel sent that did
///   not decode). Version 6 reads as is.
/// * 8: [`Header::sampling`] (a recording may hold a sample of the
///   allocations) and `LostReason::SampledFull` (appended). Versions 5 to 7
///   read as recordings of every call.
/// * 9: [`Header::segment`] (a recording written in segments, see
///   [`segments`]) and `EndReason::Rotated` (appended). Version 8 reads as a
///   recording of one file.
/// * 10: a records frame writes each time as the difference from the record
///   before it (see `timestamps`); a sampled recording's frames are cut once
///   a second and compressed harder. Version 9 reads as is.
/// * 11: [`Header::stack_walk`]: how the producer walked stacks (the probe
///   walks a build without frame pointers by tables from `.eh_frame`).
///   Version 10 reads as walked by frame pointer.
/// * 12: `Record::WholeAlloc` (appended): in a sampled recording, an
///   allocation recorded whatever the countdown said (blocks aligned to a
///   cache-line pair, in both modes: tokio's task cells and channels).
///   Version 11 reads as is.
/// * 13: a sampled recording writes its times in microseconds
///   (see `coding`, `timestamps`), and its task polls' ends
///   without their header (`arg` 0: the innermost task poll open on the
///   thread), and its records frames are the flushes of one zstd stream
///   (the writer's `Compression::Stream`). Version 12 reads as is, in
///   nanoseconds.
/// * 14: `Record::WholeAllocInPoll` (appended): an in-process sampled
///   recording writes a block recorded whole inside a session span's poll
///   that holds nothing else as one record, not three. Version 13 reads as is.
pub const FORMAT_VERSION: u32 = 14;

/// The oldest format version this reader still reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// A frame longer than this is corruption, not data (writers flush far earlier).
pub const MAX_FRAME_BYTES: u32 = 64 << 20;

/// Prints a recording as JSON lines: the header, then one record per line. A torn
/// tail is reported on stderr after the readable prefix (which is still printed).
pub fn dump(path: &std::path::Path, out: impl std::io::Write) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut reader = segments::Chain::open(path)?;
    let mut out = std::io::BufWriter::new(out);
    writeln!(out, "{}", serde_json::to_string(reader.header())?)?;
    for record in reader.by_ref() {
        writeln!(out, "{}", serde_json::to_string(&record)?)?;
    }
    out.flush()?;
    if let Some(Tail::Torn { offset, reason }) = reader.tail() {
        eprintln!(
            "{}: torn tail at byte {offset} ({reason}); everything before it was printed",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
