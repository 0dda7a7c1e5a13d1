//! The lifecycle objects' kinds and where each stands at the end of a
//! recording (the trackers of `stages/objects/` decide it).

use serde::{Deserialize, Serialize};

pub use super::session_state::SessionState;

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
