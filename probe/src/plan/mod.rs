//! The attach plan: which eBPF program goes on which function, at which offset.
//!
//! Allocations are probed where the process makes them, chosen here and written
//! into the recording header with the reason:
//! * **libc** (default): the target calls a libc `malloc` (Rust's default `System`
//!   allocator does, through `__rdl_alloc`, and so does C code). Rust's allocation
//!   passes through `__rust_alloc` *and* `malloc`; probing libc alone counts it once
//!   and also sees C allocations.
//! * **An allocator's C API and libc**: the `#[global_allocator]` is built on
//!   jemalloc or mimalloc, linked into the binary ([`ALLOCATOR_APIS`]): their
//!   C functions are probed, which every Rust allocation reaches, inlined
//!   shims or not; libc's malloc family too, for the C code.
//! * **Rust shims and libc**: the binary has its own `#[global_allocator]`
//!   (jemalloc, mimalloc, a wrapper): its `__rust_alloc` does not go to std's
//!   `__rdl_alloc` ([`rust_allocator`] reads the shim's code; rustc 1.95's
//!   release builds emit no `__rg_alloc` to look for). Rust allocations never
//!   reach libc then, so the shims (`__rustc::__rust_alloc` and friends, local
//!   symbols) are probed, and libc's malloc family too for the C code. A
//!   wrapper around `System` calls libc from inside a shim: the capture keeps
//!   a thread's outermost call only, so each allocation counts once.
//! * **A malloc replacement**: a library other than libc that defines `malloc`
//!   (jemalloc, mimalloc, tcmalloc; `LD_PRELOAD`ed or linked) serves `malloc`
//!   instead of libc, so its malloc family is the one probed.

mod allocator;
mod scopes;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use anyhow::Result;
use leakscope_probe_ebpf::program;
use leakscope_recording::preset::Preset;
use leakscope_recording::target::Target;
use leakscope_recording::{AllocLayer, ScopeFunction, ScopeKind};

use crate::attach_offset::later_entry_offsets;
use crate::symbols::{ElfSymbols, Function};

pub use allocator::{RustAllocator, allocator_apis, rust_allocator};
pub use scopes::{ScopeMatch, missing_scopes, scope_matches};

/// One uprobe or uretprobe to attach.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Name of the eBPF program (one of `leakscope_probe_ebpf::program`).
    pub program: &'static str,
    /// The file to attach to: a path that names exactly the file planned on
    /// (`/proc/PID/map_files/...`, or `/proc/self/fd/N` while `file` is open).
    pub path: PathBuf,
    /// The file as the target names it, for messages.
    pub file_name: String,
    /// Keeps the file open while the probe may be attached, so `path` keeps
    /// naming it.
    pub file: Option<std::sync::Arc<leakscope_recording::target::TargetFile>>,
    /// File offset of the probed instruction.
    pub file_offset: u64,
    /// For scope probes: the uprobe cookie ([`scope_cookie`]: the
    /// [`ScopeKind`], and whether the function has a return probe).
    pub cookie: Option<u64>,
    /// Demangled function name, for messages.
    pub function: String,
    /// Where else the probe may go, in order, if the kernel cannot probe the
    /// instruction at `file_offset`: later places that still see the
    /// arguments (entry-only probes; see [`later_entry_offsets`]).
    pub fallback_offsets: Vec<u64>,
}

pub struct Plan {
    pub layer: AllocLayer,
    pub layer_reason: String,
    /// The allocator functions probed, as "function (file)", for messages
    /// (what to name when nothing goes through them).
    pub allocator_functions: Vec<String>,
    pub probes: Vec<Probe>,
    /// "kind: function" for each probed lifecycle function.
    pub scopes: Vec<String>,
    /// Scope kinds the preset names that matched no function of the target.
    pub missing_scopes: Vec<ScopeKind>,
    /// Every probed lifecycle function and where its code is.
    pub scope_functions: Vec<ScopeFunction>,
}

/// Replaces every program with a no-op at the same place and drops scope probes:
/// what a uprobe costs before our code runs (the benchmark's floor).
pub fn bare(mut plan: Plan) -> Plan {
    plan.probes.retain(|p| p.cookie.is_none());
    for probe in &mut plan.probes {
        probe.program = if probe.program.ends_with(program::EXIT_SUFFIX) {
            program::NOOP_EXIT
        } else {
            program::NOOP_ENTER
        };
    }
    plan.scopes.clear();
    plan.missing_scopes.clear();
    plan.scope_functions.clear();
    plan
}

/// Which programs go where in `target`: the allocator layer's and the
/// lifecycle functions `preset` names, in the order they are attached.
pub fn make_plan(target: &Target, exe: &ElfSymbols, preset: &Preset) -> Result<Plan> {
    let mut probes = Vec::new();
    let mut allocator_functions = Vec::new();
    let (layer, layer_reason) =
        allocator::layer_probes(target, exe, &mut probes, &mut allocator_functions)?;
    let scopes = scopes::scope_probes(target, exe, preset, &mut probes);
    order_for_attach(&mut probes);
    Ok(Plan {
        layer,
        layer_reason,
        allocator_functions,
        probes,
        scopes: scopes.names,
        missing_scopes: scopes.missing,
        scope_functions: scopes.functions,
    })
}

/// The order probes are attached in (and detached in, the other way round),
/// so that a recording's edges make neither false leaks, nor false losses,
/// nor cut stacks. Frees first: a block allocated under an allocation probe
/// but freed before `free` was probed would stay live forever (a false leak),
/// while a free of a block allocated before attach is simply unknown, which
/// the analyzer ignores. Returns next: a return whose entry was not seen is
/// ignored, but an entry whose return probe was not yet in place would count
/// as an allocation lost. Then the lifecycle entries, and the allocators'
/// entries last: a lifecycle call entered while only its return probe is in
/// place runs with the kernel's trampoline for its return address and no
/// entry to say what it hides, so an allocation inside it, if already
/// probed, has a stack cut there (left: a call entered between its own two
/// attaches and still running when the allocators' entries attach).
/// Detaching in reverse, the allocators' entries go first (no new stack is
/// walked), then the lifecycle entries, so a call in progress still returns
/// through its probe, and frees last.
/// Detaching takes a grace period per probe (seconds for all of them), and
/// a server still working meanwhile once had a stack cut at its stop
/// (`fixtures/tests/unwind_tables.rs`).
fn order_for_attach(probes: &mut [Probe]) {
    probes.sort_by_key(|p| {
        if p.program == program::FREE_ENTER || p.program == program::RUST_DEALLOC_ENTER {
            0
        } else if p.program.ends_with(program::EXIT_SUFFIX) {
            1
        } else if p.program == program::SCOPE_ENTER {
            2
        } else {
            3
        }
    });
}

/// [`later_entry_offsets`] of `function`, as file offsets.
fn later_offsets(symbols: &ElfSymbols, function: &Function, from: u64) -> Vec<u64> {
    later_entry_offsets(symbols.code(function, 64), from)
        .into_iter()
        .map(|offset| function.file_offset + offset)
        .collect()
}

fn probe(
    program: &'static str,
    symbols: &ElfSymbols,
    function: &Function,
    offset: u64,
    cookie: Option<u64>,
) -> Probe {
    Probe {
        program,
        path: symbols.path.clone(),
        file_name: symbols.name.clone(),
        file: symbols.file.clone(),
        file_offset: function.file_offset + offset,
        cookie,
        function: function.name.clone(),
        fallback_offsets: Vec::new(),
    }
}
