//! The attach plan: which eBPF program goes on which function, at which offset.
//!
//! Allocations are probed on exactly one layer, chosen here and written into the
//! recording header with the reason:
//! * **libc** (default): the target calls a libc `malloc` (Rust's default `System`
//!   allocator does, through `__rdl_alloc`, and so does C code). Rust's allocation
//!   passes through `__rust_alloc` *and* `malloc`; probing libc alone counts it once
//!   and also sees C allocations.
//! * **Rust shims**: the binary has its own `#[global_allocator]` (`__rg_alloc`), so
//!   libc would miss most allocations; we probe `__rust_alloc` and friends instead,
//!   under either spelling rustc has used (`__rustc::__rust_alloc`, `__rust_alloc`).
//! * **A malloc replacement**: a library other than libc that defines `malloc`
//!   (jemalloc, mimalloc, tcmalloc; `LD_PRELOAD`ed or linked) serves `malloc`
//!   instead of libc, so its malloc family is the one probed.

use std::path::PathBuf;

use anyhow::{Result, bail};
use leakscope_probe_ebpf::{program, scope_cookie};
use leakscope_recording::preset::Preset;
use leakscope_recording::target::Target;
use leakscope_recording::{AllocLayer, ScopeFunction, ScopeKind};

use crate::attach_offset::entry_probe_offset;
use crate::symbols::{ElfSymbols, Function};

/// One uprobe or uretprobe to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Name of the eBPF program (one of `leakscope_probe_ebpf::program`).
    pub program: &'static str,
    /// The file to attach to (openable from here).
    pub path: PathBuf,
    /// File offset of the probed instruction.
    pub file_offset: u64,
    /// For scope probes: the uprobe cookie ([`scope_cookie`]: the
    /// [`ScopeKind`], and whether the function has a return probe).
    pub cookie: Option<u64>,
    /// Demangled function name, for messages.
    pub function: String,
}

pub struct Plan {
    pub layer: AllocLayer,
    pub layer_reason: String,
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
    (program::MALLOC_ENTER, program::MALLOC_EXIT, "__rust_alloc"),
    (
        program::MALLOC_ENTER,
        program::MALLOC_EXIT,
        "__rust_alloc_zeroed",
    ),
    (
        program::RUST_REALLOC_ENTER,
        program::REALLOC_EXIT,
        "__rust_realloc",
    ),
    (program::FREE_ENTER, "", "__rust_dealloc"),
];

/// Prefixes rustc has given the allocator shims' names: `__rustc::__rust_alloc`
/// (recent, v0-mangled into the `__rustc` crate) and a bare `__rust_alloc`.
const RUST_SHIM_SPELLINGS: [&str; 2] = ["__rustc::", ""];

/// The allocator function `name` in `symbols`, under any spelling it may have.
fn allocator_function<'a>(
    symbols: &'a ElfSymbols,
    name: &str,
    layer: AllocLayer,
) -> Option<&'a Function> {
    if layer == AllocLayer::RustShims {
        RUST_SHIM_SPELLINGS
            .iter()
            .find_map(|prefix| symbols.named(&format!("{prefix}{name}")))
    } else {
        symbols.named(name)
    }
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
        let Ok(symbols) = ElfSymbols::load(&target.host_path(path)) else {
            continue;
        };
        if symbols.named("malloc").is_some() && symbols.named("free").is_some() {
            return Some((path.to_owned(), symbols));
        }
    }
    None
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
    let exe_path = target.host_path(&target.exe);
    let custom_allocator = exe.has_function("*__rg_alloc");
    let has_rust_shims = allocator_function(exe, "__rust_alloc", AllocLayer::RustShims).is_some();
    let exe_defines_malloc = exe.named("malloc").is_some();
    let libc = target
        .mapped_library("libc.so")
        .or_else(|| target.mapped_library("libc-"));

    let (layer, reason, hooks, file): (AllocLayer, String, &[AllocHook], Option<ElfSymbols>) =
        if custom_allocator && has_rust_shims {
            (
                AllocLayer::RustShims,
                "the binary has its own #[global_allocator] (__rg_alloc), so the Rust allocator shims are probed; C allocations are not seen".into(),
                RUST_HOOKS,
                None,
            )
        } else if exe_defines_malloc {
            (
                AllocLayer::Libc,
                "the executable defines malloc itself (statically linked allocator); its malloc family is probed".into(),
                LIBC_HOOKS,
                None,
            )
        } else if let Some((library, symbols)) = malloc_replacement(target) {
            (
                AllocLayer::Libc,
                format!(
                    "malloc is served by {library}, a malloc replacement (LD_PRELOAD or linked), not libc: its malloc family is probed"
                ),
                LIBC_HOOKS,
                Some(symbols),
            )
        } else if let Some(libc) = libc {
            let symbols = ElfSymbols::load(&target.host_path(libc))?;
            (
                AllocLayer::Libc,
                format!(
                    "allocations reach {libc}'s malloc family (no custom #[global_allocator]); probing it counts each allocation once, C ones included"
                ),
                LIBC_HOOKS,
                Some(symbols),
            )
        } else if has_rust_shims {
            (
                AllocLayer::RustShims,
                "no libc is mapped; the Rust allocator shims are probed".into(),
                RUST_HOOKS,
                None,
            )
        } else {
            bail!(
                "pid {}: found no allocator to probe: no libc or malloc replacement is mapped, the executable defines no malloc, and it has no Rust allocator shims (__rust_alloc under any spelling; a stripped static binary has none)",
                target.pid
            );
        };

    let (alloc_symbols, alloc_path) = match &file {
        Some(symbols) => (symbols, symbols.path.clone()),
        None => (exe, exe_path.clone()),
    };
    let mut probes = Vec::new();
    let mut seen_offsets = Vec::new();
    for &(enter, exit, name) in hooks {
        let Some(function) = allocator_function(alloc_symbols, name, layer) else {
            continue;
        };
        // memalign and aligned_alloc are one function in glibc: probe it once.
        if seen_offsets.contains(&function.file_offset) {
            continue;
        }
        seen_offsets.push(function.file_offset);
        let entry_offset = if exit.is_empty() {
            entry_probe_offset(alloc_symbols.code(function, 64), name == "free")
        } else {
            0
        };
        probes.push(probe(enter, &alloc_path, function, entry_offset, None));
        if !exit.is_empty() {
            probes.push(probe(exit, &alloc_path, function, 0, None));
        }
    }
    order_for_attach(&mut probes);
    if !probes.iter().any(|p| p.program == program::FREE_ENTER)
        || !probes.iter().any(|p| p.program == program::MALLOC_EXIT)
    {
        bail!(
            "could not find the allocator's malloc and free in {}",
            alloc_path.display()
        );
    }

    let mut scopes = Vec::new();
    let mut scope_functions = Vec::new();
    let matches = scope_matches(exe, preset);
    for found in &matches {
        for function in &found.functions {
            let cookie = Some(scope_cookie(found.kind as u32, found.returns));
            let entry_offset = if found.returns {
                0
            } else {
                entry_probe_offset(exe.code(function, 64), false)
            };
            probes.push(probe(
                program::SCOPE_ENTER,
                &exe_path,
                function,
                entry_offset,
                cookie,
            ));
            if found.returns {
                probes.push(probe(program::SCOPE_EXIT, &exe_path, function, 0, cookie));
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
    let missing_scopes = missing_scopes(&matches);
    Ok(Plan {
        layer,
        layer_reason: reason,
        probes,
        scopes,
        missing_scopes,
        scope_functions,
    })
}

/// Frees first: attaching takes a while, and a block allocated under an
/// allocation probe but freed before `free` was probed would stay live forever
/// (a false leak). The other way round, a free of a block allocated before
/// attach is simply unknown, which the analyzer ignores.
fn order_for_attach(probes: &mut [Probe]) {
    probes.sort_by_key(|p| p.program != program::FREE_ENTER);
}

/// The functions of the executable that one scope rule of a preset matches.
#[derive(Debug)]
pub struct ScopeMatch<'a> {
    pub kind: ScopeKind,
    pub returns: bool,
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

fn probe(
    program: &'static str,
    path: &std::path::Path,
    function: &Function,
    offset: u64,
    cookie: Option<u64>,
) -> Probe {
    Probe {
        program,
        path: path.to_owned(),
        file_offset: function.file_offset + offset,
        cookie,
        function: function.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_cookie_carries_its_kind_and_whether_it_returns() {
        for kind in ScopeKind::ALL {
            for returns in [false, true] {
                let (index, back) =
                    leakscope_probe_ebpf::split_scope(scope_cookie(kind as u32, returns) as u32);
                assert_eq!(ScopeKind::from_cookie(index), Some(kind));
                assert_eq!(back, returns);
            }
        }
    }

    #[test]
    fn free_is_attached_before_any_allocation_probe() {
        let at = |program| Probe {
            program,
            path: PathBuf::from("/lib/libc.so.6"),
            file_offset: 0,
            cookie: None,
            function: String::new(),
        };
        let mut probes = vec![
            at(program::MALLOC_ENTER),
            at(program::MALLOC_EXIT),
            at(program::FREE_ENTER),
            at(program::REALLOC_ENTER),
        ];
        order_for_attach(&mut probes);
        assert_eq!(probes[0].program, program::FREE_ENTER);
        assert_eq!(
            probes[1].program,
            program::MALLOC_ENTER,
            "the rest keep their order"
        );
    }
}
