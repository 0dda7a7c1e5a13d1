//! What a recording says first: who wrote it, about which process, and how
//! (its [`Header`]), and the clock its timestamps use.

use serde::{Deserialize, Serialize};

use crate::event::ScopeKind;
use crate::frame_pointers::{FramePointers, StackWalk};
use crate::sampling::Sampling;

/// Who wrote the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Producer {
    Ebpf,
    InProcess,
}

impl Producer {
    /// The name `summary.json` and reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            Producer::Ebpf => "ebpf",
            Producer::InProcess => "in-process",
        }
    }
}

/// A pair of simultaneous readings of the monotonic and the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOrigin {
    pub monotonic_ns: u64,
    pub unix_ns: u64,
}

impl ClockOrigin {
    pub fn now() -> Self {
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self {
            monotonic_ns: monotonic_ns(),
            unix_ns,
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock of every record's `ts`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Which layer of the allocator stack was probed. Each allocation is recorded
/// once, at the outermost layer it went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocLayer {
    /// libc `malloc`/`calloc`/`realloc`/`free`/`posix_memalign`/`aligned_alloc`.
    Libc,
    /// Rust's `__rust_alloc`/`__rust_dealloc`/`__rust_realloc`/`__rust_alloc_zeroed`.
    RustShims,
    /// A global allocator wrapper inside the process (in-process mode).
    GlobalAllocator,
    /// The Rust shims (the binary has its own `#[global_allocator]`, whose
    /// allocations never reach libc) and libc's malloc family (the C code's
    /// allocations); an allocation the global allocator passes on to malloc
    /// (a wrapper around `System`) is recorded once, at the shim.
    RustShimsAndLibc,
    /// The C API of the allocator a `#[global_allocator]` is built on (jemalloc,
    /// mimalloc), linked into the binary, and libc's malloc family.
    AllocatorApiAndLibc,
}

impl AllocLayer {
    /// The name the recording's JSON and reports use (`rust-shims-and-libc`).
    pub fn name(self) -> &'static str {
        match self {
            AllocLayer::Libc => "libc",
            AllocLayer::RustShims => "rust-shims",
            AllocLayer::GlobalAllocator => "global-allocator",
            AllocLayer::RustShimsAndLibc => "rust-shims-and-libc",
            AllocLayer::AllocatorApiAndLibc => "allocator-api-and-libc",
        }
    }
}

/// How the producer was configured; copied into reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub alloc_layer: AllocLayer,
    /// Why this layer: e.g. "glibc malloc is used; no custom #[global_allocator]".
    pub alloc_layer_reason: String,
    /// Frames kept per allocation stack.
    pub stack_depth: u32,
    /// The preset that named the lifecycle functions (e.g. "rmcp-3.11").
    pub preset: Option<String>,
    /// Lifecycle functions found and probed, as "kind: demangled name" lines.
    pub scope_probes: Vec<String>,
    /// Lifecycle scopes the preset names that matched nothing in the target: the
    /// signals a report must say it did not have.
    pub missing_scopes: Vec<ScopeKind>,
    /// Every probed lifecycle function, with where its code is: an analysis can
    /// tell from an allocation's stack whether it was made inside one (what a
    /// scope without a return probe needs).
    pub scope_functions: Vec<ScopeFunction>,
    /// Anything else worth knowing, as "key: value" lines.
    pub notes: Vec<String>,
}

/// The first frame of every recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub producer: Producer,
    /// `leakscope-probe 0.1.0`, for reports.
    pub producer_version: String,
    pub pid: u32,
    pub exe: String,
    /// GNU build-id of the executable, hex.
    pub build_id: Option<String>,
    pub clock: ClockOrigin,
    /// The `rmcp` release the target was built with, read from the source paths
    /// cargo leaves in the binary; `None` when it does not say (or uses no rmcp).
    pub rmcp_version: Option<String>,
    pub settings: Settings,
    /// Whether the executable's code keeps frame pointers, which every stack
    /// walk here needs (read from its code by the producer; format 5).
    pub frame_pointers: FramePointers,
    /// Which allocations were recorded: every one, or a sample by bytes
    /// whose figures are estimates (format 8).
    pub sampling: Sampling,
    /// A recording that stays on is written in segments (`attach --rotate`):
    /// which one this is. `None`: a recording of one file (format 9).
    pub segment: Option<Segment>,
    /// How the stacks were walked (format 11).
    pub stack_walk: StackWalk,
}

/// One file of a recording written in segments: each is a whole recording
/// (header, mappings, its own stacks) of the time it covers, and consecutive
/// segments read as one (`crate::segments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// 1 for the first segment of the run, then one more each rotation.
    pub index: u32,
    /// When the run's first segment began (`monotonic_ns`): the segments of
    /// one run share it.
    pub run_start_ns: u64,
}

/// The process a recording is of, as plain values (a producer reads them:
/// [`crate::target::Target::identity`] from `/proc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub pid: u32,
    pub exe: String,
    pub build_id: Option<String>,
    pub rmcp_version: Option<String>,
}

impl Header {
    /// The header of a recording of `target` that starts now. `producer_version`
    /// names the producing tool for reports (e.g. `leakscope-probe 0.1.0`).
    pub fn new(
        producer: Producer,
        producer_version: String,
        target: Identity,
        settings: Settings,
    ) -> Self {
        Self {
            producer,
            producer_version,
            pid: target.pid,
            exe: target.exe,
            build_id: target.build_id,
            clock: ClockOrigin::now(),
            rmcp_version: target.rmcp_version,
            settings,
            frame_pointers: FramePointers::Unknown,
            sampling: Sampling::Every,
            segment: None,
            stack_walk: StackWalk::FramePointers,
        }
    }
}

/// A probed lifecycle function and where its code is in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeFunction {
    pub kind: ScopeKind,
    /// The file as the target maps it (a [`Mapping::path`](crate::Mapping::path)).
    pub path: String,
    /// Where its first byte is in `path`, and how many bytes it has.
    pub file_offset: u64,
    pub size: u64,
    /// Its return was probed too (scope exits are recorded).
    pub returns: bool,
}
