//! `summary.json`'s types: the contract other tools read (field names change
//! only with [`FORMAT_VERSION`](super::FORMAT_VERSION)). Plain data: the
//! summary ([`summarize`](super::summarize)) and the objects
//! ([`objects`](crate::outputs::objects)) fill it, and it imports none of
//! them. The parts the model already holds (the statistics, the session
//! states, the spawn sites, the verdict's kind) are the model's own types,
//! serialized as they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::model::{
    IdleSpread, ObjectKind, Retained, SessionStates, SpawnSite, Spread, VerdictKind,
};

#[derive(Debug, Serialize, Deserialize)]
pub struct Summary {
    pub format_version: u32,
    pub producer: String,
    /// How the recording chose its allocations (format 4).
    pub sampling: SamplingSummary,
    pub duration_s: f64,
    pub events: Events,
    pub sessions: Sessions,
    /// Every kind of lifecycle object the recording shows (sessions, tasks).
    pub objects: BTreeMap<ObjectKind, ObjectSummary>,
    pub categories: Vec<CategorySummary>,
    pub top_sites: Vec<SiteSummary>,
    /// Blocks allocated during the recording and still live at the end, by call
    /// site, most live bytes first; no preset needed.
    pub findings: Vec<Finding>,
    /// Lifecycle signals the recording lacks, and what the verdict cannot claim.
    pub missing_signals: Vec<String>,
    /// What else limits the figures (a torn recording, files that could not be
    /// matched for symbols).
    pub warnings: Vec<String>,
    pub verdict_kind: VerdictKind,
    pub verdict: String,
}

/// `every`, or a sample by bytes whose figures are estimates.
#[derive(Debug, Serialize, Deserialize)]
pub struct SamplingSummary {
    /// Mean bytes between samples; `null` when every call was recorded.
    pub mean_bytes: Option<u64>,
    /// Whether byte and block figures are estimates.
    pub estimated: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Events {
    pub alloc: u64,
    pub free: u64,
    pub lost: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Sessions {
    pub count: u64,
    pub worker_ended: u64,
    /// Format 1's figure, kept: sessions whose worker ended and that retain no
    /// byte. The verdict reads `states` instead.
    pub closed: u64,
    /// Sessions per observed state at the end of the recording.
    pub states: SessionStates,
    /// Per leaked session: bytes still live after its worker ended.
    pub retained_bytes: Retained,
    /// Per live session: bytes it holds at the end.
    pub live_bytes: Retained,
    /// Per live session: seconds since it last did anything (p50, max).
    pub live_idle_s: IdleSpread,
    pub transient_bytes: Spread,
    /// What a session holds by part, live and leaked ones apart (format 5).
    pub parts: PartsByState,
}

/// A live and a leaked session's bytes by part (format 5).
#[derive(Debug, Serialize, Deserialize)]
pub struct PartsByState {
    pub live: SessionParts,
    pub leaked: SessionParts,
}

/// Mean bytes per session of one state, by how each block came to be the
/// session's; the parts add up to `total_bytes` (format 5).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SessionParts {
    /// Sessions of that state the means are over.
    pub sessions: u64,
    /// Its entry in the session map: the handle and what it keeps.
    pub map_entry_bytes: u64,
    /// The channels between its handle and its worker.
    pub channels_bytes: u64,
    /// What the request that created it allocated for it.
    pub request_bytes: u64,
    /// Its tasks: their cells and what their polls allocated.
    pub tasks_bytes: u64,
    /// What its worker's polls and its spans allocated otherwise.
    pub scopes_bytes: u64,
    /// The sum of the parts: a session's live bytes at the end, on average.
    pub total_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct CategorySummary {
    pub name: String,
    pub allocated_bytes: u64,
    pub reclaimed_bytes: u64,
    pub retained_bytes: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SiteSummary {
    pub frames: Vec<String>,
    pub retained_bytes: u64,
    pub blocks: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Finding {
    /// The frame that best names the site, shortened for reading: the one whose
    /// rule chose its category, else the program's innermost own frame.
    pub name: String,
    /// Function names, innermost first, allocator frames trimmed (full names).
    pub frames: Vec<String>,
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// The recorded blocks `live_bytes` rests on: `live_blocks` itself, or
    /// in a sampled recording the samples the estimate comes from (format 4).
    pub samples: u64,
    /// Relative standard error of `live_bytes`: 0 when exact (format 4).
    pub relative_error: f64,
    /// Fitted growth of the site's surviving bytes over the recording.
    pub growth_bytes_per_s: f64,
    /// Live bytes per lifecycle event, where the recording has such events.
    pub bytes_per_event: Option<PerEvent>,
    /// How long the oldest of its blocks has been live at the end.
    pub oldest_age_s: f64,
    /// Keeps a block (or a fixed group) per request or event: see `sites::Site::is_leak_candidate`.
    pub leak_candidate: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PerEvent {
    pub event: String,
    pub bytes: u64,
}

/// One kind's objects at the end of a recording (`summary.json`'s `objects`).
#[derive(Debug, Serialize, Deserialize)]
pub struct ObjectSummary {
    pub count: u64,
    /// Objects per state (every state of the kind is listed).
    pub states: BTreeMap<String, u64>,
    /// Per object still alive at the end (a live session; an alive or parked
    /// task): bytes it holds.
    pub alive_bytes: Retained,
    /// Per object that ended (a task) or leaked (a session) and still holds
    /// memory: what it left behind.
    pub retained_bytes: Retained,
    /// Per object still alive: seconds since it last did anything.
    pub idle_s: IdleSpread,
    /// Where the kind's objects were spawned from, most alive first (tasks).
    pub spawn_sites: Vec<SpawnSite>,
}
