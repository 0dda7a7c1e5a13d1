//! `summary.json`'s `objects`: each kind of lifecycle object
//! ([`crate::stages::objects`]) by state, with the bytes of those still alive,
//! what ended (or leaked) ones left behind, idle times, and where tasks were
//! spawned from, with the one rule that makes tasks a finding:
//! [`SpawnSite::leak`].

use std::collections::BTreeMap;

use crate::model::SessionState;
use crate::model::TaskState;
use crate::model::percentile;
use crate::model::sites::{MIN_BLOCKS, MIN_SPAN_SHARE};
use crate::model::{Task, Timeline};
use crate::outputs::summary::schema::{IdleSpread, Retained};
pub use crate::outputs::summary::schema::{ObjectKind, ObjectSummary, SpawnSite};

/// A spawn site no frame of the program names.
pub const UNKNOWN_SITE: &str = "[unknown]";

/// Spawn sites listed per kind at most.
const MAX_SPAWN_SITES: usize = 10;

/// A spawn site whose parked tasks leak has at most this share of its tasks
/// ended ("none has ended", with room for a few that a client closed).
const MAX_ENDED_SHARE: f64 = 0.05;

impl SpawnSite {
    /// Tasks that pile up: at least [`MIN_BLOCKS`] of them spawned during the
    /// recording, outside sessions (a session's verdict covers its own), are
    /// parked; their spawns span most of the target's activity (one per
    /// request or event, not a burst at start-up); and (almost) none of the
    /// site's tasks ended. A task that ends and frees its memory is no finding.
    fn is_leak(&self, growing: bool) -> bool {
        self.parked >= MIN_BLOCKS
            && self.in_sessions == 0
            && growing
            && (self.ended as f64) <= MAX_ENDED_SHARE * self.count as f64
    }
}

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
        idle_s: idle(live().map(|s| s.idle_ns).collect()),
        spawn_sites: Vec::new(),
    }
}

fn tasks(timeline: &Timeline) -> ObjectSummary {
    let tasks = &timeline.tasks;
    let mut states: BTreeMap<String, u64> = TaskState::ALL
        .iter()
        .map(|s| (s.name().to_owned(), 0))
        .collect();
    for t in tasks {
        *states.entry(t.state.name().to_owned()).or_default() += 1;
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
        idle_s: idle(alive().map(|t| t.idle_ns).collect()),
        spawn_sites: spawn_sites(timeline),
    }
}

/// Tasks grouped by the function that spawned them: leaks first, then most
/// alive, then most spawned.
pub fn spawn_sites(timeline: &Timeline) -> Vec<SpawnSite> {
    // Tasks whose spawn site is unknown (a stack that stops inside tokio) are
    // told apart by their cell's size: one future type, one size.
    let mut by_site: BTreeMap<String, Vec<&Task>> = BTreeMap::new();
    for task in &timeline.tasks {
        let site = match &task.spawned_from {
            Some(site) => site.clone(),
            None => format!("{UNKNOWN_SITE} (cells of {} B)", task.cell_size),
        };
        by_site.entry(site).or_default().push(task);
    }
    let mut sites: Vec<SpawnSite> = by_site
        .into_iter()
        .map(|(site, tasks)| {
            let of = |state| tasks.iter().filter(|t| t.state == state).count() as u64;
            let mut site = SpawnSite {
                known: !site.starts_with(UNKNOWN_SITE),
                site,
                count: tasks.len() as u64,
                ended: of(TaskState::Ended),
                alive: of(TaskState::Alive),
                parked: of(TaskState::Parked),
                in_sessions: tasks.iter().filter(|t| t.session.is_some()).count() as u64,
                alive_bytes: Retained::of(
                    tasks
                        .iter()
                        .filter(|t| t.state != TaskState::Ended)
                        .map(|t| t.live_bytes)
                        .collect(),
                ),
                leak: false,
            };
            site.leak = site.is_leak(spawns_span_the_activity(&tasks, timeline.allocs));
            site
        })
        .collect();
    sites.sort_by_key(|s| {
        (
            !s.leak,
            std::cmp::Reverse(s.alive + s.parked),
            std::cmp::Reverse(s.count),
        )
    });
    sites.truncate(MAX_SPAWN_SITES);
    sites
}

/// The parked tasks among `tasks` were spawned during the recording across
/// most of the target's activity (its allocations, in order).
fn spawns_span_the_activity(tasks: &[&Task], allocations: u64) -> bool {
    let seqs: Vec<u64> = tasks
        .iter()
        .filter(|t| t.state == TaskState::Parked && t.born_ns.is_some())
        .map(|t| t.born_seq)
        .collect();
    let (Some(first), Some(last)) = (seqs.iter().min(), seqs.iter().max()) else {
        return false;
    };
    seqs.len() as u64 >= MIN_BLOCKS
        && (last - first) as f64 >= MIN_SPAN_SHARE * allocations.max(1) as f64
}

fn idle(mut ns: Vec<u64>) -> IdleSpread {
    ns.sort_unstable();
    IdleSpread {
        p50: percentile(&ns, 50.0) as f64 / 1e9,
        max: ns.last().copied().unwrap_or(0) as f64 / 1e9,
    }
}
