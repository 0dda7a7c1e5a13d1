//! `leakscope-probe attach`: record a running process until told to stop,
//! through one of two backends that write the same recording:
//!
//! * [`cooperative`]: the process records itself (its global allocator is
//!   `leakscope_inproc::Alloc` and it listens); it is asked to, over its
//!   control socket. No eBPF, no root.
//! * [`ebpf`]: uprobes on the allocator and the lifecycle functions, as root.
//!
//! Both take [`AttachOptions`], report [`AttachEvent`]s, end on the same
//! [`StopSignals`], `--duration` or the target's exit, and return an
//! [`AttachOutcome`] whose [`Stats`] the status line shows. This file holds
//! what they share and import; [`entry`] chooses between them.

mod cooperative;
mod ebpf;
mod entry;
mod live;
mod rotation;

use std::path::PathBuf;
use std::time::Duration;

use leakscope_recording::EndReason;
use leakscope_recording::output::{Existing, Owner};
use leakscope_recording::preset::Preset;
use leakscope_recording::sampling::Sampling;

pub use ebpf::LostCounters;
pub use entry::attach;
pub use live::{Candidate, LiveBytes, SiteNamer};
pub use rotation::Rotation;

pub struct AttachOptions {
    pub pid: u32,
    pub out: PathBuf,
    /// Whether an existing `out` may be replaced (never through a symbolic link).
    pub existing: Existing,
    /// Who the recording is handed to (the user who ran sudo), if not the runner.
    pub owner: Option<Owner>,
    pub duration: Option<Duration>,
    pub preset: Preset,
    pub ring_buffer_bytes: u32,
    /// Attach no-op programs at the same points (benchmarks: the uprobe floor).
    pub bare: bool,
    /// Have the kernel time every program run (BPF_ENABLE_STATS), and report
    /// each program's runs and mean time in the outcome: what the probe's own
    /// code costs the target per call.
    pub bpf_stats: bool,
    /// Use the eBPF probes even when the process could record itself.
    pub ebpf: bool,
    /// Every call, or a sample by bytes (`--sample`).
    pub sampling: Sampling,
    /// One file, or segments (`--rotate`, `--keep`).
    pub rotation: Option<Rotation>,
    /// How the programs walk stacks (`--unwind`).
    pub unwind: Unwind,
    /// Entries of the kernel's map of sampled blocks alive
    /// (`leakscope_probe_ebpf::SAMPLED_BLOCKS` unless a test makes it
    /// small, to see what happens when it is full).
    pub sampled_blocks: u32,
}

/// How the eBPF programs walk the target's stacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unwind {
    /// By frame pointer when the executable's code keeps them, else by
    /// tables from `.eh_frame` (also when its code is too little to tell).
    #[default]
    Auto,
    /// By frame pointer, whatever the build (cheaper; a build without them
    /// then has stacks of a frame or two).
    FramePointers,
    /// By tables from `.eh_frame`, whatever the build.
    Tables,
}

/// What [`attach`] reports while it runs; the caller decides what to show.
#[derive(Debug)]
pub enum AttachEvent<'a> {
    /// Something the user should know (e.g. no lifecycle function was found).
    Warning(String),
    /// Every probe is in place: events are being recorded from now on.
    Attached { pid: u32, probes: usize },
    /// The process records itself (its global allocator is
    /// `leakscope_inproc::Alloc`) and has started to: no probe was needed.
    InProcess { pid: u32 },
    /// Twice a second while recording: the running figures, the event rate,
    /// and the site most likely leaking so far, if one grows.
    Progress {
        stats: &'a Stats,
        events_per_s: f64,
        top: Option<&'a Candidate>,
    },
}

/// What the run produced.
#[derive(Debug)]
pub struct AttachOutcome {
    pub stats: Stats,
    pub end: EndReason,
    /// The file written last: the recording, or its last segment.
    pub written: PathBuf,
    /// Per program, when [`AttachOptions::bpf_stats`] asked for it; programs
    /// that never ran are left out.
    pub programs: Vec<ProgramStats>,
}

/// One eBPF program's runs while attached (with [`AttachOptions::bpf_stats`]).
#[derive(Debug, Clone)]
pub struct ProgramStats {
    pub program: &'static str,
    pub runs: u64,
    pub run_time: Duration,
    /// Instructions the kernel's verifier processed to load the program: how
    /// close it is to the 1 M limit past which a kernel refuses it.
    pub verified_insns: Option<u32>,
}

/// The signals that end a recording, installed before anything else so that
/// one that comes while attaching finishes the recording instead of killing
/// the probe.
pub(crate) struct StopSignals {
    pub(crate) interrupt: tokio::signal::unix::Signal,
    pub(crate) terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }
}

/// When a recording of `duration` ends: never, without one (a century on).
pub(crate) fn deadline(duration: Option<Duration>) -> tokio::time::Instant {
    tokio::time::Instant::now() + duration.unwrap_or(NEVER)
}

/// A deadline that never comes.
pub(crate) const NEVER: Duration = Duration::from_secs(100 * 365 * 86400);

/// Running figures for the live status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub events: u64,
    pub allocs: u64,
    pub frees: u64,
    /// Bytes of the blocks made while recording and not freed (in a sampled
    /// recording, the estimate).
    pub live_bytes: u64,
    /// The recording is sampled: `live_bytes` is an estimate.
    pub sampled: bool,
    pub sessions_born: u64,
    pub workers_ended: u64,
    pub lost: u64,
    /// Records the kernel sent that we could not decode (should stay 0).
    pub malformed: u64,
    /// Allocation entries or returns whose other half never came.
    pub unpaired: u64,
    /// Stacks cut short at a uretprobe trampoline whose call's entry (and so
    /// its real return address) was not seen: a dropped record, a call that
    /// began while the probes were being attached, or another tool's
    /// uretprobe on the target. Not counted for an executable built without
    /// frame pointers, whose walks past the first frame read stale stack.
    pub trampolines_unresolved: u64,
    /// Stacks walked by table (a target built without frame pointers) that
    /// stopped before the outermost frame, by why (`unwind::Cut`'s order):
    /// code with no table, no row, a rule not followed, a signal frame, a
    /// lost rbp, a failed read, a CFA below the stack pointer, a trampoline
    /// whose call's entry was not seen. `None`: walked by frame pointer.
    pub unwind_cuts: Option<[u64; leakscope_probe_ebpf::unwind::CUT_SLOTS]>,
    /// Blocks made while the status line's count was full (see
    /// `LiveBytes`): in the recording, not in [`live_bytes`](Self::live_bytes).
    pub untracked: u64,
    /// A sampled recording's kernel map of sampled blocks alive was full:
    /// from then on the kernel sends every free, for the probe to match
    /// (nothing is lost, but each free costs what it costs recording every
    /// call).
    pub sampled_map_full: bool,
}
