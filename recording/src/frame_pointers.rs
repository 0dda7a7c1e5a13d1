//! Whether an executable's own code keeps frame pointers, read from its code.
//!
//! Why producers check: both the eBPF probe and the in-process recorder walk
//! stacks by frame pointer (`rbp`). A build without frame pointers (a plain
//! `cargo build --release`) leaves any value in `rbp`, so its stacks stop
//! after a frame or two, and a report must say so, and how to fix it, rather
//! than show shallow stacks as if they were the truth.
//!
//! How: a function compiled with frame pointers begins with `push rbp; mov
//! rbp, rsp` (after an `endbr64` where CET is on). Its share among the
//! program's own Rust functions tells: ~100% in a frame-pointer build, a few
//! per cent otherwise (functions that need a frame for other reasons). The
//! standard library is left out: it ships prebuilt with frame pointers
//! whatever the program's flags, and in a small program it is most of the code.

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};

/// What a producer found of the executable's frame pointers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FramePointers {
    /// Not checked (a recording older than format 5), or too little code to tell.
    #[default]
    Unknown,
    /// The program's code sets up frame pointers: stacks unwind through it.
    Kept,
    /// The program's code was built without them: stacks walked by frame
    /// pointer stop early ([`FIX`] rebuilds it with them).
    Omitted,
}

/// How a producer walked the stacks it recorded (format 11).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StackWalk {
    /// By frame pointer, or by the unwinder of the program's own runtime
    /// (in-process): every recording before format 11.
    #[default]
    FramePointers,
    /// By tables compiled from each executable's `.eh_frame` (a build
    /// without frame pointers; by the probe, or in-process by the recorder):
    /// whole stacks, except through code with no table.
    EhFrame {
        /// Executable mappings with a table.
        mappings: u32,
        rows: u64,
        /// Files mapped executable whose stacks stop in them, each with why.
        without_table: Vec<String>,
    },
}

/// The flags that give a Rust build frame pointers.
pub const FIX: &str = "RUSTFLAGS=\"-C force-frame-pointers=yes\"";

/// Functions shorter than this are left out (thunks, tail-call stubs).
const MIN_FUNCTION_BYTES: u64 = 16;

/// Fewer sampled functions than this tell nothing.
const MIN_FUNCTIONS: usize = 20;

/// Crates of the prebuilt standard library (and what it links), whose code
/// has frame pointers whatever the program was built with.
const STD_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "hashbrown",
    "std_detect",
    "rustc_demangle",
    "addr2line",
    "gimli",
    "object",
    "miniz_oxide",
    "adler2",
    "panic_unwind",
    "panic_abort",
    "unwind",
    "compiler_builtins",
    "__rustc",
];

/// Share of the program's own functions that set up a frame pointer, and
/// how many were looked at; `None` when `elf` is not an ELF file.
pub fn frame_pointer_share(elf: &[u8]) -> Option<(f64, usize)> {
    let file = object::File::parse(elf).ok()?;
    let (mut rust, mut rust_framed, mut other, mut other_framed) = (0usize, 0usize, 0usize, 0usize);
    for symbol in file.symbols() {
        if symbol.kind() != SymbolKind::Text || symbol.size() < MIN_FUNCTION_BYTES {
            continue;
        }
        let Ok(raw) = symbol.name() else { continue };
        let Some(section) = symbol
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
        else {
            continue;
        };
        let Some(code) = section
            .data_range(symbol.address(), MIN_FUNCTION_BYTES)
            .ok()
            .flatten()
        else {
            continue;
        };
        let framed = sets_up_frame(code);
        if raw.starts_with("_ZN") || raw.starts_with("_R") {
            if is_std(raw) {
                continue;
            }
            rust += 1;
            rust_framed += framed as usize;
        } else {
            other += 1;
            other_framed += framed as usize;
        }
    }
    // A Rust program is judged by its Rust code; anything else by all of it.
    let (framed, total) = if rust >= MIN_FUNCTIONS {
        (rust_framed, rust)
    } else {
        (rust_framed + other_framed, rust + other)
    };
    Some((framed as f64 / total.max(1) as f64, total))
}

/// [`FramePointers`] of an executable's contents.
pub fn frame_pointers(elf: &[u8]) -> FramePointers {
    match frame_pointer_share(elf) {
        Some((_, total)) if total < MIN_FUNCTIONS => FramePointers::Unknown,
        Some((share, _)) if share >= 0.5 => FramePointers::Kept,
        Some(_) => FramePointers::Omitted,
        None => FramePointers::Unknown,
    }
}

/// `[endbr64] push rbp; mov rbp, rsp`.
fn sets_up_frame(code: &[u8]) -> bool {
    let code = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
    code.starts_with(&[0x55, 0x48, 0x89, 0xe5])
}

/// A symbol of the prebuilt standard library, by its crate: the first path
/// segment, or in `<T as Trait>::f` the self type's, or the trait's when the
/// self type is a primitive (`<u8 as core::fmt::Display>::fmt`).
fn is_std(raw: &str) -> bool {
    let name = crate::demangle(raw);
    let first = first_segment(&name);
    if !PRIMITIVES.contains(&first) {
        return STD_CRATES.contains(&first);
    }
    match name.split_once(" as ") {
        Some((_, rest)) => STD_CRATES.contains(&first_segment(rest)),
        None => true,
    }
}

/// Self types that name no crate.
const PRIMITIVES: &[&str] = &[
    "", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
    "f32", "f64", "bool", "char", "str", "_",
];

/// The first path segment of a demangled name, past `<`, `&`, `mut`, `dyn`,
/// `*const`, `[` and `(`.
fn first_segment(name: &str) -> &str {
    let mut rest = name;
    loop {
        let trimmed = rest
            .trim_start_matches(['<', '&', '[', '(', '*', ' '])
            .trim_start_matches("mut ")
            .trim_start_matches("const ")
            .trim_start_matches("dyn ");
        if trimmed.len() == rest.len() {
            break;
        }
        rest = trimmed;
    }
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prologues_with_and_without_a_frame() {
        assert!(sets_up_frame(&[0x55, 0x48, 0x89, 0xe5, 0x90]));
        assert!(sets_up_frame(&[
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5
        ]));
        // push rbp used as a callee-saved register, no frame.
        assert!(!sets_up_frame(&[0x55, 0x41, 0x57, 0x41, 0x56]));
        assert!(!sets_up_frame(&[0x48, 0x83, 0xec, 0x28]));
    }

    #[test]
    fn std_crates_are_told_by_their_path() {
        assert!(is_std("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"));
        assert!(is_std(
            "_ZN60_$LT$alloc..string..String$u20$as$u20$core..fmt..Display$GT$3fmt17h0123456789abcdefE"
        ));
        assert!(!is_std("_ZN5rmcp9transport5spawn17h0123456789abcdefE"));
        assert_eq!(first_segment("<&mut [u8] as core::fmt::Debug>::fmt"), "u8");
        assert_eq!(first_segment("<&dyn rmcp::Service as x::Y>::f"), "rmcp");
        assert!(is_std(
            "_ZN45_$LT$u8$u20$as$u20$core..fmt..Display$GT$3fmt17h0123456789abcdefE"
        ));
    }

    /// This test binary is built as the workspace builds everything, with
    /// frame pointers (`.cargo/config.toml`).
    #[test]
    fn this_test_binary_keeps_frame_pointers() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let (share, total) = frame_pointer_share(&me).unwrap();
        assert!(total >= MIN_FUNCTIONS, "{total}");
        assert!(share > 0.9, "{share} of {total}");
        assert_eq!(frame_pointers(&me), FramePointers::Kept);
        assert_eq!(frame_pointers(b"not an elf"), FramePointers::Unknown);
    }
}
