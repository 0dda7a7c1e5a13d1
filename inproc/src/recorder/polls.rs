//! Polls of a sampled recording, coalesced on the thread that makes them.
//!
//! A sampled recording keeps a poll (a task's, a session span's) only when it
//! holds a record of its own or says something new of its object
//! (`leakscope_recording::coalesce`: a task's first poll, a session's first
//! two, then one a second; a free holds none).
//! The writer applies that rule to every batch, but each poll it drops was
//! first pushed under the buffer's lock and converted: on the fixture server
//! at saturation ~56 events a session reached the buffer for ~15 records
//! written, and the writer thread was the largest part of the cost of
//! recording. So here a poll's entry waits on its thread until something is
//! recorded inside it (then it goes first, in order) or the poll ends (then
//! the rule decides whether both go). A recording of every call keeps every
//! poll and never waits.
//!
//! Only this thread's order matters to what the analyzer reads from a poll
//! (what it encloses); an entry that waited is written with the time it was
//! made, after other threads' later records, which the format allows.

use std::cell::RefCell;

use leakscope_recording::coalesce::{Object, PollsKept};
use leakscope_recording::monotonic_ns;

use super::buffer::{RawEvent, RawKind, Shared, push};
use super::sampler;

/// Polls open at once on a thread that can wait; deeper ones are written at
/// once (a poll of a task inside a session span inside a task's is 3).
const DEPTH: usize = 8;

#[derive(Clone, Copy)]
struct Open {
    kind: RawKind,
    key: u64,
    ts: u64,
}

/// This thread's open polls, innermost last: `open[..written]` are in the
/// buffer already, the rest wait.
struct Polls {
    open: [Open; DEPTH],
    len: usize,
    written: usize,
    /// The recording they belong to (`sampler::epoch`): a poll left open when
    /// a recording ended is not the next one's.
    epoch: u32,
}

const NONE: Open = Open {
    kind: RawKind::SpanEnter,
    key: 0,
    ts: 0,
};

thread_local! {
    static POLLS: RefCell<Polls> = const {
        RefCell::new(Polls { open: [NONE; DEPTH], len: 0, written: 0, epoch: 0 })
    };
}

/// Runs `f` on this thread's polls of the running recording.
fn with_polls<R>(f: impl FnOnce(&mut Polls) -> R) -> Option<R> {
    let epoch = sampler::epoch();
    POLLS
        .try_with(|polls| {
            let mut polls = polls.try_borrow_mut().ok()?;
            if polls.epoch != epoch {
                polls.len = 0;
                polls.written = 0;
                polls.epoch = epoch;
            }
            Some(f(&mut polls))
        })
        .ok()
        .flatten()
}

/// Writes the entries that wait: something is recorded inside them. Called
/// before every event this thread pushes.
pub(super) fn write_waiting(shared: &Shared) {
    if !sampler::sampling() {
        return;
    }
    with_polls(|polls| {
        for open in &polls.open[polls.written..polls.len] {
            push(shared, RawEvent::at(open.kind, open.key, open.ts), &[]);
        }
        polls.written = polls.len;
    });
}

/// Writes the entries that wait around a block recorded whole, but the
/// innermost when it is a session span's: that one's key is returned, and
/// the block is written as `Record::WholeAllocInPoll`, which stands for the
/// poll around it too. So a poll that holds nothing but such blocks (a
/// request's task cells) costs no record of its own, unless the rule keeps
/// it at its end. `None` when there is no such poll: everything that waited
/// is written, as for any record.
pub(super) fn write_waiting_around_whole(shared: &Shared) -> Option<u64> {
    if !sampler::sampling() {
        return None;
    }
    with_polls(|polls| {
        // A full stack may have deeper polls written past it (see `enter`):
        // then its innermost is not the thread's.
        let innermost = polls.open[..polls.len].last().copied();
        let span = match innermost {
            Some(open)
                if polls.len < DEPTH
                    && polls.written < polls.len
                    && open.kind == RawKind::SpanEnter =>
            {
                Some(open.key)
            }
            _ => None,
        };
        let end = polls.len - usize::from(span.is_some());
        for open in &polls.open[polls.written..end] {
            push(shared, RawEvent::at(open.kind, open.key, open.ts), &[]);
        }
        polls.written = end;
        span
    })
    .flatten()
}

/// A poll begins (`kind` is its entry, `key` its object): it waits, in a
/// sampled recording.
pub(super) fn enter(shared: &Shared, kind: RawKind, key: u64) {
    let ts = monotonic_ns();
    if sampler::sampling() {
        let waits = with_polls(|polls| {
            if polls.len == DEPTH {
                return false;
            }
            polls.open[polls.len] = Open { kind, key, ts };
            polls.len += 1;
            true
        });
        if waits == Some(true) {
            return;
        }
        write_waiting(shared);
    }
    push(shared, RawEvent::at(kind, key, ts), &[]);
}

/// A poll ends (`exit` is its end, `key` its object, `kept` its object's
/// polls so far): written, with its entry if that waited, unless it held
/// nothing and says nothing new.
pub(super) fn exit(shared: &Shared, exit: RawKind, key: u64, kept: &mut PollsKept) {
    if !sampler::sampling() {
        push(shared, RawEvent::at(exit, key, monotonic_ns()), &[]);
        return;
    }
    let entry = entry_of(exit);
    // The innermost open poll it ends; polls opened inside it and never
    // ended end with it (unwritten, they held nothing).
    let found = with_polls(|polls| {
        let at = polls.open[..polls.len]
            .iter()
            .rposition(|o| o.kind == entry && o.key == key)?;
        let open = polls.open[at];
        let written = polls.written > at;
        polls.len = at;
        polls.written = polls.written.min(at);
        Some((open, written))
    })
    .flatten();
    match found {
        Some((open, true)) => kept.keep(open.ts),
        Some((open, false)) if !kept.redundant(object_of(exit), open.ts) => {
            kept.keep(open.ts);
            // The polls around it hold it: they go first.
            write_waiting(shared);
            push(shared, RawEvent::at(open.kind, open.key, open.ts), &[]);
        }
        Some((_, false)) => return,
        // Entered before this recording, or deeper than it waits: written as
        // it was, inside the polls around it.
        None => write_waiting(shared),
    }
    // The clock read only for an end that is written: most polls of a
    // sampled recording hold nothing and go unwritten.
    push(shared, RawEvent::at(exit, key, monotonic_ns()), &[]);
}

/// Whose poll `exit` ends: a task's, or a session span's.
fn object_of(exit: RawKind) -> Object {
    match exit {
        RawKind::TaskPollEnd => Object::Task,
        _ => Object::Session,
    }
}

fn entry_of(exit: RawKind) -> RawKind {
    match exit {
        RawKind::TaskPollEnd => RawKind::TaskPoll,
        _ => RawKind::SpanEnter,
    }
}

#[cfg(test)]
mod tests {
    use leakscope_recording::sampling::Sampling;
    use leakscope_recording::{Phase, Record, RecordingReader, ScopeKind, SessionFact};

    use super::super::tests::one_recorder_at_a_time;
    use super::super::{
        Recorder, record_poll, record_poll_end, record_session_id, record_task_spawned,
    };
    use super::*;

    /// What this thread's polls and facts read as in a recording of `sampling`.
    fn recorded(sampling: Sampling, polls: impl FnOnce()) -> Vec<String> {
        let _one = one_recorder_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("polls.lsrec");
        let recorder = Recorder::start_with(&path, sampling).unwrap();
        polls();
        recorder.finish().unwrap();
        RecordingReader::open(&path)
            .unwrap()
            .filter_map(|record| match record {
                Record::Scope {
                    kind, phase, arg, ..
                } => Some(match (kind, phase) {
                    (ScopeKind::SessionSpan, Phase::Enter) => format!("enter {arg}"),
                    (ScopeKind::SessionSpan, Phase::Exit) => format!("exit {arg}"),
                    (ScopeKind::TaskPoll, _) => format!("poll {arg}"),
                    (ScopeKind::TaskPollEnd, _) => format!("end {arg}"),
                    other => format!("{other:?}"),
                }),
                Record::Session {
                    fact: SessionFact::Id(id),
                    ..
                } => Some(format!("id {id}")),
                Record::Task { id, .. } => Some(format!("task {id}")),
                Record::WholeAlloc { addr, .. } => Some(format!("whole {addr}")),
                Record::WholeAllocInPoll { addr, span, .. } => {
                    Some(format!("whole {addr} in {span}"))
                }
                _ => None,
            })
            .collect()
    }

    fn span(key: u64, kept: &mut PollsKept, inside: impl FnOnce()) {
        record_poll(RawKind::SpanEnter, key);
        inside();
        record_poll_end(RawKind::SpanExit, key, kept);
    }

    fn task(key: u64, kept: &mut PollsKept, inside: impl FnOnce()) {
        record_poll(RawKind::TaskPoll, key);
        inside();
        record_poll_end(RawKind::TaskPollEnd, key, kept);
    }

    /// The polls of the module docs: a span polled five times with nothing
    /// inside, then once around a fact; a task whose third poll holds a new
    /// span's first poll, and whose fourth holds an empty, redundant one (a
    /// task's first poll is kept, a session's first two).
    fn polls() {
        let (mut one, mut three, mut nine) = Default::default();
        // (A task whose birth a sampled recording lacks has no polls kept.)
        record_task_spawned(9);
        for _ in 0..5 {
            span(1, &mut one, || {});
        }
        span(1, &mut one, || record_session_id("s"));
        task(9, &mut nine, || {});
        task(9, &mut nine, || {});
        task(9, &mut nine, || span(3, &mut three, || {}));
        task(9, &mut nine, || span(1, &mut one, || {}));
    }

    #[test]
    fn a_sampled_recording_keeps_the_polls_that_hold_something_or_say_something_new() {
        let recorded = recorded(Sampling::Bytes { mean: 1 << 30 }, polls);
        let expected = [
            "task 9", // its birth
            "enter 1", "exit 1", "enter 1", "exit 1", // the first two
            "enter 1", "id s", "exit 1", // the one that holds a fact
            // (A sampled recording's poll ends are written without their task.)
            "poll 9", "end 0", // the task's first
            "poll 9", "enter 3", "exit 3", "end 0", // one that holds a kept poll
        ];
        assert_eq!(recorded, expected);
    }

    fn whole(addr: u64) {
        super::super::record_memory(RawKind::WholeAlloc, addr, 0, 128);
    }

    /// A block recorded whole inside a session span's poll that waits is
    /// written as one record naming the span; the poll itself goes only if
    /// the rule keeps it or something else inside it needs it.
    #[test]
    fn a_block_recorded_whole_stands_for_the_span_poll_it_was_made_in() {
        let recorded = recorded(Sampling::Bytes { mean: 1 << 30 }, || {
            let (mut one, mut nine) = Default::default();
            record_task_spawned(9);
            span(1, &mut one, || record_session_id("s"));
            span(1, &mut one, || {});
            // Past a session's first two: the poll holds the block alone.
            span(1, &mut one, || whole(100));
            // Inside a task's poll: the task's entry goes before the block.
            task(9, &mut nine, || {});
            task(9, &mut nine, || span(1, &mut one, || whole(200)));
            // A fact after the block: the poll is written then, around it.
            span(1, &mut one, || {
                whole(300);
                record_session_id("s");
            });
        });
        let expected = [
            "task 9",
            "enter 1",
            "id s",
            "exit 1",
            "enter 1",
            "exit 1",
            "whole 100 in 1",
            "poll 9",
            "end 0",
            "poll 9",
            "whole 200 in 1",
            "end 0",
            "whole 300 in 1",
            "enter 1",
            "id s",
            "exit 1",
        ];
        assert_eq!(recorded, expected);
    }

    #[test]
    fn a_recording_of_every_call_keeps_every_poll() {
        let recorded = recorded(Sampling::Every, polls);
        assert_eq!(
            recorded.len(),
            6 * 2 + 1 + 1 + 4 * 2 + 2 * 2,
            "{recorded:?}"
        );
    }
}
