//! Which allocator functions are probed: libc's malloc family, an
//! allocator's C API, rustc's shims, or a malloc replacement (the module
//! docs of [`super`] say when each).

use anyhow::{Result, bail};
use iced_x86::{Decoder, DecoderOptions, FlowControl};
use leakscope_probe_ebpf::program;
use leakscope_recording::AllocLayer;
use leakscope_recording::target::Target;

use super::{Probe, later_offsets, probe};
use crate::attach_offset::entry_probe_offset;
use crate::symbols::{ElfSymbols, Function};

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
            (
                program::MALLOCX_ENTER,
                program::MALLOC_EXIT,
                "_rjem_mallocx",
            ),
            (program::CALLOC_ENTER, program::MALLOC_EXIT, "_rjem_calloc"),
            (
                program::REALLOC_ENTER,
                program::REALLOC_EXIT,
                "_rjem_realloc",
            ),
            (
                program::RALLOCX_ENTER,
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
                program::MALLOC_ALIGNED_ENTER,
                program::MALLOC_EXIT,
                "mi_malloc_aligned",
            ),
            (
                program::MALLOC_ALIGNED_ENTER,
                program::MALLOC_EXIT,
                "mi_zalloc_aligned",
            ),
            (program::CALLOC_ENTER, program::MALLOC_EXIT, "mi_calloc"),
            (program::REALLOC_ENTER, program::REALLOC_EXIT, "mi_realloc"),
            (
                program::REALLOC_ALIGNED_ENTER,
                program::REALLOC_EXIT,
                "mi_realloc_aligned",
            ),
            (program::FREE_ENTER, "", "mi_free"),
        ],
    },
];

/// The allocator APIs leakscope knows that the executable links whole: an
/// allocating and a freeing function of each. Every one is probed: a binary
/// over mimalloc can also link jemalloc for a dependency's own blocks, and
/// probing the first found alone recorded none of the Rust allocations. One
/// linked in part is none: a binary over mimalloc that links jemalloc's
/// control API (`tikv-jemalloc-ctl`, for its figures) keeps `_rjem_mallocx`
/// and no free, and choosing it refused the whole attach ("could not find
/// the allocator's malloc and free").
pub fn allocator_apis(exe: &ElfSymbols) -> Vec<&'static str> {
    linked_allocator_apis(exe)
        .into_iter()
        .map(|api| api.name)
        .collect()
}

fn linked_allocator_apis(exe: &ElfSymbols) -> Vec<&'static AllocatorApi> {
    ALLOCATOR_APIS
        .iter()
        .filter(|api| exe.named(api.marker).is_some())
        .filter(|api| {
            // As `allocator_probes` requires: one that returns a block, one free.
            let linked = |allocating: bool| {
                api.hooks.iter().any(|&(_, exit, name)| {
                    let kind = if allocating {
                        exit == program::MALLOC_EXIT
                    } else {
                        exit.is_empty()
                    };
                    kind && exe.named(name).is_some()
                })
            };
            linked(true) && linked(false)
        })
        .collect()
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

/// Plans the allocator's probes into `probes` (their functions into
/// `names`): which layer, and why.
pub(super) fn layer_probes(
    target: &Target,
    exe: &ElfSymbols,
    probes: &mut Vec<Probe>,
    names: &mut Vec<String>,
) -> Result<(AllocLayer, String)> {
    let rust = rust_allocator(exe);
    let malloc = malloc_layer(target, exe)?;
    let probe_malloc = |malloc: &MallocLayer, probes: &mut Vec<Probe>, names: &mut Vec<String>| {
        allocator_probes(
            LIBC_HOOKS,
            malloc.symbols.as_ref().unwrap_or(exe),
            false,
            probes,
            names,
        )
    };
    let apis = linked_allocator_apis(exe);
    Ok(match (rust, &malloc) {
        (RustAllocator::Own, Some(malloc)) if !apis.is_empty() => {
            for api in &apis {
                allocator_probes(api.hooks, exe, false, probes, names)?;
            }
            probe_malloc(malloc, probes, names)?;
            let built_on = apis
                .iter()
                .map(|api| api.name)
                .collect::<Vec<_>>()
                .join(" or ");
            let apis_are = if apis.len() == 1 {
                "its C API is"
            } else {
                "each one's C API is"
            };
            (
                AllocLayer::AllocatorApiAndLibc,
                format!(
                    "the binary's #[global_allocator] is built on {built_on}, linked into it: {apis_are} probed (rustc's shims are inlined into the binary's own code, so not every call goes through them); {} and its malloc family is probed for C allocations",
                    malloc.reason
                ),
            )
        }
        (RustAllocator::Own, Some(malloc)) => {
            allocator_probes(RUST_HOOKS, exe, true, probes, names)?;
            probe_malloc(malloc, probes, names)?;
            (
                AllocLayer::RustShimsAndLibc,
                format!(
                    "the binary has its own #[global_allocator] (its __rust_alloc does not go to std's System allocator), so the Rust allocator shims are probed; {} and its malloc family is probed for C allocations; an allocation the global allocator passes on to malloc counts once",
                    malloc.reason
                ),
            )
        }
        (RustAllocator::Own, None) => {
            allocator_probes(RUST_HOOKS, exe, true, probes, names)?;
            (
                AllocLayer::RustShims,
                "the binary has its own #[global_allocator] and no malloc is mapped; the Rust allocator shims are probed".into(),
            )
        }
        (_, Some(malloc)) => {
            probe_malloc(malloc, probes, names)?;
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
            allocator_probes(RUST_HOOKS, exe, true, probes, names)?;
            (
                AllocLayer::RustShims,
                "no malloc is mapped; the Rust allocator shims are probed".into(),
            )
        }
        (RustAllocator::NoShims, None) => bail!(
            "pid {}: found no allocator to probe: no libc or malloc replacement is mapped, the executable defines no malloc, and it has no Rust allocator shims (__rust_alloc under any spelling; a stripped static binary has none)",
            target.pid
        ),
    })
}
