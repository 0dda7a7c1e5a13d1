//! What one pass over a recording produced: the [`Timeline`] the outputs
//! read, its sessions and tasks, and what the recording lacked.

use leakscope_recording::{EndReason, Header, LostReason, Tail};

use super::{
    CategoryTotals, HeapProfile, PerCategory, PerPart, Rest, Sample, SessionState, Site, SpawnSite,
    TaskState, Verdict,
};

/// One session as the recording shows it: its lifecycle and its bytes.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The session id string, when the recording names it (in-process mode).
    pub id: Option<String>,
    pub born_ns: u64,
    pub worker_end_ns: Option<u64>,
    pub allocated: u64,
    pub reclaimed: u64,
    /// Freed within the grace period after the worker ended.
    pub transient: u64,
    /// Still live at the end, worker gone for longer than the grace period.
    pub retained: u64,
    /// Still live at the end (retained or not).
    pub live_at_end: u64,
    /// `live_at_end` by the way each block came to be the session's.
    pub parts: PerPart,
    pub state: SessionState,
    /// How long it had done nothing at the end (no birth, no worker poll since).
    pub idle_ns: u64,
    /// Polls of its worker seen (the sessions stage's `SessionLife::polls`).
    pub polls: u32,
}

/// One tokio task as the recording shows it (the tasks stage, `stages/objects/tasks.rs`).
#[derive(Debug, Clone)]
pub struct Task {
    /// `None`: spawned before the recording began.
    pub born_ns: Option<u64>,
    /// The activity clock at its spawn (the recording's allocations so far).
    pub born_seq: u64,
    pub end_ns: Option<u64>,
    pub state: TaskState,
    pub polls: u32,
    /// Since its last poll, at the end of the recording.
    pub idle_ns: u64,
    /// Bytes it owns live at the end: its cell and what its polls allocated.
    pub live_bytes: u64,
    /// Its cell's size (one per future type), 0 when its cell was not seen.
    pub cell_size: u64,
    /// What its polls allocated over the recording (its cell included).
    pub allocated: u64,
    /// The function that spawned it (the first frame of its cell's stack
    /// outside tokio, the allocator and the standard library), when known.
    /// One string a site, shared by its tasks (a day holds millions).
    pub spawned_from: Option<std::sync::Arc<str>>,
    /// Its cell's stack.
    pub stack: Option<leakscope_recording::StackId>,
    /// The task that spawned it (an index into [`Timeline::tasks`]).
    pub parent: Option<usize>,
    /// The session it belongs to (an index into [`Timeline::sessions`]).
    pub session: Option<usize>,
}

pub struct Timeline {
    pub header: Header,
    pub tail: Tail,
    pub end_reason: Option<EndReason>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub allocs: u64,
    /// Of them, recorded whole in a sampled recording (`Record::WholeAlloc`):
    /// none in a sampled in-process recording of a format before 12, whose
    /// sessions' map entries were sampled like anything else.
    pub whole_allocs: u64,
    pub frees: u64,
    pub lost: u64,
    pub lost_by_reason: Vec<(LostReason, u64)>,
    pub sessions: Vec<Session>,
    /// Every tokio task seen polling, in order of first poll.
    pub tasks: Vec<Task>,
    /// The tasks by the function that spawned them: leaks first.
    pub spawn_sites: Vec<SpawnSite>,
    pub categories: PerCategory<CategoryTotals>,
    pub samples: Vec<Sample>,
    pub session_births_s: Vec<f64>,
    pub worker_ends_s: Vec<f64>,
    /// Live blocks at the end grouped by stack: most session-retained bytes first.
    pub sites: Vec<Site>,
    /// What survives of the recording's allocations, by when in the target's
    /// activity it was allocated (a warm-up's rest, or growth).
    pub rest: Rest,
    /// Every stack's allocations and live blocks, for the pprof output.
    pub profile: HeapProfile,
    /// Time zero of the application's own trace (`tracing-chrome`), if the
    /// recording has one: `trace.json` then counts from it, so both line up.
    pub trace_origin_ns: Option<u64>,
    pub grace_ns: u64,
    /// Things the reader of a report should know (e.g. a torn recording).
    pub warnings: Vec<String>,
    /// Lifecycle signals the recording lacks, each with what it means for the verdict.
    pub missing_signals: Vec<String>,
    /// What the rest of the model comes to (the verdict stage's).
    pub verdict: Verdict,
}

impl Timeline {
    pub fn duration_s(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
}
