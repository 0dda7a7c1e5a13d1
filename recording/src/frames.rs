//! How frames read, for every tool that names code from a stack: the
//! allocator's own frames and the standard library's are skipped to find the
//! program's frame that asked for the memory, and names are shortened for
//! prose (generic arguments out, a qualified name's type and trait kept). The
//! report's sites and verdict and the probe's live status line name code
//! through these, so both say the same name.

use wildmatch::WildMatch;

/// Frames of the allocator itself, trimmed from a stack's inner end. Names are
/// demangled without hash; inlined frames carry DWARF's short names.
pub const ALLOCATOR_FRAMES: &[&str] = &[
    // libc's malloc family.
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    // rustc's allocator shims and std's default behind them (`__rust_alloc`,
    // `__rdl_alloc`, `__rg_alloc`, ...), under either spelling.
    "__rustc::__rust_alloc*",
    "__rustc::__rust_realloc",
    "__rustc::__rust_dealloc",
    "__rustc::__rdl_*",
    "__rustc::__rg_*",
    "__rust_alloc*",
    "__rust_realloc",
    "__rdl_*",
    "__rg_*",
    // The shims symbolized under the crate that defines the
    // `#[global_allocator]` (`keeper::__rust_alloc` in a release build of a
    // binary that declares its own).
    "*::__rust_alloc*",
    "*::__rust_realloc",
    "*::__rust_dealloc",
    "*::__rdl_*",
    "*::__rg_*",
    "alloc::alloc::*",
    "<alloc::alloc::Global as core::alloc::Allocator>::*",
    "alloc::raw_vec::*",
    // Any `#[global_allocator]`: std's System, jemalloc's, mimalloc's, and a
    // wrapper of the program's own (`<Counting as GlobalAlloc>::alloc`).
    "<* as core::alloc::global::GlobalAlloc>::*",
    "<* as core::alloc::GlobalAlloc>::*",
    // jemalloc (tikv-jemallocator's prefixed build, or an unprefixed one),
    // mimalloc and snmalloc internals.
    "tikv_jemallocator::*",
    "tikv_jemalloc_sys::*",
    "_rjem_*",
    "je_*",
    "imalloc*",
    "ialloc*",
    "mimalloc::*",
    "libmimalloc_sys::*",
    "mi_*",
    "_mi_*",
    "snmalloc_rs::*",
    "snmalloc::*",
    "sn_rust_*",
    "std::sys::alloc::*",
    "std::sys::pal::*::alloc::*",
    "*::aligned_malloc",
    "aligned_malloc",
    "alloc",
    "alloc_zeroed",
    "alloc_impl*",
    "allocate*",
    "try_allocate_in*",
    "box_new*",
    "do_alloc*",
    "new_uninitialized*",
    "grow_amortized*",
    "grow_one*",
    "finish_grow*",
    "exchange_malloc*",
    "dhat::*",
    "<dhat::Alloc as *",
    // The in-process recorder's unwinder (builds without frame pointers).
    "backtrace::*",
    "_Unwind_*",
    "leakscope_inproc::*",
    "<leakscope_inproc::*",
];

/// Whether `name` is a frame of the allocator itself ([`ALLOCATOR_FRAMES`]).
pub fn is_allocator_frame(name: &str) -> bool {
    static PATTERNS: std::sync::OnceLock<Vec<WildMatch>> = std::sync::OnceLock::new();
    PATTERNS
        .get_or_init(|| ALLOCATOR_FRAMES.iter().map(|p| WildMatch::new(p)).collect())
        .iter()
        .any(|p| p.matches(name))
}

/// Library frames a reader skips to find the code that asked for the memory.
const LIBRARY_PREFIXES: &[&str] = &[
    "core::",
    "alloc::",
    "std::",
    "hashbrown::",
    "<core::",
    "<alloc::",
    "<std::",
    "<hashbrown::",
];

/// Trait impls of the standard library (`<u8 as alloc::vec::...>::from_elem`).
const LIBRARY_IMPLS: &[&str] = &[" as alloc::", " as core::", " as std::", " as hashbrown::"];

/// A frame of the standard library or its collections.
pub fn is_library_frame(name: &str) -> bool {
    LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
        || LIBRARY_IMPLS.iter().any(|p| name.contains(p))
}

/// The innermost frame of the program itself: not the allocator (a
/// `#[global_allocator]` of any kind, rustc's shims), not the standard library
/// or its collections, and not an inlined frame's bare short name; the
/// innermost frame when none qualifies. Names, innermost first.
pub fn own_frame<'a>(frames: impl IntoIterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let candidate = |name: &&str| {
        let short = short_name(name);
        !short.is_empty()
            && !short.starts_with(['{', ':'])
            && !is_library_frame(name)
            && !is_allocator_frame(name)
    };
    // A full path first (inlined frames carry bare short names), then any.
    frames
        .clone()
        .into_iter()
        .filter(candidate)
        .find(|name| short_name(name).contains("::"))
        .or_else(|| frames.clone().into_iter().find(candidate))
        .or_else(|| frames.into_iter().next())
}

/// A function name without its generic arguments, for prose (`->` inside them
/// is not a closing bracket). A qualified name keeps its self type and trait:
/// `<my::Handler as rmcp::ServerHandler>::call_tool`.
pub fn short_name(name: &str) -> String {
    if name.starts_with('<')
        && let Some(close) = matching_close(name)
    {
        let inner = &name[1..close];
        let inner = match top_level_split(inner, " as ") {
            Some((ty, tr)) => format!("{} as {}", without_generics(ty), without_generics(tr)),
            None => without_generics(inner),
        };
        return format!("<{inner}>{}", without_generics(&name[close + 1..]));
    }
    without_generics(name)
}

/// `name` with every `<...>` taken out.
fn without_generics(name: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    let mut previous = ' ';
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
        previous = c;
    }
    out
}

/// The index of the `>` that closes the `<` `name` starts with.
fn matching_close(name: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut previous = ' ';
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        previous = c;
    }
    None
}

/// `text` split at the first `separator` outside any `<...>`.
fn top_level_split<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let mut depth = 0i32;
    let mut previous = ' ';
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            _ if depth == 0 && text[i..].starts_with(separator) => {
                return Some((&text[..i], &text[i + separator.len()..]));
            }
            _ => {}
        }
        previous = c;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_drop_generics() {
        assert_eq!(short_name("channel<rmcp::X<u8>>"), "channel");
        assert_eq!(short_name("a::b<T>::c"), "a::b::c");
        assert_eq!(
            short_name("{async_block#0}<fn(u8) -> x::Y<u8>, z>"),
            "{async_block#0}"
        );
    }

    #[test]
    fn qualified_names_keep_their_type_and_trait() {
        assert_eq!(
            short_name("<my::Handler<u8> as rmcp::ServerHandler>::call_tool<T>"),
            "<my::Handler as rmcp::ServerHandler>::call_tool"
        );
        assert_eq!(short_name("<my::Cache>::get"), "<my::Cache>::get");
    }

    /// A `#[global_allocator]` wrapper of the program's own is the allocator,
    /// not the site: the site is the code that asked (`render`).
    #[test]
    fn own_frames_skip_any_global_allocator() {
        let frames = [
            "<my_server::Counting as core::alloc::global::GlobalAlloc>::alloc",
            "__rustc::__rust_alloc",
            "alloc::alloc::alloc",
            "alloc_impl_runtime",
            "<alloc::raw_vec::RawVecInner>::try_allocate_in",
            "<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc",
            "my_server::render",
            "main",
        ];
        assert_eq!(own_frame(frames.iter().copied()), Some("my_server::render"));
        let handler = ["<my::Handler as rmcp::handler::server::ServerHandler>::call_tool"];
        assert_eq!(own_frame(handler.iter().copied()), Some(handler[0]));
    }

    /// A binary that declares its own `#[global_allocator]` may have its
    /// shims symbolized under its crate's name.
    #[test]
    fn shims_named_after_the_allocators_crate_are_the_allocator() {
        for shim in [
            "keeper::__rust_alloc",
            "my_server::__rust_dealloc",
            "x::__rg_alloc",
        ] {
            assert!(is_allocator_frame(shim), "{shim}");
        }
        assert!(!is_allocator_frame("keeper::keep_one"));
        let frames = [
            "keeper::__rust_alloc",
            "alloc::alloc::alloc",
            "keeper::keep_one",
        ];
        assert_eq!(own_frame(frames.iter().copied()), Some("keeper::keep_one"));
    }

    #[test]
    fn own_frames_skip_the_standard_library_and_inlined_short_names() {
        let frames = [
            "from_elem<u8>",
            "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "alloc::vec::from_elem",
            "my_server::cache::remember",
            "main",
        ];
        assert_eq!(
            own_frame(frames.iter().copied()),
            Some("my_server::cache::remember")
        );
        assert_eq!(own_frame(["alloc::x"].iter().copied()), Some("alloc::x"));
    }
}
