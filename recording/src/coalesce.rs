//! Fewer poll records in a sampled recording, with the same objects and states.
//!
//! A server's tasks are polled far more often than they allocate: on the
//! fixture server at 100 sessions/s, sampled every 512 KiB, poll scopes
//! (`task-poll`/`task-poll-end`, `worker-poll`) were 61% of a recording's
//! records, ~2.2 MB a minute, where a recording that stays on for a day must
//! stay well under 1 GB. What the analyzer takes from a poll that holds no
//! record of its own is that its object was polled, and when: a task's first
//! poll (its birth: the cell at its header), a session's first two ("polled
//! only once" is a session that never started), its latest (its idle time).
//! So, per object (the scope's `arg`), its first polls
//! ([`Object::kept_first`]) are kept, then one every [`SPACING_NS`]; a poll
//! that encloses any other record of its thread (an allocation it made, a
//! nested scope) is always kept, so nothing is attributed differently. A
//! free is not such a record: the analyzer reads a free's time and address,
//! never the poll it was made in, and ~a fifth of a day of session churn's
//! polls held frees only. The cost: an idle time up to a second short.
//!
//! A task is known by its birth: the block its cell was allocated in (the
//! probe), or its `spawned` record (in-process). A sampled recording records
//! few cells, and an empty poll of a task whose birth it did not record says
//! nothing the analyzer can use (a task of unknown birth is in no verdict), so
//! such polls are left out too: on that fixture, most of them are
//! connections' tasks.
//!
//! Done on each batch the writer frames, in order, so no record moves: a
//! poll whose end falls in the next batch is kept. Only sampled recordings
//! are coalesced; a recording of every call keeps every poll (its trace
//! shows each one). The in-process recorder applies the same rule
//! ([`PollsKept`]) on the thread that makes the polls, before they reach its
//! buffer: at saturation most of its writer thread's work was polls this
//! pass then dropped.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::{Phase, Record, ScopeKind, TaskEvent, WHOLE_ALIGN};

/// Whose polls are kept: a task's, or a session's (its worker's polls, its
/// spans in-process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    Task,
    Session,
}

impl Object {
    /// Polls of an object always kept. The analyzer counts a session's polls
    /// (one only: it never started) but not a task's.
    pub fn kept_first(self) -> u8 {
        match self {
            Object::Task => 1,
            Object::Session => 2,
        }
    }
}

/// After those, at most one poll per object in this long.
pub const SPACING_NS: u64 = 1_000_000_000;

/// Objects remembered at most; past it the memory starts afresh, which only
/// keeps more polls (bounded memory, whatever the number of tasks ever made).
const OBJECTS: usize = 1 << 20;

/// A recorded birth not polled in this long is not a task's (see
/// [`Coalescer::born`]).
pub const UNPOLLED_NS: u64 = 60_000_000_000;

/// Whether a recorded block at `addr` may be a task's cell: tokio aligns
/// each cell to [`WHOLE_ALIGN`] (a cache-line pair; that alignment is why a
/// sampled recording records cells whole), so a block at any other address
/// is not one. Most blocks a sampled recording keeps are not (the eBPF
/// probe records every block of a session's birth whole, most of them
/// small): at 1,000 abandoned sessions a second, 43% of what `born` held
/// was such blocks, and the probe's memory follows `born`.
fn may_be_cell(addr: u64) -> bool {
    addr.is_multiple_of(WHOLE_ALIGN as u64)
}

/// A birth in [`Coalescer::born`] whose task was polled.
const POLLED: u64 = u64::MAX;

/// `born` is first swept at this size.
const FIRST_SWEEP: usize = 1 << 14;

/// Which records open and close a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Class {
    Task,
    Worker,
    Span,
}

fn opens(record: &Record) -> Option<(u32, Class, u64)> {
    match *record {
        Record::Scope {
            tid,
            kind,
            phase: Phase::Enter,
            arg,
            ..
        } => match kind {
            ScopeKind::TaskPoll => Some((tid, Class::Task, arg)),
            ScopeKind::WorkerPoll => Some((tid, Class::Worker, arg)),
            ScopeKind::SessionSpan => Some((tid, Class::Span, arg)),
            _ => None,
        },
        _ => None,
    }
}

fn closes(record: &Record, class: Class, arg: u64) -> bool {
    match *record {
        Record::Scope {
            kind: ScopeKind::TaskPollEnd,
            arg: end,
            ..
        // 0: a sampled recording's end, of the innermost task poll open.
        } => class == Class::Task && (end == arg || end == 0),
        Record::Scope {
            kind: ScopeKind::WorkerPoll,
            phase: Phase::Exit,
            ..
        } => class == Class::Worker,
        Record::Scope {
            kind: ScopeKind::SessionSpan,
            phase: Phase::Exit,
            ..
        } => class == Class::Span,
        _ => false,
    }
}

fn tid_of(record: &Record) -> Option<u32> {
    match *record {
        Record::Alloc { tid, .. }
        | Record::WholeAlloc { tid, .. }
        | Record::WholeAllocInPoll { tid, .. }
        | Record::Free { tid, .. }
        | Record::Realloc { tid, .. }
        | Record::Scope { tid, .. }
        | Record::Session { tid, .. }
        | Record::Task { tid, .. } => Some(tid),
        _ => None,
    }
}

/// Which of an object's polls were kept: the rule of the module docs, for
/// one object.
#[derive(Debug, Clone, Copy, Default)]
pub struct PollsKept {
    polls: u8,
    last_ns: u64,
}

impl PollsKept {
    /// The polls of a task whose birth the recording does not hold (spawned
    /// before it began): an empty one says nothing the analyzer can use, as
    /// [`Coalescer`] has it, so each is redundant; one that holds a record is
    /// still kept, by whoever decides that it holds one.
    pub const UNBORN: PollsKept = PollsKept {
        polls: u8::MAX,
        last_ns: u64::MAX,
    };

    /// Whether a poll of `object` entered at `ts` that holds nothing says
    /// nothing new.
    pub fn redundant(&self, object: Object, ts: u64) -> bool {
        self.polls >= object.kept_first() && ts.saturating_sub(self.last_ns) < SPACING_NS
    }

    /// A poll entered at `ts` is kept.
    pub fn keep(&mut self, ts: u64) {
        if self.polls == 0 {
            self.last_ns = ts;
        }
        self.polls = self.polls.saturating_add(1);
        self.last_ns = self.last_ns.max(ts);
    }
}

/// An open poll in the batch being coalesced.
struct Open {
    index: usize,
    class: Class,
    arg: u64,
    ts: u64,
    holds: bool,
}

/// Remembers, across batches, which polls of each object were kept.
#[derive(Default)]
pub struct Coalescer {
    kept: HashMap<(Class, u64), PollsKept, RandomState>,
    /// Tasks whose birth is recorded and not yet their end: recorded blocks
    /// that may be cells ([`may_be_cell`]: a cell's header is its block's
    /// address) and in-process tasks spawned, each with when it was born, or
    /// [`POLLED`] once a poll of it was kept. Many recorded blocks are not
    /// task cells (a session's channels, its map entry), and a leaked session
    /// keeps some alive for good: a birth never polled within
    /// [`UNPOLLED_NS`] is forgotten (tokio polls a task it spawns as soon as
    /// a worker is free), so this holds the tasks alive and one to two
    /// minutes of blocks (the sweeps come as it doubles), not every block a
    /// server ever leaked. It is most of what the probe's memory grows by
    /// under churn, and follows the rate of recorded blocks, not their
    /// number: at 1,000 abandoned sessions a second it held ~120,000, a
    /// table of 4.5 MB, the probe's RssAnon flat from the third minute: 17.4
    /// MiB after 150,000 such sessions, 25.1 when it also took blocks at any
    /// address (`ROUNDS=0 RATE=1000 SESSIONS=150000
    /// scripts/probes-side-by-side.sh OLD_PROBE`).
    born: HashMap<u64, u64, RandomState>,
    /// `born`'s size after its last sweep: the next comes at twice it.
    swept: usize,
    /// The latest record's time: the clock the sweep ages births by.
    now: u64,
    /// The worker poll's object (an address inside its task's cell: the
    /// future) of each task whose poll was seen to enclose one, by the task's
    /// header: so that when the task ends (its cell is freed) what was kept of
    /// its worker's polls goes too. Else each session's worker kept an entry
    /// until [`OBJECTS`] cleared them all, and a new session whose worker's
    /// future lands at an ended one's address within [`SPACING_NS`] had its
    /// first polls dropped.
    workers: HashMap<u64, u64, RandomState>,
    /// Polls dropped so far.
    dropped: u64,
}

impl Coalescer {
    /// Polls dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Removes from `batch` the polls that hold nothing and say nothing new
    /// (see the module docs); every other record stays, in order.
    pub fn coalesce(&mut self, batch: &mut Vec<Record>) {
        let mut open: HashMap<u32, Vec<Open>, RandomState> = HashMap::default();
        let mut drop = vec![false; batch.len()];
        for (index, record) in batch.iter().enumerate() {
            let Some(tid) = tid_of(record) else {
                continue;
            };
            if let Some(ts) = record.ts() {
                self.now = self.now.max(ts);
            }
            self.births_and_ends(record);
            let stack = open.entry(tid).or_default();
            // A close ends the innermost poll it matches, and the polls opened
            // inside it that never close (the probe sees a worker poll's entry
            // only: it ends with its task's poll).
            if let Some(at) = stack.iter().rposition(|o| closes(record, o.class, o.arg)) {
                let mut inner_kept = false;
                while stack.len() > at {
                    let mut poll = stack.pop().expect("len > at");
                    poll.holds |= inner_kept;
                    if !poll.holds && self.redundant(poll.class, poll.arg, poll.ts) {
                        drop[poll.index] = true;
                        self.dropped += 1;
                        inner_kept = false;
                    } else {
                        self.keep(poll.class, poll.arg, poll.ts);
                        inner_kept = true;
                    }
                }
                // The close goes with its poll.
                drop[index] = !inner_kept;
                // The enclosing poll holds this one's records, if it kept them.
                if let Some(outer) = stack.last_mut() {
                    outer.holds |= inner_kept;
                }
                continue;
            }
            if let Some((_, class, arg)) = opens(record) {
                if class == Class::Worker
                    && let Some(task) = stack.iter().rev().find(|o| o.class == Class::Task)
                {
                    if self.workers.len() >= OBJECTS {
                        self.workers.clear();
                    }
                    self.workers.insert(task.arg, arg);
                }
                // Whether it holds the enclosing poll's records is known at its end.
                stack.push(Open {
                    index,
                    class,
                    arg,
                    ts: record.ts().unwrap_or(0),
                    holds: false,
                });
            } else if !matches!(record, Record::Free { .. }) {
                for poll in stack.iter_mut() {
                    poll.holds = true;
                }
            }
        }
        // Polls still open at the batch's end are kept.
        for poll in open.into_values().flatten() {
            self.keep(poll.class, poll.arg, poll.ts);
        }
        let mut index = 0;
        batch.retain(|_| {
            index += 1;
            !drop[index - 1]
        });
    }

    fn redundant(&self, class: Class, arg: u64, ts: u64) -> bool {
        if class == Class::Task && !self.born.contains_key(&arg) {
            return true;
        }
        let object = match class {
            Class::Task => Object::Task,
            Class::Worker | Class::Span => Object::Session,
        };
        self.kept
            .get(&(class, arg))
            .is_some_and(|kept| kept.redundant(object, ts))
    }

    fn keep(&mut self, class: Class, arg: u64, ts: u64) {
        if class == Class::Task
            && let Some(born) = self.born.get_mut(&arg)
        {
            *born = POLLED;
        }
        if self.kept.len() >= OBJECTS {
            self.kept.clear();
        }
        self.kept.entry((class, arg)).or_default().keep(ts);
    }

    /// A task's header is the first bytes of its cell: the cell's allocation
    /// (or, in-process, its spawn) is the task's birth, its free (its end) the
    /// task's end, and a new task may reuse the address.
    fn births_and_ends(&mut self, record: &Record) {
        match *record {
            Record::Alloc { addr, .. }
            | Record::WholeAlloc { addr, .. }
            | Record::WholeAllocInPoll { addr, .. }
                if may_be_cell(addr) =>
            {
                self.birth(addr);
            }
            // Only a cell's free ends a task: no look-up for any other.
            Record::Free { addr, .. } if may_be_cell(addr) => self.ended(addr),
            Record::Realloc { old, new, .. } => {
                if may_be_cell(old) {
                    self.ended(old);
                }
                if new != 0 && may_be_cell(new) {
                    self.birth(new);
                }
            }
            Record::Task { id, event, .. } => match event {
                TaskEvent::Spawned => self.birth(id),
                TaskEvent::Ended => self.ended(id),
            },
            _ => {}
        }
    }

    /// A task (or a block that may be one) is born at `header`, now.
    fn birth(&mut self, header: u64) {
        if self.born.len() >= self.swept.max(FIRST_SWEEP / 2) * 2 {
            let now = self.now;
            self.born
                .retain(|_, &mut born| born == POLLED || now.saturating_sub(born) < UNPOLLED_NS);
            if self.born.len() >= OBJECTS * 4 {
                // Frees were lost; start afresh rather than grow.
                self.born.clear();
            }
            self.born.shrink_to(self.born.len() * 2);
            self.swept = self.born.len();
        }
        self.born.insert(header, self.now);
    }

    /// The task (or block) at `header` ended: what was kept of it and of its
    /// worker goes.
    fn ended(&mut self, header: u64) {
        self.kept.remove(&(Class::Task, header));
        self.born.remove(&header);
        if let Some(worker) = self.workers.remove(&header) {
            self.kept.remove(&(Class::Worker, worker));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(ts: u64, tid: u32, kind: ScopeKind, phase: Phase, arg: u64) -> Record {
        Record::Scope {
            ts,
            tid,
            kind,
            phase,
            arg,
        }
    }

    fn poll(ts: u64, tid: u32, header: u64) -> [Record; 2] {
        [
            scope(ts, tid, ScopeKind::TaskPoll, Phase::Enter, header),
            scope(ts + 10, tid, ScopeKind::TaskPollEnd, Phase::Enter, header),
        ]
    }

    const MS: u64 = 1_000_000;

    /// The allocation of a task's cell: its birth.
    fn cell(header: u64) -> Record {
        Record::Alloc {
            ts: 0,
            tid: 9,
            addr: header,
            size: 256,
            stack: None,
        }
    }

    #[test]
    fn empty_polls_are_kept_first_once_for_a_task_twice_for_a_session_then_once_a_second() {
        let mut c = Coalescer::default();
        // 30 polls of one task, and 30 spans of one session, 100 ms apart: 3 s.
        let mut batch = vec![cell(0x1000)];
        batch.extend((0..30).flat_map(|i| {
            let ts = i * 100 * MS;
            let [enter, end] = poll(ts, 1, 0x1000);
            [
                enter,
                end,
                scope(ts + 1, 2, ScopeKind::SessionSpan, Phase::Enter, 0x77),
                scope(ts + 2, 2, ScopeKind::SessionSpan, Phase::Exit, 0x77),
            ]
        }));
        c.coalesce(&mut batch);
        let kept = |kind: ScopeKind| -> Vec<u64> {
            batch
                .iter()
                .filter_map(|r| match *r {
                    Record::Scope {
                        kind: k,
                        phase: Phase::Enter,
                        ts,
                        ..
                    } if k == kind => Some(ts / MS),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(kept(ScopeKind::TaskPoll), [0, 1000, 2000]);
        assert_eq!(kept(ScopeKind::SessionSpan), [0, 100, 1100, 2100]);
        assert_eq!(batch.len(), 1 + 6 + 8, "each kept poll with its end");
        assert_eq!(c.dropped(), 27 + 26);
    }

    #[test]
    fn a_poll_that_holds_a_record_is_kept_and_so_are_other_threads_and_objects() {
        let mut c = Coalescer::default();
        let mut batch = vec![cell(0x1000), cell(0x2000)];
        for i in 0..5 {
            batch.extend(poll(i * MS, 1, 0x1000));
        }
        // A fifth poll of 0x1000 that allocates, interleaved with another
        // thread's poll of another task: both are kept.
        batch.push(scope(6 * MS, 1, ScopeKind::TaskPoll, Phase::Enter, 0x1000));
        batch.extend(poll(6 * MS, 2, 0x2000));
        batch.push(Record::Alloc {
            ts: 6 * MS + 1,
            tid: 1,
            addr: 0x99,
            size: 8,
            stack: None,
        });
        batch.push(scope(
            6 * MS + 2,
            1,
            ScopeKind::TaskPollEnd,
            Phase::Enter,
            0x1000,
        ));
        let before = batch.len();
        c.coalesce(&mut batch);
        // Polls 2 to 5 of 0x1000 are dropped (8 records); the rest stays in order.
        assert_eq!(batch.len(), before - 8);
        assert!(matches!(batch[4], Record::Scope { ts, tid: 1, .. } if ts == 6 * MS));
        assert!(matches!(batch[5], Record::Scope { tid: 2, .. }));
        assert!(matches!(batch[7], Record::Alloc { .. }));
    }

    #[test]
    fn a_nested_worker_poll_goes_with_its_task_poll_a_free_holds_none_and_an_ended_task_starts_afresh()
     {
        let mut c = Coalescer::default();
        let nested = |ts: u64| {
            [
                scope(ts, 1, ScopeKind::TaskPoll, Phase::Enter, 0x1000),
                scope(ts + 1, 1, ScopeKind::WorkerPoll, Phase::Enter, 0x1008),
                scope(ts + 2, 1, ScopeKind::WorkerPoll, Phase::Exit, 0),
                scope(ts + 3, 1, ScopeKind::TaskPollEnd, Phase::Enter, 0x1000),
            ]
        };
        let mut batch = vec![cell(0x1000)];
        batch.extend((0..4).flat_map(|i| nested(i * MS)));
        c.coalesce(&mut batch);
        assert_eq!(
            batch.len(),
            1 + 8,
            "two nested polls kept whole, two dropped whole"
        );
        // The probe sees a worker poll's entry only: it ends with its task's poll.
        let entry_only = |ts: u64| {
            [
                scope(ts, 1, ScopeKind::TaskPoll, Phase::Enter, 0x3000),
                scope(ts + 1, 1, ScopeKind::WorkerPoll, Phase::Enter, 0x3008),
                scope(ts + 3, 1, ScopeKind::TaskPollEnd, Phase::Enter, 0x3000),
            ]
        };
        let mut batch = vec![cell(0x3000)];
        batch.extend((0..4).flat_map(|i| entry_only(i * MS)));
        batch.extend(entry_only(5 * MS));
        batch.insert(
            batch.len() - 1,
            Record::Free {
                ts: 5 * MS + 2,
                tid: 1,
                addr: 0x99,
            },
        );
        c.coalesce(&mut batch);
        assert_eq!(
            batch.len(),
            1 + 6 + 1,
            "the first two kept, the next three dropped, a free kept without the poll it was made in"
        );
        assert!(matches!(
            batch.last(),
            Some(Record::Free { addr: 0x99, .. })
        ));
        // The task ends (its cell is freed): a poll at its address is of a
        // task of unknown birth, until a new cell is recorded there.
        let mut batch = vec![Record::Free {
            ts: 5 * MS,
            tid: 1,
            addr: 0x1000,
        }];
        batch.extend(poll(6 * MS, 1, 0x1000));
        c.coalesce(&mut batch);
        assert_eq!(batch.len(), 1);
        let mut batch = vec![cell(0x1000)];
        batch.extend(poll(7 * MS, 1, 0x1000));
        c.coalesce(&mut batch);
        assert_eq!(batch.len(), 3, "a new task's first poll is kept");
    }

    #[test]
    fn a_recorded_block_never_polled_is_forgotten_a_task_is_not() {
        let mut c = Coalescer::default();
        let block = |ts: u64, addr: u64| Record::WholeAlloc {
            ts,
            tid: 9,
            addr,
            size: 256,
            stack: None,
        };
        // A task, polled; then 20,000 blocks kept alive that no poll names
        // (a leaked session's channels).
        let mut batch = vec![block(0, 0x1000)];
        batch.extend(poll(1, 1, 0x1000));
        batch.extend((0..20_000u64).map(|i| block(2, 0x1_0000 + i * 0x100)));
        c.coalesce(&mut batch);
        assert!(c.born.len() > 20_000, "all young");
        // A minute on, more blocks: the old unpolled ones are swept out.
        let later = UNPOLLED_NS + 1_000;
        let mut batch: Vec<Record> = (0..20_000u64)
            .map(|i| block(later, 0x100_0000 + i * 0x100))
            .collect();
        c.coalesce(&mut batch);
        assert!(
            !c.born.contains_key(&0x1_0000),
            "a block a minute old never polled is not a task's"
        );
        assert_eq!(
            c.born.len(),
            1 + 20_000,
            "the task and the last minute's blocks"
        );
        // The task is still known: its empty polls are kept a second apart.
        let mut batch: Vec<Record> = poll(later + 1, 1, 0x1000).into();
        c.coalesce(&mut batch);
        assert_eq!(batch.len(), 2, "a task of known birth's poll, a second on");
        // A poll of a forgotten block's address says nothing: dropped.
        let mut batch: Vec<Record> = poll(later + 2, 1, 0x1_0000).into();
        c.coalesce(&mut batch);
        assert!(batch.is_empty());
        // A block at an address no task cell has (cells are aligned to
        // WHOLE_ALIGN) is never remembered.
        let mut batch = vec![block(later + 3, 0x200_0040)];
        c.coalesce(&mut batch);
        assert!(!c.born.contains_key(&0x200_0040));
    }

    #[test]
    fn what_was_kept_of_a_workers_polls_goes_with_its_task() {
        let mut c = Coalescer::default();
        let nested = |ts: u64, header: u64| {
            [
                scope(ts, 1, ScopeKind::TaskPoll, Phase::Enter, header),
                scope(ts + 1, 1, ScopeKind::WorkerPoll, Phase::Enter, header + 8),
                scope(ts + 3, 1, ScopeKind::TaskPollEnd, Phase::Enter, header),
            ]
        };
        // 1,000 sessions' workers, each polled twice, then their tasks end.
        let mut batch = Vec::new();
        for i in 0..1000u64 {
            let header = 0x1000 + i * 0x100;
            batch.push(cell(header));
            batch.extend(nested(i * MS, header));
            batch.extend(nested(i * MS + 10, header));
        }
        c.coalesce(&mut batch);
        assert_eq!(c.workers.len(), 1000);
        assert!(c.kept.len() >= 2000, "the tasks' and the workers' polls");
        let mut frees: Vec<Record> = (0..1000u64)
            .map(|i| Record::Free {
                ts: 999 * MS + 100,
                tid: 1,
                addr: 0x1000 + i * 0x100,
            })
            .collect();
        c.coalesce(&mut frees);
        assert_eq!(
            (c.kept.len(), c.born.len(), c.workers.len()),
            (0, 0, 0),
            "nothing remembered of ended tasks"
        );
        // A new session's worker at the last ended one's address, within a
        // second of its last poll: its first two polls are kept again.
        let last = 0x1000 + 999 * 0x100;
        let mut batch = vec![cell(last)];
        batch.extend(nested(999 * MS + 200, last));
        batch.extend(nested(999 * MS + 220, last));
        c.coalesce(&mut batch);
        let workers = batch
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Record::Scope {
                        kind: ScopeKind::WorkerPoll,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(workers, 2);
    }

    #[test]
    fn an_empty_poll_of_a_task_of_unknown_birth_says_nothing_but_one_that_holds_is_kept() {
        let mut c = Coalescer::default();
        let mut batch = poll(0, 1, 0x4000).to_vec();
        c.coalesce(&mut batch);
        assert!(batch.is_empty());
        let mut batch = vec![
            scope(MS, 1, ScopeKind::TaskPoll, Phase::Enter, 0x4000),
            Record::Alloc {
                ts: MS,
                tid: 1,
                addr: 0x50,
                size: 8,
                stack: None,
            },
            scope(MS + 1, 1, ScopeKind::TaskPollEnd, Phase::Enter, 0x4000),
        ];
        c.coalesce(&mut batch);
        assert_eq!(batch.len(), 3);
        // In-process, a task is born by its spawn record.
        let mut batch = vec![Record::Task {
            ts: 2 * MS,
            tid: 1,
            id: 7,
            event: TaskEvent::Spawned,
            stack: None,
        }];
        batch.extend(poll(3 * MS, 1, 7));
        c.coalesce(&mut batch);
        assert_eq!(batch.len(), 3);
    }

    /// A sampled recording's poll ends carry no header (format 13): a
    /// cooperative target's stream is written so, and the probe's writer
    /// coalesces it after.
    #[test]
    fn a_poll_end_without_its_header_ends_the_innermost_task_poll() {
        let mut c = Coalescer::default();
        let mut batch = vec![cell(0x1000), cell(0x2000)];
        for i in 0..3 {
            let ts = i * MS;
            batch.extend([
                scope(ts, 1, ScopeKind::TaskPoll, Phase::Enter, 0x1000),
                scope(ts + 1, 1, ScopeKind::TaskPoll, Phase::Enter, 0x2000),
                scope(ts + 2, 1, ScopeKind::TaskPollEnd, Phase::Enter, 0),
                scope(ts + 3, 1, ScopeKind::TaskPollEnd, Phase::Enter, 0),
            ]);
        }
        crate::coding::bare_poll_ends(&mut batch);
        c.coalesce(&mut batch);
        // Each task's first poll (the inner one inside the outer, which holds
        // it); the next two of each dropped whole.
        assert_eq!(batch.len(), 2 + 4, "{batch:?}");
        assert_eq!(c.dropped(), 4);
        assert!(batch[2..].iter().all(|r| match *r {
            Record::Scope {
                kind: ScopeKind::TaskPollEnd,
                arg,
                ..
            } => arg == 0,
            _ => true,
        }));
    }
}
