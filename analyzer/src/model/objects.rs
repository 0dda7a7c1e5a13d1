//! The lifecycle objects' kinds, where each stands at the end of a
//! recording (the trackers of `stages/objects/` decide it), and tasks by the
//! function that spawned them (`stages/objects/spawn_sites.rs` groups them).

use serde::{Deserialize, Serialize};

pub use super::session_state::{SessionState, SessionStates};
use super::stats::Retained;

/// The kinds of lifecycle objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectKind {
    Session,
    Task,
}

/// Where a task stands at the end of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Its cell was freed.
    Ended,
    /// Its end was not seen, and it was polled lately.
    Alive,
    /// Its end was not seen, and it was not polled for most of its time in the
    /// recording (at least `stages::objects::tasks::PARKED_MIN_IDLE_NS`): waiting for something that
    /// does not come, or for a long time.
    Parked,
}

impl TaskState {
    pub const ALL: [TaskState; 3] = [TaskState::Ended, TaskState::Alive, TaskState::Parked];

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Ended => "ended",
            TaskState::Alive => "alive",
            TaskState::Parked => "parked",
        }
    }
}

/// A spawn site no frame of the program names.
pub const UNKNOWN_SITE: &str = "[unknown]";

/// Tasks spawned from one function.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpawnSite {
    /// The function (`[unknown] (cells of N B)` when the cell's stack does
    /// not reach the program's code: a build without frame pointers).
    pub site: String,
    /// `site` names a function.
    pub known: bool,
    pub count: u64,
    pub ended: u64,
    pub alive: u64,
    pub parked: u64,
    /// How many belong to a session (counted in its footprint).
    pub in_sessions: u64,
    /// Per task alive or parked at the end: bytes it owns.
    pub alive_bytes: Retained,
    /// Its tasks are a leak (the rule: `stages/objects/spawn_sites.rs`).
    pub leak: bool,
}
