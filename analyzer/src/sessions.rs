//! Sessions: which session does a block belong to, and when did its worker end.
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
//! In-process recordings name sessions instead: `session-span` scopes and session-id
//! facts from `tracing` spans. A span may announce a new anonymous session and learn
//! its id only after the worker has named it; the two are then **merged**
//! ([`SessionKey`]s of merged sessions resolve to the one they were folded into).
//!
//! This stage knows nothing of bytes: the accounting stage asks it who owns a block.

use std::collections::{BTreeMap, HashMap};

use leakscope_recording::{Phase, ScopeKind};

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
}

#[derive(Default)]
pub struct SessionTracker {
    lives: Vec<SessionLife>,
    /// `merged[s] = Some(t)`: session `s` turned out to be `t`.
    merged: Vec<Option<SessionKey>>,
    /// The thread whose birth window is open, and for which session.
    birth_window: HashMap<u32, SessionKey>,
    /// Blocks allocated in birth windows: start -> (end, session).
    birth_blocks: BTreeMap<u64, (u64, SessionKey)>,
    /// Per thread, the open worker polls / session spans: (key, session).
    polls: HashMap<u32, Vec<(u64, Option<SessionKey>)>>,
    /// In-process mode: session of each span key, and of each session id.
    span_sessions: HashMap<u64, SessionKey>,
    session_ids: HashMap<String, SessionKey>,
    worker_ends: Vec<u64>,
}

impl SessionTracker {
    /// The session a block allocated now on `tid` belongs to, if any; a block
    /// allocated in a birth window is remembered for provenance by containment.
    pub fn alloc(&mut self, tid: u32, addr: u64, size: u64) -> Option<SessionKey> {
        let in_birth = self.birth_window.get(&tid).copied();
        let session = in_birth.or_else(|| {
            self.polls
                .get(&tid)
                .and_then(|p| p.last().and_then(|(_, s)| *s))
        });
        let session = session.map(|s| self.resolve(s))?;
        if in_birth.map(|s| self.resolve(s)) == Some(session) {
            self.birth_blocks
                .insert(addr, (addr + size.max(1), session));
        }
        Some(session)
    }

    /// The block at `addr` was freed: it can no longer contain anything.
    pub fn free(&mut self, addr: u64) {
        self.birth_blocks.remove(&addr);
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
                    let s = self.resolve(s);
                    self.lives[s as usize].worker_end_ns.get_or_insert(ts);
                }
            }
            _ => {}
        }
    }

    /// In-process mode: the innermost session span on `tid` announced its session id
    /// ("" = a new session whose id comes later). Span keys are reused by `tracing`,
    /// so each announcement rebinds the span's key.
    pub fn name(&mut self, ts: u64, tid: u32, id: String) {
        let Some((key, current)) = self.polls.get(&tid).and_then(|p| p.last()).copied() else {
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
        let target = &mut self.lives[into as usize];
        target.born_ns = target.born_ns.min(born);
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

    fn new_session(&mut self, ts: u64, id: Option<String>) -> SessionKey {
        self.merged.push(None);
        self.lives.push(SessionLife {
            id,
            born_ns: ts,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_belongs_to_the_session_whose_birth_block_contains_its_argument() {
        let mut t = SessionTracker::default();
        t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
        assert_eq!(t.alloc(1, 0x1000, 100), Some(0), "in the birth window");
        t.scope(2, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
        assert_eq!(t.alloc(1, 0x9000, 8), None, "after the window");
        t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
        assert_eq!(t.alloc(2, 0x2000, 8), Some(0), "inside the poll");
        t.scope(4, 2, ScopeKind::WorkerPoll, Phase::Exit, 0);
        assert_eq!(t.alloc(2, 0x3000, 8), None, "after the poll");
        t.scope(5, 2, ScopeKind::WorkerDrop, Phase::Enter, 0x1050);
        assert_eq!(t.worker_end_ns(0), Some(5));
        t.free(0x1000);
        t.scope(6, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
        assert_eq!(
            t.alloc(2, 0x4000, 8),
            None,
            "a freed block contains nothing"
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
        assert_eq!(t.alloc(2, 0x100, 8), Some(1));
        t.name(4, 2, "a".into());
        assert_eq!(t.resolve(1), 0);
        let (lives, index) = t.finish();
        assert_eq!(lives.len(), 1);
        assert_eq!(index, vec![0, 0]);
        assert_eq!(lives[0].born_ns, 1);
    }
}
