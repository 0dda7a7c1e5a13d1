//! leakscope's probe: attach to a running process with eBPF uprobes and record
//! which code allocates what, and when rmcp sessions begin and end.

/// The compiled eBPF object, built by `build.rs` from `probe-ebpf`.
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/leakscope-probe-ebpf"));
