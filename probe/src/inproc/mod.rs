//! In-process mode: a `dhat`-backed global allocator that writes the same
//! recordings as the eBPF probe, for heap-profile test builds. No root, no eBPF.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: leakscope_probe::inproc::Alloc = leakscope_probe::inproc::Alloc;
//! let _guard = leakscope_probe::inproc::start("leak.lsrec")?; // + dhat-heap.json at the end
//! tracing_subscriber::registry().with(leakscope_probe::inproc::SessionLayer::default()).init();
//! ```
//!
//! How it stays correct inside the allocator:
//! * **No allocation while recording.** Events go into a preallocated buffer behind
//!   one mutex; when it is full, events are dropped and counted (a `lost` record
//!   with reason `buffer-full`), never grown.
//! * **No re-entry.** A const-initialized thread-local flag marks "inside the
//!   recorder"; allocations made there (e.g. the first lookup of a thread's stack
//!   bounds) pass straight to the inner allocator without being recorded.
//! * **No deadlock.** The allocator only ever takes the buffer mutex and never
//!   allocates while holding it; the background writer swaps the full buffer for
//!   its empty spare under the lock and does all the work (stack dedup, encoding,
//!   file I/O) outside it.
//! * **Order.** A free is recorded *before* the block goes back, an allocation
//!   *after* it is made, so a reused address never appears live twice.
//! * Stacks are walked by frame pointer (the workspace builds with them), within
//!   the thread's stack bounds.
//!
//! Sessions come from `tracing` spans ([`SessionLayer`]): the fixture's
//! `mcp_session` span (field `session_id`) around session creation, and rmcp's own
//! `streamable_http_session` span (field `id`) that instruments every poll of the
//! session worker, so the worker's allocations are charged to its session even
//! though rmcp spawns its task itself. The worker span's close is the worker's end.

mod alloc;
mod layer;
mod recorder;
mod stack;

pub use alloc::Alloc;
pub use layer::SessionLayer;
pub use recorder::{Guard, Recorder, start};
