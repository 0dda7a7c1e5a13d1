//! The user stack of a build without frame pointers, walked by the rows
//! userspace compiled from each executable's `.eh_frame` (see
//! `leakscope_probe_ebpf::unwind`, whose [`step`] this runs, and
//! `leakscope-probe`'s `unwind` module, which makes the rows).
//!
//! Why `bpf_loop`: a step is two binary searches (the mapping, then its
//! rows) and up to two reads; 32 of them in one program would be verified
//! 32 times over, with every path through each. The loop's callback is
//! verified once, whatever the depth. Each search is a `bpf_loop` of its
//! own inside it, a step per call (see [`Search`]).
//!
//! The target's stack is read through the frame-pointer walk's per-CPU
//! window (see `walk`), and the same count of walks tells a walk preempted
//! by another on its CPU (uprobe programs run with migration disabled, not
//! preemption): its frames may be another thread's, so it gives up and the
//! stack goes to `bpf_get_stack`.

use core::ffi::c_void;

use aya_ebpf::helpers::bpf_probe_read_user;
use aya_ebpf::helpers::generated::bpf_loop;
use aya_ebpf::macros::map;
use aya_ebpf::maps::Array;
use leakscope_probe_ebpf::trampoline::{self, Seen};
use leakscope_probe_ebpf::unwind::{
    Cut, ExecMapping, Frame, MAPPING_SEARCH_STEPS, MAX_EXEC_MAPPINGS, ROWS_PER_CHUNK, SEARCH_STEPS,
    Source, Step, UnwindRow, step,
};
use leakscope_probe_ebpf::{MAX_STACK_DEPTH, STACK_WINDOW_BYTES, TRAMPOLINE_SLOT_MARK};

use super::walk::{
    PAGE, UPROBE_TRAMPOLINE, USER_END, USER_START, WALKER, WINDOW, WINDOW_WORDS, read_window,
};

/// Every executable's rows, end to end, [`ROWS_PER_CHUNK`] to a value: the
/// loader sizes it to the target's tables (one entry when it has none).
#[map]
static UNWIND_ROWS: Array<[UnwindRow; ROWS_PER_CHUNK]> = Array::with_max_entries(1, 0);

/// The target's executable mappings with a table, sorted by address.
#[map]
static EXEC_MAPPINGS: Array<ExecMapping> = Array::with_max_entries(MAX_EXEC_MAPPINGS, 0);

/// `[0]`: how many of [`EXEC_MAPPINGS`] hold a mapping. 0, as loaded: the
/// target is walked by frame pointer; the loader sets it for a target built
/// without them, once the tables are in.
#[map]
static UNWIND: Array<u32> = Array::with_max_entries(1, 0);

/// Rows found, by pc, per CPU (see `Source::remembered`): a walk that
/// finds a frame's row here skips both searches. Direct-mapped: a pc has
/// one slot, and the last row found for a pc there stays. An entry is two
/// words written and read one at a time, and a walk can be preempted
/// between them by another on its CPU: each entry checks itself (see
/// [`CachedRow::check`]), so a torn one is a miss, never another pc's row.
#[map]
static ROW_CACHE: aya_ebpf::maps::PerCpuArray<CachedRow> =
    aya_ebpf::maps::PerCpuArray::with_max_entries(ROW_CACHE_SLOTS, 0);

const ROW_CACHE_SLOTS: u32 = 4096;

#[derive(Clone, Copy)]
#[repr(C)]
struct CachedRow {
    /// [`CachedRow::check`] of the pc and the row: a word of one entry
    /// beside a word of another does not match (the CI once found a row
    /// with CFA = rsp + 8 under a return address of an rbp-based function,
    /// and the walk read the slot the uretprobe trampoline had taken).
    check: u64,
    row: UnwindRow,
}

impl CachedRow {
    #[inline(always)]
    fn check(pc: u64, row: &UnwindRow) -> u64 {
        let bits = row.pc as u64
            | (row.cfa_off as u64) << 32
            | (row.kind as u64) << 48
            | (row.rbp as u8 as u64) << 56;
        pc ^ bits.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// A pc's slot in [`ROW_CACHE`]: its bits above the lowest few, mixed
/// (return addresses of one function differ in their low bits).
#[inline(always)]
fn cache_slot(pc: u64) -> u32 {
    ((pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as u32) & (ROW_CACHE_SLOTS - 1)
}

/// Each thread's open calls of functions with a return probe, in slot
/// `tid % RETURN_SLOTS`: where each call's return address was and what it
/// was, which the trampoline hides while the call runs. The frame-pointer
/// walk leaves such a frame marked for userspace to put back; a walk by
/// table cannot go on from the trampoline (it has no rows), so it looks the
/// address up here and goes on. Kept only while walking by table.
#[map]
static OPEN_RETURNS: Array<OpenReturns> = Array::with_max_entries(RETURN_SLOTS, 0);

const RETURN_SLOTS: u32 = 16384;
/// Open calls kept per thread: rmcp nests two or three.
const RETURN_DEPTH: usize = 8;

#[derive(Clone, Copy)]
#[repr(C)]
struct OpenReturns {
    tid: u32,
    depth: u32,
    /// `(stack pointer at entry, return address)`, outermost first.
    calls: [[u64; 2]; RETURN_DEPTH],
}

/// A call of a function with a return probe entered, with `sp` its stack
/// pointer at entry and `ret` the return address there. Calls deeper on
/// the stack than it are over (their returns were not seen).
#[inline(always)]
pub(super) fn call_entered(tid: u32, sp: u64, ret: u64) {
    let Some(open) = OPEN_RETURNS.get_ptr_mut(tid % RETURN_SLOTS) else {
        return;
    };
    // SAFETY: the thread's slot (two threads share it only when their ids
    // are equal modulo RETURN_SLOTS: the later one takes it).
    let open = unsafe { &mut *open };
    if open.tid != tid {
        open.tid = tid;
        open.depth = 0;
    }
    let depth = pop_to(open, sp);
    if depth < RETURN_DEPTH {
        open.calls[depth] = [sp, ret];
        open.depth = depth as u32 + 1;
    }
}

/// A call of a function with a return probe returned, with `sp` its stack
/// pointer at entry: it and any deeper are over.
#[inline(always)]
pub(super) fn call_returned(tid: u32, sp: u64) {
    let Some(open) = OPEN_RETURNS.get_ptr_mut(tid % RETURN_SLOTS) else {
        return;
    };
    // SAFETY: as above.
    let open = unsafe { &mut *open };
    if open.tid == tid {
        open.depth = pop_to(open, sp) as u32;
    }
}

/// Drops the open calls at or below `sp`; returns how many remain.
#[inline(always)]
fn pop_to(open: &mut OpenReturns, sp: u64) -> usize {
    let mut depth = (open.depth as usize).min(RETURN_DEPTH);
    // Innermost first, by constant indexes (the verifier refuses an index
    // it cannot bound, and LLVM drops a mask it can prove redundant).
    for i in 0..RETURN_DEPTH {
        let index = RETURN_DEPTH - 1 - i;
        if index >= depth {
            continue;
        }
        if open.calls[index][0] > sp {
            break;
        }
        depth = index;
    }
    depth
}

/// The return address the trampoline took from the slot at `slot` of
/// thread `tid`'s stack.
#[inline(always)]
fn hidden_return(tid: u32, slot: u64) -> Option<u64> {
    let open = OPEN_RETURNS.get(tid % RETURN_SLOTS)?;
    if open.tid != tid {
        return None;
    }
    for call in open.calls {
        if call[0] == slot && call[1] != 0 {
            return Some(call[1]);
        }
    }
    None
}

/// See [`opaque`].
#[map]
static SCRATCH: aya_ebpf::maps::PerCpuArray<u64> =
    aya_ebpf::maps::PerCpuArray::with_max_entries(1, 0);

/// `value`, through memory the verifier does not track, so that it knows
/// nothing of it: an offset into memory must be bounded (a mask does it),
/// and the verifier otherwise traces that bound back to where the value came
/// from (a count of frames, a binary search's `low` and `high`) and keeps
/// apart every state that differs there, instead of pruning it: the walk's
/// loop, 31 frames of two searches of up to 23 steps, was then beyond its
/// million instructions.
#[inline(always)]
fn opaque(value: u64) -> Option<u64> {
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot, used only between these two lines.
    unsafe {
        core::ptr::write_volatile(scratch, value);
        Some(core::ptr::read_volatile(scratch))
    }
}

/// Why walks by table stopped short of the outermost frame, by [`Cut`], per
/// CPU: userspace says it at the end of a recording.
#[map]
pub(super) static UNWIND_CUTS: aya_ebpf::maps::PerCpuArray<[u64; CUT_SLOTS]> =
    aya_ebpf::maps::PerCpuArray::with_max_entries(1, 0);

const CUT_SLOTS: usize = leakscope_probe_ebpf::unwind::CUT_SLOTS;

/// How many mappings the walk by table searches; 0 when the target is walked
/// by frame pointer.
#[inline(always)]
pub(super) fn mappings() -> u32 {
    UNWIND.get(0).copied().unwrap_or(0)
}

/// A walk in progress, in a per-CPU slot ([`WALKS`]), not on the program's
/// stack: the verifier tracks what a program keeps on its stack, and
/// verifies `bpf_loop`'s callback again for as long as the state it starts
/// from differs from every state it started from before (a count of frames
/// that grows, a window's bounds that move). What it reads from a map it
/// knows nothing of: the callback is verified a few times, not 31. Like the
/// window, the slot can be another walk's by the end (a program preempted
/// on its CPU): `walk_tables` sees it from the count of walks.
#[derive(Clone, Copy)]
#[repr(C)]
struct Walk {
    frame: Frame,
    /// The window holds the target's `[base, limit)`.
    base: u64,
    limit: u64,
    /// Known readable up to here (see `Walker::top`).
    top: u64,
    trampoline_start: u64,
    trampoline_end: u64,
    filled: u64,
    mappings: u64,
    /// 1 once a read of what the thread was known to hold failed.
    stale: u64,
    tid: u64,
}

#[map]
static WALKS: aya_ebpf::maps::PerCpuArray<Walk> =
    aya_ebpf::maps::PerCpuArray::with_max_entries(1, 0);

/// What a binary search looks through.
#[derive(Clone, Copy)]
#[repr(u64)]
enum Over {
    /// [`EXEC_MAPPINGS`]' starts.
    Mappings = 0,
    /// The `pc`s of the rows from `first` on.
    Rows = 1,
}

/// A binary search in progress ([`search`]), in a per-CPU slot for the
/// reason [`Walk`] is: each step is a call of `bpf_loop`'s callback, which
/// the verifier then checks once or twice, where 23 unrolled steps inside
/// the walk's own callback were checked for every state that reached them.
/// On one build of Linux 6.18 that took the walk past the verifier's million
/// instructions (~30k a step), where another build took ~40k for the whole
/// walk: nothing the program can rely on. A walk preempted mid-search by
/// another on its CPU may find the slot changed; `walk_tables` then gives
/// the stack to `bpf_get_stack` (the count of walks).
#[derive(Clone, Copy)]
#[repr(C)]
struct Search {
    /// Key `low` is at or before `target`; key `high` (or the end) after it.
    low: u64,
    high: u64,
    target: u64,
    over: u64,
    first: u64,
    /// 1 once a key could not be read.
    failed: u64,
}

#[map]
static SEARCHES: aya_ebpf::maps::PerCpuArray<Search> =
    aya_ebpf::maps::PerCpuArray::with_max_entries(1, 0);

/// The last of `count` sorted keys that is at or before `target`, by at most
/// `steps` steps; `None` when the steps ran out or a key could not be read.
/// Key 0 is taken to be at or before `target` (the caller checks it), as in
/// `leakscope_unwind::last_at_or_before`, which this is one step at a time.
#[inline(always)]
fn search(over: Over, first: u32, count: u32, steps: u32, target: u64) -> Option<u32> {
    let slot = SEARCHES.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot.
    unsafe {
        *slot = Search {
            low: 0,
            high: count as u64,
            target,
            over: over as u64,
            first: first as u64,
            failed: 0,
        };
    }
    // SAFETY: the callback takes no context.
    unsafe { bpf_loop(steps, search_step as *mut c_void, core::ptr::null_mut(), 0) };
    // SAFETY: as above.
    let done = unsafe { *slot };
    if done.failed != 0 || done.high.wrapping_sub(done.low) > 1 {
        return None;
    }
    Some(done.low as u32)
}

/// One step of [`search`] (`bpf_loop`'s callback): 0 to go on, 1 when done.
#[inline(never)]
unsafe extern "C" fn search_step(_index: u64, _context: *mut c_void) -> i64 {
    let Some(slot) = SEARCHES.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's slot.
    let search = unsafe { &mut *slot };
    let (low, high) = (search.low, search.high);
    if high <= low || high - low <= 1 {
        return 1;
    }
    let middle = low + (high - low) / 2;
    let key = if search.over == Over::Mappings as u64 {
        EXEC_MAPPINGS.get(middle as u32).map(|m| m.start)
    } else {
        row_at((search.first + middle) as u32).map(|row| row.pc as u64)
    };
    let Some(key) = key else {
        search.failed = 1;
        return 1;
    };
    if key <= search.target {
        search.low = middle;
    } else {
        search.high = middle;
    }
    0
}

/// Row `index` among all the target's.
#[inline(always)]
fn row_at(index: u32) -> Option<UnwindRow> {
    let chunk = UNWIND_ROWS.get(index / ROWS_PER_CHUNK as u32)?;
    Some(chunk[index as usize & (ROWS_PER_CHUNK - 1)])
}

/// What the callback is handed: where the frames go (the ring-buffer
/// record's stack, a pointer, which only the program's stack can pass).
#[repr(C)]
struct Output {
    stack: *mut [u64; MAX_STACK_DEPTH],
}

/// Fills `stack` with the instruction pointer and the return address of
/// each caller, as the frame-pointer walk does, by the tables; returns the
/// bytes filled, or `None` when `bpf_get_stack` must do it (another walk
/// took the window meanwhile). `mappings` is [`mappings`]' count, not 0.
#[inline(always)]
pub(super) unsafe fn walk_tables(
    regs: *mut aya_ebpf::bindings::pt_regs,
    stack: *mut [u64; MAX_STACK_DEPTH],
    tid: u32,
    mappings: u32,
) -> Option<i64> {
    // SAFETY (whole function): `regs` is the program's context, `stack` a
    // reserved ring-buffer slot, `walk` and `walker` this CPU's slots.
    let walk = WALKS.get_ptr_mut(0)?;
    let walker = WALKER.get_ptr_mut(0)?;
    let walks = unsafe { (*walker).walks }.wrapping_add(1);
    unsafe { (*walker).walks = walks };
    let top = if unsafe { (*walker).tid } == tid {
        unsafe { (*walker).top }
    } else {
        0
    };
    let (pc, sp, bp) = unsafe { ((*regs).rip, (*regs).rsp, (*regs).rbp) };
    unsafe {
        (*stack)[0] = pc;
        *walk = Walk {
            frame: Frame { pc, sp, bp },
            base: 0,
            limit: 0,
            top,
            trampoline_start: *UPROBE_TRAMPOLINE.get_ptr(trampoline::START)?,
            trampoline_end: *UPROBE_TRAMPOLINE.get_ptr(trampoline::END)?,
            filled: 1,
            mappings: mappings as u64,
            stale: 0,
            tid: tid as u64,
        };
    }
    let mut output = Output { stack };
    // SAFETY: the callback reads `output` as the `Output` it is, for as long
    // as the call lasts.
    unsafe {
        bpf_loop(
            (MAX_STACK_DEPTH - 1) as u32,
            unwind_frame as *mut c_void,
            (&raw mut output).cast(),
            0,
        )
    };
    let walk = unsafe { *walk };
    if walk.stale != 0 {
        unsafe { (*walker).top = 0 };
    }
    if unsafe { (*walker).walks } != walks {
        return None;
    }
    let top = if walk.limit > walk.top {
        walk.limit
    } else {
        walk.top
    };
    if top != 0 && walk.stale == 0 {
        unsafe {
            (*walker).tid = tid;
            (*walker).top = top;
        }
    }
    let filled = walk.filled & (2 * MAX_STACK_DEPTH as u64 - 1);
    Some(if filled > MAX_STACK_DEPTH as u64 {
        (MAX_STACK_DEPTH * 8) as i64
    } else {
        (filled * 8) as i64
    })
}

/// One frame up (`bpf_loop`'s callback): 0 to go on, 1 when the stack is
/// whole, full, or cannot be followed further.
#[inline(never)]
unsafe extern "C" fn unwind_frame(_index: u64, context: *mut c_void) -> i64 {
    let output: *mut Output = context.cast();
    let Some(walk) = WALKS.get_ptr_mut(0) else {
        return 1;
    };
    let Some(window) = WINDOW.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's slots; `context` is `walk_tables`' `Output`.
    let (walk, stack) = unsafe { (&mut *walk, (*output).stack) };
    let mut reader = Reader { walk, window };
    let filled = reader.walk.filled;
    if filled >= MAX_STACK_DEPTH as u64 {
        return 1;
    }
    let frame = reader.walk.frame;
    // Where the step reads (the return address, the saved rbp) lies between
    // the stack pointer and the CFA: the window starts at the stack pointer.
    if !reader.covers(frame.sp) {
        reader.reload(frame.sp);
    }
    let next = match step(&mut reader, frame, filled == 1) {
        Step::Caller(next) => next,
        Step::Outermost => return 1,
        Step::Cut(Cut::NoMapping) => match reader.frame_pointer_step(frame) {
            Some(next) => next,
            None => {
                count_cut(Cut::NoMapping);
                return 1;
            }
        },
        Step::Cut(cut) => {
            count_cut(cut);
            return 1;
        }
    };
    let slot = (filled as usize) & (MAX_STACK_DEPTH - 1);
    let walk = reader.walk;
    let mut next = next;
    let seen = trampoline::seen(walk.trampoline_start, walk.trampoline_end, next.pc);
    if seen != Seen::NotIt {
        // A probed function's return address, hidden by the trampoline:
        // the one its entry kept, else where it was read, marked, for
        // userspace to put back (the walk cannot go on from the
        // trampoline, which has no rows). Until userspace has seen where
        // the trampoline is, any frame may be one: its slot is looked up.
        match hidden_return(walk.tid as u32, next.sp - 8) {
            Some(ret) => next.pc = ret,
            None if seen == Seen::Maybe => {}
            None => {
                // SAFETY: `stack` is the reserved record's.
                unsafe { (*stack)[slot] = (next.sp - 8) | TRAMPOLINE_SLOT_MARK };
                walk.filled = filled + 1;
                count_cut(Cut::Trampoline);
                return 1;
            }
        }
    }
    // SAFETY: as above.
    unsafe { (*stack)[slot] = next.pc };
    walk.filled = filled + 1;
    walk.frame = next;
    0
}

#[inline(always)]
fn count_cut(cut: Cut) {
    if let Some(cuts) = UNWIND_CUTS.get_ptr_mut(0) {
        let slot = (cut as usize) & (CUT_SLOTS - 1);
        // SAFETY: this CPU's slot; a program runs on one CPU to its end.
        unsafe { (*cuts)[slot] += 1 };
    }
}

/// A step's view of the target: the walk's window, and the maps.
struct Reader<'a> {
    walk: &'a mut Walk,
    window: *mut [u64; WINDOW_WORDS],
}

impl Reader<'_> {
    fn covers(&self, address: u64) -> bool {
        address >= self.walk.base
            && address + 8 <= self.walk.limit
            && (address - self.walk.base) & 7 == 0
    }

    /// Reads the window anew from `from`: up to what the thread is known to
    /// hold, else to the end of `from`'s page (see the frame-pointer walk).
    fn reload(&mut self, from: u64) {
        self.walk.base = from;
        self.walk.limit = from;
        if !(USER_START..USER_END).contains(&from) {
            return;
        }
        let page = PAGE - (from & (PAGE - 1));
        let mut len = if self.walk.top > from + page {
            self.walk.top - from
        } else {
            page
        };
        if len > STACK_WINDOW_BYTES as u64 {
            len = STACK_WINDOW_BYTES as u64;
        }
        if len < 16 {
            return;
        }
        if read_window(self.window, from, len) == 0 {
            self.walk.limit = from + len;
        } else if len > page {
            // What an earlier walk read is gone.
            self.walk.stale = 1;
        }
    }

    /// The caller of a frame in code with no table (JIT code, a library
    /// mapped after the tables were made), by frame pointer if `rbp` still
    /// holds one: the walk goes on where the code was built with them.
    fn frame_pointer_step(&mut self, frame: Frame) -> Option<Frame> {
        let fp = frame.bp;
        if fp < frame.sp || fp < USER_START || fp > USER_END - 16 {
            return None;
        }
        let bp = self.read(fp)?;
        let pc = self.read(fp + 8)?;
        Some(Frame {
            pc,
            sp: fp + 16,
            bp,
        })
    }
}

impl Source for Reader<'_> {
    fn mapping(&mut self, pc: u64) -> Option<ExecMapping> {
        // The last mapping that starts at or before `pc`.
        let count = self.walk.mappings as u32;
        let low = search(Over::Mappings, 0, count, MAPPING_SEARCH_STEPS, pc)?;
        let mapping = *EXEC_MAPPINGS.get(low)?;
        (mapping.start <= pc && pc < mapping.end).then_some(mapping)
    }

    fn last_row_at_or_before(&mut self, first: u32, count: u32, relative: u64) -> Option<u32> {
        search(Over::Rows, first, count, SEARCH_STEPS, relative)
    }

    fn row(&mut self, index: u32) -> Option<UnwindRow> {
        let chunk = UNWIND_ROWS.get(index / ROWS_PER_CHUNK as u32)?;
        // The row's place in its chunk, through memory the verifier does not
        // track: an offset into a map value must be bounded, and the verifier
        // would otherwise trace that bound back to the binary search's `low`
        // and `high`, and then tell each of its 2^23 paths apart instead of
        // pruning the ones that only differ there.
        let within = opaque(index as u64)?;
        Some(chunk[within as usize & (ROWS_PER_CHUNK - 1)])
    }

    #[inline(always)]
    fn remembered(&mut self, pc: u64) -> Option<UnwindRow> {
        let entry = ROW_CACHE.get_ptr(cache_slot(pc))?;
        // SAFETY: this CPU's slot; each word is read once, and whatever
        // another walk wrote meanwhile fails the check.
        let (row, check) = unsafe {
            (
                core::ptr::read_volatile(core::ptr::addr_of!((*entry).row)),
                core::ptr::read_volatile(core::ptr::addr_of!((*entry).check)),
            )
        };
        (check == CachedRow::check(pc, &row)).then_some(row)
    }

    #[inline(always)]
    fn remember(&mut self, pc: u64, row: UnwindRow) {
        if let Some(entry) = ROW_CACHE.get_ptr_mut(cache_slot(pc)) {
            // SAFETY: this CPU's slot. A walk preempted between these two
            // writes by another that fills the same slot leaves an entry
            // that fails its check: a miss.
            unsafe {
                *entry = CachedRow {
                    check: CachedRow::check(pc, &row),
                    row,
                }
            };
        }
    }

    fn read(&mut self, address: u64) -> Option<u64> {
        if !self.covers(address) {
            if !(USER_START..USER_END).contains(&address) {
                return None;
            }
            // SAFETY: reads the target's memory without faulting.
            return unsafe { bpf_probe_read_user(address as *const u64) }.ok();
        }
        let word = ((address - self.walk.base) >> 3) as usize & (WINDOW_WORDS - 1);
        // SAFETY: this CPU's window, the index masked to its size.
        Some(unsafe { (*self.window)[word] })
    }
}
