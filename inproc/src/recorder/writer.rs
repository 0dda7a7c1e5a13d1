//! The writer thread: swaps the full buffer for its spare and turns raw
//! events into records, outside the lock the recording threads push under.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use leakscope_recording::{
    EndReason, Header, LostReason, Mapping, Phase, Record, RecordingWriter, ScopeKind, SessionFact,
    TaskEvent, monotonic_ns,
};

use super::buffer::{Events, RawEvent, RawKind, Shared, lock};
use super::events::trace_origin;
use super::mode::{Mode, set_mode};
use super::own;

/// The writer of a recording, wherever it goes.
pub(super) type Writer = RecordingWriter<Box<dyn Write + Send>>;

/// Writes the header and what comes before the events: the mappings, and
/// the application trace's time zero when there is one. A `stream` to the
/// probe is relayed (`RecordingWriter::relay`): neither compressed nor
/// coalesced, since the probe decodes it and writes the file itself.
pub(super) fn begin(
    out: Box<dyn Write + Send>,
    stream: bool,
    header: &Header,
    mappings: Vec<Mapping>,
) -> Result<Writer> {
    let mut writer = RecordingWriter::new(out, header)?;
    if stream {
        writer.relay();
    }
    for mapping in mappings {
        writer.push(Record::Mapping(mapping))?;
    }
    let origin = trace_origin();
    if origin != 0 {
        writer.push(Record::TraceOrigin { ts: origin })?;
    }
    writer.flush()?;
    Ok(writer)
}

/// The writer thread: swaps the full buffer for its spare every 10 ms and turns
/// raw events into records. Its own allocations are never recorded.
pub(super) fn write_loop(
    shared: &'static Shared,
    mut writer: Writer,
    mut spare: Events,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    own::mark_thread();
    let written = write_until_stopped(shared, &mut writer, &mut spare, stop);
    spare.clear();
    *lock(&shared.spare) = Some(spare);
    if written.is_err() {
        // Nobody will write what the threads record: they stop paying for it
        // at once. The error is the recorder's result (`finish`, or its drop).
        set_mode(Mode::Busy);
    }
    written?;
    writer.finish(Record::End {
        ts: monotonic_ns(),
        reason: EndReason::Finished,
    })?;
    Ok(())
}

/// The writer's loop, until `stop` and the last swap.
fn write_until_stopped(
    shared: &'static Shared,
    writer: &mut Writer,
    spare: &mut Events,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    // What each drop counter said when last written.
    let mut seen = [0u64; 2];
    loop {
        // Recording is off before `stop` is set: this swap, under the lock
        // the threads push under, is the last, and nothing is pushed after it.
        let stopping = stop.load(Ordering::SeqCst);
        let half = shared.buffer.lock().half();
        if !stopping && !half {
            // Until it is half full, or 10 ms (a wake-up missed between the
            // look above and the wait costs at most the 10 ms).
            let idle = lock(&shared.idle);
            drop(
                shared
                    .drain
                    .wait_timeout(idle, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
        std::mem::swap(&mut *shared.buffer.lock(), spare);
        shared.stalled.store(false, Ordering::Relaxed);
        *lock(&shared.swaps) += 1;
        shared.swapped.notify_all();
        for (raw, frames) in spare.iter() {
            convert(raw, frames, shared, writer)?;
        }
        spare.clear();
        let counters = [
            (&shared.lost, LostReason::BufferFull),
            (&shared.sampled_full, LostReason::SampledFull),
        ];
        for ((counter, reason), seen) in counters.into_iter().zip(&mut seen) {
            let now = counter.load(Ordering::Relaxed);
            if now > *seen {
                writer.push(Record::Lost {
                    ts: monotonic_ns(),
                    reason,
                    count: now - *seen,
                })?;
                *seen = now;
            }
        }
        writer.tick()?;
        if stopping {
            return Ok(());
        }
    }
}

fn convert(
    raw: &RawEvent,
    frames: &[u64],
    shared: &Shared,
    writer: &mut Writer,
) -> std::io::Result<()> {
    let (ts, tid) = (raw.ts, raw.tid);
    let record = match raw.kind {
        RawKind::Alloc => Record::Alloc {
            ts,
            tid,
            addr: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
        },
        RawKind::WholeAlloc => Record::WholeAlloc {
            ts,
            tid,
            addr: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
        },
        RawKind::WholeAllocInPoll => Record::WholeAllocInPoll {
            ts,
            tid,
            addr: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
            span: raw.old,
        },
        RawKind::Realloc => Record::Realloc {
            ts,
            tid,
            old: raw.old,
            new: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
            entry_ts: raw.entry_ts,
        },
        RawKind::Free => Record::Free {
            ts,
            tid,
            addr: raw.addr,
        },
        RawKind::SpanEnter | RawKind::SpanExit => Record::Scope {
            ts,
            tid,
            kind: ScopeKind::SessionSpan,
            phase: if raw.kind == RawKind::SpanEnter {
                Phase::Enter
            } else {
                Phase::Exit
            },
            arg: raw.addr,
        },
        RawKind::WorkerEnd => Record::Scope {
            ts,
            tid,
            kind: ScopeKind::WorkerDrop,
            phase: Phase::Enter,
            arg: raw.addr,
        },
        RawKind::TraceOrigin => Record::TraceOrigin { ts: raw.addr },
        RawKind::TaskSpawned | RawKind::TaskEnded => Record::Task {
            ts,
            tid,
            id: raw.addr,
            event: if raw.kind == RawKind::TaskSpawned {
                TaskEvent::Spawned
            } else {
                TaskEvent::Ended
            },
            stack: writer.stack(frames)?,
        },
        RawKind::TaskPoll | RawKind::TaskPollEnd => Record::Scope {
            ts,
            tid,
            kind: if raw.kind == RawKind::TaskPoll {
                ScopeKind::TaskPoll
            } else {
                ScopeKind::TaskPollEnd
            },
            phase: Phase::Enter,
            arg: raw.addr,
        },
        RawKind::SessionId | RawKind::SessionCreated => {
            let id = lock(&shared.facts).take(raw.addr).unwrap_or_default();
            Record::Session {
                ts,
                tid,
                fact: if raw.kind == RawKind::SessionId {
                    SessionFact::Id(id)
                } else {
                    SessionFact::Created(id)
                },
            }
        }
    };
    writer.push(record)
}
