//! The timeline: one streaming pass over a recording, through the stages.
//!
//! Each record goes to the stage that owns its concept: `Stack` and `Mapping` to
//! [`stacks`](crate::stages::stacks) (symbolize, categorize), lifecycle scopes and session
//! facts to [`sessions`](crate::stages::objects::sessions) (which session owns a block), allocations
//! and frees to [`accounting`](crate::stages::accounting) (live, reclaimed, transient,
//! retained over time). At the end, [`sites`](crate::stages::sites) groups what is still
//! live by call site. The [`Timeline`] is what the outputs read.

use std::collections::HashMap;
use std::sync::Arc;

use leakscope_recording::sampling::Sampling;
use leakscope_recording::{EndReason, Header, LostReason, Record, SessionFact, Tail};

use crate::model::SessionState;
use crate::model::TaskState;
use crate::stages::accounting::{Accounting, Block, SessionBytes};
use crate::stages::attribute::Rules;
use crate::stages::objects::sessions::{Adopted, SessionTracker};
use crate::stages::objects::tasks::TaskTracker;
use crate::stages::profile::Allocated;
use crate::stages::stacks::Stacks;

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
    /// How the recording chose its allocations: what each one stands for.
    sampling: Sampling,
    /// `Record::WholeAlloc`s seen.
    whole_allocs: u64,
}

/// How a block came to be, as its record says.
#[derive(Clone, Copy)]
enum Made {
    /// An allocation (in a sampled recording, a sample).
    Allocated,
    /// An allocation a sampled recording recorded whole: it stands for itself.
    Whole,
    /// A realloc's new block, which stays the session the old one was of.
    Resized(Option<crate::stages::objects::sessions::SessionKey>),
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
            sampling: Sampling::Every,
            whole_allocs: 0,
        }
    }

    /// Who made the recording (its header's): in-process recordings learn a
    /// session's birth from a fact, with no task poll to bound its request.
    pub fn producer(mut self, producer: leakscope_recording::Producer) -> Self {
        if producer == leakscope_recording::Producer::InProcess {
            self.sessions.requests_end_at_facts();
        }
        self
    }

    /// How the recording chose its allocations (its header's): in a sampled
    /// one, each allocation counts for the blocks and bytes it stands for.
    pub fn sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
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
                self.alloc_made(ts, tid, addr, size, stack, Made::Allocated);
            }
            Record::WholeAlloc {
                ts,
                tid,
                addr,
                size,
                stack,
            } => self.whole_alloc(ts, tid, addr, size, stack),
            Record::WholeAllocInPoll {
                ts,
                tid,
                addr,
                size,
                stack,
                span,
            } => {
                // The poll the recorder left unwritten around it, read as if
                // it had been: its entry, the block, its end.
                use leakscope_recording::{Phase, ScopeKind};
                let adopted =
                    self.sessions
                        .scope(ts, tid, ScopeKind::SessionSpan, Phase::Enter, span);
                self.adopt(adopted);
                self.whole_alloc(ts, tid, addr, size, stack);
                let adopted =
                    self.sessions
                        .scope(ts, tid, ScopeKind::SessionSpan, Phase::Exit, span);
                self.adopt(adopted);
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
                self.alloc_made(ts, tid, new, size, stack, Made::Resized(inherited));
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
                    _ => {
                        let adopted = self.sessions.scope(ts, tid, kind, phase, arg);
                        self.adopt(adopted);
                    }
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
                let (session, blocks, request) = self.sessions.created(ts, tid, id);
                for addr in blocks {
                    self.books.adopt(addr, session);
                }
                self.adopt(request);
            }
            Record::Session { .. } => {}
            Record::TraceOrigin { ts } => self.trace_origin_ns = Some(ts),
            Record::Task {
                ts,
                tid,
                id,
                event,
                stack,
            } => {
                self.clock(ts);
                match event {
                    leakscope_recording::TaskEvent::Spawned => {
                        let session = self.sessions.current(tid);
                        self.tasks
                            .spawned((ts, self.books.allocs), tid, id, stack, session);
                    }
                    leakscope_recording::TaskEvent::Ended => {
                        self.tasks.free(ts, id);
                    }
                }
            }
        }
    }

    /// A session born now owns blocks allocated before: those still live
    /// that are still the ones allocated then (an address freed meanwhile
    /// may hold another thread's block).
    fn adopt(&mut self, adopted: Option<Adopted>) {
        let Some(Adopted { session, blocks }) = adopted else {
            return;
        };
        for (addr, ts) in blocks {
            if self.books.allocated_at(addr) == Some(ts) {
                self.books.adopt_request_block(addr, session);
            }
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

    /// A block a sampled recording recorded whole: it stands for itself.
    fn whole_alloc(
        &mut self,
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<leakscope_recording::StackId>,
    ) {
        self.clock(ts);
        self.whole_allocs += 1;
        self.alloc_made(ts, tid, addr, size, stack, Made::Whole);
    }

    fn alloc_made(
        &mut self,
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<leakscope_recording::StackId>,
        made: Made,
    ) {
        let (inherited, whole) = match made {
            Made::Allocated => (None, false),
            Made::Whole => (None, true),
            Made::Resized(inherited) => (inherited, false),
        };
        if addr == 0 {
            return;
        }
        let category = self.stacks.category(stack);
        let in_poll = self.sessions.wants_poll_stack(tid)
            && self
                .stacks
                .inside(stack, leakscope_recording::ScopeKind::WorkerPoll);
        let task = self.tasks.polling(tid);
        let mut session = self.sessions.alloc(tid, addr, size, category, in_poll);
        let mut from_request = false;
        // A map entry's blocks are learned from the birth itself (in-process,
        // the fact that follows them), never from the request around it.
        if session.is_none()
            && category != crate::model::Category::SessionMap
            && self.sessions.wants_request_stack(task.is_some())
            && self.stacks.in_session_request(stack)
        {
            session = self.sessions.request_alloc(ts, tid, addr);
            from_request = session.is_some();
        }
        let session = session
            .or_else(|| task.and_then(|t| self.tasks.session(t)))
            .or(inherited);
        // Each sample weighted by itself: summing sizes first and unbiasing
        // the sum after is wrong for a site whose blocks differ in size.
        let weight = if whole || (self.sampling.is_sampled() && self.sessions.in_birth_scope(tid)) {
            // Recorded whole: a session's birth (eBPF) and a block aligned to a
            // cache-line pair (both modes: tokio's task cells and channels) are
            // never sampled.
            leakscope_recording::sampling::Sampling::Every.weight(size)
        } else {
            self.sampling.weight(size)
        };
        let bytes = weight.bytes.round() as u64;
        self.allocated.add(stack, session, bytes, weight.count);
        let block = Block {
            ts,
            seq: 0,
            size: bytes,
            extent: size,
            weight: weight.count,
            category,
            stack,
            session,
            task,
            from_request,
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
        // The last of a session's map-entry blocks gone: closed for good.
        if block.category == crate::model::Category::SessionMap
            && let Some(key) = block.session.map(|s| self.sessions.resolve(s))
            && self.books.closed(key)
        {
            self.allocated.close(key);
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
        let sites = crate::stages::sites::sites(&totals.live, totals.allocs, &mut self.stacks);
        let mut rest = crate::model::Rest::of(&totals.live, totals.allocs, &totals.samples);
        if rest.sampled {
            let allocated = self.allocated.objects_by_stack();
            rest.weigh_survivors(&totals.live, |stack| {
                allocated.get(&stack).copied().unwrap_or(0.0)
            });
        }
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
        let sessions: Vec<Session> = crate::stages::objects::made(lives, |key, life| {
            let b = std::mem::take(&mut bytes[key]);
            Session {
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
                parts: b.parts,
            }
        });
        let mut spawn_sites: HashMap<Option<leakscope_recording::StackId>, Option<Arc<str>>> =
            HashMap::new();
        let tasks = crate::stages::objects::made(self.tasks.finish(), |key, life| {
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
                        crate::stages::objects::tasks::spawn_site(
                            self.stacks.frames(life.cell_stack),
                        )
                        .map(Arc::from)
                    })
                    .clone(),
                stack: life.cell_stack,
                parent: life.parent.map(|p| p as usize),
                session: life.session.and_then(|s| index.get(s as usize).copied()),
            }
        });
        let profile = crate::stages::profile::build(
            allocated,
            &totals.live,
            |key| index.get(key as usize).map(|&i| sessions[i].state),
            &mut self.stacks,
        );
        let mut lost_by_reason: Vec<(LostReason, u64)> = self.lost.into_iter().collect();
        lost_by_reason.sort_by_key(|(r, _)| format!("{r:?}"));
        let warnings = warnings::of(&header, &tail, &self.stacks);
        let spawn_sites = crate::stages::objects::spawn_sites::spawn_sites(&tasks, totals.allocs);
        let mut timeline = Timeline {
            header,
            tail,
            end_reason: self.end_reason,
            start_ns,
            end_ns,
            allocs: totals.allocs,
            whole_allocs: self.whole_allocs,
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
            spawn_sites,
            categories: totals.categories,
            samples: totals.samples,
            sites,
            rest,
            profile,
            trace_origin_ns: self.trace_origin_ns,
            grace_ns: self.grace_ns,
            warnings,
            missing_signals,
            verdict: Default::default(),
        };
        // The last stage: what the rest comes to.
        timeline.verdict = crate::stages::verdict::verdict(&timeline);
        timeline
    }
}

mod warnings;

use crate::model::{Session, Task, Timeline};
use warnings::missing_signals;

#[cfg(test)]
pub(crate) mod tests;
