//! Whole stacks from builds without frame pointers (issue 30).
//!
//! Most Rust servers ship a plain `cargo build --release`: no frame pointers,
//! so a frame-pointer walk stops after a frame. Every Rust binary carries
//! `.eh_frame` for panics, though, and the profilers that unwind such builds
//! in the kernel (the OpenTelemetry eBPF profiler, Parca's agent before it)
//! compile it into compact tables a BPF program can search. This crate is
//! those tables and the one [`step`] that walks them, for both of leakscope's
//! modes: the probe's eBPF programs walk a target's stack with it (the crate
//! is `no_std` for them), and the in-process recorder walks its own with it,
//! so both modes cut a stack at the same places for the same reasons.
//!
//! With feature `tables`, [`table`] compiles an executable's `.eh_frame`
//! into rows (gimli), and [`Tables`] lays a process's out for a walk.
#![cfg_attr(not(feature = "tables"), no_std)]

#[cfg(feature = "tables")]
pub mod table;
#[cfg(feature = "tables")]
mod tables;

#[cfg(feature = "tables")]
pub use table::{Table, TableError, eh_frame_address};
#[cfg(feature = "tables")]
pub use tables::Tables;

/// How to find a frame's caller, from `pc` up to the next row's: the
/// canonical frame address (CFA, the stack pointer before the call) from
/// `rsp` or `rbp` plus an offset, the return address at CFA - 8, and where
/// the caller's `rbp` was saved. 8 bytes: a row per ~40 bytes of code, so a
/// binary of 50 MB of text is ~1.2 M rows, ~10 MB of map.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UnwindRow {
    /// Where the rule starts: the address less the table's base (its
    /// first function's start).
    pub pc: u32,
    /// The offset added to the register of [`kind::CFA_RSP`] or
    /// [`kind::CFA_RBP`].
    pub cfa_off: u16,
    /// One of [`kind`].
    pub kind: u8,
    /// Where the caller's `rbp` is: at CFA + 8 * `rbp` when negative,
    /// unchanged when 0, unknown when [`RBP_LOST`].
    pub rbp: i8,
}

/// What a row says.
pub mod kind {
    /// No rule the walk can follow (a CFA from another register or an
    /// expression, a return address elsewhere than CFA - 8, a gap between
    /// functions): the stack ends here, cut. 0, so a zeroed row says it.
    pub const UNSUPPORTED: u8 = 0;
    /// CFA = rsp + `cfa_off`.
    pub const CFA_RSP: u8 = 1;
    /// CFA = rbp + `cfa_off`.
    pub const CFA_RBP: u8 = 2;
    /// A PLT entry: CFA = rsp + 8, + 8 more when `pc & 15 >= 11` (the
    /// expression every x86-64 linker writes for `.plt`).
    pub const PLT11: u8 = 3;
    /// The same with 10 (`.plt.sec` and some linkers' `.plt`).
    pub const PLT10: u8 = 4;
    /// The return address is undefined: the outermost frame (`_start`,
    /// a thread's start). The stack is whole.
    pub const STOP: u8 = 5;
    /// A signal frame (`__restore_rt`): the caller is in the saved
    /// context, which the walk does not read; the stack ends here, cut.
    pub const SIGNAL: u8 = 6;
}

/// [`UnwindRow::rbp`]: the caller's `rbp` cannot be found.
pub const RBP_LOST: i8 = i8::MIN;

/// Rows per map value: 4 KiB values, so a table of a million rows is
/// ~2,000 map updates, not a million.
pub const ROWS_PER_CHUNK: usize = 512;

/// Steps of the binary search of a mapping's rows: up to 8 M rows, ~6x
/// what a binary of 50 MB of text needs.
pub const SEARCH_STEPS: u32 = 23;

/// An executable mapping of the target, and where its rows are among all
/// of the target's.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ExecMapping {
    pub start: u64,
    pub end: u64,
    /// An address in the mapping less this is its row `pc` (the load
    /// bias plus the table's base).
    pub bias: u64,
    /// The mapping's rows: `first_row..first_row + rows`.
    pub first_row: u32,
    pub rows: u32,
}

/// A frame's registers, as far as the walk knows them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Frame {
    pub pc: u64,
    pub sp: u64,
    /// 0 when unknown.
    pub bp: u64,
}

/// What a walk reads: in the kernel, BPF maps and the target's stack; in
/// tests, a process's own tables and memory. The step itself is the same
/// code on both sides.
pub trait Source {
    /// The mapping `pc` is in.
    fn mapping(&mut self, pc: u64) -> Option<ExecMapping>;
    /// Row `index` among all the target's.
    fn row(&mut self, index: u32) -> Option<UnwindRow>;
    /// The 8 bytes at `address` of the target's stack.
    fn read(&mut self, address: u64) -> Option<u64>;
    /// The row found for `pc` before, if the source keeps them (the
    /// programs do, per CPU: a server's allocations come from the same
    /// few hundred call paths, and two searches a frame are most of a
    /// walk's work).
    #[inline(always)]
    fn remembered(&mut self, _pc: u64) -> Option<UnwindRow> {
        None
    }
    /// Keeps the row found for `pc`.
    #[inline(always)]
    fn remember(&mut self, _pc: u64, _row: UnwindRow) {}
    /// The last of the rows `first..first + count` that starts at or before
    /// `relative` (its index from `first`), by a binary search of at most
    /// [`SEARCH_STEPS`] steps: [`last_at_or_before`] over [`row`](Self::row).
    /// The programs run each step as a call of `bpf_loop`'s callback
    /// instead, so that the verifier checks one step, not 23 unrolled.
    #[inline(always)]
    fn last_row_at_or_before(&mut self, first: u32, count: u32, relative: u64) -> Option<u32>
    where
        Self: Sized,
    {
        last_at_or_before(self, count, SEARCH_STEPS, relative, |s, i| {
            s.row(first + i).map(|row| row.pc as u64)
        })
    }
}

/// Where one step of a walk got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// The caller's frame: its `pc` is the return address.
    Caller(Frame),
    /// The outermost frame: the stack is whole.
    Outermost,
    /// The walk cannot go on: the stack is cut here.
    Cut(Cut),
}

/// Why a walk stopped before the outermost frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum Cut {
    /// The pc is in no executable mapping with a table (JIT code, a
    /// library mapped after the tables were made, a bad return address).
    NoMapping = 0,
    /// Below the mapping's first row, or the search ran out of steps.
    NoRow = 1,
    /// A rule the table cannot express, or a gap between functions.
    Unsupported = 2,
    /// A signal frame.
    Signal = 3,
    /// The CFA is rbp-based and rbp was lost on the way.
    NoFramePointer = 4,
    /// The stack could not be read.
    Read = 5,
    /// The CFA is not above the stack pointer: the stack would not grow.
    Backwards = 6,
    /// A return address the uretprobe trampoline stands in for: the
    /// walk cannot look up the trampoline's rules (the frame is kept,
    /// marked, for userspace to put the real address back).
    Trampoline = 7,
}

/// Slots of the programs' count of walks by [`Cut`].
pub const CUT_SLOTS: usize = 8;

/// Executable mappings a walk can search: a process maps a few dozen
/// (its binary, libc, ld.so, the vDSO, a preloaded allocator).
pub const MAX_EXEC_MAPPINGS: u32 = 1024;

/// Steps of the binary search of the mappings: 2^10 = [`MAX_EXEC_MAPPINGS`].
pub const MAPPING_SEARCH_STEPS: u32 = 10;

/// One frame up: the caller of `frame`. `interrupted` is true for a
/// frame stopped at any instruction (a probe at a function's entry), false
/// for one whose `pc` is a return address, looked up at `pc - 1`, inside
/// the call (a call can be a function's last instruction).
#[inline(always)]
pub fn step<S: Source>(source: &mut S, frame: Frame, interrupted: bool) -> Step {
    let look = if interrupted {
        frame.pc
    } else {
        frame.pc.wrapping_sub(1)
    };
    let row = match source.remembered(look) {
        Some(row) => row,
        None => {
            let Some(mapping) = source.mapping(look) else {
                return Step::Cut(Cut::NoMapping);
            };
            let Some(row) = find(source, &mapping, look) else {
                return Step::Cut(Cut::NoRow);
            };
            source.remember(look, row);
            row
        }
    };
    let offset = row.cfa_off as u64;
    let cfa = match row.kind {
        kind::CFA_RSP => frame.sp.wrapping_add(offset),
        kind::CFA_RBP if frame.bp == 0 => return Step::Cut(Cut::NoFramePointer),
        kind::CFA_RBP => frame.bp.wrapping_add(offset),
        kind::PLT11 | kind::PLT10 => {
            let threshold = if row.kind == kind::PLT11 { 11 } else { 10 };
            frame.sp + 8 + if frame.pc & 15 >= threshold { 8 } else { 0 }
        }
        kind::STOP => return Step::Outermost,
        kind::SIGNAL => return Step::Cut(Cut::Signal),
        _ => return Step::Cut(Cut::Unsupported),
    };
    if cfa <= frame.sp {
        return Step::Cut(Cut::Backwards);
    }
    let Some(pc) = source.read(cfa - 8) else {
        return Step::Cut(Cut::Read);
    };
    let bp = match row.rbp {
        0 => frame.bp,
        RBP_LOST => 0,
        slot if slot < 0 => match source.read(cfa.wrapping_add_signed(8 * slot as i64)) {
            Some(bp) => bp,
            None => return Step::Cut(Cut::Read),
        },
        _ => 0,
    };
    Step::Caller(Frame { pc, sp: cfa, bp })
}

/// The last of `count` sorted keys (`key(source, i)`) that is at or
/// before `target`, by a binary search of at most `steps` steps; `None`
/// when the steps ran out or a key could not be read. Key 0 is taken to
/// be at or before `target` (the caller checks it). The programs run the
/// same search one step per call of `bpf_loop`'s callback (probe-ebpf's
/// `search`).
#[inline(always)]
pub fn last_at_or_before<S: Source>(
    source: &mut S,
    count: u32,
    steps: u32,
    target: u64,
    mut key: impl FnMut(&mut S, u32) -> Option<u64>,
) -> Option<u32> {
    // Key `low` is at or before `target`; key `high` (or the end) after it.
    let (mut low, mut high) = (0u32, count);
    for _ in 0..steps {
        if high <= low || high - low <= 1 {
            break;
        }
        let middle = low + (high - low) / 2;
        if key(source, middle)? <= target {
            low = middle;
        } else {
            high = middle;
        }
    }
    (high.wrapping_sub(low) <= 1).then_some(low)
}

/// The row of `mapping` that covers `pc`: the last that starts at or
/// before it, by a binary search of at most [`SEARCH_STEPS`] steps.
#[inline(always)]
fn find<S: Source>(source: &mut S, mapping: &ExecMapping, pc: u64) -> Option<UnwindRow> {
    let relative = pc.checked_sub(mapping.bias)?;
    if mapping.rows == 0 || relative > u32::MAX as u64 {
        return None;
    }
    let relative = relative as u32;
    if source.row(mapping.first_row)?.pc > relative {
        return None;
    }
    let low = source.last_row_at_or_before(mapping.first_row, mapping.rows, relative as u64)?;
    source.row(mapping.first_row + low)
}

/// The calling function's own frame, here: where it is (`pc`, an address
/// inside this inlined block), its stack pointer and `rbp`, for a walk of
/// the current thread's stack (the in-process recorder, the probe's tests).
/// The three are read at one point, where the row at `pc` holds for `sp`;
/// the walk's first step looks `pc` up as is (`interrupted`).
#[cfg(all(feature = "tables", target_arch = "x86_64"))]
#[inline(always)]
pub fn here() -> Frame {
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: reads registers only.
    unsafe {
        core::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    Frame { pc, sp, bp }
}
