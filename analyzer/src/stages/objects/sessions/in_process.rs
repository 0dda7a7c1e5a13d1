//! Sessions in in-process recordings: named by `tracing` spans and rmcp's
//! "create new session" event instead of scopes. A span may announce a new
//! anonymous session and learn its id only after the worker has named it; the
//! two are then merged.

use super::{Adopted, SessionKey, SessionTracker};

impl SessionTracker {
    /// In-process mode: a session with `id` was just created on `tid`. Returns
    /// it, and the unowned map-entry blocks allocated on `tid` since the last
    /// such fact, which are its own (the caller hands them to the session);
    /// and, when tokio's task spans say which poll this is, what its
    /// request allocated for it earlier in the poll ([`Adopted`]).
    pub fn created(
        &mut self,
        ts: u64,
        tid: u32,
        id: String,
    ) -> (SessionKey, Vec<u64>, Option<Adopted>) {
        let session = match self.session_ids.get(&id) {
            Some(&known) => self.resolve(known),
            None => {
                let s = self.new_session(ts, Some(id.clone()));
                self.session_ids.insert(id, s);
                s
            }
        };
        // Born inside a session span (the application's around
        // `create_session`): what follows in it is shared work too.
        if let Some(&(key, _, true)) = self.polls.get(&tid).and_then(|p| p.last()) {
            self.birth_spans.insert(key);
        }
        let request = self
            .request_blocks
            .remove(&tid)
            .map(|blocks| Adopted { session, blocks });
        if self.requests_end_at_facts {
            // What the request goes on to allocate for it (the task that
            // serves it), until the thread turns to a session's own work.
            self.after_birth.insert(tid, session);
        }
        (
            session,
            self.orphans.remove(&tid).unwrap_or_default(),
            request,
        )
    }

    /// In-process mode: the innermost session span on `tid` announced its session id
    /// ("" = a new session whose id comes later). Span keys are reused by `tracing`,
    /// so each announcement rebinds the span's key.
    pub fn name(&mut self, ts: u64, tid: u32, id: String) {
        let Some((key, current, _)) = self.polls.get(&tid).and_then(|p| p.last()).copied() else {
            return;
        };
        let bound = self.span_sessions.get(&key).copied();
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
        if bound.map(|s| self.resolve(s)) != Some(self.resolve(session)) {
            // A new span under a reused key (or a new binding): no birth in it yet.
            self.birth_spans.remove(&key);
        }
        self.span_sessions.insert(key, session);
        if let Some(top) = self.polls.get_mut(&tid).and_then(|p| p.last_mut()) {
            top.1 = Some(session);
        }
    }

    /// Folds session `from` into `into`: the same session, learned late.
    /// What still holds `from` (a span's binding, a birth window, a spawn
    /// waiting for its session) is left as it is: every reader resolves
    /// ([`SessionTracker::resolve`]; `from` is anonymous and `into` named,
    /// and a named session is never folded, so that is one step). Rewriting
    /// them here walked every span bound so far at each merge, quadratic in
    /// the sessions of a recording: reading the last 45 minutes of a
    /// cooperative soak (81,000 sessions) took 14.7 s, 90% of it here; 0.95 s
    /// without.
    fn merge(&mut self, from: SessionKey, into: SessionKey) {
        let born = self.lives[from as usize].born_ns;
        let last = self.lives[from as usize].last_active_ns;
        let polls = self.lives[from as usize].polls;
        let target = &mut self.lives[into as usize];
        target.born_ns = target.born_ns.min(born);
        target.last_active_ns = target.last_active_ns.max(last);
        target.polls = target.polls.saturating_add(polls);
        self.merged[from as usize] = Some(into);
    }
}
