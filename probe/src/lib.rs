//! leakscope's probe: attach to a running process with eBPF uprobes and record
//! which code allocates what, and when rmcp sessions begin and end.
//!
//! Pipeline of `leakscope-probe attach`:
//! `leakscope_recording::target` (the process, its mappings) -> [`symbols`] +
//! `leakscope_recording::preset` (which functions) -> [`plan`] (which program
//! where, [`attach_offset`] picks cheap offsets) -> [`loader`] (aya) -> [`capture`]
//! (ring buffer -> `leakscope_recording::RecordingWriter`), driven by [`attach`]
//! (which asks a process that records itself to, instead, when it can);
//! [`trampoline`] tells the programs where the kernel's uretprobe trampoline is.
//!
//! The recording format lives in `leakscope-recording` and the in-process mode in
//! `leakscope-inproc`; this crate is the only one that needs the eBPF toolchain
//! (its `build.rs` builds `probe-ebpf` with nightly and bpf-linker).

pub mod attach;
pub mod attach_offset;
pub mod capture;
pub mod loader;
pub mod plan;
pub mod symbols;
pub mod trampoline;
pub mod unwind;

/// The compiled eBPF object, built by `build.rs` from `probe-ebpf`.
#[cfg(feature = "ebpf")]
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/leakscope-probe-ebpf"));

/// Built without the `ebpf` feature: no object, so an attach that needs the
/// eBPF probe says so ([`loader::load`]); a cooperative attach works.
#[cfg(not(feature = "ebpf"))]
pub static EBPF_OBJECT: &[u8] = &[];

#[cfg(all(test, feature = "ebpf"))]
mod tests {
    use leakscope_probe_ebpf::program;
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

    /// The plan names programs through `leakscope_probe_ebpf::program`; the built
    /// object must have exactly those programs, so a renamed function in
    /// `probe-ebpf/src/main.rs` fails here, not at attach time.
    #[test]
    fn the_object_has_exactly_the_named_programs() {
        let file = object::File::parse(super::EBPF_OBJECT).expect("the eBPF object is ELF");
        // Programs are the global functions in aya's `uprobe`/`uretprobe` sections
        // (the object also has helpers such as memcpy).
        let mut found: Vec<String> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_global())
            .filter(|s| {
                s.section_index()
                    .and_then(|i| file.section_by_index(i).ok())
                    .and_then(|section| section.name().ok().map(str::to_owned))
                    .is_some_and(|name| name.starts_with("uprobe") || name.starts_with("uretprobe"))
            })
            .filter_map(|s| s.name().ok().map(str::to_owned))
            .collect();
        found.sort();
        let mut named: Vec<String> = program::ALL.iter().map(|s| s.to_string()).collect();
        named.sort();
        assert_eq!(found, named);
    }
}
