//! Whole stacks from builds without frame pointers (issue 30).
//!
//! Most Rust servers ship a plain `cargo build --release`: no frame pointers,
//! so the probe's frame-pointer walk stops after a frame. Every Rust binary
//! carries `.eh_frame` for panics, though, and the profilers that unwind such
//! builds in the kernel (the OpenTelemetry eBPF profiler, Parca's agent
//! before it) compile it into compact tables a BPF program can search. This
//! module is that compiler ([`table`]) and the layout of a process's tables
//! for the walk ([`process`]); the walk's step is shared with the programs
//! (`leakscope_probe_ebpf::unwind::step`) and tested here on this process's
//! own stack. The programs' walk, the maps and the loader's part are not
//! built yet (`docs/plans/issue-30-eh-frame.md`).

pub mod process;
pub mod table;

pub use process::ProcessTables;
pub use table::{Table, TableError};
