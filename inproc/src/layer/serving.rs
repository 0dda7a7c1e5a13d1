//! Which session a serving span is (a preset's `serves = true` span, rmcp's
//! `serve_inner`): such a span names no session, yet everything the task
//! that serves a session allocates (its peer's channels, its service loop's
//! buffers, the tasks it spawns) is the session's.
//!
//! rmcp's handler creates the session (the "create new session" event),
//! then spawns the task that serves it; tokio runs a task spawned from a
//! worker thread next on that thread (its LIFO slot), where it opens
//! `serve_inner`. So a serving span takes the session created most recently
//! on its own thread and not served yet; when its task was stolen by
//! another thread, the oldest session not served yet (sessions are served in
//! the order they are made, give or take the few made at the same moment).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions waiting for their serving span, at most: a server whose
/// sessions never reach the service loop (a failed handshake) forgets the
/// oldest.
const MAX_UNSERVED: usize = 256;

/// A session whose serving span has not opened this long after its creation
/// never will (rmcp opens it as soon as the `initialize` request is read,
/// which the creating request sends at once).
const MAX_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Unserved {
    tid: u32,
    id: String,
    at: Instant,
}

/// The sessions created and not served yet, oldest first.
#[derive(Debug, Default)]
pub(super) struct Serving {
    unserved: Mutex<VecDeque<Unserved>>,
}

impl Serving {
    /// Session `id` was created on thread `tid`.
    pub(super) fn created(&self, tid: u32, id: &str) {
        let mut unserved = self.unserved.lock().unwrap_or_else(|e| e.into_inner());
        if unserved.len() == MAX_UNSERVED {
            unserved.pop_front();
        }
        unserved.push_back(Unserved {
            tid,
            id: id.to_owned(),
            at: Instant::now(),
        });
    }

    /// A serving span opened on thread `tid`: the session it serves, if one
    /// waits (see the module's doc).
    pub(super) fn serve(&self, tid: u32) -> Option<String> {
        let mut unserved = self.unserved.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        while unserved
            .front()
            .is_some_and(|u| now.duration_since(u.at) > MAX_WAIT)
        {
            unserved.pop_front();
        }
        let index = unserved.iter().rposition(|u| u.tid == tid).unwrap_or(0);
        unserved.remove(index).map(|u| u.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_span_takes_its_threads_newest_session_else_the_oldest() {
        let serving = Serving::default();
        assert_eq!(serving.serve(1), None, "nothing created yet");
        serving.created(1, "a");
        serving.created(2, "b");
        serving.created(1, "c");
        assert_eq!(
            serving.serve(1).as_deref(),
            Some("c"),
            "its own thread's newest"
        );
        assert_eq!(serving.serve(3).as_deref(), Some("a"), "stolen: the oldest");
        assert_eq!(serving.serve(1).as_deref(), Some("b"));
        assert_eq!(serving.serve(1), None, "each session is served once");
    }

    #[test]
    fn the_sessions_waiting_are_bounded() {
        let serving = Serving::default();
        for i in 0..MAX_UNSERVED + 3 {
            serving.created(1, &i.to_string());
        }
        assert_eq!(
            serving.serve(2).as_deref(),
            Some("3"),
            "the oldest three forgotten"
        );
    }
}
