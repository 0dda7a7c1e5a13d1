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

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::{Phase, ScopeKind};

use crate::attribute::Category;

/// Sessions created and waiting for their worker's spawn, at most (a create whose
/// spawn never comes, e.g. a failed request, must not grow this forever).
const MAX_PENDING_SPAWNS: usize = 4096;

/// Unowned map-entry blocks remembered per thread, waiting for a `created` fact.
const MAX_ORPHANS: usize = 16;

/// Blocks allocated in sessions' birth requests after their birth windows, at
/// most (each may be a task's cell, learned at its first poll).
const MAX_AFTER_BIRTH_BLOCKS: usize = 4096;

/// A session as this stage first knew it; [`SessionTracker::resolve`] maps it to
/// the session it was merged into, if any.
pub type SessionKey = u32;

/// Where a session stands at the end of a recording: observed, never inferred
/// from byte counts.
///
/// The map entry's state is read from the objects the entry keeps alive: the
/// blocks of the session in the `session-map` category (the handle's
/// `SessionEvent` channel). Their release is the entry's last copy going away (a
/// `Sender` in the map keeps the channel alive). A drop of a `LocalSessionHandle`
/// is not: rmcp 3.11.0 clones the handle out of the map for every request
/// (`LocalSessionManager::session_handle`), so its drop glue runs for copies too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// The map entry's objects were released: the entry left the map.
    Closed,
    /// The entry is kept (its objects live) and the worker ended: the leak.
    Leaked,
    /// The entry is kept and the worker is still running (or ended within the
    /// grace period before the end of the recording).
    Live,
    /// A signal needed to decide was missing (see [`SessionState::decide`]).
    #[default]
    Unknown,
}

impl SessionState {
    pub const ALL: [SessionState; 4] = [
        SessionState::Closed,
        SessionState::Leaked,
        SessionState::Live,
        SessionState::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SessionState::Closed => "closed",
            SessionState::Leaked => "leaked",
            SessionState::Live => "live",
            SessionState::Unknown => "unknown",
        }
    }

    /// The state from what was observed: `map_blocks` of the entry (`map_live` of
    /// them still live), and the worker: `Some(true)` gone for longer than the
    /// grace period, `Some(false)` running (or just ended), `None` when the
    /// worker's end could not be observed (no probe on it).
    pub fn decide(map_blocks: u64, map_live: u64, worker_gone: Option<bool>) -> Self {
        if map_blocks == 0 {
            // The entry's objects were never identified: nothing says whether it left.
            return SessionState::Unknown;
        }
        if map_live == 0 {
            return SessionState::Closed;
        }
        match worker_gone {
            Some(true) => SessionState::Leaked,
            Some(false) => SessionState::Live,
            None => SessionState::Unknown,
        }
    }
}

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
    /// containment. In-process session spans enclose more than the session's own
    /// code (the application's span around `create_session` includes the map
    /// insert): there a block belongs to the session only when the rules say it is
    /// session memory (any category but `other`).
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
                Some((_, _, true)) if category == Category::Other => None,
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

    pub fn scope(&mut self, ts: u64, tid: u32, kind: ScopeKind, phase: Phase, arg: u64) {
        match (kind, phase) {
            (ScopeKind::SessionCreate, Phase::Enter) if enter(&mut self.create_depth, tid) => {
                let session = self.new_session(ts, None);
                self.birth_window.insert(tid, session);
            }
            (ScopeKind::SessionCreate, Phase::Exit) => {
                if !exit(&mut self.create_depth, tid) {
                    return;
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
                    return;
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
    }

    fn touch(&mut self, session: Option<SessionKey>, ts: u64) {
        if let Some(s) = session.map(|s| self.resolve(s)) {
            let life = &mut self.lives[s as usize];
            life.last_active_ns = life.last_active_ns.max(ts);
            life.polls = life.polls.saturating_add(1);
        }
    }

    /// In-process mode: a session with `id` was just created on `tid`. Returns
    /// it, and the unowned map-entry blocks allocated on `tid` since the last
    /// such fact, which are its own (the caller hands them to the session).
    pub fn created(&mut self, ts: u64, tid: u32, id: String) -> (SessionKey, Vec<u64>) {
        let session = match self.session_ids.get(&id) {
            Some(&known) => self.resolve(known),
            None => {
                let s = self.new_session(ts, Some(id.clone()));
                self.session_ids.insert(id, s);
                s
            }
        };
        (session, self.orphans.remove(&tid).unwrap_or_default())
    }

    /// In-process mode: the innermost session span on `tid` announced its session id
    /// ("" = a new session whose id comes later). Span keys are reused by `tracing`,
    /// so each announcement rebinds the span's key.
    pub fn name(&mut self, ts: u64, tid: u32, id: String) {
        let Some((key, current, _)) = self.polls.get(&tid).and_then(|p| p.last()).copied() else {
            return;
        };
        let unnamed_current = current
            .map(|s| self.resolve(s))
            .filter(|s| self.lives[*s as usize].id.is_none());
        let session = if id.is_empty() {
            self.new_session(ts, None)
        } else if let Some(&known) = self.session_ids.get(&id) {
            if let Some(anonymous) = unnamed_current.filter(|s| *s != known) {
                self.merge(anonymous, known);
            }
            known
        } else if let Some(s) = unnamed_current {
            self.lives[s as usize].id = Some(id.clone());
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

    /// Folds session `from` into `into`: the same session, learned late.
    fn merge(&mut self, from: SessionKey, into: SessionKey) {
        let born = self.lives[from as usize].born_ns;
        let last = self.lives[from as usize].last_active_ns;
        let polls = self.lives[from as usize].polls;
        let target = &mut self.lives[into as usize];
        target.born_ns = target.born_ns.min(born);
        target.last_active_ns = target.last_active_ns.max(last);
        target.polls = target.polls.saturating_add(polls);
        self.merged[from as usize] = Some(into);
        for bound in self
            .span_sessions
            .values_mut()
            .chain(self.birth_window.values_mut())
            .chain(self.pending_spawn.iter_mut().map(|(_, s)| s))
        {
            if *bound == from {
                *bound = into;
            }
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

    /// Every session key, merged ones included (for folding per-key figures).
    pub fn keys(&self) -> impl Iterator<Item = SessionKey> + use<> {
        0..self.lives.len() as SessionKey
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_belongs_to_the_session_whose_birth_block_contains_its_argument() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        assert_eq!(
            t.alloc(1, 0x1000, 100, Category::WorkerOther, false),
            Some(0),
            "in the birth window"
        );
        t.scope(2, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        assert_eq!(
            t.alloc(1, 0x9000, 8, Category::WorkerOther, false),
            None,
            "after the window"
        );
        t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
        assert_eq!(
            t.alloc(2, 0x2000, 8, Category::WorkerOther, false),
            Some(0),
            "inside the poll"
        );
        t.scope(4, 2, ScopeKind::WorkerPoll, Phase::Exit, 0);
        assert_eq!(
            t.alloc(2, 0x3000, 8, Category::WorkerOther, false),
            None,
            "after the poll"
        );
        t.scope(5, 2, ScopeKind::WorkerDrop, Phase::Enter, 0x1050);
        assert_eq!(t.worker_end_ns(0), Some(5));
        t.free(0x1000);
        t.scope(6, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
        assert_eq!(
            t.alloc(2, 0x4000, 8, Category::WorkerOther, false),
            None,
            "a freed block contains nothing"
        );
    }

    #[test]
    fn what_runs_between_create_and_spawn_is_not_the_sessions() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        assert_eq!(t.alloc(1, 0x1000, 64, Category::SessionMap, false), Some(0));
        t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
        // Awaiting the map's lock: another task's block, then the map's table resize.
        assert_eq!(t.alloc(1, 0x5000, 64, Category::Other, false), None);
        // The creating task resumed on thread 2, which spawns its worker.
        t.scope(3, 2, ScopeKind::WorkerSpawn, Phase::Enter, 0);
        assert_eq!(
            t.alloc(2, 0x2000, 64, Category::WorkerChannel, false),
            Some(0)
        );
        t.scope(4, 2, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        assert_eq!(t.alloc(2, 0x3000, 64, Category::Other, false), None);
        // The worker's poll points into the task allocated by the spawn.
        t.scope(5, 1, ScopeKind::WorkerPoll, Phase::Enter, 0x2008);
        assert_eq!(t.alloc(1, 0x4000, 8, Category::Other, false), Some(0));
    }

    /// Polls probed at entry only: the thread's latest poll holds for the blocks
    /// whose stacks pass through the poll function, and for no other.
    #[test]
    fn polls_without_exits_are_read_from_the_stack() {
        let mut t = SessionTracker::default();
        t.polls_by_stack();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        assert_eq!(
            t.alloc(1, 0x1000, 64, Category::WorkerChannel, false),
            Some(0)
        );
        t.scope(2, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1008);
        assert!(t.wants_poll_stack(2));
        assert_eq!(
            t.alloc(2, 0x2000, 8, Category::Other, true),
            Some(0),
            "inside the poll"
        );
        assert_eq!(
            t.alloc(2, 0x3000, 8, Category::Other, false),
            None,
            "another task"
        );
    }

    #[test]
    fn a_loss_ends_what_each_thread_was_inside() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        assert_eq!(t.alloc(1, 0x1000, 64, Category::SessionMap, false), Some(0));
        t.scope(2, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1000);
        // The exits of both were among the lost records.
        t.forget_threads();
        assert_eq!(t.alloc(1, 0x2000, 8, Category::Other, false), None);
        assert_eq!(t.alloc(2, 0x3000, 8, Category::Other, false), None);
        // Containment still links the next poll.
        t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1008);
        assert_eq!(t.alloc(2, 0x4000, 8, Category::Other, false), Some(0));
    }

    #[test]
    fn nested_create_and_spawn_scopes_count_once() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
        assert_eq!(
            t.alloc(1, 0x100, 8, Category::SessionMap, false),
            Some(0),
            "still inside"
        );
        t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
        t.scope(3, 1, ScopeKind::WorkerSpawn, Phase::Enter, 0);
        t.scope(3, 1, ScopeKind::WorkerSpawn, Phase::Enter, 0);
        assert_eq!(
            t.alloc(1, 0x200, 8, Category::WorkerChannel, false),
            Some(0)
        );
        t.scope(4, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        assert_eq!(
            t.alloc(1, 0x300, 8, Category::WorkerChannel, false),
            Some(0)
        );
        t.scope(4, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        assert_eq!(t.alloc(1, 0x400, 8, Category::Other, false), None);
        let (lives, _) = t.finish();
        assert_eq!(lives.len(), 1, "one session, not two");
    }

    #[test]
    fn in_process_spans_keep_only_session_memory() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
        t.name(1, 1, "a".into());
        assert_eq!(t.alloc(1, 0x100, 8, Category::SessionMap, false), Some(0));
        assert_eq!(
            t.alloc(1, 0x200, 8, Category::Other, false),
            None,
            "the map's table grows inside the application's span: shared"
        );
    }

    #[test]
    fn an_anonymous_span_that_learns_a_known_id_is_merged() {
        let mut t = SessionTracker::default();
        // The worker's span names session "a" first.
        t.scope(1, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
        t.name(1, 1, "a".into());
        t.scope(2, 1, ScopeKind::SessionSpan, Phase::Exit, 10);
        // The creating span announced itself anonymously, then learns it is "a".
        t.scope(3, 2, ScopeKind::SessionSpan, Phase::Enter, 20);
        t.name(3, 2, String::new());
        assert_eq!(t.alloc(2, 0x100, 8, Category::WorkerOther, false), Some(1));
        t.name(4, 2, "a".into());
        assert_eq!(t.resolve(1), 0);
        let (lives, index) = t.finish();
        assert_eq!(lives.len(), 1);
        assert_eq!(index, vec![0, 0]);
        assert_eq!(lives[0].born_ns, 1);
    }
}
