//! leakscope's in-process mode: a `dhat`-backed global allocator that writes the
//! same recordings as the eBPF probe, for heap-profile test builds. No root, no
//! eBPF, stable Rust: add it as a dev-dependency (`cargo add --dev leakscope-inproc`,
//! plus `dhat` and `tracing-subscriber` if your test uses them directly).
//!
//! # Use
//! The three lines a heap-profile test adds (one test per file: dhat allows one
//! profiler per process):
//!
//! ```no_run
//! # use tracing_subscriber::layer::SubscriberExt;
//! #[global_allocator]
//! static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;
//!
//! # fn main() -> anyhow::Result<()> {
//! tracing::subscriber::set_global_default(
//!     tracing_subscriber::registry().with(leakscope_inproc::SessionLayer::default()),
//! )?;
//! let _guard = leakscope_inproc::start("target/leak.lsrec")?; // + dhat-heap.json at the end
//! // ... drive the server: create and abandon sessions, wait past keep-alive ...
//! # Ok(())
//! # }
//! ```
//! Then `leakscope report target/leak.lsrec --out report/`. With dhat's testing
//! mode (`dhat::Profiler::builder().testing().build()`) use [`Recorder::start`]
//! instead of [`start`], which records without starting a second profiler.
//!
//! # How it differs from the eBPF probe
//! It sees every Rust allocation through the global allocator (no C ones), and
//! learns sessions exactly from `tracing` spans instead of uprobes on rmcp's
//! functions; the preset's `[[span]]` entries name them ([`SessionLayer`]). The
//! recording has the same format, so the analyzer and its reports are the same.
//!
//! # How it stays correct inside the allocator
//! * **No allocation while recording.** Events go into a preallocated buffer behind
//!   one mutex, never grown. When it is full a thread waits for the writer to
//!   take it rather than drop an event (a dropped free reads as a block kept);
//!   only a writer stalled for 100 ms (its reader stopped reading) has threads
//!   drop events, counted (a `lost` record with reason `buffer-full`).
//! * **No re-entry.** A const-initialized thread-local flag marks "inside the
//!   recorder"; allocations made there (e.g. the first lookup of a thread's stack
//!   bounds) pass straight to the inner allocator without being recorded.
//! * **No deadlock.** The allocator only ever takes the buffer mutex and never
//!   allocates while holding it; the background writer swaps the full buffer for
//!   its empty spare under the lock and does all the work (stack dedup, encoding,
//!   file I/O) outside it.
//! * **Order.** A free is recorded *before* the block goes back, an allocation
//!   *after* it is made, so a reused address never appears live twice.
//! * Stacks are walked by frame pointer, within the thread's stack bounds. A
//!   program built without frame pointers (read from its code at start) has
//!   its stacks unwound instead, by the tables the probe's programs walk
//!   (`leakscope-unwind`), compiled at start from every loaded object's
//!   `.eh_frame`: about twice the frame-pointer walk's cost, a tenth of
//!   `_Unwind_Backtrace`'s (what dhat uses, and the fallback where no object
//!   has a table).
//! * **Not the application's.** What the recorder, its writer thread and the
//!   session layer allocate for themselves comes straight from `System`: it is
//!   neither recorded nor counted by dhat.
//! * **fork.** A child forked without `exec` stops recording at once (it has no
//!   writer thread, and the buffer's lock may be held by a thread it does not
//!   have); the recording is the parent's. Its allocations bypass dhat as well,
//!   whose spin lock another thread may have held at the fork.
//!
//! # The application's own trace (feature `chrome`)
//! `chrome_layer` adds a `tracing-chrome` layer on the recording's clock, so the
//! application's spans and the memory they hold open together in Perfetto
//! (`leakscope report --app-trace`); see the `chrome` module's docs.
//!
//! Sessions come from `tracing` spans ([`SessionLayer`]): the application's
//! `mcp_session` span (field `session_id`) around session creation, and rmcp's own
//! `streamable_http_session` span (field `id`) that instruments every poll of the
//! session worker, so the worker's allocations are charged to its session even
//! though rmcp spawns its task itself. The worker span's close is the worker's end.
//! The layer filters for itself (a per-layer filter): it reads no other span or
//! event, and takes none from the application's own layers.

mod alloc;
#[cfg(feature = "chrome")]
mod chrome;
mod control;
mod layer;
mod recorder;
mod sampled;
mod stack;

pub use alloc::Alloc;
#[cfg(feature = "chrome")]
pub use chrome::{ChromeLayer, FlushGuard, chrome_layer};
pub use control::listen;
pub use layer::SessionLayer;
pub use leakscope_recording::sampling::Sampling;
pub use recorder::{Guard, Recorder, is_recording, start, unwritten_events};

/// Walks stacks through the program's unwind tables from now on, as a
/// recorder does by itself in a program built without frame pointers: for
/// benchmarks (what unwinding costs a build that has them, on the same
/// stacks), and for a program whose code the recorder misjudges. The tables
/// are compiled now, from every object loaded.
pub fn walk_stacks_by_unwinding() {
    recorder::own::quietly(stack::unwind_instead);
}

/// Walks stacks with libgcc's `_Unwind_Backtrace` from now on, as dhat
/// does: for the benchmark that puts it beside the tables' walk.
#[doc(hidden)]
pub fn walk_stacks_with_libgcc() {
    stack::unwind_with_libgcc();
}
