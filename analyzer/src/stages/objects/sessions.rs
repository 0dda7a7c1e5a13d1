//! Sessions: which session does a block belong to, and when did its worker end.
//!
//! Sessions come from the lifecycle scopes:
//! * **birth**: blocks allocated inside `session-create` (which makes the handle's
//!   channel) and inside the `worker-spawn` that follows it (the worker's channels
//!   and task) belong to the new session. Both are synchronous functions, so a
//!   scope's entry and exit on one thread enclose exactly its own allocations.
//!   What runs between them is *not* the session's: in rmcp 3.11.0 that is the
//!   `await` on the map's write lock (other tasks run on the thread meanwhile) and
//!   the map insert (a table resize there is shared by all sessions). A spawn is
//!   linked to the session created on its own thread and not yet spawned, or, when
//!   the creating task resumed on another thread, to the oldest such session;
//! * **worker polls**: a `worker-poll` entry's argument points into the worker's
//!   task, a block allocated in some session's birth window (*provenance by
//!   containment*); blocks allocated on that thread until the poll returns belong
//!   to that session;
//! * **worker end**: `worker-drop`'s argument, found the same way.
//!
//! In-process recordings name sessions instead: `session-span` scopes and session-id
//! facts from `tracing` spans. A span may announce a new anonymous session and learn
//! its id only after the worker has named it; the two are then **merged**
//! ([`SessionKey`]s of merged sessions resolve to the one they were folded into).
//!
//! In-process recordings of a server with no span of its own around session
//! creation (the stock `StreamableHttpService`) learn the birth from rmcp's
//! "create new session" event instead ([`SessionTracker::created`]): the map-entry
//! blocks allocated on that thread just before it, with no owner, are adopted.
//!
//! This stage knows nothing of bytes: the accounting stage asks it who owns a block.

use std::collections::{BTreeMap, HashSet, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::{Phase, ScopeKind};

use crate::model::Category;

/// Sessions created and waiting for their worker's spawn, at most (a create whose
/// spawn never comes, e.g. a failed request, must not grow this forever).
const MAX_PENDING_SPAWNS: usize = 4096;

/// Unowned map-entry blocks remembered per thread, waiting for a `created` fact.
const MAX_ORPHANS: usize = 16;

/// Blocks allocated in sessions' birth requests after their birth windows, at
/// most (each may be a task's cell, learned at its first poll).
const MAX_AFTER_BIRTH_BLOCKS: usize = 4096;

/// Blocks a session request's handler allocated in one task poll before a
/// birth, remembered per thread at most (rmcp 3.11's `handle_post` makes a
/// few dozen before `create_session`, most of them the service instance).
const MAX_REQUEST_BLOCKS: usize = 512;

/// A session as this stage first knew it; [`SessionTracker::resolve`] maps it to
/// the session it was merged into, if any.
pub type SessionKey = u32;

/// What the lifecycle says about one session.
#[derive(Debug, Clone, Default)]
pub struct SessionLife {
    /// The session id string, when the recording names it (in-process mode).
    pub id: Option<String>,
    pub born_ns: u64,
    pub worker_end_ns: Option<u64>,
    /// The last time the session did anything: its birth, or its worker's last poll.
    pub last_active_ns: u64,
    /// Polls of its worker seen (or entries of its session spans, in-process).
    /// A worker polled once has received nothing since it started: a session
    /// whose client never sent `initialize` (rmcp before 1.6.0 waits for it
    /// forever).
    pub polls: u32,
}

#[derive(Default)]
pub struct SessionTracker {
    lives: Vec<SessionLife>,
    /// `merged[s] = Some(t)`: session `s` turned out to be `t`.
    merged: Vec<Option<SessionKey>>,
    /// Threads inside a `session-create` or its `worker-spawn`, and for which session.
    birth_window: HashMap<u32, SessionKey>,
    /// Per thread, how deep it is in `session-create` / `worker-spawn` scopes: a
    /// preset may probe a function and the one it calls (`spawn` and
    /// `spawn_with_ct`); only the outermost counts.
    create_depth: HashMap<u32, u32>,
    spawn_depth: HashMap<u32, u32>,
    /// Sessions created and not yet spawned: (creating thread, session), oldest first.
    pending_spawn: VecDeque<(u32, SessionKey)>,
    /// Blocks allocated in birth windows: start -> (end, session).
    birth_blocks: BTreeMap<u64, (u64, SessionKey)>,
    /// Per thread, the open worker polls / session spans: (key, session, is a span).
    polls: HashMap<u32, Vec<(u64, Option<SessionKey>, bool)>>,
    /// Worker polls were probed at entry only (no exits): a poll's session holds
    /// for the allocations whose stacks pass through the poll function, and the
    /// thread's latest poll entry says which session that is.
    polls_by_stack: bool,
    latest_poll: HashMap<u32, Option<SessionKey>>,
    /// In-process mode: session of each span key, and of each session id.
    span_sessions: HashMap<u64, SessionKey>,
    /// In-process mode: span keys inside which their session was born (the
    /// application's span around `create_session`, which encloses shared
    /// work too: the map insert and its table's growth).
    birth_spans: HashSet<u64>,
    session_ids: HashMap<String, SessionKey>,
    worker_ends: Vec<u64>,
    /// Per thread, `session-map` blocks allocated with no owner since the last
    /// `created` fact there (in-process recordings without a creation span).
    orphans: HashMap<u32, Vec<u64>>,
    /// Task polls are probed: a session's birth request goes on after its
    /// birth window, to the end of the creating task's poll.
    tasks_probed: bool,
    /// Threads whose task poll created a session and is still running, and for
    /// which session.
    after_birth: HashMap<u32, SessionKey>,
    /// Blocks allocated there (start -> session): the task that serves the
    /// session is spawned in its birth request (rmcp's `spawn_session_worker`
    /// runs right after `create_session` returns), so a cell among them is the
    /// session's task.
    after_birth_blocks: HashMap<u64, SessionKey>,
    /// Per thread, blocks the session request's handler allocated in the
    /// current task poll with no owner, and when: the session born later in
    /// the same poll adopts those still live ([`Self::request_alloc`]).
    request_blocks: HashMap<u32, VecDeque<(u64, u64)>>,
    /// Births come as facts (in-process recordings): no task poll bounds the
    /// request, so the newest of its blocks wait for the thread's next fact.
    requests_end_at_facts: bool,
}

/// Blocks a session was born to own after they were allocated: `(address,
/// allocation time)`, adopted if that block is still the one live there.
pub struct Adopted {
    pub session: SessionKey,
    pub blocks: VecDeque<(u64, u64)>,
}

impl SessionTracker {
    /// Worker polls come without exits: see `polls_by_stack`.
    pub fn polls_by_stack(&mut self) {
        self.polls_by_stack = true;
    }

    /// Task polls are probed: see `tasks_probed`.
    pub fn tasks_probed(&mut self) {
        self.tasks_probed = true;
    }

    /// A task's poll began or ended on `tid`: a birth request on it is over.
    pub fn task_poll_boundary(&mut self, tid: u32) {
        if !self.after_birth.is_empty() {
            self.after_birth.remove(&tid);
        }
        if !self.request_blocks.is_empty() && !self.requests_end_at_facts {
            self.request_blocks.remove(&tid);
        }
    }

    /// Whether a block allocated on a thread inside a task poll may be a
    /// session request's ([`Self::request_alloc`]): only when task polls are
    /// probed, which is what bounds the request to one poll.
    pub fn wants_request_stack(&self, task_polling: bool) -> bool {
        self.requests_end_at_facts || (self.tasks_probed && task_polling)
    }

    /// Births come as facts, with no task poll to bound the request that
    /// makes one: see [`Self::request_alloc`].
    pub fn requests_end_at_facts(&mut self) {
        self.requests_end_at_facts = true;
    }

    /// A block with no owner, allocated on `tid` inside a task poll by the
    /// handler of a session request (its stack passes through the rules'
    /// `[session-request]`). The poll that creates a session allocates for
    /// it before and after the birth window: rmcp's `handle_post` calls the
    /// service factory (the user's service instance, moved into the
    /// session's task) before `create_session`, and spawns the session's
    /// task after it. After a birth in this poll the block is that
    /// session's; before one, it waits for a birth later in the same poll
    /// ([`Adopted`]) and is forgotten when the poll ends (a request that
    /// makes no session keeps it: its connection's, or nobody's).
    ///
    /// In-process recordings learn a birth from rmcp's "create new session"
    /// event, and tokio's task polls only in `tokio_unstable` builds: there
    /// the newest blocks wait for the thread's next birth fact, and those
    /// freed by then (every finished request's) are not adopted; after the
    /// fact, the handler's blocks are the session's until the thread enters
    /// a session span or sees the next birth. A request still in flight on
    /// the thread at a birth is taken for the new session's: a transient
    /// error that frees itself.
    pub fn request_alloc(&mut self, ts: u64, tid: u32, addr: u64) -> Option<SessionKey> {
        if let Some(&session) = self.after_birth.get(&tid) {
            return Some(self.resolve(session));
        }
        let blocks = self.request_blocks.entry(tid).or_default();
        if blocks.len() == MAX_REQUEST_BLOCKS {
            if !self.requests_end_at_facts {
                return None;
            }
            blocks.pop_front();
        }
        blocks.push_back((addr, ts));
        None
    }

    /// Whether a free of a block with no session must still be told (it may be
    /// a birth request's block).
    pub fn wants_every_free(&self) -> bool {
        !self.after_birth_blocks.is_empty()
    }

    /// The session whose birth request allocated the block at `addr` after its
    /// birth window, if one did (a task's cell: that task is the session's).
    pub fn spawned_in_birth_request(&mut self, addr: u64) -> Option<SessionKey> {
        let session = self.after_birth_blocks.remove(&addr)?;
        Some(self.resolve(session))
    }

    /// Whether `alloc` needs to know if the block's stack is inside a worker poll.
    pub fn wants_poll_stack(&self, tid: u32) -> bool {
        self.polls_by_stack && self.latest_poll.contains_key(&tid)
    }

    /// The session a block of `category` allocated now on `tid` belongs to, if
    /// any; a block allocated in a birth window is remembered for provenance by
    /// containment. In-process, a span inside which its session was born
    /// encloses more than the session's own code (the application's span
    /// around `create_session` includes the map insert): there, once the birth
    /// is seen, a block belongs to the session only when the rules say it is
    /// session memory (any category but `other`). The session's other spans
    /// (its worker's, its service loop's) enclose its own work only, as a
    /// worker's polls do in eBPF recordings.
    ///
    /// `in_poll`: the block's stack passes through a worker poll function (only
    /// read when polls are probed without exits).
    pub fn alloc(
        &mut self,
        tid: u32,
        addr: u64,
        size: u64,
        category: Category,
        in_poll: bool,
    ) -> Option<SessionKey> {
        let in_birth = self.birth_window.get(&tid).copied();
        let polled = if self.polls_by_stack && in_poll {
            self.latest_poll.get(&tid).copied().flatten()
        } else {
            None
        };
        let session = match (in_birth, polled) {
            (Some(s), _) => Some(s),
            (None, Some(s)) => Some(s),
            (None, None) => match self.polls.get(&tid).and_then(|p| p.last()).copied() {
                Some((key, _, true))
                    if category == Category::Other && self.birth_spans.contains(&key) =>
                {
                    None
                }
                Some((_, session, _)) => session,
                None => None,
            },
        };
        let Some(session) = session.map(|s| self.resolve(s)) else {
            if let Some(&birth) = self.after_birth.get(&tid)
                && self.after_birth_blocks.len() < MAX_AFTER_BIRTH_BLOCKS
            {
                self.after_birth_blocks.insert(addr, birth);
            }
            if category == Category::SessionMap {
                let orphans = self.orphans.entry(tid).or_default();
                if orphans.len() < MAX_ORPHANS {
                    orphans.push(addr);
                }
            }
            return None;
        };
        if in_birth.map(|s| self.resolve(s)) == Some(session) {
            self.birth_blocks
                .insert(addr, (addr + size.max(1), session));
        }
        Some(session)
    }

    /// Whether `tid` is inside a birth scope (a session-create or worker-spawn
    /// call), whatever session it turns out to be: in a sampled eBPF
    /// recording the probe records every allocation made there whole
    /// (`BIRTH_SCOPE_KINDS` in `probe-ebpf`), so each counts for itself.
    pub fn in_birth_scope(&self, tid: u32) -> bool {
        self.create_depth.get(&tid).is_some_and(|d| *d > 0)
            || self.spawn_depth.get(&tid).is_some_and(|d| *d > 0)
    }

    /// Records were lost: a lost scope exit would leave a thread inside a birth
    /// window or a worker poll for the rest of the recording, charging whatever
    /// it allocates later to that session. Forget what each thread is inside;
    /// the next scope entries set it right again.
    pub fn forget_threads(&mut self) {
        self.birth_window.clear();
        self.create_depth.clear();
        self.spawn_depth.clear();
        self.polls.clear();
        self.latest_poll.clear();
        self.orphans.clear();
        self.after_birth.clear();
        self.request_blocks.clear();
    }

    /// The session whose window is open on `tid` now (a birth window, a
    /// worker poll or a session span), if any: the owner of a task spawned there.
    pub fn current(&self, tid: u32) -> Option<SessionKey> {
        self.birth_window
            .get(&tid)
            .copied()
            .or_else(|| {
                self.polls
                    .get(&tid)
                    .and_then(|p| p.last())
                    .and_then(|p| p.1)
            })
            .map(|s| self.resolve(s))
    }

    /// The block at `addr` was freed: it can no longer contain anything.
    pub fn free(&mut self, addr: u64) {
        self.birth_blocks.remove(&addr);
        if !self.after_birth_blocks.is_empty() {
            self.after_birth_blocks.remove(&addr);
        }
    }

    /// The session `key` ended up as (itself unless merged).
    pub fn resolve(&self, mut key: SessionKey) -> SessionKey {
        while let Some(into) = self.merged[key as usize] {
            key = into;
        }
        key
    }

    pub fn worker_end_ns(&self, key: SessionKey) -> Option<u64> {
        self.lives[self.resolve(key) as usize].worker_end_ns
    }

    /// Timestamps of every worker end seen (whether or not its session was known).
    pub fn worker_ends(&self) -> &[u64] {
        &self.worker_ends
    }

    /// The session whose birth-window block contains `addr`.
    fn session_containing(&self, addr: u64) -> Option<SessionKey> {
        let (_, &(end, session)) = self.birth_blocks.range(..=addr).next_back()?;
        (addr < end).then(|| self.resolve(session))
    }

    /// A lifecycle scope: returns the blocks a session born here adopts (its
    /// request's, allocated earlier in the same task poll).
    pub fn scope(
        &mut self,
        ts: u64,
        tid: u32,
        kind: ScopeKind,
        phase: Phase,
        arg: u64,
    ) -> Option<Adopted> {
        match (kind, phase) {
            (ScopeKind::SessionCreate, Phase::Enter) if enter(&mut self.create_depth, tid) => {
                let session = self.new_session(ts, None);
                self.birth_window.insert(tid, session);
                let blocks = self.request_blocks.remove(&tid)?;
                return Some(Adopted { session, blocks });
            }
            (ScopeKind::SessionCreate, Phase::Exit) => {
                if !exit(&mut self.create_depth, tid) {
                    return None;
                }
                if let Some(session) = self.birth_window.remove(&tid) {
                    if self.pending_spawn.len() == MAX_PENDING_SPAWNS {
                        self.pending_spawn.pop_front();
                    }
                    self.pending_spawn.push_back((tid, session));
                }
            }
            (ScopeKind::WorkerSpawn, Phase::Enter) => {
                if !enter(&mut self.spawn_depth, tid) {
                    return None;
                }
                let mine = self.pending_spawn.iter().rposition(|(t, _)| *t == tid);
                let index = mine.or((!self.pending_spawn.is_empty()).then_some(0));
                if let Some((_, session)) = index.and_then(|i| self.pending_spawn.remove(i)) {
                    self.birth_window.insert(tid, session);
                }
            }
            (ScopeKind::WorkerSpawn, Phase::Exit) => {
                // Without a spawn entry (older recordings probed only its return)
                // the exit still closes the window.
                if self.spawn_depth.get(&tid).copied().unwrap_or(0) <= 1
                    && let Some(session) = self.birth_window.remove(&tid)
                    && self.tasks_probed
                {
                    self.after_birth.insert(tid, session);
                }
                exit(&mut self.spawn_depth, tid);
            }
            (ScopeKind::WorkerPoll, Phase::Enter) if self.polls_by_stack => {
                let session = self.session_containing(arg);
                self.touch(session, ts);
                self.latest_poll.insert(tid, session);
            }
            (ScopeKind::WorkerPoll, Phase::Enter) => {
                let session = self.session_containing(arg);
                self.touch(session, ts);
                self.polls
                    .entry(tid)
                    .or_default()
                    .push((arg, session, false));
            }
            (ScopeKind::SessionSpan, Phase::Enter) => {
                // In-process, a birth's request ends at the latest when its
                // thread turns to a session's own work.
                self.after_birth.remove(&tid);
                let session = self.span_sessions.get(&arg).copied();
                self.touch(session, ts);
                self.polls
                    .entry(tid)
                    .or_default()
                    .push((arg, session, true));
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
                    let s = self.resolve(s);
                    self.lives[s as usize].worker_end_ns.get_or_insert(ts);
                }
            }
            _ => {}
        }
        None
    }

    fn touch(&mut self, session: Option<SessionKey>, ts: u64) {
        if let Some(s) = session.map(|s| self.resolve(s)) {
            let life = &mut self.lives[s as usize];
            life.last_active_ns = life.last_active_ns.max(ts);
            life.polls = life.polls.saturating_add(1);
        }
    }

    fn new_session(&mut self, ts: u64, id: Option<String>) -> SessionKey {
        self.merged.push(None);
        self.lives.push(SessionLife {
            id,
            born_ns: ts,
            last_active_ns: ts,
            ..Default::default()
        });
        self.lives.len() as SessionKey - 1
    }

    /// The sessions that were not merged into another, in order of birth, with
    /// the index each key's figures go to.
    pub fn finish(self) -> (Vec<SessionLife>, Vec<usize>) {
        let mut index_of_kept = vec![usize::MAX; self.lives.len()];
        let mut kept = Vec::new();
        for (key, life) in self.lives.iter().enumerate() {
            if self.merged[key].is_none() {
                index_of_kept[key] = kept.len();
                kept.push(life.clone());
            }
        }
        let index: Vec<usize> = (0..self.lives.len() as SessionKey)
            .map(|key| index_of_kept[self.resolve(key) as usize])
            .collect();
        (kept, index)
    }
}

/// One level deeper on `tid`; true when this is the outermost entry.
fn enter(depth: &mut HashMap<u32, u32>, tid: u32) -> bool {
    let d = depth.entry(tid).or_default();
    *d += 1;
    *d == 1
}

/// One level out on `tid`; true when the outermost scope just ended.
fn exit(depth: &mut HashMap<u32, u32>, tid: u32) -> bool {
    match depth.get_mut(&tid) {
        Some(d) if *d > 1 => {
            *d -= 1;
            false
        }
        Some(_) => {
            depth.remove(&tid);
            true
        }
        // An exit without its entry (attached mid-call): treat as outermost.
        None => true,
    }
}

mod in_process;

#[cfg(test)]
mod tests;
