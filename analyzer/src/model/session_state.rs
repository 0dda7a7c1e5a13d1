//! A session's state at the end of a recording, and the sessions by state.

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

/// Sessions per state (`summary.json`'s `sessions.states`).
#[derive(Debug, serde::Serialize, serde::Deserialize, Default, Clone, Copy, PartialEq, Eq)]
pub struct SessionStates {
    pub closed: u64,
    pub leaked: u64,
    pub live: u64,
    pub unknown: u64,
}

impl SessionStates {
    /// How many of `states` are in each.
    pub fn of(states: impl IntoIterator<Item = SessionState>) -> Self {
        let mut counts = Self::default();
        for state in states {
            match state {
                SessionState::Closed => counts.closed += 1,
                SessionState::Leaked => counts.leaked += 1,
                SessionState::Live => counts.live += 1,
                SessionState::Unknown => counts.unknown += 1,
            }
        }
        counts
    }
}
