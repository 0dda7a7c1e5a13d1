//! Stack walking inside the allocator. By frame pointer, which never allocates
//! and never faults: every frame address must lie inside the current thread's
//! stack and grow towards its base. A program built without frame pointers (a
//! plain `cargo build --release`) leaves any value in `rbp`, so its stacks
//! would stop at once; there the walk unwinds instead ([`unwind_instead`]),
//! by the tables the probe's programs walk ([`tables`]), compiled once from
//! the process's `.eh_frame`; where they cannot be made, with
//! `_Unwind_Backtrace`, as dhat does (a few microseconds a call).

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

pub mod tables;

/// How stacks are walked: one of the `WALK_*`.
static WALK: AtomicU8 = AtomicU8::new(WALK_FRAME_POINTERS);
const WALK_FRAME_POINTERS: u8 = 0;
const WALK_TABLES: u8 = 1;
const WALK_UNWIND_BACKTRACE: u8 = 2;

/// How a build without frame pointers has its stacks walked.
#[derive(Debug)]
pub enum Unwinding {
    /// By the tables, as the recording's header says it (how many
    /// mappings and rows, the objects with code but no table).
    Tables(leakscope_recording::StackWalk),
    /// With `_Unwind_Backtrace`: no object had a table the walk could use.
    UnwindBacktrace,
}

/// Walk by unwinding from now on (the recorder calls it at start when the
/// executable's code keeps no frame pointers): compiles the tables (the
/// caller runs it as the recorder's own work) and says how stacks will be
/// walked.
pub fn unwind_instead() -> Unwinding {
    let tables = tables::compiled();
    if tables.mappings.is_empty() {
        WALK.store(WALK_UNWIND_BACKTRACE, Ordering::Relaxed);
        return Unwinding::UnwindBacktrace;
    }
    WALK.store(WALK_TABLES, Ordering::Relaxed);
    Unwinding::Tables(tables.stack_walk())
}

/// Walk with `_Unwind_Backtrace` from now on: for the benchmark that puts
/// it beside the tables' walk.
pub fn unwind_with_libgcc() {
    WALK.store(WALK_UNWIND_BACKTRACE, Ordering::Relaxed);
}

pub const DEPTH: usize = 24;

thread_local! {
    /// (low, high) bounds of this thread's stack; (0, 0) until first looked up.
    static BOUNDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// This thread's stack bounds (looked up once; the caller holds the re-entry guard,
/// since glibc may allocate while answering for the main thread).
pub(crate) fn bounds() -> (u64, u64) {
    let cached = BOUNDS.with(Cell::get);
    if cached.1 != 0 {
        return cached;
    }
    // SAFETY: pthread_getattr_np fills an attr we own and destroy; no Rust invariants involved.
    let found = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if !ok {
            return (0, 0);
        }
        (addr as u64, addr as u64 + size as u64)
    };
    BOUNDS.with(|b| b.set(found));
    found
}

/// Return addresses of the current call stack, innermost first; returns how many.
#[inline(never)]
pub fn walk(frames: &mut [u64; DEPTH]) -> usize {
    let how = WALK.load(Ordering::Relaxed);
    if how == WALK_UNWIND_BACKTRACE {
        return unwind(frames);
    }
    let (low, high) = bounds();
    if high == 0 {
        return 0;
    }
    if how == WALK_TABLES {
        return tables::walk(frames, low, high).unwrap_or(0);
    }
    let mut fp: u64;
    // SAFETY: reads the frame pointer register only.
    unsafe {
        core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    let mut n = 0;
    while n < DEPTH {
        if fp < low || !fp.is_multiple_of(8) || fp + 16 > high {
            break;
        }
        // SAFETY: fp and fp+8 lie within this thread's mapped stack (checked above).
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if ret == 0 {
            break;
        }
        frames[n] = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// [`walk`] by the unwind tables: for code without frame pointers. The caller
/// holds the recorder's re-entry guard, so what the unwinder allocates for
/// itself (glibc may, the first time it reads a library's tables) is neither
/// recorded nor walked again.
#[inline(never)]
fn unwind(frames: &mut [u64; DEPTH]) -> usize {
    // The walk's own frames come first: which ones the unwinder reports
    // differs with inlining, so none is skipped here; the analyzer trims the
    // recorder's and the unwinder's frames (`backtrace::*`,
    // `leakscope_inproc::*`) by name.
    let mut n = 0usize;
    // SAFETY: `trace_unsynchronized` requires that no other thread unwinds
    // through backtrace's own synchronized API at the same time with state
    // we share; the callback only writes into our own array.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if ip == 0 {
                return false;
            }
            frames[n] = ip;
            n += 1;
            n < DEPTH
        });
    }
    n
}
