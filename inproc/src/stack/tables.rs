//! Walking a build without frame pointers by its unwind tables: the rows the
//! probe's eBPF programs walk (`leakscope-unwind`), compiled from what this
//! process has loaded, and the same [`step`].
//!
//! `_Unwind_Backtrace` (what dhat and the `backtrace` crate use) finds each
//! frame's function in the loader's list, parses its FDE and evaluates its
//! call-frame instructions, every frame of every event: ~2 us a stack of a
//! dozen frames, 95% of what recording cost such a build (issue 30). The
//! rows are those instructions evaluated once, at start; a walk is then a
//! lookup per frame, and a per-thread cache of rows by address (a server's
//! allocations come from a few hundred call paths) makes most lookups one
//! load. framehop caches rules the same way; this is the probe's own table,
//! so both modes cut a stack at the same places for the same reasons.
//!
//! The tables are compiled from memory (`dl_iterate_phdr`: every loaded
//! object's `PT_GNU_EH_FRAME`, the vDSO's included), no file read. A library
//! loaded later has no rows: its frames are stepped by frame pointer if `rbp`
//! holds one, else the stack ends there.

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

use leakscope_unwind::{
    Cut, ExecMapping, Frame, Source, Step, Table, Tables, UnwindRow, eh_frame_address, here, step,
};

use super::DEPTH;

static TABLES: OnceLock<Tables> = OnceLock::new();

/// The tables of every object loaded now, compiled once (the caller runs it
/// as the recorder's own work: what the compiler allocates is not the
/// application's).
pub fn compiled() -> &'static Tables {
    TABLES.get_or_init(compile)
}

/// The tables, if [`compiled`] made them.
fn tables() -> Option<&'static Tables> {
    TABLES.get()
}

/// A loaded object, as `dl_iterate_phdr` shows it.
struct Loaded {
    name: String,
    bias: u64,
    /// `(type, flags, virtual address, size in memory)` of each segment.
    segments: Vec<(u32, u32, u64, u64)>,
}

/// Compiles every loaded object's table, each inside `dl_iterate_phdr`'s
/// callback: the loader holds its lock there, so no other thread can
/// unmap the object (`dlclose`) while its `.eh_frame` is read.
fn compile() -> Tables {
    let mut tables = Tables::default();
    // SAFETY: the callback reads the headers the loader passes it and the
    // memory they describe, and adds to the Tables behind `data`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(collect), (&raw mut tables).cast()) };
    tables.sort();
    tables
}

/// Adds `object`'s table and executable mappings to `tables`.
fn add(tables: &mut Tables, object: &Loaded) {
    let executable = object
        .segments
        .iter()
        .filter(|s| s.0 == libc::PT_LOAD && s.1 & libc::PF_X != 0);
    if executable.clone().next().is_none() {
        return;
    }
    let table = match table_of(object) {
        Ok(table) => table,
        Err(why) => {
            tables.missing.push((object.name.clone(), why));
            return;
        }
    };
    let Some((first_row, rows)) = tables.add_rows(&table.rows) else {
        tables
            .missing
            .push((object.name.clone(), "more than 4 G rows".into()));
        return;
    };
    for &(_, _, vaddr, size) in executable {
        let start = object.bias.wrapping_add(vaddr);
        tables.mappings.push(ExecMapping {
            start,
            end: start + size,
            // The table's addresses are the memory's: its base is the
            // lowest function's address in memory.
            bias: table.base,
            first_row,
            rows,
        });
    }
}

/// `object`'s table, from its `.eh_frame` in memory.
fn table_of(object: &Loaded) -> Result<Table, String> {
    let &(_, _, vaddr, size) = object
        .segments
        .iter()
        .find(|s| s.0 == libc::PT_GNU_EH_FRAME)
        .ok_or("no PT_GNU_EH_FRAME (.eh_frame_hdr)")?;
    let header_address = object.bias.wrapping_add(vaddr);
    // SAFETY: the loader mapped the segment, readable, for its whole size.
    let header = unsafe { std::slice::from_raw_parts(header_address as *const u8, size as usize) };
    let eh_frame = eh_frame_address(header, header_address).map_err(|e| e.to_string())?;
    // `.eh_frame` lies in a loadable segment; its entries end at their
    // terminator, at the latest where the segment does.
    let end = object
        .segments
        .iter()
        .filter(|s| s.0 == libc::PT_LOAD)
        .map(|&(_, _, vaddr, size)| {
            let start = object.bias.wrapping_add(vaddr);
            (start, start + size)
        })
        .find(|&(start, end)| start <= eh_frame && eh_frame < end)
        .ok_or(".eh_frame is in no loaded segment")?
        .1;
    // SAFETY: from `.eh_frame` to the end of the mapped segment that holds it.
    let bytes =
        unsafe { std::slice::from_raw_parts(eh_frame as *const u8, (end - eh_frame) as usize) };
    Table::from_eh_frame(bytes, eh_frame, header_address).map_err(|e| e.to_string())
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is `compile`'s Tables; `info` and its headers are the
    // loader's, valid during the call.
    let (tables, object) = unsafe {
        let tables = &mut *data.cast::<Tables>();
        let info = &*info;
        let name = if info.dlpi_name.is_null() || *info.dlpi_name == 0 {
            "the executable".to_owned()
        } else {
            CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned()
        };
        let headers = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let object = Loaded {
            name,
            bias: info.dlpi_addr,
            segments: headers
                .iter()
                .map(|h| (h.p_type, h.p_flags, h.p_vaddr, h.p_memsz))
                .collect(),
        };
        (tables, object)
    };
    // A panic must not unwind into the loader (out of an `extern "C"`
    // callback it aborts the process): an object whose table makes the
    // compiler panic has none.
    let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| add(tables, &object)));
    if added.is_err() {
        tables
            .missing
            .push((object.name, "its table could not be compiled".into()));
    }
    0
}

/// Rows kept per thread, by the address they were looked up at: 4 KiB of
/// each thread's static TLS (which glibc takes from the thread's stack).
const SLOTS: usize = 256;

#[derive(Clone, Copy)]
struct Slot {
    pc: u64,
    row: UnwindRow,
}

const EMPTY: Slot = Slot {
    pc: 0,
    row: UnwindRow {
        pc: 0,
        cfa_off: 0,
        kind: 0,
        rbp: 0,
    },
};

thread_local! {
    /// Const-initialized and without a destructor: reading it never allocates.
    static ROWS: UnsafeCell<[Slot; SLOTS]> = const { UnsafeCell::new([EMPTY; SLOTS]) };
}

/// The walk's view of this process: the tables, this thread's stack, and
/// its row cache.
struct Own<'a> {
    tables: &'a Tables,
    low: u64,
    high: u64,
    rows: &'a mut [Slot; SLOTS],
}

fn slot(pc: u64) -> usize {
    (pc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl Source for Own<'_> {
    fn mapping(&mut self, pc: u64) -> Option<ExecMapping> {
        self.tables.mapping(pc)
    }

    fn row(&mut self, index: u32) -> Option<UnwindRow> {
        self.tables.rows.get(index as usize).copied()
    }

    fn read(&mut self, address: u64) -> Option<u64> {
        if address < self.low || address.checked_add(8)? > self.high || !address.is_multiple_of(8) {
            return None;
        }
        // SAFETY: within this thread's stack, aligned.
        Some(unsafe { std::ptr::read_volatile(address as *const u64) })
    }

    fn remembered(&mut self, pc: u64) -> Option<UnwindRow> {
        let slot = self.rows[slot(pc)];
        (slot.pc == pc).then_some(slot.row)
    }

    fn remember(&mut self, pc: u64, row: UnwindRow) {
        self.rows[slot(pc)] = Slot { pc, row };
    }
}

/// Return addresses of the current call stack, innermost first, walked by
/// the tables; `None` when there are none (not compiled, or no mapping).
#[inline(never)]
pub fn walk(frames: &mut [u64; DEPTH], low: u64, high: u64) -> Option<usize> {
    let tables = tables().filter(|t| !t.mappings.is_empty())?;
    let here = here();
    let walked = ROWS.try_with(|rows| {
        // SAFETY: this thread's cache; the walk never re-enters itself (it
        // neither allocates nor calls out).
        let rows = unsafe { &mut *rows.get() };
        let mut own = Own {
            tables,
            low,
            high,
            rows,
        };
        let mut frame = here;
        let mut n = 0;
        // The first caller is `stack::walk`, which called this: not kept,
        // so the stack starts where the frame-pointer walk's does.
        let mut own_frame = true;
        let mut interrupted = true;
        while n < DEPTH {
            let next = match step(&mut own, frame, std::mem::take(&mut interrupted)) {
                Step::Caller(next) => next,
                // Code with no table: by frame pointer, if rbp holds one.
                Step::Cut(Cut::NoMapping) => match frame_pointer_step(&mut own, frame) {
                    Some(next) => next,
                    None => break,
                },
                Step::Outermost | Step::Cut(_) => break,
            };
            if next.pc == 0 {
                break;
            }
            frame = next;
            if std::mem::take(&mut own_frame) {
                continue;
            }
            frames[n] = next.pc;
            n += 1;
        }
        n
    });
    walked.ok()
}

/// The caller of a frame in code with no table, by frame pointer.
fn frame_pointer_step(own: &mut Own<'_>, frame: Frame) -> Option<Frame> {
    let fp = frame.bp;
    if fp < frame.sp {
        return None;
    }
    let bp = own.read(fp)?;
    let pc = own.read(fp + 8)?;
    Some(Frame {
        pc,
        sp: fp + 16,
        bp,
    })
}

#[cfg(test)]
mod tests;
