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
//!
//! A sampled recording's kernel side files the sampled blocks alive in a map,
//! and sends only their frees. Should the map ever be full, the blocks it
//! cannot take come marked, and are filed here instead (`unfiled`): from
//! then on the kernel sends every other free as well, and those of blocks
//! filed here are written, the rest dropped.

mod pairing;
mod returns;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::mem::size_of;
use std::ops::Range;

use leakscope_probe_ebpf::{
    AllocEnterRecord, AllocExitRecord, BIRTH_SCOPE_KINDS, FreeRecord, PHASE_ENTER, RecordHeader,
    RecordKind, ScopeRecord, split_scope,
};

use leakscope_recording::{Phase, Record, RecordingWriter, ScopeKind};

use crate::attach::{LiveBytes, Stats};
use pairing::{InProgress, MAX_THREADS_IN_PROGRESS};
use returns::PendingReturn;

pub struct Capture<W: Write> {
    pub writer: RecordingWriter<W>,
    /// Live blocks seen by this capture, for `live_bytes` only.
    live: LiveBytes,
    /// Per thread, allocator calls entered and not yet returned.
    in_progress: HashMap<u32, InProgress>,
    /// Per thread, calls of those functions in progress, outermost first.
    pending_returns: HashMap<u32, Vec<PendingReturn>>,
    /// Per thread, the block its last record gave back through `__rust_dealloc`:
    /// a libc `free` of the same block next is the global allocator passing
    /// the free on, not a second free.
    rust_freed: HashMap<u32, u64>,
    /// Sampled blocks alive that the kernel's map could not take (see the
    /// module docs): their frees come among every other.
    unfiled: HashSet<u64>,
    /// Per thread, how deep inside a session's birth it is (the programs'
    /// `WINDOWS`, followed from the scope records): in a sampled recording
    /// every block made there is recorded whole, and counts for itself in
    /// the status line's live bytes, not as a sample.
    births: HashMap<u32, u32>,
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
            live: LiveBytes::default(),
            in_progress: HashMap::new(),
            pending_returns: HashMap::new(),
            rust_freed: HashMap::new(),
            unfiled: HashSet::new(),
            births: HashMap::new(),
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

    /// How the recording samples (the status line's live bytes are then an
    /// estimate) and names its sites.
    pub fn set_live(&mut self, live: LiveBytes, sampling: leakscope_recording::sampling::Sampling) {
        self.live = live;
        self.stats.sampled = sampling.is_sampled();
    }

    /// The status line's top leak candidate, if one grows.
    pub fn candidate(&mut self) -> Option<&crate::attach::Candidate> {
        self.live.candidate()
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
                Some(free) if self.passed_on(&free, rust_freed) => Ok(()),
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
            Some(RecordKind::UnfiledFree) => match read::<FreeRecord>(bytes) {
                Some(free) if self.passed_on(&free, rust_freed) => Ok(()),
                Some(free) if self.unfiled.remove(&free.addr) => self.free(&free),
                Some(_) => Ok(()),
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

    fn note_alloc(
        &mut self,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<leakscope_recording::StackId>,
    ) {
        if addr == 0 {
            return;
        }
        self.stats.allocs += 1;
        if self.stats.sampled && self.births.contains_key(&tid) {
            // Made inside a session's birth: recorded whole, not sampled.
            // Weighed as a sample, a leaked session's ~2 small birth blocks
            // read as ~1 MiB on the status line, and each took an entry of
            // its count: the probe's memory grew ~0.2 KiB a leaked session.
            self.live.alloc_whole(&mut self.stats, addr, size, stack);
        } else {
            self.live.alloc(&mut self.stats, addr, size, stack);
        }
    }

    /// A sampled recording's birth windows, as the programs open and close
    /// them (`probe-ebpf`'s `sample::window`): the entry and return of a
    /// birth scope with a return probe.
    fn follow_birth(&mut self, tid: u32, kind: u32, returns: bool, phase: Phase) {
        if !self.stats.sampled || !returns || !BIRTH_SCOPE_KINDS.contains(&kind) {
            return;
        }
        match phase {
            Phase::Enter => {
                if self.births.len() >= MAX_THREADS_IN_PROGRESS && !self.births.contains_key(&tid) {
                    self.births.clear();
                }
                *self.births.entry(tid).or_default() += 1;
            }
            Phase::Exit => {
                if let Some(depth) = self.births.get_mut(&tid) {
                    *depth -= 1;
                    if *depth == 0 {
                        self.births.remove(&tid);
                    }
                }
            }
        }
    }

    /// A recorded block was made at `addr`: `unfiled` when the kernel's map
    /// could not take it. Any block filed here at that address before is
    /// gone (its free was lost).
    fn file(&mut self, addr: u64, unfiled: bool) {
        if unfiled {
            self.stats.sampled_map_full = true;
            self.unfiled.insert(addr);
        } else if !self.unfiled.is_empty() {
            self.unfiled.remove(&addr);
        }
    }

    fn free(&mut self, record: &FreeRecord) -> io::Result<()> {
        if !self.unfiled.is_empty() && record.header.kind != RecordKind::UnfiledFree as u32 {
            self.unfiled.remove(&record.addr);
        }
        self.stats.frees += 1;
        self.live.free(&mut self.stats, record.addr);
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
        let (cookie, returns) = split_scope(record.scope);
        let Some(kind) = ScopeKind::from_cookie(cookie) else {
            return self.malformed();
        };
        let phase = if record.phase == PHASE_ENTER {
            Phase::Enter
        } else {
            Phase::Exit
        };
        self.follow_birth(record.header.tid, cookie, returns, phase);
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
