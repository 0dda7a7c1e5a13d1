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

use std::path::PathBuf;

use anyhow::{Result, bail};
use iced_x86::{Decoder, DecoderOptions, FlowControl};
use leakscope_probe_ebpf::{program, scope_cookie};
use leakscope_recording::preset::Preset;
use leakscope_recording::target::Target;
use leakscope_recording::{AllocLayer, ScopeFunction, ScopeKind};

use crate::attach_offset::{entry_probe_offset, later_entry_offsets};
use crate::symbols::{ElfSymbols, Function};

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

/// (entry program, return program or "" for none, function name)
type AllocHook = (&'static str, &'static str, &'static str);

const LIBC_HOOKS: &[AllocHook] = &[
    (program::MALLOC_ENTER, program::MALLOC_EXIT, "malloc"),
    (program::CALLOC_ENTER, program::MALLOC_EXIT, "calloc"),
    (program::REALLOC_ENTER, program::REALLOC_EXIT, "realloc"),
    (
        program::POSIX_MEMALIGN_ENTER,
        program::POSIX_MEMALIGN_EXIT,
        "posix_memalign",
    ),
    (
        program::ALIGNED_ALLOC_ENTER,
        program::MALLOC_EXIT,
        "aligned_alloc",
    ),
    (
        program::ALIGNED_ALLOC_ENTER,
        program::MALLOC_EXIT,
        "memalign",
    ),
    (program::FREE_ENTER, "", "free"),
];

/// Without their `__rustc::` prefix: see [`RUST_SHIM_SPELLINGS`].
const RUST_HOOKS: &[AllocHook] = &[
    (
        program::RUST_ALLOC_ENTER,
        program::MALLOC_EXIT,
        "__rust_alloc",
    ),
    (
        program::RUST_ALLOC_ENTER,
        program::MALLOC_EXIT,
        "__rust_alloc_zeroed",
    ),
    (
        program::RUST_REALLOC_ENTER,
        program::REALLOC_EXIT,
        "__rust_realloc",
    ),
    (program::RUST_DEALLOC_ENTER, "", "__rust_dealloc"),
];

/// The C API of an allocator a `#[global_allocator]` is built on, linked
/// into the executable: tikv-jemallocator's jemalloc (`_rjem_` prefix),
/// mimalloc's. Probed there rather than at rustc's shims when the binary has
/// one: the shims are local functions of the binary, so its own code (and
/// generic code it instantiates, hyper's and http's included) gets them
/// inlined, calling `mi_free` or `_rjem_sdallocx` directly. A probe on the
/// shims missed those calls: a fixed axum server over mimalloc read as a leak
/// of `HeaderMap::try_reserve`, its frees never seen (1,007 direct references
/// to `mi_free`'s GOT slot in that binary).
struct AllocatorApi {
    /// Who it is, for the layer's reason.
    name: &'static str,
    /// A function only this allocator defines.
    marker: &'static str,
    hooks: &'static [AllocHook],
}

const ALLOCATOR_APIS: &[AllocatorApi] = &[
    AllocatorApi {
        name: "jemalloc (tikv-jemallocator)",
        marker: "_rjem_mallocx",
        hooks: &[
            (program::MALLOC_ENTER, program::MALLOC_EXIT, "_rjem_malloc"),
            (program::MALLOC_ENTER, program::MALLOC_EXIT, "_rjem_mallocx"),
            (program::CALLOC_ENTER, program::MALLOC_EXIT, "_rjem_calloc"),
            (
                program::REALLOC_ENTER,
                program::REALLOC_EXIT,
                "_rjem_realloc",
            ),
            (
                program::REALLOC_ENTER,
                program::REALLOC_EXIT,
                "_rjem_rallocx",
            ),
            (
                program::POSIX_MEMALIGN_ENTER,
                program::POSIX_MEMALIGN_EXIT,
                "_rjem_posix_memalign",
            ),
            (
                program::ALIGNED_ALLOC_ENTER,
                program::MALLOC_EXIT,
                "_rjem_aligned_alloc",
            ),
            (program::FREE_ENTER, "", "_rjem_free"),
            (program::FREE_ENTER, "", "_rjem_sdallocx"),
            (program::FREE_ENTER, "", "_rjem_dallocx"),
        ],
    },
    AllocatorApi {
        name: "mimalloc",
        marker: "mi_malloc_aligned",
        hooks: &[
            (program::MALLOC_ENTER, program::MALLOC_EXIT, "mi_malloc"),
            (program::MALLOC_ENTER, program::MALLOC_EXIT, "mi_zalloc"),
            (
                program::MALLOC_ENTER,
                program::MALLOC_EXIT,
                "mi_malloc_aligned",
            ),
            (
                program::MALLOC_ENTER,
                program::MALLOC_EXIT,
                "mi_zalloc_aligned",
            ),
            (program::CALLOC_ENTER, program::MALLOC_EXIT, "mi_calloc"),
            (program::REALLOC_ENTER, program::REALLOC_EXIT, "mi_realloc"),
            (
                program::REALLOC_ENTER,
                program::REALLOC_EXIT,
                "mi_realloc_aligned",
            ),
            (program::FREE_ENTER, "", "mi_free"),
        ],
    },
];

/// The allocator API the executable links, if it is one leakscope knows.
fn allocator_api(exe: &ElfSymbols) -> Option<&'static AllocatorApi> {
    ALLOCATOR_APIS
        .iter()
        .find(|api| exe.named(api.marker).is_some())
}

/// Prefixes rustc has given the allocator shims' names: `__rustc::__rust_alloc`
/// (recent, v0-mangled into the `__rustc` crate) and a bare `__rust_alloc`.
const RUST_SHIM_SPELLINGS: [&str; 2] = ["__rustc::", ""];

/// A Rust allocator shim or std's default behind it, under any spelling rustc
/// has used (`name` without prefix: `__rust_alloc`, `__rdl_alloc`).
fn rust_function<'a>(symbols: &'a ElfSymbols, name: &str) -> Option<&'a Function> {
    RUST_SHIM_SPELLINGS
        .iter()
        .find_map(|prefix| symbols.named(&format!("{prefix}{name}")))
}

/// Who serves a Rust binary's allocations, as its allocator shim shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RustAllocator {
    /// No `__rust_alloc`: not a Rust binary with std (or a stripped one).
    NoShims,
    /// std's default: `__rust_alloc` goes to `__rdl_alloc`, which calls libc's
    /// `malloc`, so probing libc sees every Rust allocation.
    System,
    /// A `#[global_allocator]` of the program's own (jemalloc, mimalloc, a
    /// wrapper around any allocator): its code is inlined into the shim, or
    /// reached through `__rg_alloc` (older rustc).
    Own,
}

/// Instructions of `__rust_alloc` read to find its branch to `__rdl_alloc`
/// (std's shim is one `jmp`; a debug build's sets up a frame first).
const SHIM_INSTRUCTIONS: usize = 16;

/// Reads the binary's allocator shim: std's default allocator makes
/// `__rust_alloc` a jump (or call) to `__rdl_alloc`; a `#[global_allocator]`
/// leaves `__rdl_alloc` unused, and usually out of the binary.
pub fn rust_allocator(exe: &ElfSymbols) -> RustAllocator {
    let Some(shim) = rust_function(exe, "__rust_alloc") else {
        return RustAllocator::NoShims;
    };
    if exe.has_function("*__rg_alloc") {
        return RustAllocator::Own;
    }
    let Some(default) = rust_function(exe, "__rdl_alloc") else {
        return RustAllocator::Own;
    };
    let code = exe.code(shim, 256);
    let mut decoder = Decoder::with_ip(64, code, shim.vaddr, DecoderOptions::NONE);
    for _ in 0..SHIM_INSTRUCTIONS {
        if !decoder.can_decode() {
            break;
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            break;
        }
        match instruction.flow_control() {
            FlowControl::UnconditionalBranch | FlowControl::Call
                if instruction.near_branch_target() == default.vaddr =>
            {
                return RustAllocator::System;
            }
            FlowControl::Return => break,
            _ => {}
        }
    }
    RustAllocator::Own
}

/// Libraries that are the platform's, never a malloc replacement.
const PLATFORM_LIBRARIES: [&str; 4] = ["libc.so", "libc-", "ld-linux", "ld-musl"];

/// A mapped library other than libc that defines `malloc` and `free`: it serves
/// the process's `malloc` (an `LD_PRELOAD`ed or linked jemalloc, mimalloc, tcmalloc).
fn malloc_replacement(target: &Target) -> Option<(String, ElfSymbols)> {
    let mut seen: Vec<&str> = Vec::new();
    for mapping in &target.mappings {
        let path = mapping.path.as_str();
        let name = path.rsplit('/').next().unwrap_or(path);
        if path == target.exe
            || seen.contains(&path)
            || PLATFORM_LIBRARIES.iter().any(|p| name.starts_with(p))
        {
            continue;
        }
        seen.push(path);
        let Ok(symbols) = ElfSymbols::of_target(target, path) else {
            continue;
        };
        if symbols.named("malloc").is_some() && symbols.named("free").is_some() {
            return Some((path.to_owned(), symbols));
        }
    }
    None
}

/// Where the process's `malloc` is: the executable's own, a replacement
/// library's, or libc's. `None` when nothing mapped defines one.
struct MallocLayer {
    /// Says where, for the layer's reason.
    reason: String,
    /// `None`: the executable's.
    symbols: Option<ElfSymbols>,
}

fn malloc_layer(target: &Target, exe: &ElfSymbols) -> Result<Option<MallocLayer>> {
    if exe.named("malloc").is_some() {
        return Ok(Some(MallocLayer {
            reason: "the executable defines malloc itself (statically linked allocator)".into(),
            symbols: None,
        }));
    }
    if let Some((library, symbols)) = malloc_replacement(target) {
        return Ok(Some(MallocLayer {
            reason: format!(
                "malloc is served by {library}, a malloc replacement (LD_PRELOAD or linked), not libc"
            ),
            symbols: Some(symbols),
        }));
    }
    let libc = target
        .mapped_library("libc.so")
        .or_else(|| target.mapped_library("libc-"));
    match libc {
        Some(libc) => Ok(Some(MallocLayer {
            reason: format!("malloc is {libc}'s"),
            symbols: Some(ElfSymbols::of_target(target, libc)?),
        })),
        None => Ok(None),
    }
}

/// The probes of one allocator layer's functions in one file.
fn allocator_probes(
    hooks: &[AllocHook],
    symbols: &ElfSymbols,
    rust: bool,
    probes: &mut Vec<Probe>,
    names: &mut Vec<String>,
) -> Result<()> {
    let mut seen_offsets = Vec::new();
    let mut has = (false, false);
    for &(enter, exit, name) in hooks {
        let function = if rust {
            rust_function(symbols, name)
        } else {
            symbols.named(name)
        };
        let Some(function) = function else {
            continue;
        };
        // memalign and aligned_alloc are one function in glibc: probe it once.
        if seen_offsets.contains(&function.file_offset) {
            continue;
        }
        seen_offsets.push(function.file_offset);
        let entry_offset = if exit.is_empty() {
            entry_probe_offset(symbols.code(function, 64), name == "free")
        } else {
            0
        };
        let mut entry = probe(enter, symbols, function, entry_offset, None);
        if exit.is_empty() {
            entry.fallback_offsets = later_offsets(symbols, function, entry_offset);
        }
        probes.push(entry);
        if !exit.is_empty() {
            probes.push(probe(exit, symbols, function, 0, None));
        }
        has.0 |= exit == program::MALLOC_EXIT;
        has.1 |= exit.is_empty();
        names.push(format!(
            "{} ({})",
            function.name,
            symbols.name.rsplit('/').next().unwrap_or(&symbols.name)
        ));
    }
    if !(has.0 && has.1) {
        bail!(
            "could not find the allocator's {} in {}",
            if rust {
                "__rust_alloc and __rust_dealloc"
            } else {
                "malloc and free"
            },
            symbols.name
        );
    }
    Ok(())
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

pub fn make_plan(target: &Target, exe: &ElfSymbols, preset: &Preset) -> Result<Plan> {
    let rust = rust_allocator(exe);
    let malloc = malloc_layer(target, exe)?;
    let mut probes = Vec::new();
    let mut allocator_functions = Vec::new();
    let probe_malloc = |malloc: &MallocLayer, probes: &mut Vec<Probe>, names: &mut Vec<String>| {
        allocator_probes(
            LIBC_HOOKS,
            malloc.symbols.as_ref().unwrap_or(exe),
            false,
            probes,
            names,
        )
    };
    let api = allocator_api(exe);
    let (layer, layer_reason) = match (rust, &malloc) {
        (RustAllocator::Own, Some(malloc)) if let Some(api) = api => {
            allocator_probes(api.hooks, exe, false, &mut probes, &mut allocator_functions)?;
            probe_malloc(malloc, &mut probes, &mut allocator_functions)?;
            (
                AllocLayer::AllocatorApiAndLibc,
                format!(
                    "the binary's #[global_allocator] is built on {}, linked into it: its C API is probed (rustc's shims are inlined into the binary's own code, so not every call goes through them); {} and its malloc family is probed for C allocations",
                    api.name, malloc.reason
                ),
            )
        }
        (RustAllocator::Own, Some(malloc)) => {
            allocator_probes(RUST_HOOKS, exe, true, &mut probes, &mut allocator_functions)?;
            probe_malloc(malloc, &mut probes, &mut allocator_functions)?;
            (
                AllocLayer::RustShimsAndLibc,
                format!(
                    "the binary has its own #[global_allocator] (its __rust_alloc does not go to std's System allocator), so the Rust allocator shims are probed; {} and its malloc family is probed for C allocations; an allocation the global allocator passes on to malloc counts once",
                    malloc.reason
                ),
            )
        }
        (RustAllocator::Own, None) => {
            allocator_probes(RUST_HOOKS, exe, true, &mut probes, &mut allocator_functions)?;
            (
                AllocLayer::RustShims,
                "the binary has its own #[global_allocator] and no malloc is mapped; the Rust allocator shims are probed".into(),
            )
        }
        (_, Some(malloc)) => {
            probe_malloc(malloc, &mut probes, &mut allocator_functions)?;
            let rust_note = if rust == RustAllocator::System {
                "; Rust allocations reach it through std's System allocator (no #[global_allocator] of the binary's own), so probing it counts each allocation once, C ones included"
            } else {
                ""
            };
            (
                AllocLayer::Libc,
                format!("{}: its malloc family is probed{rust_note}", malloc.reason),
            )
        }
        (RustAllocator::System, None) => {
            allocator_probes(RUST_HOOKS, exe, true, &mut probes, &mut allocator_functions)?;
            (
                AllocLayer::RustShims,
                "no malloc is mapped; the Rust allocator shims are probed".into(),
            )
        }
        (RustAllocator::NoShims, None) => bail!(
            "pid {}: found no allocator to probe: no libc or malloc replacement is mapped, the executable defines no malloc, and it has no Rust allocator shims (__rust_alloc under any spelling; a stripped static binary has none)",
            target.pid
        ),
    };
    let mut scopes = Vec::new();
    let mut scope_functions = Vec::new();
    let mut matches = scope_matches(exe, preset);
    let missing_scopes = missing_scopes(&matches);
    // tokio's task polls, in every target whatever its preset (a preset that
    // names them itself is not probed twice).
    if !preset.scopes.iter().any(|rule| rule.kind.is_task()) {
        matches.extend(scope_matches(exe, &Preset::tokio()));
    }
    for found in &matches {
        for function in &found.functions {
            let cookie = Some(scope_cookie(
                found.kind as u32,
                found.returns,
                u32::from(found.arg),
            ));
            let entry_offset = if found.returns {
                0
            } else {
                entry_probe_offset(exe.code(function, 64), false)
            };
            let mut entry = probe(program::SCOPE_ENTER, exe, function, entry_offset, cookie);
            if !found.returns {
                entry.fallback_offsets = later_offsets(exe, function, entry_offset);
            }
            probes.push(entry);
            if found.returns {
                probes.push(probe(program::SCOPE_EXIT, exe, function, 0, cookie));
            }
            scopes.push(format!("{}: {}", found.kind.name(), function.name));
            scope_functions.push(ScopeFunction {
                kind: found.kind,
                path: target.exe.clone(),
                file_offset: function.file_offset,
                size: function.size,
                returns: found.returns,
            });
        }
    }
    order_for_attach(&mut probes);
    Ok(Plan {
        layer,
        layer_reason,
        allocator_functions,
        probes,
        scopes,
        missing_scopes,
        scope_functions,
    })
}

/// The order probes are attached in (and detached in, the other way round),
/// so that a recording's edges make neither false leaks nor false losses.
/// Frees first: a block allocated under an allocation probe but freed before
/// `free` was probed would stay live forever (a false leak), while a free of a
/// block allocated before attach is simply unknown, which the analyzer
/// ignores. Returns next: a return whose entry was not seen is ignored, but an
/// entry whose return probe was not yet in place would count as an allocation
/// lost. Entries last. Detaching in reverse, the entries go first, so a call in
/// progress still returns through its probe, and frees last.
fn order_for_attach(probes: &mut [Probe]) {
    probes.sort_by_key(|p| {
        if p.program == program::FREE_ENTER || p.program == program::RUST_DEALLOC_ENTER {
            0
        } else if p.program.ends_with(program::EXIT_SUFFIX) {
            1
        } else {
            2
        }
    });
}

/// The functions of the executable that one scope rule of a preset matches.
#[derive(Debug)]
pub struct ScopeMatch<'a> {
    pub kind: ScopeKind,
    pub returns: bool,
    /// Which argument the entry sends.
    pub arg: u8,
    /// One per address, whichever of the rule's patterns matched it.
    pub functions: Vec<&'a Function>,
}

/// What each scope rule of `preset` matches in `exe` (what `attach` would probe).
pub fn scope_matches<'a>(exe: &'a ElfSymbols, preset: &Preset) -> Vec<ScopeMatch<'a>> {
    preset
        .scopes
        .iter()
        .map(|rule| {
            let mut functions: Vec<&Function> = rule
                .patterns
                .iter()
                .flat_map(|pattern| exe.matching(pattern))
                .collect();
            functions.sort_by_key(|f| f.vaddr);
            functions.dedup_by_key(|f| f.vaddr);
            ScopeMatch {
                kind: rule.kind,
                returns: rule.returns,
                arg: rule.arg,
                functions,
            }
        })
        .collect()
}

/// Scope kinds the preset names that matched nothing (a kind named by several
/// rules is missing only when none of them matched).
pub fn missing_scopes(matches: &[ScopeMatch<'_>]) -> Vec<ScopeKind> {
    let mut missing: Vec<ScopeKind> = Vec::new();
    for found in matches {
        let matched = matches
            .iter()
            .any(|m| m.kind == found.kind && !m.functions.is_empty());
        if !matched && !missing.contains(&found.kind) {
            missing.push(found.kind);
        }
    }
    missing
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_cookie_carries_its_kind_and_whether_it_returns() {
        for kind in ScopeKind::ALL {
            for returns in [false, true] {
                for arg in [0, 1, 5] {
                    let cookie = scope_cookie(kind as u32, returns, arg) as u32;
                    let (index, back) = leakscope_probe_ebpf::split_scope(cookie);
                    assert_eq!(ScopeKind::from_cookie(index), Some(kind));
                    assert_eq!(back, returns);
                    assert_eq!(leakscope_probe_ebpf::scope_arg(cookie), arg);
                }
            }
        }
    }

    #[test]
    fn frees_then_returns_then_entries_are_attached() {
        let at = |program| Probe {
            program,
            path: PathBuf::from("/lib/libc.so.6"),
            file_name: "/lib/libc.so.6".into(),
            file: None,
            file_offset: 0,
            cookie: None,
            function: String::new(),
            fallback_offsets: Vec::new(),
        };
        let mut probes = vec![
            at(program::MALLOC_ENTER),
            at(program::SCOPE_EXIT),
            at(program::MALLOC_EXIT),
            at(program::FREE_ENTER),
            at(program::REALLOC_ENTER),
            at(program::SCOPE_ENTER),
        ];
        order_for_attach(&mut probes);
        let order: Vec<&str> = probes.iter().map(|p| p.program).collect();
        assert_eq!(
            order,
            [
                program::FREE_ENTER,
                program::SCOPE_EXIT,
                program::MALLOC_EXIT,
                program::MALLOC_ENTER,
                program::REALLOC_ENTER,
                program::SCOPE_ENTER
            ],
            "each kind keeps its order"
        );
    }
}
