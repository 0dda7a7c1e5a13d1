//! What a recording says after its [`Header`](crate::Header): a stream of [`Record`]s.
//!
//! Addresses are virtual addresses in the target; timestamps are CLOCK_MONOTONIC
//! nanoseconds (what `bpf_ktime_get_ns` returns), mapped to wall time through
//! [`ClockOrigin`](crate::ClockOrigin). Stacks are written once as [`Record::Stack`] and referred to by id.

use serde::{Deserialize, Serialize};

/// Index of a [`Record::Stack`] in this recording.
pub type StackId = u32;

/// The lifecycle functions a [`Record::Scope`] can be about: rmcp's session
/// lifecycle (a preset's) and tokio's task polls (built in, `presets/tokio.toml`).
///
/// The discriminants are the eBPF uprobe cookies (with the probe's
/// `SCOPE_RETURNS` flag on top); keep them stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScopeKind {
    /// `create_local_session_with_event_store`: makes the session's handle and its channel.
    SessionCreate = 0,
    /// `WorkerTransport<W>::spawn`: makes the worker's channels and spawns its task.
    WorkerSpawn = 1,
    /// The worker's poll function; `arg` at entry points into its task.
    WorkerPoll = 2,
    /// `drop_in_place<LocalSessionWorker>`: the worker's end; `arg` points to the worker.
    WorkerDrop = 3,
    /// `LocalSessionManager::close_session`, where it has a symbol.
    SessionClose = 4,
    /// In-process mode: a `tracing` span carrying a session id is entered/exited.
    SessionSpan = 5,
    /// A tokio task's poll begins: `State::transition_to_running`, whose `arg`
    /// is the task's header, the first bytes of the block its cell was
    /// allocated in. Allocations on the thread until [`ScopeKind::TaskPollEnd`]
    /// are the task's.
    TaskPoll = 6,
    /// A tokio task's poll ended: `State::transition_to_idle` (it returned
    /// `Pending`) or `transition_to_complete` (it finished); `arg` is its header,
    /// or 0 in a sampled recording (format 13 on): it ends the innermost task
    /// poll open on its thread, as it always did for the analyzer, and its
    /// header repeated its entry's, 7 bytes of every poll kept.
    /// Both are entries, not returns: no uretprobe on tokio's poll path.
    TaskPollEnd = 7,
}

impl ScopeKind {
    pub const ALL: [ScopeKind; 8] = [
        ScopeKind::SessionCreate,
        ScopeKind::WorkerSpawn,
        ScopeKind::WorkerPoll,
        ScopeKind::WorkerDrop,
        ScopeKind::SessionClose,
        ScopeKind::SessionSpan,
        ScopeKind::TaskPoll,
        ScopeKind::TaskPollEnd,
    ];

    pub fn from_cookie(cookie: u32) -> Option<Self> {
        Self::ALL.get(cookie as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            ScopeKind::SessionCreate => "session-create",
            ScopeKind::WorkerSpawn => "worker-spawn",
            ScopeKind::WorkerPoll => "worker-poll",
            ScopeKind::WorkerDrop => "worker-drop",
            ScopeKind::SessionClose => "session-close",
            ScopeKind::SessionSpan => "session-span",
            ScopeKind::TaskPoll => "task-poll",
            ScopeKind::TaskPollEnd => "task-poll-end",
        }
    }

    /// A tokio task signal (built in), not a session one (a preset's).
    pub fn is_task(self) -> bool {
        matches!(self, ScopeKind::TaskPoll | ScopeKind::TaskPollEnd)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Enter,
    Exit,
}

/// Something learned about a session beyond its scopes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionFact {
    /// The session id string (`mcp-session-id`), tagged to the scope open on `tid`.
    Id(String),
    /// Why the worker quit, when the producer can tell (e.g. "idle-timeout").
    WorkerQuit(String),
    /// The session with this id was just created on `tid` (in-process: rmcp's
    /// "create new session" event, emitted inside the synchronous function that
    /// makes the session's handle and channels): the session's map-entry memory
    /// allocated on `tid` since the previous such fact is this session's.
    Created(String),
}

/// An executable region of the target, so stacks can be symbolized later or elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in `path` of the region's first byte.
    pub file_offset: u64,
    pub path: String,
    pub build_id: Option<String>,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// Why records were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LostReason {
    /// The kernel ring buffer was full.
    RingFull,
    /// An allocation call's state was lost while it ran (the probe's slot for
    /// a posix_memalign call was taken by another thread's), so its block is
    /// not known.
    PendingFull,
    /// A stack could not be captured (the record was kept, without frames).
    Stack,
    /// The in-process recorder's buffers were full.
    BufferFull,
    /// A record the kernel sent that could not be decoded (a probe and an
    /// eBPF object of different builds; should never happen).
    Malformed,
    /// A sampling point fell in a block the in-process recorder's table of
    /// sampled blocks alive could not take: the block was made unsampled, a
    /// sample lost (format 8). eBPF recordings of probes before the kernel's
    /// map fell back to sending every free wrote it for a block whose free
    /// was then not recorded.
    SampledFull,
}

/// Why the recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// `--duration` elapsed.
    Duration,
    /// The target process exited.
    TargetExited,
    /// The in-process recorder was dropped (program end).
    Finished,
    /// The target `exec`ed another program: the probes were on the old image,
    /// and its mappings no longer describe the process.
    TargetExeced,
    /// The recording goes on in the next segment (`attach --rotate`; format 9).
    Rotated,
}

impl EndReason {
    /// In words, for messages and reports.
    pub fn describe(self) -> &'static str {
        match self {
            EndReason::Interrupted => "stopped by signal",
            EndReason::Duration => "duration elapsed",
            EndReason::TargetExited => "target exited",
            EndReason::Finished => "finished",
            EndReason::TargetExeced => "target exec'd another program",
            EndReason::Rotated => "continued in the next segment",
        }
    }
}

/// One event of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Record {
    Alloc {
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<StackId>,
    },
    Free {
        ts: u64,
        tid: u32,
        addr: u64,
    },
    /// `old` was resized to `new` (`new` may equal `old`; `new == 0` means it failed).
    Realloc {
        ts: u64,
        tid: u32,
        old: u64,
        new: u64,
        size: u64,
        stack: Option<StackId>,
        /// When the realloc was entered. `old` was freed between then and `ts`, so
        /// a block another thread got at `old` after `entry_ts` is that thread's,
        /// not this realloc's. 0 when unknown (format 1).
        entry_ts: u64,
    },
    Scope {
        ts: u64,
        tid: u32,
        kind: ScopeKind,
        phase: Phase,
        /// First argument at entry; return value at exit (in-process: a session key).
        arg: u64,
    },
    Session {
        ts: u64,
        tid: u32,
        fact: SessionFact,
    },
    /// Frames are return addresses, innermost first.
    Stack {
        id: StackId,
        frames: Vec<u64>,
    },
    Mapping(Mapping),
    Lost {
        ts: u64,
        reason: LostReason,
        count: u64,
    },
    End {
        ts: u64,
        reason: EndReason,
    },
    /// The moment an application trace written beside this recording (the
    /// in-process mode's `tracing-chrome` layer) counts its time from: its
    /// timestamps are microseconds since `ts`, on this recording's clock.
    TraceOrigin {
        ts: u64,
    },
    /// In-process mode: a tokio task was spawned on `tid` (`stack`: where) or
    /// ended, as tokio's `runtime.spawn` span shows it (a build with
    /// `--cfg tokio_unstable` and tokio's `tracing` feature). `id` is the
    /// span's key; the task's polls are `task-poll` / `task-poll-end` scopes
    /// with the same `arg`. (The eBPF probe needs none: a task's cell block
    /// tells its birth and end.)
    Task {
        ts: u64,
        tid: u32,
        id: u64,
        event: TaskEvent,
        stack: Option<StackId>,
    },
    /// An allocation a sampled recording recorded whole, whatever its
    /// countdown said: it stands for itself alone (one block, its own bytes),
    /// and its free is recorded like a sampled block's. Both modes record
    /// every block aligned to [`WHOLE_ALIGN`] or more this way:
    /// tokio aligns its task cells and its channels to a cache-line pair, and
    /// those are what sessions and tasks are made of (a session's map entry
    /// is its handle's channel), so their counts and states stay exact while
    /// everything else is sampled. A recording of every call never holds one.
    WholeAlloc {
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<StackId>,
    },
    /// A [`Record::WholeAlloc`] made inside a poll of the session span
    /// `span` (its key, a `session-span` scope's `arg`) that the recording
    /// did not write: it reads as that poll's entry, the block, and the
    /// poll's end, all at `ts`.
    ///
    /// Why: a sampled recording writes a poll only when something is
    /// recorded inside it, and most of what is are blocks recorded whole (a
    /// request's task cells): each took the poll's two records around it, so
    /// the analyzer could tell whose session the block is. One record says
    /// the same: an in-process sampled recording of rmcp's service at
    /// saturation wrote ~2 scopes for each block recorded whole. Only the
    /// in-process recorder writes it (format 14), when the poll it was
    /// made in is the innermost one open on its thread and waits unwritten.
    WholeAllocInPoll {
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<StackId>,
        span: u64,
    },
}

/// The alignment from which a sampled recording records a block whole
/// ([`Record::WholeAlloc`]): tokio's `CachePadded` and task `Cell` are
/// `repr(align(128))` on x86_64 and aarch64. On rmcp's stock service, 14 of
/// a session's ~355 allocations (6 task cells, 8 channels: ~22% of its bytes).
pub const WHOLE_ALIGN: usize = 128;

/// The one list of which records carry a time: `ts` and `ts_mut` are this
/// match, borrowing immutably or mutably.
macro_rules! time_of {
    ($record:expr) => {
        match $record {
            Record::Alloc { ts, .. }
            | Record::WholeAlloc { ts, .. }
            | Record::WholeAllocInPoll { ts, .. }
            | Record::Free { ts, .. }
            | Record::Realloc { ts, .. }
            | Record::Scope { ts, .. }
            | Record::Session { ts, .. }
            | Record::Lost { ts, .. }
            | Record::End { ts, .. }
            | Record::TraceOrigin { ts }
            | Record::Task { ts, .. } => Some(ts),
            Record::Stack { .. } | Record::Mapping(_) => None,
        }
    };
}

impl Record {
    /// When it happened; `None` for what has no time (stacks, mappings).
    pub fn ts(&self) -> Option<u64> {
        time_of!(self).copied()
    }

    /// Its time, to change in place: the records [`ts`](Self::ts) gives one.
    pub fn ts_mut(&mut self) -> Option<&mut u64> {
        time_of!(self)
    }

    /// The stack it names, for a reader that renumbers stacks (segments read
    /// as one, a recording replayed).
    pub fn stack_mut(&mut self) -> Option<&mut Option<StackId>> {
        match self {
            Record::Alloc { stack, .. }
            | Record::WholeAlloc { stack, .. }
            | Record::WholeAllocInPoll { stack, .. }
            | Record::Realloc { stack, .. }
            | Record::Task { stack, .. } => Some(stack),
            _ => None,
        }
    }
}

/// What a [`Record::Task`] says of its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskEvent {
    Spawned,
    Ended,
}
