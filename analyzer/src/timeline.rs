//! The timeline: one streaming pass over a recording, through the stages.
//!
//! Each record goes to the stage that owns its concept: `Stack` and `Mapping` to
//! [`stacks`](crate::stacks) (symbolize, categorize), lifecycle scopes and session
//! facts to [`sessions`](crate::sessions) (which session owns a block), allocations
//! and frees to [`accounting`](crate::accounting) (live, reclaimed, transient,
//! retained over time). At the end, [`sites`](crate::sites) groups what is still
//! live by call site. The [`Timeline`] is what the outputs read.

use std::collections::HashMap;

use leakscope_recording::{EndReason, Header, LostReason, Record, SessionFact, Tail};

use crate::accounting::{Accounting, Block, SessionBytes};
pub use crate::accounting::{CategoryTotals, Sample};
use crate::attribute::{PerCategory, Rules};
use crate::profile::{Allocated, HeapProfile};
pub use crate::sessions::SessionState;
use crate::sessions::SessionTracker;
pub use crate::sites::Site;
use crate::stacks::Stacks;
pub use crate::tasks::TaskState;
use crate::tasks::TaskTracker;

/// One session as the recording shows it: its lifecycle and its bytes.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The session id string, when the recording names it (in-process mode).
    pub id: Option<String>,
    pub born_ns: u64,
    pub worker_end_ns: Option<u64>,
    pub allocated: u64,
    pub reclaimed: u64,
    /// Freed within the grace period after the worker ended.
    pub transient: u64,
    /// Still live at the end, worker gone for longer than the grace period.
    pub retained: u64,
    /// Still live at the end (retained or not).
    pub live_at_end: u64,
    pub state: SessionState,
    /// How long it had done nothing at the end (no birth, no worker poll since).
    pub idle_ns: u64,
    /// Polls of its worker seen ([`crate::sessions::SessionLife::polls`]).
    pub polls: u32,
}

/// One tokio task as the recording shows it ([`crate::tasks`]).
#[derive(Debug, Clone)]
pub struct Task {
    /// `None`: spawned before the recording began.
    pub born_ns: Option<u64>,
    /// The activity clock at its spawn (the recording's allocations so far).
    pub born_seq: u64,
    pub end_ns: Option<u64>,
    pub state: TaskState,
    pub polls: u32,
    /// Since its last poll, at the end of the recording.
    pub idle_ns: u64,
    /// Bytes it owns live at the end: its cell and what its polls allocated.
    pub live_bytes: u64,
    /// Its cell's size (one per future type), 0 when its cell was not seen.
    pub cell_size: u64,
    /// What its polls allocated over the recording (its cell included).
    pub allocated: u64,
    /// The function that spawned it (the first frame of its cell's stack
    /// outside tokio, the allocator and the standard library), when known.
    pub spawned_from: Option<String>,
    /// Its cell's stack.
    pub stack: Option<leakscope_recording::StackId>,
    /// The task that spawned it (an index into [`Timeline::tasks`]).
    pub parent: Option<usize>,
    /// The session it belongs to (an index into [`Timeline::sessions`]).
    pub session: Option<usize>,
}

pub struct Timeline {
    pub header: Header,
    pub tail: Tail,
    pub end_reason: Option<EndReason>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub allocs: u64,
    pub frees: u64,
    pub lost: u64,
    pub lost_by_reason: Vec<(LostReason, u64)>,
    pub sessions: Vec<Session>,
    /// Every tokio task seen polling, in order of first poll.
    pub tasks: Vec<Task>,
    pub categories: PerCategory<CategoryTotals>,
    pub samples: Vec<Sample>,
    pub session_births_s: Vec<f64>,
    pub worker_ends_s: Vec<f64>,
    /// Live blocks at the end grouped by stack: most session-retained bytes first.
    pub sites: Vec<Site>,
    /// What survives of the recording's allocations, by when in the target's
    /// activity it was allocated (a warm-up's rest, or growth).
    pub rest: crate::sites::Rest,
    /// Every stack's allocations and live blocks, for the pprof output.
    pub profile: HeapProfile,
    /// Time zero of the application's own trace (`tracing-chrome`), if the
    /// recording has one: `trace.json` then counts from it, so both line up.
    pub trace_origin_ns: Option<u64>,
    pub grace_ns: u64,
    /// Things the reader of a report should know (e.g. a torn recording).
    pub warnings: Vec<String>,
    /// Lifecycle signals the recording lacks, each with what it means for the verdict.
    pub missing_signals: Vec<String>,
}

impl Timeline {
    pub fn duration_s(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
}

/// Builds the timeline from records (the reader's iterator) in one pass.
pub struct Builder {
    grace_ns: u64,
    stacks: Stacks,
    sessions: SessionTracker,
    tasks: TaskTracker,
    books: Accounting,
    start_ns: Option<u64>,
    last_ns: u64,
    lost: HashMap<LostReason, u64>,
    end_reason: Option<EndReason>,
    allocated: Allocated,
    trace_origin_ns: Option<u64>,
}

impl Builder {
    /// The recording's probed lifecycle functions (its header's): worker polls
    /// probed without a return are then read from the allocations' stacks.
    pub fn scope_functions(mut self, functions: &[leakscope_recording::ScopeFunction]) -> Self {
        use leakscope_recording::ScopeKind;
        let polls: Vec<_> = functions
            .iter()
            .filter(|f| f.kind == ScopeKind::WorkerPoll)
            .collect();
        if !polls.is_empty() && polls.iter().all(|f| !f.returns) {
            self.sessions.polls_by_stack();
        }
        if functions.iter().any(|f| f.kind == ScopeKind::TaskPoll) {
            self.sessions.tasks_probed();
        }
        self.stacks.set_scope_functions(functions.to_vec());
        self
    }

    pub fn new(rules: Rules, grace_ns: u64, sample_every_ns: u64) -> Self {
        Self {
            grace_ns,
            stacks: Stacks::new(rules),
            sessions: SessionTracker::default(),
            tasks: TaskTracker::default(),
            books: Accounting::new(grace_ns, sample_every_ns),
            start_ns: None,
            last_ns: 0,
            lost: HashMap::new(),
            end_reason: None,
            allocated: Allocated::default(),
            trace_origin_ns: None,
        }
    }

    fn clock(&mut self, ts: u64) {
        self.start_ns.get_or_insert(ts);
        self.books.tick(ts);
        self.last_ns = self.last_ns.max(ts);
    }

    pub fn push(&mut self, record: Record) {
        match record {
            Record::Mapping(m) => self.stacks.add_mapping(m),
            Record::Stack { id, frames } => self.stacks.add(id, frames),
            Record::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            } => {
                self.clock(ts);
                self.alloc_inheriting(ts, tid, addr, size, stack, None);
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
                self.clock(ts);
                // The old block is gone when realloc succeeded (moved or resized in
                // place: re-added below) or was realloc(p, 0); a failure keeps it.
                // It is this realloc's block only if it was allocated before the
                // realloc began: another thread may have been handed the address
                // in between (the realloc freed it inside), and that block lives.
                let ours =
                    entry_ts == 0 || self.books.allocated_at(old).is_none_or(|at| at <= entry_ts);
                let resized = if old != 0 && (new != 0 || size == 0) && ours {
                    self.free(ts, old)
                } else {
                    None
                };
                // A resized block stays its session's, wherever it is resized.
                let inherited = resized.and_then(|b| b.session);
                self.alloc_inheriting(ts, tid, new, size, stack, inherited);
            }
            Record::Free { ts, addr, .. } => {
                self.clock(ts);
                self.free(ts, addr);
            }
            Record::Scope {
                ts,
                tid,
                kind,
                phase,
                arg,
            } => {
                self.clock(ts);
                match kind {
                    leakscope_recording::ScopeKind::TaskPoll => self.task_poll(ts, tid, arg),
                    leakscope_recording::ScopeKind::TaskPollEnd => {
                        self.sessions.task_poll_boundary(tid);
                        self.tasks.poll_end(tid);
                    }
                    _ => self.sessions.scope(ts, tid, kind, phase, arg),
                }
            }
            Record::Lost { reason, count, .. } => {
                *self.lost.entry(reason).or_default() += count;
                // Lost records may include scope exits (a stack that could not be
                // captured, or a posix_memalign block not known, loses no record).
                if !matches!(reason, LostReason::Stack | LostReason::PendingFull) {
                    self.sessions.forget_threads();
                    self.tasks.forget_threads();
                }
            }
            Record::End { ts, reason } => {
                self.clock(ts);
                self.end_reason = Some(reason);
            }
            Record::Session {
                ts,
                tid,
                fact: SessionFact::Id(id),
            } => {
                self.clock(ts);
                self.sessions.name(ts, tid, id);
            }
            Record::Session {
                ts,
                tid,
                fact: SessionFact::Created(id),
            } => {
                self.clock(ts);
                let (session, blocks) = self.sessions.created(ts, tid, id);
                for addr in blocks {
                    self.books.adopt(addr, session);
                }
            }
            Record::Session { .. } => {}
            Record::TraceOrigin { ts } => self.trace_origin_ns = Some(ts),
        }
    }

    /// A task's poll begins: on its first, its cell (the live block at its
    /// header) tells its birth, spawn site and owner, and becomes its own.
    fn task_poll(&mut self, ts: u64, tid: u32, header: u64) {
        self.sessions.task_poll_boundary(tid);
        if self.tasks.known(header).is_some() {
            self.tasks.poll(ts, tid, header, None, None);
            return;
        }
        let cell = self.books.cell_at(header);
        let request = if cell.is_some_and(|c| c.session.is_none()) {
            self.sessions.spawned_in_birth_request(header)
        } else {
            None
        };
        let key = self.tasks.poll(ts, tid, header, cell, request);
        if cell.is_some() {
            self.books.retag_cell(header, key, self.tasks.session(key));
        }
    }

    fn alloc_inheriting(
        &mut self,
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<leakscope_recording::StackId>,
        inherited: Option<crate::sessions::SessionKey>,
    ) {
        if addr == 0 {
            return;
        }
        let category = self.stacks.category(stack);
        let in_poll = self.sessions.wants_poll_stack(tid)
            && self
                .stacks
                .inside(stack, leakscope_recording::ScopeKind::WorkerPoll);
        let task = self.tasks.polling(tid);
        let session = self
            .sessions
            .alloc(tid, addr, size, category, in_poll)
            .or_else(|| task.and_then(|t| self.tasks.session(t)))
            .or(inherited);
        self.allocated.add(stack, session, size);
        let block = Block {
            ts,
            seq: 0,
            size,
            category,
            stack,
            session,
            task,
        };
        self.books.alloc(addr, block);
    }

    fn free(&mut self, ts: u64, addr: u64) -> Option<Block> {
        let Some(block) = self.books.free(ts, addr, &self.sessions) else {
            // A task born before the recording ends with a cell never seen.
            if !self.tasks.is_empty() {
                self.tasks.free(ts, addr);
            }
            return None;
        };
        // Only a session's block can be a birth-window block (most frees are not).
        if block.session.is_some() || self.sessions.wants_every_free() {
            self.sessions.free(addr);
        }
        if block.task.is_some() {
            // Only a cell retagged as its task's can be a task's header.
            self.tasks.free(ts, addr);
        }
        Some(block)
    }

    pub fn finish(mut self, header: Header, tail: Tail) -> Timeline {
        let end_ns = self.last_ns;
        let start_ns = self.start_ns.unwrap_or(end_ns);
        let totals = self.books.finish(end_ns, &self.sessions);
        let sites = crate::sites::sites(&totals.live, totals.allocs, &mut self.stacks);
        let rest = crate::sites::Rest::of(&totals.live, totals.allocs, &totals.samples);
        // Saturating: a producer's timestamps need not be monotonic in record order.
        let to_s = |ts: &u64| ts.saturating_sub(start_ns) as f64 / 1e9;
        let worker_ends_s = self.sessions.worker_ends().iter().map(to_s).collect();
        let allocated = std::mem::take(&mut self.allocated).resolved(|k| self.sessions.resolve(k));
        let (lives, index) = self.sessions.finish();
        let mut bytes = vec![SessionBytes::default(); lives.len()];
        for (key, figures) in totals.sessions.iter().enumerate() {
            bytes[index[key]] += *figures;
        }
        let missing_signals = missing_signals(&header);
        let worker_end_missing = header
            .settings
            .missing_scopes
            .contains(&leakscope_recording::ScopeKind::WorkerDrop);
        let grace_ns = self.grace_ns;
        let sessions: Vec<Session> = lives
            .into_iter()
            .zip(bytes)
            .map(|(life, b)| Session {
                state: SessionState::decide(
                    b.map_blocks,
                    b.map_blocks_live(),
                    match life.worker_end_ns {
                        Some(end) => Some(end + grace_ns <= end_ns),
                        None if worker_end_missing => None,
                        None => Some(false),
                    },
                ),
                idle_ns: end_ns.saturating_sub(life.last_active_ns),
                polls: life.polls,
                id: life.id,
                born_ns: life.born_ns,
                worker_end_ns: life.worker_end_ns,
                allocated: b.allocated,
                reclaimed: b.reclaimed,
                transient: b.transient,
                retained: b.retained,
                live_at_end: b.live_at_end,
            })
            .collect();
        let mut spawn_sites: HashMap<Option<leakscope_recording::StackId>, Option<String>> =
            HashMap::new();
        let tasks = self
            .tasks
            .finish()
            .into_iter()
            .enumerate()
            .map(|(key, life)| {
                let bytes = totals.tasks.get(key).copied().unwrap_or_default();
                Task {
                    state: TaskState::of(&life, start_ns, end_ns),
                    born_ns: life.born_ns,
                    born_seq: life.born_seq,
                    end_ns: life.end_ns,
                    polls: life.polls,
                    idle_ns: end_ns.saturating_sub(life.last_poll_ns),
                    live_bytes: bytes.live,
                    cell_size: life.cell_size,
                    allocated: bytes.allocated,
                    spawned_from: spawn_sites
                        .entry(life.cell_stack)
                        .or_insert_with(|| {
                            crate::tasks::spawn_site(self.stacks.frames(life.cell_stack))
                        })
                        .clone(),
                    stack: life.cell_stack,
                    parent: life.parent.map(|p| p as usize),
                    session: life.session.and_then(|s| index.get(s as usize).copied()),
                }
            })
            .collect();
        let profile = crate::profile::build(
            allocated,
            &totals.live,
            |key| index.get(key as usize).map(|&i| sessions[i].state),
            &mut self.stacks,
        );
        let mut lost_by_reason: Vec<(LostReason, u64)> = self.lost.into_iter().collect();
        lost_by_reason.sort_by_key(|(r, _)| format!("{r:?}"));
        let mut warnings = Vec::new();
        if let Tail::Torn { offset, reason } = &tail {
            warnings.push(format!(
                "the recording is truncated at byte {offset} ({reason}); reporting its readable prefix"
            ));
        }
        if header.frame_pointers == leakscope_recording::FramePointers::Omitted
            && header.producer == leakscope_recording::Producer::Ebpf
        {
            warnings.push(format!(
                "{} was built without frame pointers (read from its code): its stacks stop after a frame or two, so sites are named by the few frames there are; sessions, totals and the verdict do not need stacks. Rebuild with {} for full stacks",
                header.exe,
                leakscope_recording::frame_pointers::FIX
            ));
        }
        for (file, why) in self.stacks.unmatched_files() {
            warnings.push(format!(
                "{file} is not the file the target ran ({why}): its frames stay addresses, so categories and sites that need them are unknown"
            ));
        }
        Timeline {
            header,
            tail,
            end_reason: self.end_reason,
            start_ns,
            end_ns,
            allocs: totals.allocs,
            frees: totals.frees,
            lost: lost_by_reason
                .iter()
                .filter(|(r, _)| *r != LostReason::Stack)
                .map(|(_, n)| n)
                .sum(),
            lost_by_reason,
            session_births_s: sessions.iter().map(|s| to_s(&s.born_ns)).collect(),
            worker_ends_s,
            sessions,
            tasks,
            categories: totals.categories,
            samples: totals.samples,
            sites,
            rest,
            profile,
            trace_origin_ns: self.trace_origin_ns,
            grace_ns: self.grace_ns,
            warnings,
            missing_signals,
        }
    }
}

/// The lifecycle signals a recording lacks, from the scopes its preset named
/// that matched nothing, each with what the verdict cannot claim without it.
fn missing_signals(header: &Header) -> Vec<String> {
    use leakscope_recording::ScopeKind;
    header
        .settings
        .missing_scopes
        .iter()
        .filter_map(|kind| {
            let consequence = match kind {
                ScopeKind::SessionCreate => {
                    "no session births: sessions cannot be counted; see the findings by call site"
                }
                ScopeKind::WorkerSpawn => {
                    "no worker spawns: the worker's task is not linked to its session"
                }
                ScopeKind::WorkerPoll => {
                    "no worker polls: the worker's own allocations are not charged to sessions"
                }
                ScopeKind::WorkerDrop => {
                    "no worker ends: a kept entry cannot be told leaked from live (reported unknown)"
                }
                ScopeKind::SessionClose
                | ScopeKind::SessionSpan
                | ScopeKind::TaskPoll
                | ScopeKind::TaskPollEnd => return None,
            };
            Some(format!("{}: {consequence}", kind.name()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use leakscope_recording::{
        AllocLayer, ClockOrigin, Phase, Producer, Record, ScopeKind, Settings,
    };

    use super::*;
    use crate::analyze;
    use crate::attribute::Category;

    const GRACE: u64 = 1_000_000_000;

    fn recording(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings")
            .join(name)
    }

    fn header() -> Header {
        Header {
            producer: Producer::InProcess,
            producer_version: "test".into(),
            pid: 1,
            exe: "/nonexistent".into(),
            build_id: None,
            clock: ClockOrigin {
                monotonic_ns: 0,
                unix_ns: 0,
            },
            rmcp_version: None,
            settings: Settings {
                alloc_layer: AllocLayer::GlobalAllocator,
                alloc_layer_reason: String::new(),
                stack_depth: 0,
                preset: None,
                scope_probes: vec![],
                missing_scopes: vec![],
                scope_functions: vec![],
                notes: vec![],
            },
            frame_pointers: leakscope_recording::FramePointers::Unknown,
        }
    }

    fn scope(ts: u64, tid: u32, kind: ScopeKind, phase: Phase, arg: u64) -> Record {
        Record::Scope {
            ts,
            tid,
            kind,
            phase,
            arg,
        }
    }

    /// A block allocated without a stack.
    fn alloc(ts: u64, tid: u32, addr: u64, size: u64) -> Record {
        Record::Alloc {
            ts,
            tid,
            addr,
            size,
            stack: None,
        }
    }

    #[test]
    fn polls_and_worker_end_are_linked_by_containment() {
        let s = 1_000_000_000;
        let records = vec![
            scope(s, 1, ScopeKind::SessionCreate, Phase::Enter, 0),
            alloc(s, 1, 0x1000, 100),
            scope(s, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0),
            // Not in the window: belongs to no session.
            alloc(s, 1, 0x9000, 7),
            // A poll on another thread whose argument points inside the task block.
            scope(2 * s, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010),
            alloc(2 * s, 2, 0x2000, 50),
            scope(2 * s, 2, ScopeKind::WorkerPoll, Phase::Exit, 0),
            scope(3 * s, 2, ScopeKind::WorkerDrop, Phase::Enter, 0x1020),
            Record::Free {
                ts: 3 * s + 10,
                tid: 2,
                addr: 0x2000,
            },
            Record::End {
                ts: 10 * s,
                reason: EndReason::Finished,
            },
        ];
        let mut builder = Builder::new(Rules::builtin(), GRACE, s);
        for record in records {
            builder.push(record);
        }
        let timeline = builder.finish(header(), Tail::Clean);
        assert_eq!(timeline.sessions.len(), 1);
        let session = &timeline.sessions[0];
        assert_eq!(
            session.allocated, 150,
            "the birth block and the poll's block"
        );
        assert_eq!(session.worker_end_ns, Some(3 * s));
        assert_eq!(session.transient, 50, "freed right after the worker ended");
        assert_eq!(session.retained, 100, "the task block outlived its worker");
        assert_eq!(timeline.categories[Category::Other].live_at_end, 107);
        assert_eq!(timeline.worker_ends_s, vec![2.0]);
    }

    /// A drop that may have taken a scope exit makes the threads' open windows
    /// unknown; a block the probe could not learn (a posix_memalign whose
    /// slot another thread took) takes no record, so the windows stand.
    #[test]
    fn only_losses_that_may_drop_scope_records_close_open_windows() {
        let s = 1_000_000_000;
        let allocated_after = |reason| {
            let mut builder = Builder::new(Rules::builtin(), GRACE, s);
            for record in [
                scope(s, 1, ScopeKind::SessionCreate, Phase::Enter, 0),
                alloc(s, 1, 0x1000, 100),
                Record::Lost {
                    ts: s,
                    reason,
                    count: 1,
                },
                alloc(s, 1, 0x2000, 20),
                scope(s, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0),
                Record::End {
                    ts: 10 * s,
                    reason: EndReason::Finished,
                },
            ] {
                builder.push(record);
            }
            let timeline = builder.finish(header(), Tail::Clean);
            timeline.sessions.iter().map(|s| s.allocated).sum::<u64>()
        };
        assert_eq!(allocated_after(LostReason::PendingFull), 120);
        assert_eq!(allocated_after(LostReason::Stack), 120);
        assert_eq!(allocated_after(LostReason::RingFull), 100);
    }

    /// realloc frees its old block inside the call: another thread can be handed
    /// that address before the realloc's record; the late free must not delete
    /// the other thread's live block.
    #[test]
    fn a_reused_address_is_not_freed_by_a_late_realloc() {
        let records = vec![
            alloc(10, 1, 0x100, 64),
            // Thread 2 gets 0x100 at ts 30, after thread 1's realloc began (20)...
            alloc(30, 2, 0x100, 32),
            // ...and thread 1's realloc (entered at 20) is recorded at 40.
            Record::Realloc {
                ts: 40,
                tid: 1,
                old: 0x100,
                new: 0x200,
                size: 128,
                stack: None,
                entry_ts: 20,
            },
            Record::End {
                ts: 50,
                reason: EndReason::Finished,
            },
        ];
        let mut builder = Builder::new(Rules::builtin(), GRACE, 1_000_000_000);
        for record in records {
            builder.push(record);
        }
        let timeline = builder.finish(header(), Tail::Clean);
        assert_eq!(
            timeline.categories[Category::Other].live_at_end,
            32 + 128,
            "thread 2's block and the realloc's new block are both live"
        );
    }

    #[test]
    fn leaky_recording_retains_the_session_channel_per_session() {
        let timeline = analyze(
            &recording("leaky-5-sessions.lsrec"),
            Rules::builtin(),
            GRACE,
        )
        .unwrap();
        assert_eq!(timeline.sessions.len(), 5);
        assert!(timeline.sessions.iter().all(|s| s.worker_end_ns.is_some()));
        let exact = timeline
            .sessions
            .iter()
            .filter(|s| s.retained == 12_064 + 512)
            .count();
        assert!(
            exact >= 4,
            "the SessionEvent channel's two blocks per session: {:?}",
            timeline.sessions
        );
        assert!(timeline.sessions.iter().all(|s| s.transient > 20_000));
        assert_eq!(timeline.end_reason, Some(EndReason::Interrupted));
    }

    #[test]
    fn fixed_recording_retains_nothing_per_session() {
        let timeline = analyze(
            &recording("fixed-5-sessions.lsrec"),
            Rules::builtin(),
            GRACE,
        )
        .unwrap();
        assert_eq!(timeline.sessions.len(), 5);
        // At most a table resize of the map lands in one session; no channel survives.
        let sessions = &timeline.sessions;
        assert!(sessions.iter().all(|s| s.retained < 1024), "{sessions:?}");
        assert!(
            sessions.iter().filter(|s| s.retained == 0).count() >= 4,
            "{sessions:?}"
        );
        assert!(timeline.sessions.iter().all(|s| s.transient > 20_000));
    }
}
