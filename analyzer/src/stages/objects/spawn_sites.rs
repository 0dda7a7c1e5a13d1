//! Tasks by the function that spawned them, and the one rule that makes
//! tasks a finding: [`is_leak`]. `summary.json`'s `objects.task.spawn_sites`
//! lists them; the verdict names a leaking one.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::model::sites::{MIN_BLOCKS, MIN_SPAN_SHARE};
use crate::model::{Retained, SpawnSite, Task, TaskState, UNKNOWN_SITE};

/// Spawn sites listed at most.
const MAX_SPAWN_SITES: usize = 10;

/// A spawn site whose parked tasks leak has at most this share of its tasks
/// ended ("none has ended", with room for a few that a client closed).
const MAX_ENDED_SHARE: f64 = 0.05;

/// Tasks that pile up: at least [`MIN_BLOCKS`] of them spawned during the
/// recording, outside sessions (a session's verdict covers its own), are
/// parked; their spawns span most of the target's activity (one per
/// request or event, not a burst at start-up); and (almost) none of the
/// site's tasks ended. A task that ends and frees its memory is no finding.
fn is_leak(site: &SpawnSite, growing: bool) -> bool {
    site.parked >= MIN_BLOCKS
        && site.in_sessions == 0
        && growing
        && (site.ended as f64) <= MAX_ENDED_SHARE * site.count as f64
}

/// Tasks grouped by the function that spawned them: leaks first, then most
/// alive, then most spawned.
/// `allocations`: the recording's, the clock spawns are placed on.
pub fn spawn_sites(tasks: &[Task], allocations: u64) -> Vec<SpawnSite> {
    // Tasks whose spawn site is unknown (a stack that stops inside tokio) are
    // told apart by their cell's size: one future type, one size.
    let mut by_site: BTreeMap<String, Vec<&Task>> = BTreeMap::new();
    let mut unknown = String::new();
    for task in tasks {
        let site = match &task.spawned_from {
            Some(site) => &**site,
            None => {
                unknown.clear();
                let _ = write!(unknown, "{UNKNOWN_SITE} (cells of {} B)", task.cell_size);
                unknown.as_str()
            }
        };
        // A site's name made once, not a task's (a day holds millions).
        match by_site.get_mut(site) {
            Some(of_site) => of_site.push(task),
            None => {
                by_site.insert(site.to_string(), vec![task]);
            }
        }
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
            site.leak = is_leak(&site, spawns_span_the_activity(&tasks, allocations));
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
