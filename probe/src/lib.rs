//! leakscope's probe: attach to a running process with eBPF uprobes and record
//! which code allocates what, and when rmcp sessions begin and end.
//!
//! Pipeline of `leakscope-probe attach`:
//! [`target`] (the process, its mappings) -> [`symbols`] + [`preset`] (which
//! functions) -> [`plan`] (which program where, [`attach_offset`] picks cheap
//! offsets) -> [`loader`] (aya) -> [`capture`] (ring buffer -> [`recording`]),
//! driven by [`attach`]. With the `inproc` feature, [`inproc`] writes the same
//! recordings from inside a program (a dhat-backed global allocator).

pub mod attach;
pub mod attach_offset;
pub mod capture;
#[cfg(feature = "inproc")]
pub mod inproc;
pub mod loader;
pub mod plan;
pub mod preset;
pub mod recording;
pub mod symbols;
pub mod target;

/// The compiled eBPF object, built by `build.rs` from `probe-ebpf`.
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/leakscope-probe-ebpf"));
