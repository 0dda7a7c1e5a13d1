//! Turning ring-buffer records into recording events.
//!
//! The kernel side sends fixed-size `#[repr(C)]` records (see `leakscope-probe-ebpf`);
//! here they become [`Record`]s (the writer deduplicates stacks), and a few
//! running figures feed the status line.
//!
//! An allocation arrives as two records, its entry and its return. They are
//! paired here, per thread, by stack pointer (a return's is its entry's plus
//! [`RETURN_SP_OFFSET`]), and only a thread's outermost allocator call is
//! recorded: an allocator function that calls another probed one (glibc's
//! `realloc(NULL, n)` calls `malloc`, musl's `aligned_alloc` calls `malloc`, a
//! `malloc` in a signal handler) must not record the inner call's block as
//! well, nor with the wrong size. The ring buffer keeps one thread's records in
//! order, so the pairing needs no timestamps; when the ring buffer dropped one
//! of a pair (counted as lost in the kernel), the other is dropped here.
//!
//! A process with its own `#[global_allocator]` is probed at two layers, the
//! Rust shims and libc (see the plan). A global allocator that wraps `System`
//! calls libc inside a shim: the nested allocation is dropped as above, and a
//! libc `free` is dropped when it is the same block a `__rust_dealloc` just
//! gave back on that thread (its next record), or when it is made inside an
//! open shim call (a wrapper's realloc moving the block).

use std::collections::HashMap;
use std::io::{self, Write};
use std::mem::size_of;
use std::ops::Range;

use leakscope_probe_ebpf::{
    ALLOC_FLAG_RUST, AllocCall, AllocEnterRecord, AllocExitRecord, FreeRecord, MAX_STACK_DEPTH,
    PHASE_ENTER, RETURN_SP_OFFSET, RecordHeader, RecordKind, ScopeRecord, TRAMPOLINE_SLOT_MARK,
    split_scope,
};

use leakscope_recording::{Phase, Record, RecordingWriter, ScopeKind, StackId, monotonic_ns};

/// Running figures for the live status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub events: u64,
    pub allocs: u64,
    pub frees: u64,
    pub live_bytes: u64,
    pub sessions_born: u64,
    pub workers_ended: u64,
    pub lost: u64,
    /// Records the kernel sent that we could not decode (should stay 0).
    pub malformed: u64,
    /// Allocation entries or returns whose other half never came.
    pub unpaired: u64,
    /// Stacks cut short at a uretprobe trampoline whose call's entry (and so
    /// its real return address) was not seen: a dropped record, a call that
    /// began while the probes were being attached, or another tool's
    /// uretprobe on the target. Not counted for an executable built without
    /// frame pointers, whose walks past the first frame read stale stack.
    pub trampolines_unresolved: u64,
}

/// A call of a lifecycle function with a return probe, entered and not yet
/// returned: while it runs, the kernel's trampoline stands in for `ret` on
/// the stack.
#[derive(Debug, Clone, Copy)]
struct PendingReturn {
    /// The stack pointer at entry (pointing to the return address).
    sp: u64,
    ret: u64,
}

/// More open lifecycle calls on one thread than any real nesting: entries
/// whose returns were lost pile up here, and the oldest are let go.
const MAX_PENDING_RETURNS: usize = 64;

/// Threads with open lifecycle calls beyond this are forgotten at once (threads
/// that ended inside one, or whose returns were lost).
const MAX_THREADS_PENDING: usize = 65_536;

/// Allocator calls in progress on one thread, outermost first.
type InProgress = Vec<AllocEnterRecord>;

/// More calls in progress on one thread than any real nesting: entries whose
/// returns were lost pile up here, and the oldest are let go.
const MAX_NESTED_CALLS: usize = 16;

/// Threads with calls in progress beyond this are forgotten at once (their
/// returns were lost: a thread with a call in progress is inside the allocator).
const MAX_THREADS_IN_PROGRESS: usize = 65_536;

/// A call still open this long before a nested call began is not really
/// open: its return was dropped. Allocator calls take microseconds; this
/// leaves room for a thread descheduled inside one.
const STALE_CALL_NS: u64 = 1_000_000_000;

pub struct Capture<W: Write> {
    pub writer: RecordingWriter<W>,
    /// Live blocks seen by this capture (addr -> size), for `live_bytes` only.
    live: HashMap<u64, u64>,
    /// Per thread, allocator calls entered and not yet returned.
    in_progress: HashMap<u32, InProgress>,
    /// Per thread, calls of those functions in progress, outermost first.
    pending_returns: HashMap<u32, Vec<PendingReturn>>,
    /// Per thread, the block its last record gave back through `__rust_dealloc`:
    /// a libc `free` of the same block next is the global allocator passing
    /// the free on, not a second free.
    rust_freed: HashMap<u32, u64>,
    /// The target's `[uprobes]` mapping, once known (see [`crate::trampoline`]).
    trampoline: Option<Range<u64>>,
    /// The executable was built without frame pointers: its stacks are walked
    /// through whatever `rbp` holds, and a trampoline address found that way
    /// (a stale copy in dead stack) says nothing about lost records.
    frame_pointers_omitted: bool,
    pub stats: Stats,
}

impl<W: Write> Capture<W> {
    pub fn new(writer: RecordingWriter<W>) -> Self {
        Self {
            writer,
            live: HashMap::new(),
            in_progress: HashMap::new(),
            pending_returns: HashMap::new(),
            rust_freed: HashMap::new(),
            trampoline: None,
            frame_pointers_omitted: false,
            stats: Stats::default(),
        }
    }

    /// Where the kernel's uretprobe trampoline is: from the moment the
    /// programs are told (see [`crate::trampoline::publish`]) their walks keep
    /// its address where a probed function's return address was.
    pub fn set_trampoline(&mut self, region: Range<u64>) {
        self.trampoline = Some(region);
    }

    /// What the executable's code says of its frame pointers (see
    /// [`Stats::trampolines_unresolved`]).
    pub fn set_frame_pointers(&mut self, frame_pointers: leakscope_recording::FramePointers) {
        self.frame_pointers_omitted = frame_pointers == leakscope_recording::FramePointers::Omitted;
    }

    /// Decodes one ring-buffer record and appends what it says.
    pub fn handle(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(header) = read::<RecordHeader>(bytes) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        let kind = RecordKind::from_u32(header.kind);
        // What a thread's `__rust_dealloc` gave back matters to its next record only.
        let rust_freed = if self.rust_freed.is_empty() {
            None
        } else {
            self.rust_freed.remove(&header.tid)
        };
        match kind {
            Some(RecordKind::AllocEnter) => match read::<AllocEnterRecord>(bytes) {
                Some(enter) => {
                    self.enter(enter);
                    Ok(())
                }
                None => self.malformed(),
            },
            Some(RecordKind::AllocExit) => match read::<AllocExitRecord>(bytes) {
                Some(exit) => self.exit(&exit),
                None => self.malformed(),
            },
            Some(RecordKind::Free) => match read::<FreeRecord>(bytes) {
                Some(free) if self.passed_on_by_rust(&free, rust_freed) => Ok(()),
                Some(free) => self.free(&free),
                None => self.malformed(),
            },
            Some(RecordKind::RustFree) => match read::<FreeRecord>(bytes) {
                Some(free) => {
                    if self.rust_freed.len() >= MAX_THREADS_IN_PROGRESS {
                        self.rust_freed.clear();
                    }
                    self.rust_freed.insert(free.header.tid, free.addr);
                    self.free(&free)
                }
                None => self.malformed(),
            },
            Some(RecordKind::Scope) => match read::<ScopeRecord>(bytes) {
                Some(scope) => self.scope(&scope),
                None => self.malformed(),
            },
            None => self.malformed(),
        }
    }

    fn malformed(&mut self) -> io::Result<()> {
        self.stats.malformed += 1;
        Ok(())
    }

    fn enter(&mut self, mut enter: AllocEnterRecord) {
        if enter.header.ts_ns == 0 {
            // The kernel times realloc's entries only (see `AllocEnterRecord`);
            // the others are timed on arrival, a drain period late at most
            // unless the ring buffer is backed up: late enough to judge a call
            // open for a second, and never earlier than the call.
            enter.header.ts_ns = monotonic_ns();
        }
        if self.in_progress.len() >= MAX_THREADS_IN_PROGRESS
            && !self.in_progress.contains_key(&enter.header.tid)
        {
            let stale = self.in_progress.values().map(|c| c.len() as u64).sum();
            self.in_progress.clear();
            self.lost_returns(enter.header.ts_ns, stale);
        }
        let calls = self.in_progress.entry(enter.header.tid).or_default();
        // Open calls this one cannot be nested in had their returns dropped: one
        // deeper than it (a lower stack pointer), or one still open although a
        // record was dropped since it began, or long ago.
        let before = calls.len();
        calls.retain(|open| {
            open.sp >= enter.sp
                && open.drops == enter.drops
                && enter.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS
        });
        let mut stale = (before - calls.len()) as u64;
        if calls.len() == MAX_NESTED_CALLS {
            calls.remove(0);
            stale += 1;
        }
        calls.push(enter);
        self.lost_returns(enter.header.ts_ns, stale);
    }

    /// Allocator calls whose returns the ring buffer dropped: each is an
    /// allocation not recorded. (The kernel counts a dropped entry itself, and
    /// not a dropped return, so that a call whose two records were both dropped
    /// counts once.)
    fn lost_returns(&mut self, ts: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.stats.lost += count;
        self.stats.unpaired += count;
        let _ = self.writer.push(Record::Lost {
            ts,
            reason: leakscope_recording::LostReason::RingFull,
            count,
        });
    }

    /// The end of the recording: calls still in progress (the probes were
    /// detached inside them, or their returns were dropped) are lost
    /// allocations, and records that did not decode are lost events, written
    /// as such so the report counts them too.
    pub fn finish(&mut self, ts: u64) -> io::Result<()> {
        let left = self.in_progress.values().map(|c| c.len() as u64).sum();
        self.in_progress.clear();
        self.lost_returns(ts, left);
        if self.stats.malformed > 0 {
            self.stats.lost += self.stats.malformed;
            self.writer.push(Record::Lost {
                ts,
                reason: leakscope_recording::LostReason::Malformed,
                count: self.stats.malformed,
            })?;
        }
        Ok(())
    }

    /// A return: pairs it with its entry and records the block if the call was
    /// its thread's outermost.
    fn exit(&mut self, exit: &AllocExitRecord) -> io::Result<()> {
        let tid = exit.header.tid;
        let Some(calls) = self.in_progress.get_mut(&tid) else {
            // Its entry was dropped (and counted by the kernel).
            self.stats.unpaired += 1;
            return Ok(());
        };
        let entry_sp = exit.sp.wrapping_sub(RETURN_SP_OFFSET);
        // Innermost first: the entry of this return. Calls entered after it
        // (deeper) were nested in it and lost their returns.
        let Some(at) = calls.iter().rposition(|c| c.sp == entry_sp) else {
            self.stats.unpaired += 1;
            return Ok(());
        };
        self.stats.unpaired += (calls.len() - at - 1) as u64;
        calls.truncate(at + 1);
        let enter = calls.pop().expect("rposition found it");
        // What is left are the calls this one is nested in (their entries
        // checked that), unless one has been open implausibly long.
        let before = calls.len();
        calls.retain(|open| exit.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS);
        let stale = (before - calls.len()) as u64;
        let outermost = calls.is_empty();
        if outermost {
            self.in_progress.remove(&tid);
        }
        self.lost_returns(exit.header.ts_ns, stale);
        let call = AllocCall::from_u32(enter.call);
        if !outermost || call.map(AllocCall::exit) != AllocCall::from_u32(exit.call) {
            return Ok(());
        }
        let stack = self.stack_id(exit)?;
        let (ts, size, addr) = (exit.header.ts_ns, enter.size, exit.addr);
        let event = match call {
            Some(AllocCall::Realloc) => {
                if let Some(old_size) = self.live.remove(&enter.ptr_arg) {
                    self.stats.live_bytes -= old_size;
                }
                Record::Realloc {
                    ts,
                    tid,
                    old: enter.ptr_arg,
                    new: addr,
                    size,
                    stack,
                    entry_ts: enter.header.ts_ns,
                }
            }
            // A failed posix_memalign wrote nothing: there is no block.
            Some(AllocCall::PosixMemalign) if addr == 0 => return Ok(()),
            _ => Record::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            },
        };
        self.note_alloc(addr, size);
        self.stats.events += 1;
        self.writer.push(event)
    }

    fn note_alloc(&mut self, addr: u64, size: u64) {
        if addr == 0 {
            return;
        }
        self.stats.allocs += 1;
        if let Some(old) = self.live.insert(addr, size) {
            self.stats.live_bytes -= old;
        }
        self.stats.live_bytes += size;
    }

    /// Whether a libc `free` is the global allocator's own, made for a Rust
    /// shim call already recorded: the block `__rust_dealloc` just gave back
    /// on this thread (`rust_freed`), or a free inside a shim call still open
    /// on it (a realloc that moved the block).
    fn passed_on_by_rust(&self, free: &FreeRecord, rust_freed: Option<u64>) -> bool {
        if rust_freed == Some(free.addr) {
            return true;
        }
        self.in_progress.get(&free.header.tid).is_some_and(|calls| {
            calls.iter().any(|open| {
                open.flags & ALLOC_FLAG_RUST != 0
                    && free.header.ts_ns.saturating_sub(open.header.ts_ns) < STALE_CALL_NS
            })
        })
    }

    fn free(&mut self, record: &FreeRecord) -> io::Result<()> {
        self.stats.frees += 1;
        if let Some(size) = self.live.remove(&record.addr) {
            self.stats.live_bytes -= size;
        }
        self.stats.events += 1;
        self.writer.push(Record::Free {
            ts: record.header.ts_ns,
            tid: record.header.tid,
            addr: record.addr,
        })
    }

    fn scope(&mut self, record: &ScopeRecord) -> io::Result<()> {
        // A function with a return probe says so in every record (its
        // probes' cookie): its entries' return addresses replace the
        // trampoline in the stacks recorded while it runs.
        let (kind, returns) = split_scope(record.scope);
        let Some(kind) = ScopeKind::from_cookie(kind) else {
            return self.malformed();
        };
        let phase = if record.phase == PHASE_ENTER {
            Phase::Enter
        } else {
            Phase::Exit
        };
        match (kind, phase) {
            (ScopeKind::SessionCreate, Phase::Enter) => self.stats.sessions_born += 1,
            (ScopeKind::WorkerDrop, Phase::Enter) => self.stats.workers_ended += 1,
            _ => {}
        }
        if returns {
            self.track_return(record, phase);
        }
        self.stats.events += 1;
        self.writer.push(Record::Scope {
            ts: record.header.ts_ns,
            tid: record.header.tid,
            kind,
            phase,
            arg: record.arg,
        })
    }

    /// Keeps the thread's open calls of a function with a return probe. A call
    /// is matched with its return by stack pointer; calls deeper than the one
    /// entered or returned from have returned already (their records were
    /// dropped), and are let go.
    fn track_return(&mut self, record: &ScopeRecord, phase: Phase) {
        let tid = record.header.tid;
        if self.pending_returns.len() >= MAX_THREADS_PENDING
            && !self.pending_returns.contains_key(&tid)
        {
            self.pending_returns.clear();
        }
        let open = self.pending_returns.entry(tid).or_default();
        match phase {
            Phase::Enter => {
                open.retain(|call| call.sp > record.sp);
                if open.len() == MAX_PENDING_RETURNS {
                    open.remove(0);
                }
                open.push(PendingReturn {
                    sp: record.sp,
                    ret: record.ret,
                });
            }
            Phase::Exit => {
                let entry_sp = record.sp.wrapping_sub(RETURN_SP_OFFSET);
                open.retain(|call| call.sp > entry_sp);
            }
        }
        if open.is_empty() {
            self.pending_returns.remove(&tid);
        }
    }

    /// The id of this record's stack (the writer writes a `Stack` record the first time).
    fn stack_id(&mut self, record: &AllocExitRecord) -> io::Result<Option<StackId>> {
        if record.stack_bytes <= 0 {
            return Ok(None);
        }
        let filled = (record.stack_bytes as usize / 8).min(MAX_STACK_DEPTH);
        let mut stack = record.stack;
        let mut frames: &[u64] = &stack[..filled];
        if frames.iter().any(|&frame| self.is_trampoline(frame)) {
            let kept = self.restore_returns(record.header.tid, record.sp, &mut stack[..filled]);
            frames = &stack[..kept];
        }
        while let [rest @ .., 0] = frames {
            frames = rest;
        }
        self.writer.stack(frames)
    }

    /// Whether a stack frame stands for a return address the kernel's
    /// trampoline took: marked by the programs' walk with the slot it was read
    /// from, or the trampoline's own address (in a stack from `bpf_get_stack`,
    /// on kernels that do not put the real address back themselves).
    fn is_trampoline(&self, frame: u64) -> bool {
        frame & TRAMPOLINE_SLOT_MARK != 0
            || self
                .trampoline
                .as_ref()
                .is_some_and(|range| range.contains(&frame))
    }

    /// Puts the real return addresses in `frames` (innermost first) where the
    /// trampoline stands, for an allocation that returned with stack pointer
    /// `sp`. A marked frame names the slot its return address was read from,
    /// which is the stack pointer of exactly one open call's entry: its return
    /// address goes there. A bare trampoline address takes the innermost open
    /// call above the allocation not yet used, as the kernel pairs them.
    /// Returns how many frames to keep: all, or those below the first
    /// trampoline no open call accounts for.
    fn restore_returns(&mut self, tid: u32, sp: u64, frames: &mut [u64]) -> usize {
        let open = self
            .pending_returns
            .get(&tid)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Open calls before this index (outermost first) are left for bare
        // trampoline addresses, which go outward.
        let mut next = open.len();
        let mut kept = frames.len();
        for (i, slot_or_frame) in frames.iter_mut().enumerate() {
            let frame = *slot_or_frame;
            if !self.is_trampoline(frame) {
                continue;
            }
            let found = if frame & TRAMPOLINE_SLOT_MARK != 0 {
                let slot = frame & !TRAMPOLINE_SLOT_MARK;
                open.iter().rposition(|call| call.sp == slot)
            } else {
                open[..next].iter().rposition(|call| call.sp > sp)
            };
            match found {
                Some(at) if open[at].ret != 0 => {
                    *slot_or_frame = open[at].ret;
                    next = at;
                }
                _ => {
                    kept = i;
                    break;
                }
            }
        }
        if kept < frames.len() && !self.frame_pointers_omitted {
            self.stats.trampolines_unresolved += 1;
        }
        kept
    }
}

/// Reads a `T` from the front of `bytes` (ring-buffer items are 8-aligned, but
/// `read_unaligned` does not rely on it).
fn read<T: Copy>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: length checked; T is a plain-old-data #[repr(C)] record.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leakscope_probe_ebpf::{PHASE_EXIT, scope_cookie};
    use leakscope_recording::{
        AllocLayer, EndReason, Header, Producer, RecordingReader, Settings, target::Target,
    };

    fn capture() -> Capture<Vec<u8>> {
        let target = Target::inspect(std::process::id()).expect("inspect self");
        let settings = Settings {
            alloc_layer: AllocLayer::Libc,
            alloc_layer_reason: "test".into(),
            stack_depth: MAX_STACK_DEPTH as u32,
            preset: None,
            scope_probes: vec![],
            missing_scopes: vec![],
            scope_functions: vec![],
            notes: vec![],
        };
        let header = Header::new(
            Producer::Ebpf,
            "test".into(),
            target.identity(None),
            settings,
        );
        Capture::new(RecordingWriter::new(Vec::new(), &header).expect("header"))
    }

    /// Every record a capture wrote.
    fn written(capture: Capture<Vec<u8>>) -> impl Iterator<Item = Record> {
        let bytes = capture
            .writer
            .finish(Record::End {
                ts: 0,
                reason: EndReason::Finished,
            })
            .expect("finish");
        RecordingReader::new(std::io::Cursor::new(bytes), std::path::Path::new("test"))
            .expect("readable")
    }

    /// The memory records a capture wrote.
    fn records(capture: Capture<Vec<u8>>) -> Vec<Record> {
        written(capture)
            .filter(|r| matches!(r, Record::Alloc { .. } | Record::Realloc { .. }))
            .collect()
    }

    fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
        // SAFETY: T is a plain-old-data #[repr(C)] record.
        unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    /// An entry at `sp`, at time `sp` unless `at` says otherwise.
    fn enter(c: &mut Capture<Vec<u8>>, tid: u32, sp: u64, call: AllocCall, size: u64, old: u64) {
        enter_at(c, tid, sp, sp, 0, call, size, old);
    }

    /// The entry of a Rust allocator shim.
    fn enter_rust(c: &mut Capture<Vec<u8>>, tid: u32, sp: u64, call: AllocCall, size: u64) {
        enter_flagged(c, tid, sp, sp, 0, ALLOC_FLAG_RUST, call, size, 0);
    }

    fn header(kind: RecordKind, tid: u32, ts_ns: u64) -> RecordHeader {
        RecordHeader {
            kind: kind as u32,
            tid,
            ts_ns,
        }
    }

    /// `drops`: records the ring buffer had dropped when it was entered.
    #[allow(clippy::too_many_arguments)]
    fn enter_at(
        c: &mut Capture<Vec<u8>>,
        tid: u32,
        sp: u64,
        at: u64,
        drops: u64,
        call: AllocCall,
        size: u64,
        old: u64,
    ) {
        enter_flagged(c, tid, sp, at, drops, 0, call, size, old);
    }

    #[allow(clippy::too_many_arguments)]
    fn enter_flagged(
        c: &mut Capture<Vec<u8>>,
        tid: u32,
        sp: u64,
        at: u64,
        drops: u64,
        flags: u32,
        call: AllocCall,
        size: u64,
        old: u64,
    ) {
        let record = AllocEnterRecord {
            header: header(RecordKind::AllocEnter, tid, at),
            call: call as u32,
            flags,
            size,
            ptr_arg: old,
            sp,
            drops,
        };
        c.handle(&bytes_of(&record)).unwrap();
    }

    fn exit(c: &mut Capture<Vec<u8>>, tid: u32, entry_sp: u64, call: AllocCall, addr: u64) {
        exit_at(c, tid, entry_sp, entry_sp + 1, call, addr);
    }

    fn exit_at(
        c: &mut Capture<Vec<u8>>,
        tid: u32,
        entry_sp: u64,
        at: u64,
        call: AllocCall,
        addr: u64,
    ) {
        let record = AllocExitRecord {
            header: header(RecordKind::AllocExit, tid, at),
            call: call as u32,
            _pad: 0,
            addr,
            sp: entry_sp + RETURN_SP_OFFSET,
            stack_bytes: 8,
            stack: [0x1000 + entry_sp; MAX_STACK_DEPTH],
        };
        c.handle(&bytes_of(&record)).unwrap();
    }

    #[test]
    fn entry_and_return_make_one_allocation_with_the_return_stack() {
        let mut c = capture();
        enter(&mut c, 7, 1000, AllocCall::Calloc, 64, 0);
        exit(&mut c, 7, 1000, AllocCall::Malloc, 0x5000);
        assert_eq!(c.stats.unpaired, 0);
        match &records(c)[..] {
            [
                Record::Alloc {
                    tid: 7,
                    addr: 0x5000,
                    size: 64,
                    stack: Some(_),
                    ..
                },
            ] => {}
            other => panic!("{other:?}"),
        }
    }

    fn free(c: &mut Capture<Vec<u8>>, kind: RecordKind, tid: u32, addr: u64) {
        let record = FreeRecord {
            header: header(kind, tid, 10),
            addr,
        };
        c.handle(&bytes_of(&record)).unwrap();
    }

    /// Both layers probed: a global allocator wrapping `System` passes each
    /// call on to libc. The libc calls made inside a shim are that call;
    /// a libc call of the thread's own, between shim calls, is recorded.
    #[test]
    fn a_global_allocator_passing_calls_on_to_libc_counts_each_once() {
        let mut c = capture();
        // __rust_alloc -> malloc.
        enter_rust(&mut c, 1, 1000, AllocCall::Malloc, 40);
        enter(&mut c, 1, 900, AllocCall::Malloc, 40, 0);
        exit(&mut c, 1, 900, AllocCall::Malloc, 0x100);
        exit(&mut c, 1, 1000, AllocCall::Malloc, 0x100);
        // __rust_realloc moving the block: malloc + free inside.
        enter_flagged(
            &mut c,
            1,
            1000,
            1000,
            0,
            ALLOC_FLAG_RUST,
            AllocCall::Realloc,
            80,
            0x100,
        );
        enter(&mut c, 1, 900, AllocCall::Malloc, 80, 0);
        exit(&mut c, 1, 900, AllocCall::Malloc, 0x200);
        free(&mut c, RecordKind::Free, 1, 0x100);
        exit(&mut c, 1, 1000, AllocCall::Realloc, 0x200);
        // __rust_dealloc -> free of the same block: one free.
        free(&mut c, RecordKind::RustFree, 1, 0x200);
        free(&mut c, RecordKind::Free, 1, 0x200);
        // C code's own malloc and free on the same thread.
        enter(&mut c, 1, 1000, AllocCall::Malloc, 8, 0);
        exit(&mut c, 1, 1000, AllocCall::Malloc, 0x300);
        free(&mut c, RecordKind::RustFree, 2, 0x400);
        free(&mut c, RecordKind::Free, 1, 0x300);
        // A libc free that is not the block the Rust free gave back.
        free(&mut c, RecordKind::RustFree, 1, 0x500);
        free(&mut c, RecordKind::Free, 1, 0x600);
        assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
        let (mut allocs, mut frees) = (Vec::new(), Vec::new());
        for record in written(c) {
            match record {
                Record::Alloc { addr, size, .. } => allocs.push((addr, size)),
                Record::Realloc { old, new, size, .. } => allocs.push((old + new, size)),
                Record::Free { addr, .. } => frees.push(addr),
                _ => {}
            }
        }
        assert_eq!(allocs, [(0x100, 40), (0x100 + 0x200, 80), (0x300, 8)]);
        assert_eq!(frees, [0x200, 0x400, 0x300, 0x500, 0x600]);
    }

    #[test]
    fn a_nested_call_is_not_recorded_and_threads_do_not_mix() {
        let mut c = capture();
        enter(&mut c, 1, 1000, AllocCall::Realloc, 128, 0x4000);
        enter(&mut c, 2, 5000, AllocCall::Malloc, 32, 0);
        enter(&mut c, 1, 900, AllocCall::Malloc, 128, 0);
        exit(&mut c, 1, 900, AllocCall::Malloc, 0x6000);
        exit(&mut c, 2, 5000, AllocCall::Malloc, 0x7000);
        exit(&mut c, 1, 1000, AllocCall::Realloc, 0x6000);
        assert_eq!(c.stats.unpaired, 0);
        match &records(c)[..] {
            [
                Record::Alloc {
                    tid: 2,
                    addr: 0x7000,
                    size: 32,
                    ..
                },
                Record::Realloc {
                    tid: 1,
                    old: 0x4000,
                    new: 0x6000,
                    size: 128,
                    entry_ts: 1000,
                    ..
                },
            ] => {}
            other => panic!("{other:?}"),
        }
    }

    /// The kernel times only realloc's entries; the others come with time 0 and
    /// are timed on arrival. Such a call, and one nested in it, pair as usual
    /// with returns timed by the kernel (earlier than the arrival, here).
    #[test]
    fn untimed_entries_pair_and_nest_like_timed_ones() {
        let mut c = capture();
        enter_at(&mut c, 3, 1000, 0, 0, AllocCall::AlignedAlloc, 48, 0);
        enter_at(&mut c, 3, 900, 0, 0, AllocCall::Malloc, 64, 0);
        exit_at(&mut c, 3, 900, 5, AllocCall::Malloc, 0x8000);
        exit_at(&mut c, 3, 1000, 6, AllocCall::Malloc, 0x8000);
        assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
        match &records(c)[..] {
            [
                Record::Alloc {
                    ts: 6,
                    addr: 0x8000,
                    size: 48,
                    ..
                },
            ] => {}
            other => panic!("{other:?}"),
        }
    }

    /// glibc's `realloc(NULL, n)` jumps to `malloc`: both are entered at the
    /// same stack pointer, and both return probes fire at the one return.
    #[test]
    fn a_tail_call_is_nested_in_the_call_that_made_it() {
        let mut c = capture();
        enter(&mut c, 1, 1000, AllocCall::Realloc, 64, 0);
        enter(&mut c, 1, 1000, AllocCall::Malloc, 64, 0);
        exit(&mut c, 1, 1000, AllocCall::Malloc, 0x3000);
        exit(&mut c, 1, 1000, AllocCall::Realloc, 0x3000);
        assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
        match &records(c)[..] {
            [
                Record::Realloc {
                    old: 0,
                    new: 0x3000,
                    size: 64,
                    ..
                },
            ] => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lost_halves_drop_their_pair_and_nothing_else() {
        let mut c = capture();
        // The nested call's return was lost: the outer one still pairs.
        enter(&mut c, 1, 1000, AllocCall::Malloc, 16, 0);
        enter(&mut c, 1, 900, AllocCall::Malloc, 99, 0);
        exit(&mut c, 1, 1000, AllocCall::Malloc, 0x5000);
        // A return whose entry was lost.
        exit(&mut c, 1, 2000, AllocCall::Malloc, 0x9000);
        // A failed posix_memalign has no block.
        enter(&mut c, 1, 1000, AllocCall::PosixMemalign, 64, 0x100);
        exit(&mut c, 1, 1000, AllocCall::PosixMemalign, 0);
        assert_eq!(c.stats.unpaired, 2);
        assert!(c.in_progress.is_empty());
        match &records(c)[..] {
            [
                Record::Alloc {
                    addr: 0x5000,
                    size: 16,
                    ..
                },
            ] => {}
            other => panic!("{other:?}"),
        }
    }

    /// A record that does not decode used to be counted in a figure nobody
    /// printed: it is a lost event, written as one at the end.
    #[test]
    fn records_that_do_not_decode_are_lost_events_in_the_recording() {
        let mut c = capture();
        c.handle(&[1, 2, 3]).unwrap();
        let mut bogus = bytes_of(&header(RecordKind::AllocExit, 1, 5));
        bogus.truncate(bogus.len() - 1);
        c.handle(&bogus).unwrap();
        c.finish(9).unwrap();
        assert_eq!((c.stats.malformed, c.stats.lost), (2, 2));
        let lost: Vec<(leakscope_recording::LostReason, u64)> = written(c)
            .filter_map(|r| match r {
                Record::Lost { reason, count, .. } => Some((reason, count)),
                _ => None,
            })
            .collect();
        assert_eq!(lost, [(leakscope_recording::LostReason::Malformed, 2)]);
    }

    #[test]
    fn a_call_whose_return_was_dropped_is_lost_and_does_not_hide_later_ones() {
        let mut c = capture();
        // Same frame again, a record dropped in between: the first call's
        // return was that record.
        enter_at(&mut c, 1, 1000, 10, 0, AllocCall::Malloc, 8, 0);
        enter_at(&mut c, 1, 1000, 20, 1, AllocCall::Malloc, 16, 0);
        exit_at(&mut c, 1, 1000, 21, AllocCall::Malloc, 0x1000);
        assert_eq!(c.stats.lost, 1);
        // A deeper frame, long after an open call: that call is not open.
        enter_at(&mut c, 1, 2000, 30, 1, AllocCall::Malloc, 8, 0);
        enter_at(
            &mut c,
            1,
            900,
            30 + 2 * STALE_CALL_NS,
            1,
            AllocCall::Malloc,
            32,
            0,
        );
        exit_at(
            &mut c,
            1,
            900,
            31 + 2 * STALE_CALL_NS,
            AllocCall::Malloc,
            0x2000,
        );
        assert_eq!(c.stats.lost, 2);
        // Detached inside a call: lost too.
        enter(&mut c, 1, 1000, AllocCall::Malloc, 64, 0);
        c.finish(u64::MAX).unwrap();
        assert_eq!(c.stats.lost, 3);
        let lost: u64 = {
            let bytes = c
                .writer
                .finish(Record::End {
                    ts: 0,
                    reason: EndReason::Finished,
                })
                .unwrap();
            let records: Vec<Record> =
                RecordingReader::new(&bytes[..], std::path::Path::new("test"))
                    .unwrap()
                    .collect();
            let allocs: Vec<u64> = records
                .iter()
                .filter_map(|r| match r {
                    Record::Alloc { addr, .. } => Some(*addr),
                    _ => None,
                })
                .collect();
            assert_eq!(allocs, [0x1000, 0x2000]);
            records
                .iter()
                .filter_map(|r| match r {
                    Record::Lost { count, .. } => Some(*count),
                    _ => None,
                })
                .sum()
        };
        assert_eq!(lost, 3, "each lost call is in the recording once");
    }

    /// The frames of every stack a capture wrote, in order.
    fn stacks(capture: Capture<Vec<u8>>) -> Vec<Vec<u64>> {
        written(capture)
            .filter_map(|r| match r {
                Record::Stack { frames, .. } => Some(frames),
                _ => None,
            })
            .collect()
    }

    /// The kinds the tests' preset probes with a return probe.
    const RETURNING: [ScopeKind; 2] = [ScopeKind::SessionCreate, ScopeKind::WorkerSpawn];

    fn scope(c: &mut Capture<Vec<u8>>, tid: u32, kind: ScopeKind, phase: u32, sp: u64, ret: u64) {
        scope_probe(c, tid, kind, RETURNING.contains(&kind), phase, sp, ret);
    }

    /// A scope record from a function probed with (`returns`) or without a
    /// return probe.
    fn scope_probe(
        c: &mut Capture<Vec<u8>>,
        tid: u32,
        kind: ScopeKind,
        returns: bool,
        phase: u32,
        sp: u64,
        ret: u64,
    ) {
        let record = ScopeRecord {
            header: header(RecordKind::Scope, tid, 1),
            scope: scope_cookie(kind as u32, returns, 0) as u32,
            phase,
            arg: 0,
            sp,
            ret,
        };
        c.handle(&bytes_of(&record)).unwrap();
    }

    /// An allocation at `entry_sp` whose stack is `frames`.
    fn alloc_with_stack(c: &mut Capture<Vec<u8>>, tid: u32, entry_sp: u64, frames: &[u64]) {
        enter(c, tid, entry_sp, AllocCall::Malloc, 16, 0);
        let mut stack = [0; MAX_STACK_DEPTH];
        stack[..frames.len()].copy_from_slice(frames);
        let record = AllocExitRecord {
            header: header(RecordKind::AllocExit, tid, entry_sp + 1),
            call: AllocCall::Malloc as u32,
            _pad: 0,
            addr: 0x5000 + entry_sp,
            sp: entry_sp + RETURN_SP_OFFSET,
            stack_bytes: (frames.len() * 8) as i64,
            stack,
        };
        c.handle(&bytes_of(&record)).unwrap();
    }

    const TRAMPOLINE: u64 = 0x7fff_f000;

    /// A frame the walk marked: the trampoline was read from `slot`.
    fn slot(slot: u64) -> u64 {
        slot | TRAMPOLINE_SLOT_MARK
    }

    fn returning_capture() -> Capture<Vec<u8>> {
        let mut c = capture();
        c.set_trampoline(TRAMPOLINE..TRAMPOLINE + 0x1000);
        c
    }

    #[test]
    fn a_marked_trampoline_becomes_the_return_address_sent_from_its_slot() {
        let mut c = returning_capture();
        // session-create entered at sp 9000 (returns to 0xc1), worker-spawn
        // inside it at sp 8000 (returns to 0xc2); a poll (no return probe)
        // at 7000 sends a word that is no return address.
        scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
        scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
        scope(&mut c, 3, ScopeKind::WorkerPoll, PHASE_ENTER, 7000, 0xdead);
        alloc_with_stack(&mut c, 3, 6000, &[0xa0, slot(8000), 0xa1, slot(9000), 0xa2]);
        // Another thread's open calls are not this one's.
        alloc_with_stack(&mut c, 4, 6000, &[0xb0, slot(8000), 0xb1]);
        // worker-spawn returns; session-create is still open.
        scope(
            &mut c,
            3,
            ScopeKind::WorkerSpawn,
            PHASE_EXIT,
            8000 + RETURN_SP_OFFSET,
            0,
        );
        alloc_with_stack(&mut c, 3, 5000, &[0xa3, slot(9000), 0xa4]);
        // A slot no open call entered at (another tool's uretprobe).
        alloc_with_stack(&mut c, 3, 5000, &[0xa5, slot(8500), 0xa6]);
        assert_eq!(c.stats.trampolines_unresolved, 2);
        assert_eq!(
            stacks(c),
            vec![
                vec![0xa0, 0xc2, 0xa1, 0xc1, 0xa2],
                vec![0xb0],
                vec![0xa3, 0xc1, 0xa4],
                vec![0xa5],
            ]
        );
    }

    #[test]
    fn a_call_whose_return_was_dropped_takes_no_other_calls_frame() {
        let mut c = returning_capture();
        scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
        // Entered at 8000 and returned, its return record dropped.
        scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc3);
        // An allocation in a sibling call, deeper than the lost one's frame.
        alloc_with_stack(&mut c, 3, 7000, &[0xa0, slot(9000), 0xa1]);
        // A later call at the same depth: the one before has returned.
        scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
        alloc_with_stack(&mut c, 3, 6000, &[0xa2, slot(8000), 0xa3, slot(9000)]);
        // session-create returns, taking any call left open inside it.
        scope(
            &mut c,
            3,
            ScopeKind::SessionCreate,
            PHASE_EXIT,
            9000 + RETURN_SP_OFFSET,
            0,
        );
        assert!(!c.pending_returns.contains_key(&3));
        assert_eq!(c.stats.trampolines_unresolved, 0);
        assert_eq!(
            stacks(c),
            vec![vec![0xa0, 0xc1, 0xa1], vec![0xa2, 0xc2, 0xa3, 0xc1]]
        );
    }

    /// `bpf_get_stack` on a kernel that leaves the trampoline's address in
    /// its stacks (older kernels): paired innermost first, like the kernel.
    #[test]
    fn bare_trampoline_addresses_take_the_open_calls_innermost_first() {
        let mut c = returning_capture();
        scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
        scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
        alloc_with_stack(
            &mut c,
            3,
            6000,
            &[0xa0, TRAMPOLINE, 0xa1, TRAMPOLINE + 1, 0xa2],
        );
        alloc_with_stack(
            &mut c,
            3,
            6000,
            &[0xa0, TRAMPOLINE, 0xa1, TRAMPOLINE, TRAMPOLINE],
        );
        assert_eq!(c.stats.trampolines_unresolved, 1);
        assert_eq!(
            stacks(c),
            vec![
                vec![0xa0, 0xc2, 0xa1, 0xc1, 0xa2],
                vec![0xa0, 0xc2, 0xa1, 0xc1]
            ]
        );
    }

    /// A preset may probe one kind's functions with and without a return
    /// probe: only the calls that will return hide a return address, so only
    /// they take a trampoline's place, however the kind is probed elsewhere.
    #[test]
    fn only_calls_with_a_return_probe_stand_for_trampolines() {
        let mut c = returning_capture();
        scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
        // The same kind, another function, entry only: nothing was hidden.
        scope_probe(
            &mut c,
            3,
            ScopeKind::WorkerSpawn,
            false,
            PHASE_ENTER,
            7000,
            0,
        );
        alloc_with_stack(&mut c, 3, 6000, &[0xa0, 0xa1, TRAMPOLINE, 0xa2]);
        alloc_with_stack(&mut c, 3, 6000, &[0xa3, 0xa1, slot(8000), 0xa2]);
        assert_eq!(c.stats.trampolines_unresolved, 0);
        assert_eq!(
            stacks(c),
            vec![vec![0xa0, 0xa1, 0xc2, 0xa2], vec![0xa3, 0xa1, 0xc2, 0xa2]]
        );
    }
}
