//! `summary.json`'s `objects`: each kind of lifecycle object
//! (`stages/objects/`) by state, with the bytes of those still alive, what
//! ended (or leaked) ones left behind, idle times, and (tasks) where they
//! were spawned from, as the model holds them ([`crate::model::SpawnSite`]).

use std::collections::BTreeMap;

use crate::model::{IdleSpread, Retained, SessionState, TaskState, Timeline};
pub use crate::outputs::summary::schema::{ObjectKind, ObjectSummary};

/// Every kind the recording shows objects of.
pub fn objects(timeline: &Timeline) -> BTreeMap<ObjectKind, ObjectSummary> {
    let mut kinds = BTreeMap::new();
    if !timeline.sessions.is_empty() {
        kinds.insert(ObjectKind::Session, sessions(timeline));
    }
    if !timeline.tasks.is_empty() {
        kinds.insert(ObjectKind::Task, tasks(timeline));
    }
    kinds
}

fn sessions(timeline: &Timeline) -> ObjectSummary {
    let sessions = &timeline.sessions;
    let mut states: BTreeMap<String, u64> = SessionState::ALL
        .iter()
        .map(|s| (s.name().to_owned(), 0))
        .collect();
    for s in sessions {
        *states.entry(s.state.name().to_owned()).or_default() += 1;
    }
    let live = || sessions.iter().filter(|s| s.state == SessionState::Live);
    ObjectSummary {
        count: sessions.len() as u64,
        states,
        alive_bytes: Retained::of(live().map(|s| s.live_at_end).collect()),
        retained_bytes: Retained::of(
            sessions
                .iter()
                .filter(|s| s.state == SessionState::Leaked)
                .map(|s| s.retained)
                .collect(),
        ),
        idle_s: IdleSpread::of_ns(live().map(|s| s.idle_ns).collect()),
        spawn_sites: Vec::new(),
    }
}

fn tasks(timeline: &Timeline) -> ObjectSummary {
    let tasks = &timeline.tasks;
    let mut states: BTreeMap<String, u64> = TaskState::ALL
        .iter()
        .map(|s| (s.name().to_owned(), 0))
        .collect();
    for state in TaskState::ALL {
        let count = tasks.iter().filter(|t| t.state == state).count() as u64;
        *states.entry(state.name().to_owned()).or_default() += count;
    }
    let alive = || tasks.iter().filter(|t| t.state != TaskState::Ended);
    ObjectSummary {
        count: tasks.len() as u64,
        states,
        alive_bytes: Retained::of(alive().map(|t| t.live_bytes).collect()),
        retained_bytes: Retained::of(
            tasks
                .iter()
                .filter(|t| t.state == TaskState::Ended && t.live_bytes > 0)
                .map(|t| t.live_bytes)
                .collect(),
        ),
        idle_s: IdleSpread::of_ns(alive().map(|t| t.idle_ns).collect()),
        spawn_sites: timeline.spawn_sites.clone(),
    }
}
