//! `leakscope diff BEFORE AFTER`: two recordings of the same load (a buggy and a
//! fixed build, or two releases of a dependency) side by side: session states
//! and retained bytes, what changed at each call site, and one verdict sentence.
//!
//! Sessions are paired by birth order (the same churn opens them in the same
//! order); sites by the name the report gives them (their addresses differ from
//! build to build, their functions do not).
//!
//! `diff.json` field names are a contract, versioned by [`FORMAT_VERSION`]:
//! * 1: the first contract.
//! * 2: each side's `tasks`, `parked_tasks`, `ended_tasks` and `task_bytes`
//!   (tokio's tasks, `summary.json`'s `objects.task`). Other fields keep their meaning.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::SessionState;
use crate::model::Timeline;
use crate::model::percentile;
use crate::model::site_name;
use crate::outputs::objects::ObjectKind;
use crate::outputs::summary::{Summary, VerdictKind};

pub const FORMAT_VERSION: u32 = 2;

/// A site's bytes changed when they moved by more than this share...
const CHANGE_SHARE: f64 = 0.10;
/// ...and by more than this many bytes (allocator noise, one more buffer).
const CHANGE_BYTES: u64 = 1024;

#[derive(Debug, Serialize)]
pub struct Diff {
    pub format_version: u32,
    pub before: Side,
    pub after: Side,
    /// Retained bytes per leaked session (p50) before minus after.
    pub removed_per_session_bytes: i64,
    /// `removed_per_session_bytes` as a share of what was retained before (0..1;
    /// 0 when nothing was retained before).
    pub removed_share: f64,
    /// Sites holding memory at the end in either recording, most changed first.
    pub sites: Vec<SiteDelta>,
    /// Per session, paired by birth order.
    pub sessions: Vec<SessionPair>,
    pub verdict_kind: DiffKind,
    pub verdict: String,
}

/// What the change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiffKind {
    /// Before leaked; after nothing is retained.
    Fixed,
    /// Less is retained, but not nothing.
    Reduced,
    /// About the same.
    Unchanged,
    /// More is retained after, or a new leak appeared.
    Regressed,
    /// One side cannot be decided (see its verdict).
    Undecided,
}

/// One recording's figures.
#[derive(Debug, Serialize)]
pub struct Side {
    pub recording: String,
    pub exe: String,
    pub pid: u32,
    pub rmcp_version: Option<String>,
    pub producer: &'static str,
    pub duration_s: f64,
    pub sessions: u64,
    pub closed: u64,
    pub leaked: u64,
    pub live: u64,
    pub unknown: u64,
    /// Bytes retained by leaked sessions, total and per session (p50).
    pub retained_bytes: u64,
    pub retained_per_session_p50: u64,
    /// Bytes live at the end of the recording, everything counted.
    pub live_at_end_bytes: u64,
    /// tokio tasks seen, how many were parked and ended at the end, and the
    /// bytes the ones still running hold.
    pub tasks: u64,
    pub parked_tasks: u64,
    pub ended_tasks: u64,
    pub task_bytes: u64,
    pub verdict_kind: VerdictKind,
    pub verdict: String,
}

impl Side {
    fn of(recording: &str, summary: &Summary, timeline: &Timeline) -> Self {
        let s = &summary.sessions;
        let tasks = summary.objects.get(&ObjectKind::Task);
        let task_state = |state: &str| {
            tasks
                .and_then(|t| t.states.get(state).copied())
                .unwrap_or(0)
        };
        Self {
            recording: recording.to_owned(),
            exe: timeline.header.exe.clone(),
            pid: timeline.header.pid,
            rmcp_version: timeline.header.rmcp_version.clone(),
            producer: timeline.header.producer.as_str(),
            duration_s: summary.duration_s,
            sessions: s.count,
            closed: s.states.closed,
            leaked: s.states.leaked,
            live: s.states.live,
            unknown: s.states.unknown,
            retained_bytes: s.retained_bytes.total,
            retained_per_session_p50: s.retained_bytes.p50,
            live_at_end_bytes: timeline.sites.iter().map(|site| site.retained_bytes).sum(),
            tasks: tasks.map_or(0, |t| t.count),
            parked_tasks: task_state("parked"),
            ended_tasks: task_state("ended"),
            task_bytes: tasks.map_or(0, |t| t.alive_bytes.total),
            verdict_kind: summary.verdict_kind,
            verdict: summary.verdict.clone(),
        }
    }

    /// "fixture-server (rmcp 3.11.0), leaky.lsrec": the target, its version and
    /// the recording (a fixed build often has the same name and version).
    pub fn label(&self) -> String {
        let exe = self.exe.rsplit('/').next().unwrap_or(&self.exe);
        let file = self.recording.rsplit('/').next().unwrap_or(&self.recording);
        match &self.rmcp_version {
            Some(v) => format!("{exe} (rmcp {v}), {file}"),
            None => format!("{exe}, {file}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    Disappeared,
    Appeared,
    Grew,
    Shrank,
    Unchanged,
}

#[derive(Debug, Serialize)]
pub struct SiteDelta {
    pub name: String,
    pub category: &'static str,
    pub change: Change,
    pub before: SiteFigures,
    pub after: SiteFigures,
    pub delta_bytes: i64,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct SiteFigures {
    /// Bytes live at the end.
    pub bytes: u64,
    pub blocks: u64,
    /// Of `bytes`, those of sessions whose worker is gone.
    pub session_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct SessionPair {
    /// Birth order, from 0.
    pub index: usize,
    pub before: Option<SessionFigures>,
    pub after: Option<SessionFigures>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct SessionFigures {
    pub state: SessionState,
    pub retained_bytes: u64,
    pub live_at_end_bytes: u64,
}

/// Sites by name: (category, figures).
fn sites_by_name(timeline: &Timeline) -> BTreeMap<String, (&'static str, SiteFigures)> {
    let mut by_name: BTreeMap<String, (&'static str, SiteFigures)> = BTreeMap::new();
    for site in &timeline.sites {
        let entry = by_name
            .entry(site_name(site))
            .or_insert((site.category.name(), SiteFigures::default()));
        entry.1.bytes += site.retained_bytes;
        entry.1.blocks += site.blocks;
        entry.1.session_bytes += site.session_bytes;
    }
    by_name
}

fn sessions_in_birth_order(timeline: &Timeline) -> Vec<SessionFigures> {
    let mut sessions: Vec<_> = timeline.sessions.iter().collect();
    sessions.sort_by_key(|s| s.born_ns);
    sessions
        .into_iter()
        .map(|s| SessionFigures {
            state: s.state,
            retained_bytes: s.retained,
            live_at_end_bytes: s.live_at_end,
        })
        .collect()
}

/// Compares two analysed recordings (`before` and `after`, each with the path
/// it was read from).
pub fn diff(before: (&str, &Summary, &Timeline), after: (&str, &Summary, &Timeline)) -> Diff {
    let side_before = Side::of(before.0, before.1, before.2);
    let side_after = Side::of(after.0, after.1, after.2);

    let old = sites_by_name(before.2);
    let new = sites_by_name(after.2);
    let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    let mut sites: Vec<SiteDelta> = names
        .into_iter()
        .map(|name| {
            let (category, b) = old.get(name).copied().unwrap_or_default();
            let (category_after, a) = new.get(name).copied().unwrap_or_default();
            let delta = a.bytes as i64 - b.bytes as i64;
            let moved = delta.unsigned_abs() > CHANGE_BYTES
                && delta.unsigned_abs() as f64 > CHANGE_SHARE * b.bytes.max(a.bytes) as f64;
            let change = match (b.bytes, a.bytes) {
                (0, 0) => Change::Unchanged,
                (_, 0) if moved => Change::Disappeared,
                (0, _) if moved => Change::Appeared,
                _ if moved && delta > 0 => Change::Grew,
                _ if moved => Change::Shrank,
                _ => Change::Unchanged,
            };
            SiteDelta {
                name: name.clone(),
                category: if category.is_empty() {
                    category_after
                } else {
                    category
                },
                change,
                before: b,
                after: a,
                delta_bytes: delta,
            }
        })
        .collect();
    sites.sort_by_key(|s| {
        (
            std::cmp::Reverse(s.delta_bytes.unsigned_abs()),
            s.name.clone(),
        )
    });

    let old_sessions = sessions_in_birth_order(before.2);
    let new_sessions = sessions_in_birth_order(after.2);
    let sessions = (0..old_sessions.len().max(new_sessions.len()))
        .map(|index| SessionPair {
            index,
            before: old_sessions.get(index).copied(),
            after: new_sessions.get(index).copied(),
        })
        .collect();

    // Per leaked session before, against the same sessions after (all of them:
    // a fixed build's sessions retain 0).
    let per_session = |sessions: &[SessionFigures], only_leaked: bool| {
        let mut values: Vec<u64> = sessions
            .iter()
            .filter(|s| !only_leaked || s.state == SessionState::Leaked)
            .map(|s| s.retained_bytes)
            .collect();
        values.sort_unstable();
        percentile(&values, 50.0)
    };
    let before_p50 = per_session(&old_sessions, true);
    let after_p50 = if side_after.leaked > 0 {
        per_session(&new_sessions, true)
    } else {
        0
    };
    let removed = before_p50 as i64 - after_p50 as i64;
    let removed_share = if before_p50 == 0 {
        0.0
    } else {
        removed as f64 / before_p50 as f64
    };
    let (verdict_kind, verdict) = decide(
        &side_before,
        &side_after,
        before_p50,
        after_p50,
        removed_share,
        &sites,
    );
    Diff {
        format_version: FORMAT_VERSION,
        before: side_before,
        after: side_after,
        removed_per_session_bytes: removed,
        removed_share,
        sites,
        sessions,
        verdict_kind,
        verdict,
    }
}

mod decide;
mod render;

use decide::decide;

pub use render::render;
