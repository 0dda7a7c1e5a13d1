//! Turning ring-buffer records into recording events.
//!
//! The kernel side sends fixed-size `#[repr(C)]` records (see `leakscope-probe-ebpf`);
//! here each becomes a [`Record`] (the writer deduplicates stacks), and a few
//! running figures feed the status line.

use std::collections::HashMap;
use std::io::{self, Write};
use std::mem::size_of;

use leakscope_probe_ebpf::{
    AllocRecord, FreeRecord, MAX_STACK_DEPTH, PHASE_ENTER, RecordHeader, RecordKind, ScopeRecord,
};

use leakscope_recording::{Phase, Record, RecordingWriter, ScopeKind, StackId};

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
}

pub struct Capture<W: Write> {
    pub writer: RecordingWriter<W>,
    /// Live blocks seen by this capture (addr -> size), for `live_bytes` only.
    live: HashMap<u64, u64>,
    pub stats: Stats,
}

impl<W: Write> Capture<W> {
    pub fn new(writer: RecordingWriter<W>) -> Self {
        Self {
            writer,
            live: HashMap::new(),
            stats: Stats::default(),
        }
    }

    /// Decodes one ring-buffer record and appends what it says.
    pub fn handle(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(header) = read::<RecordHeader>(bytes) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        self.stats.events += 1;
        match RecordKind::from_u32(header.kind) {
            Some(kind @ (RecordKind::Alloc | RecordKind::Realloc)) => {
                match read::<AllocRecord>(bytes) {
                    Some(alloc) => self.alloc(kind, &alloc),
                    None => self.malformed(),
                }
            }
            Some(RecordKind::Free) => match read::<FreeRecord>(bytes) {
                Some(free) => self.free(&free),
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

    fn alloc(&mut self, kind: RecordKind, record: &AllocRecord) -> io::Result<()> {
        let stack = self.stack_id(record)?;
        let (ts, tid, size) = (record.header.ts_ns, record.header.tid, record.size);
        let event = if kind == RecordKind::Realloc {
            if let Some(old_size) = self.live.remove(&record.old_addr) {
                self.stats.live_bytes -= old_size;
            }
            Record::Realloc {
                ts,
                tid,
                old: record.old_addr,
                new: record.addr,
                size,
                stack,
                entry_ts: record.entry_ts_ns,
            }
        } else {
            Record::Alloc {
                ts,
                tid,
                addr: record.addr,
                size,
                stack,
            }
        };
        self.note_alloc(record.addr, size);
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

    fn free(&mut self, record: &FreeRecord) -> io::Result<()> {
        self.stats.frees += 1;
        if let Some(size) = self.live.remove(&record.addr) {
            self.stats.live_bytes -= size;
        }
        self.writer.push(Record::Free {
            ts: record.header.ts_ns,
            tid: record.header.tid,
            addr: record.addr,
        })
    }

    fn scope(&mut self, record: &ScopeRecord) -> io::Result<()> {
        let Some(kind) = ScopeKind::from_cookie(record.scope) else {
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
        self.writer.push(Record::Scope {
            ts: record.header.ts_ns,
            tid: record.header.tid,
            kind,
            phase,
            arg: record.arg,
        })
    }

    /// The id of this record's stack (the writer writes a `Stack` record the first time).
    fn stack_id(&mut self, record: &AllocRecord) -> io::Result<Option<StackId>> {
        if record.stack_bytes <= 0 {
            return Ok(None);
        }
        let filled = (record.stack_bytes as usize / 8).min(MAX_STACK_DEPTH);
        let mut frames: &[u64] = &record.stack[..filled];
        while let [rest @ .., 0] = frames {
            frames = rest;
        }
        self.writer.stack(frames)
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
