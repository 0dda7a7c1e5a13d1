//! Replaying a recording: live and reclaimed bytes per category and per session over time.
//!
//! Sessions come from the lifecycle scopes:
//! * **birth window**: from `session-create` entry to `worker-spawn` return on one
//!   thread; every block allocated there belongs to the new session;
//! * **worker polls**: a `worker-poll` entry's argument points into the worker's
//!   task, a block allocated in some session's birth window (*provenance by
//!   containment*); blocks allocated on that thread until the poll returns belong
//!   to that session;
//! * **worker end**: `worker-drop`'s argument, found the same way.
//!
//! After a worker ends, a session's blocks freed within `grace` are **transient**;
//! blocks still live at the end of the recording, with the worker gone for longer
//! than `grace`, are **retained**: the leak signal. Memory is O(live blocks + stacks).

use std::collections::{BTreeMap, HashMap};

use leakscope_probe::recording::{
    EndReason, Header, LostReason, Phase, Record, ScopeKind, SessionFact, StackId, Tail,
};

use crate::attribute::{Category, Rules};
use crate::symbolize::{Frame, Symbolizer};

/// One session as the recording shows it.
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
}

#[derive(Debug, Clone, Copy, Default)]
pub struct CategoryTotals {
    pub allocated: u64,
    pub reclaimed: u64,
    pub live_at_end: u64,
    /// Live at the end and belonging to a session whose worker is gone.
    pub retained: u64,
}

/// Live bytes at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub t_s: f64,
    pub live: [u64; 4],
    pub reclaimed_total: u64,
}

/// A call site still holding memory at the end.
#[derive(Debug, Clone)]
pub struct Site {
    pub stack: Option<StackId>,
    pub frames: Vec<Frame>,
    pub category: Category,
    /// Index in `frames` of the frame whose rule chose the category.
    pub decided_by: Option<usize>,
    pub retained_bytes: u64,
    pub blocks: u64,
    pub session_bytes: u64,
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
    pub categories: [CategoryTotals; 4],
    pub samples: Vec<Sample>,
    pub session_births_s: Vec<f64>,
    pub worker_ends_s: Vec<f64>,
    /// Live blocks at the end grouped by stack: most session-retained bytes first.
    pub sites: Vec<Site>,
    pub grace_ns: u64,
}

impl Timeline {
    pub fn duration_s(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    category: Category,
    stack: Option<StackId>,
    session: Option<u32>,
}

/// Builds the timeline from records (the reader's iterator) in one pass.
pub struct Builder {
    rules: Rules,
    symbolizer: Symbolizer,
    grace_ns: u64,
    stacks: HashMap<StackId, Vec<u64>>,
    stack_category: HashMap<StackId, Category>,
    live: HashMap<u64, Block>,
    /// Blocks allocated in birth windows: start -> (end, session).
    birth_blocks: BTreeMap<u64, (u64, u32)>,
    birth_window: HashMap<u32, u32>,
    /// Per thread, the open worker polls / session spans: (key, session).
    polls: HashMap<u32, Vec<(u64, Option<u32>)>>,
    /// In-process mode: session of each span key, and of each session id.
    span_sessions: HashMap<u64, u32>,
    session_ids: HashMap<String, u32>,
    /// `merged[s] = Some(t)`: session `s` turned out to be `t` (in-process: an
    /// anonymous span learned its id after the worker had already announced it).
    merged: Vec<Option<u32>>,
    sessions: Vec<Session>,
    categories: [CategoryTotals; 4],
    live_by_category: [u64; 4],
    reclaimed_total: u64,
    samples: Vec<Sample>,
    worker_ends: Vec<u64>,
    start_ns: Option<u64>,
    last_ns: u64,
    next_sample_ns: u64,
    sample_every_ns: u64,
    allocs: u64,
    frees: u64,
    lost: HashMap<LostReason, u64>,
    end_reason: Option<EndReason>,
}

impl Builder {
    pub fn new(rules: Rules, grace_ns: u64, sample_every_ns: u64) -> Self {
        Self {
            rules,
            symbolizer: Symbolizer::new(),
            grace_ns,
            stacks: HashMap::new(),
            stack_category: HashMap::new(),
            live: HashMap::new(),
            birth_blocks: BTreeMap::new(),
            birth_window: HashMap::new(),
            polls: HashMap::new(),
            span_sessions: HashMap::new(),
            session_ids: HashMap::new(),
            merged: Vec::new(),
            sessions: Vec::new(),
            categories: Default::default(),
            live_by_category: [0; 4],
            reclaimed_total: 0,
            samples: Vec::new(),
            worker_ends: Vec::new(),
            start_ns: None,
            last_ns: 0,
            next_sample_ns: 0,
            sample_every_ns: sample_every_ns.max(1),
            allocs: 0,
            frees: 0,
            lost: HashMap::new(),
            end_reason: None,
        }
    }

    fn clock(&mut self, ts: u64) {
        let start = *self.start_ns.get_or_insert(ts);
        if self.next_sample_ns == 0 {
            self.next_sample_ns = ts;
        }
        while ts >= self.next_sample_ns {
            self.samples.push(Sample {
                t_s: (self.next_sample_ns - start) as f64 / 1e9,
                live: self.live_by_category,
                reclaimed_total: self.reclaimed_total,
            });
            self.next_sample_ns += self.sample_every_ns;
        }
        self.last_ns = self.last_ns.max(ts);
    }

    pub fn push(&mut self, record: Record) {
        match record {
            Record::Mapping(m) => self.symbolizer.add_mapping(m),
            Record::Stack { id, frames } => {
                self.stacks.insert(id, frames);
            }
            Record::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            } => {
                self.clock(ts);
                self.alloc(ts, tid, addr, size, stack);
            }
            Record::Realloc {
                ts,
                tid,
                old,
                new,
                size,
                stack,
            } => {
                self.clock(ts);
                // The old block is gone when realloc succeeded (moved or resized in
                // place: re-added below) or was realloc(p, 0); a failure keeps it.
                if old != 0 && (new != 0 || size == 0) {
                    self.free(ts, old);
                }
                self.alloc(ts, tid, new, size, stack);
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
                self.scope(ts, tid, kind, phase, arg);
            }
            Record::Lost { reason, count, .. } => *self.lost.entry(reason).or_default() += count,
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
                self.name_session(ts, tid, id);
            }
            Record::Session { .. } => {}
        }
    }

    fn category_of(&mut self, stack: Option<StackId>) -> Category {
        let Some(id) = stack else {
            return Category::Other;
        };
        if let Some(category) = self.stack_category.get(&id) {
            return *category;
        }
        let ips = self.stacks.get(&id).cloned().unwrap_or_default();
        let frames = self.symbolizer.stack(&ips);
        let category = self
            .rules
            .categorize(frames.iter().map(|f| f.function.as_str()));
        self.stack_category.insert(id, category);
        category
    }

    fn alloc(&mut self, _ts: u64, tid: u32, addr: u64, size: u64, stack: Option<StackId>) {
        if addr == 0 {
            return;
        }
        self.allocs += 1;
        let category = self.category_of(stack);
        let session = self.birth_window.get(&tid).copied().or_else(|| {
            self.polls
                .get(&tid)
                .and_then(|p| p.last().and_then(|(_, s)| *s))
        });
        let session = session.map(|s| self.resolve(s));
        if let Some(s) = session {
            self.sessions[s as usize].allocated += size;
            if self.birth_window.get(&tid) == Some(&s) {
                self.birth_blocks.insert(addr, (addr + size.max(1), s));
            }
        }
        if let Some(old) = self.live.insert(
            addr,
            Block {
                size,
                category,
                stack,
                session,
            },
        ) {
            // A block we never saw freed (lost record): forget it.
            self.live_by_category[old.category as usize] -= old.size;
        }
        self.categories[category as usize].allocated += size;
        self.live_by_category[category as usize] += size;
    }

    fn free(&mut self, ts: u64, addr: u64) {
        let Some(block) = self.live.remove(&addr) else {
            return;
        };
        self.frees += 1;
        self.birth_blocks.remove(&addr);
        self.live_by_category[block.category as usize] -= block.size;
        self.categories[block.category as usize].reclaimed += block.size;
        self.reclaimed_total += block.size;
        if let Some(s) = block.session.map(|s| self.resolve(s)) {
            let session = &mut self.sessions[s as usize];
            session.reclaimed += block.size;
            if let Some(end) = session.worker_end_ns
                && ts <= end + self.grace_ns
            {
                session.transient += block.size;
            }
        }
    }

    /// The session whose birth-window block contains `addr`.
    fn session_containing(&self, addr: u64) -> Option<u32> {
        let (_, &(end, session)) = self.birth_blocks.range(..=addr).next_back()?;
        (addr < end).then(|| self.resolve(session))
    }

    fn scope(&mut self, ts: u64, tid: u32, kind: ScopeKind, phase: Phase, arg: u64) {
        match (kind, phase) {
            (ScopeKind::SessionCreate, Phase::Enter) => {
                let session = self.new_session(ts, None);
                self.birth_window.insert(tid, session);
            }
            (ScopeKind::WorkerSpawn, Phase::Exit) => {
                self.birth_window.remove(&tid);
            }
            (ScopeKind::WorkerPoll, Phase::Enter) => {
                let session = self.session_containing(arg);
                self.polls.entry(tid).or_default().push((arg, session));
            }
            (ScopeKind::SessionSpan, Phase::Enter) => {
                let session = self.span_sessions.get(&arg).copied();
                self.polls.entry(tid).or_default().push((arg, session));
            }
            (ScopeKind::WorkerPoll | ScopeKind::SessionSpan, Phase::Exit) => {
                if let Some(stack) = self.polls.get_mut(&tid) {
                    stack.pop();
                }
            }
            (ScopeKind::WorkerDrop, Phase::Enter) => {
                self.worker_ends.push(ts);
                let session = self
                    .session_containing(arg)
                    .or_else(|| self.span_sessions.get(&arg).copied());
                if let Some(s) = session {
                    let session = &mut self.sessions[s as usize];
                    session.worker_end_ns.get_or_insert(ts);
                }
            }
            _ => {}
        }
    }

    /// In-process mode: the innermost session span on `tid` announced its session id
    /// ("" = a new session whose id comes later). Span keys are reused by `tracing`,
    /// so each announcement rebinds the span's key.
    fn name_session(&mut self, ts: u64, tid: u32, id: String) {
        let Some((key, current)) = self.polls.get(&tid).and_then(|p| p.last()).copied() else {
            return;
        };
        let unnamed_current = current.filter(|s| self.sessions[*s as usize].id.is_none());
        let session = if id.is_empty() {
            self.new_session(ts, None)
        } else if let Some(&known) = self.session_ids.get(&id) {
            if let Some(anonymous) = unnamed_current.filter(|s| *s != known) {
                self.merge(anonymous, known);
            }
            known
        } else if let Some(s) = unnamed_current {
            self.sessions[s as usize].id = Some(id.clone());
            self.session_ids.insert(id, s);
            s
        } else {
            let s = self.new_session(ts, Some(id.clone()));
            self.session_ids.insert(id, s);
            s
        };
        self.span_sessions.insert(key, session);
        if let Some(top) = self.polls.get_mut(&tid).and_then(|p| p.last_mut()) {
            top.1 = Some(session);
        }
    }

    fn resolve(&self, mut session: u32) -> u32 {
        while let Some(into) = self.merged[session as usize] {
            session = into;
        }
        session
    }

    /// Folds session `from` into `into`: same session, learned late.
    fn merge(&mut self, from: u32, into: u32) {
        let moved = std::mem::take(&mut self.sessions[from as usize]);
        let target = &mut self.sessions[into as usize];
        target.born_ns = target.born_ns.min(moved.born_ns);
        target.allocated += moved.allocated;
        target.reclaimed += moved.reclaimed;
        target.transient += moved.transient;
        self.merged[from as usize] = Some(into);
        for bound in self
            .span_sessions
            .values_mut()
            .chain(self.birth_window.values_mut())
        {
            if *bound == from {
                *bound = into;
            }
        }
    }

    fn new_session(&mut self, ts: u64, id: Option<String>) -> u32 {
        self.merged.push(None);
        self.sessions.push(Session {
            id,
            born_ns: ts,
            ..Default::default()
        });
        self.sessions.len() as u32 - 1
    }

    pub fn finish(mut self, header: Header, tail: Tail) -> Timeline {
        let end_ns = self.last_ns;
        let start_ns = self.start_ns.unwrap_or(end_ns);
        self.clock(end_ns);
        let mut sites: HashMap<Option<StackId>, Site> = HashMap::new();
        let resolved: Vec<Option<u32>> = (0..self.sessions.len() as u32)
            .map(|s| Some(self.resolve(s)))
            .collect();
        for block in self.live.values_mut() {
            block.session = block.session.and_then(|s| resolved[s as usize]);
        }
        for block in self.live.values() {
            let worker_gone = block
                .session
                .and_then(|s| self.sessions[s as usize].worker_end_ns)
                .is_some_and(|end| end + self.grace_ns <= end_ns);
            let totals = &mut self.categories[block.category as usize];
            totals.live_at_end += block.size;
            if worker_gone {
                totals.retained += block.size;
            }
            if let Some(s) = block.session {
                let session = &mut self.sessions[s as usize];
                session.live_at_end += block.size;
                if worker_gone {
                    session.retained += block.size;
                }
            }
            let site = sites.entry(block.stack).or_insert_with(|| Site {
                stack: block.stack,
                frames: Vec::new(),
                category: block.category,
                decided_by: None,
                retained_bytes: 0,
                blocks: 0,
                session_bytes: 0,
            });
            site.retained_bytes += block.size;
            site.blocks += 1;
            if worker_gone {
                site.session_bytes += block.size;
            }
        }
        let mut sites: Vec<Site> = sites.into_values().collect();
        sites.sort_by(|a, b| {
            b.session_bytes
                .cmp(&a.session_bytes)
                .then(b.retained_bytes.cmp(&a.retained_bytes))
        });
        for site in &mut sites {
            let ips = site
                .stack
                .and_then(|id| self.stacks.get(&id))
                .cloned()
                .unwrap_or_default();
            site.frames = self.symbolizer.stack(&ips);
            site.decided_by = self
                .rules
                .decide(site.frames.iter().map(|f| f.function.as_str()))
                .1;
        }
        let to_s = |ts: &u64| (ts - start_ns) as f64 / 1e9;
        let sessions: Vec<Session> = self
            .sessions
            .into_iter()
            .zip(&self.merged)
            .filter(|(_, merged)| merged.is_none())
            .map(|(session, _)| session)
            .collect();
        let births: Vec<u64> = sessions.iter().map(|s| s.born_ns).collect();
        let mut lost_by_reason: Vec<(LostReason, u64)> = self.lost.into_iter().collect();
        lost_by_reason.sort_by_key(|(r, _)| format!("{r:?}"));
        Timeline {
            header,
            tail,
            end_reason: self.end_reason,
            start_ns,
            end_ns,
            allocs: self.allocs,
            frees: self.frees,
            lost: lost_by_reason
                .iter()
                .filter(|(r, _)| *r != LostReason::Stack)
                .map(|(_, n)| n)
                .sum(),
            lost_by_reason,
            session_births_s: births.iter().map(to_s).collect(),
            worker_ends_s: self.worker_ends.iter().map(to_s).collect(),
            sessions,
            categories: self.categories,
            samples: self.samples,
            sites,
            grace_ns: self.grace_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use leakscope_probe::recording::{
        AllocLayer, ClockOrigin, Producer, Record, ScopeKind, Settings,
    };

    use super::*;
    use crate::analyze;

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
            settings: Settings {
                alloc_layer: AllocLayer::GlobalAllocator,
                alloc_layer_reason: String::new(),
                stack_depth: 0,
                preset: None,
                scope_probes: vec![],
                notes: vec![],
            },
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

    #[test]
    fn polls_and_worker_end_are_linked_by_containment() {
        let s = 1_000_000_000;
        let records = vec![
            scope(s, 1, ScopeKind::SessionCreate, Phase::Enter, 0),
            Record::Alloc {
                ts: s,
                tid: 1,
                addr: 0x1000,
                size: 100,
                stack: None,
            },
            scope(s, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0),
            // Not in the window: belongs to no session.
            Record::Alloc {
                ts: s,
                tid: 1,
                addr: 0x9000,
                size: 7,
                stack: None,
            },
            // A poll on another thread whose argument points inside the task block.
            scope(2 * s, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010),
            Record::Alloc {
                ts: 2 * s,
                tid: 2,
                addr: 0x2000,
                size: 50,
                stack: None,
            },
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
        assert_eq!(
            timeline.categories[Category::Other as usize].live_at_end,
            107
        );
        assert_eq!(timeline.worker_ends_s, vec![2.0]);
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
