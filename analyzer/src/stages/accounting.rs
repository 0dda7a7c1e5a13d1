//! Accounting over time: live and reclaimed bytes per category and per session.
//!
//! Every block is charged, at allocation, to a category (from its stack) and to
//! the session that owns it (if any). After a session's worker ends, its blocks
//! freed within `grace` are **transient**; blocks still live at the end of the
//! recording, with the worker gone for longer than `grace`, are **retained**: the
//! leak signal. Live bytes per category are sampled every [`SAMPLE_INTERVAL_NS`].
//! Memory is O(live blocks + sessions + samples).

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::StackId;

use crate::model::{Category, PerCategory};
use crate::stages::objects::sessions::{SessionKey, SessionTracker};
use crate::stages::objects::tasks::{Cell, TaskKey};

/// Live bytes are sampled this often (recording time) for charts and traces.
pub const SAMPLE_INTERVAL_NS: u64 = 100_000_000;

/// Bytes of one session (or one key before merged keys are folded together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionBytes {
    pub allocated: u64,
    pub reclaimed: u64,
    /// Freed within the grace period after the worker ended.
    pub transient: u64,
    /// Still live at the end, worker gone for longer than the grace period.
    pub retained: u64,
    /// Still live at the end (retained or not).
    pub live_at_end: u64,
    /// `live_at_end` by part.
    pub parts: PerPart,
    /// Blocks of the session in the `session-map` category (what its map entry
    /// keeps alive: the handle's channel), and how many of them were freed.
    pub map_blocks: u64,
    pub map_blocks_freed: u64,
}

impl SessionBytes {
    /// Blocks of the map entry still live: the entry (or a copy of its handle) is kept.
    pub fn map_blocks_live(&self) -> u64 {
        self.map_blocks.saturating_sub(self.map_blocks_freed)
    }
}

impl std::ops::AddAssign for SessionBytes {
    fn add_assign(&mut self, other: Self) {
        self.allocated += other.allocated;
        self.reclaimed += other.reclaimed;
        self.transient += other.transient;
        self.retained += other.retained;
        self.live_at_end += other.live_at_end;
        self.parts += other.parts;
        self.map_blocks += other.map_blocks;
        self.map_blocks_freed += other.map_blocks_freed;
    }
}

use crate::model::{CategoryTotals, Part, PerPart, STAND_IN_WEIGHT, Sample};

/// A block allocated and not (yet) freed.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// When it was allocated.
    pub ts: u64,
    /// How many allocations the recording had made when this one was (set by
    /// [`Accounting::alloc`]): a clock of the target's activity, by which a
    /// site that keeps a block per request grows linearly however bursty the
    /// load was in time.
    pub seq: u64,
    /// The bytes this block counts for: its size, or in a sampled recording
    /// the estimate it stands for (`Sampling::weight`); every byte figure
    /// downstream sums these.
    pub size: u64,
    /// Its size in the target's address space (what a pointer into it may
    /// reach): `size` unless the recording is sampled.
    pub extent: u64,
    /// The blocks it stands for: 1, or in a sampled recording `1/p`.
    pub weight: f64,
    pub category: Category,
    pub stack: Option<StackId>,
    pub session: Option<SessionKey>,
    /// The task whose poll allocated it (or, for a task's cell, that task).
    pub task: Option<TaskKey>,
    /// Its session's because the request that created the session
    /// allocated it ([`Part::Request`]).
    pub from_request: bool,
}

impl Block {
    /// Whether this block marks its session's map entry: a `session-map`
    /// block recorded for itself. A sample standing for others
    /// ([`STAND_IN_WEIGHT`]) is not one session's: an in-process sampled
    /// recording of format 11 or older, which could not record a session's
    /// birth whole (rmcp allocates the entry before the log line that names
    /// the session; format 12 records the entry's aligned channel whole), read
    /// 4 of 300 abandoned sessions "leaked, each retaining 517.9 KiB" and 2
    /// "closed", from the few entries sampled.
    pub fn marks_the_entry(&self) -> bool {
        self.category == Category::SessionMap && self.weight < STAND_IN_WEIGHT
    }
}

/// Bytes of one task: what its polls allocated (its cell included), and what
/// of that is live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskBytes {
    pub allocated: u64,
    pub live: u64,
}

pub struct Accounting {
    grace_ns: u64,
    live: HashMap<u64, Block>,
    categories: PerCategory<CategoryTotals>,
    live_by_category: PerCategory<u64>,
    reclaimed_total: u64,
    sessions: Vec<SessionBytes>,
    tasks: Vec<TaskBytes>,
    sampler: Sampler,
    pub allocs: u64,
    pub frees: u64,
}

/// What the accounting knows at the end of the recording.
pub struct Totals {
    pub categories: PerCategory<CategoryTotals>,
    /// Per session key (fold merged keys before use).
    pub sessions: Vec<SessionBytes>,
    /// Per task key.
    pub tasks: Vec<TaskBytes>,
    pub samples: Vec<Sample>,
    /// Blocks live at the end, with whether their session's worker is gone.
    pub live: Vec<(Block, bool)>,
    pub allocs: u64,
    pub frees: u64,
}

impl Accounting {
    pub fn new(grace_ns: u64, sample_every_ns: u64) -> Self {
        Self {
            grace_ns,
            live: HashMap::default(),
            categories: PerCategory::default(),
            live_by_category: PerCategory::default(),
            reclaimed_total: 0,
            sessions: Vec::new(),
            tasks: Vec::new(),
            sampler: Sampler::new(sample_every_ns),
            allocs: 0,
            frees: 0,
        }
    }

    /// Time passes: take the samples due before `ts`.
    pub fn tick(&mut self, ts: u64) {
        self.sampler
            .tick(ts, self.live_by_category, self.reclaimed_total, self.allocs);
    }

    /// Whether session `key`'s map entry left the map: every block of it
    /// identified was freed (`SessionState::Closed`, final).
    pub fn closed(&self, key: SessionKey) -> bool {
        self.sessions
            .get(key as usize)
            .is_some_and(|s| s.map_blocks > 0 && s.map_blocks_live() == 0)
    }

    fn session(&mut self, key: SessionKey) -> &mut SessionBytes {
        let index = key as usize;
        if self.sessions.len() <= index {
            self.sessions.resize(index + 1, SessionBytes::default());
        }
        &mut self.sessions[index]
    }

    fn task(&mut self, key: TaskKey) -> &mut TaskBytes {
        let index = key as usize;
        if self.tasks.len() <= index {
            self.tasks.resize(index + 1, TaskBytes::default());
        }
        &mut self.tasks[index]
    }

    pub fn alloc(&mut self, addr: u64, mut block: Block) {
        self.allocs += 1;
        block.seq = self.allocs;
        if let Some(key) = block.task {
            let task = self.task(key);
            task.allocated += block.size;
            task.live += block.size;
        }
        if let Some(key) = block.session {
            let session = self.session(key);
            session.allocated += block.size;
            if block.marks_the_entry() {
                session.map_blocks += 1;
            }
        }
        if let Some(old) = self.live.insert(addr, block) {
            // A block we never saw freed (lost record): forget it.
            self.live_by_category[old.category] -= old.size;
            if let Some(key) = old.task {
                self.task(key).live -= old.size;
            }
        }
        self.categories[block.category].allocated += block.size;
        self.live_by_category[block.category] += block.size;
    }

    /// When the live block at `addr` was allocated, if one is.
    pub fn allocated_at(&self, addr: u64) -> Option<u64> {
        self.live.get(&addr).map(|b| b.ts)
    }

    /// The live block that starts at `addr`, as a task's cell would be seen.
    pub fn cell_at(&self, addr: u64) -> Option<Cell> {
        self.live.get(&addr).map(|b| Cell {
            ts: b.ts,
            seq: b.seq,
            size: b.extent,
            stack: b.stack,
            session: b.session,
            task: b.task,
        })
    }

    /// The live block at `addr` is task `key`'s cell: its bytes are that
    /// task's own (not the spawning task's), and its session's if it has one
    /// and the block had none.
    pub fn retag_cell(&mut self, addr: u64, key: TaskKey, session: Option<SessionKey>) {
        let Some(block) = self.live.get_mut(&addr) else {
            return;
        };
        let (size, previous) = (block.size, block.task.replace(key));
        if let Some(old) = previous {
            let old = self.task(old);
            old.allocated -= size;
            old.live -= size;
        }
        let task = self.task(key);
        task.allocated += size;
        task.live += size;
        if let Some(session) = session {
            self.adopt(addr, session);
        }
    }

    /// A live block with no owner turned out to be `key`'s (learned after its
    /// allocation): charge it to the session.
    pub fn adopt(&mut self, addr: u64, key: SessionKey) {
        self.adopt_as(addr, key, false);
    }

    /// [`Self::adopt`] for what the session's creating request allocated.
    pub fn adopt_request_block(&mut self, addr: u64, key: SessionKey) {
        self.adopt_as(addr, key, true);
    }

    fn adopt_as(&mut self, addr: u64, key: SessionKey, from_request: bool) {
        let Some(block) = self.live.get_mut(&addr) else {
            return;
        };
        if block.session.is_some() {
            return;
        }
        block.session = Some(key);
        block.from_request = from_request;
        let (size, marks) = (block.size, block.marks_the_entry());
        let session = self.session(key);
        session.allocated += size;
        if marks {
            session.map_blocks += 1;
        }
    }

    /// The block at `addr` was freed at `ts`; returns it if it was live.
    pub fn free(&mut self, ts: u64, addr: u64, sessions: &SessionTracker) -> Option<Block> {
        let block = self.live.remove(&addr)?;
        self.frees += 1;
        self.live_by_category[block.category] -= block.size;
        self.categories[block.category].reclaimed += block.size;
        self.reclaimed_total += block.size;
        if let Some(key) = block.task {
            self.task(key).live -= block.size;
        }
        if let Some(key) = block.session.map(|s| sessions.resolve(s)) {
            let grace_ns = self.grace_ns;
            let worker_end = sessions.worker_end_ns(key);
            let session = self.session(key);
            session.reclaimed += block.size;
            if block.marks_the_entry() {
                session.map_blocks_freed += 1;
            }
            if worker_end.is_some_and(|end| ts <= end + grace_ns) {
                session.transient += block.size;
            }
        }
        Some(block)
    }

    /// Closes the books at `end_ns`: what is live then, and what of it is retained.
    pub fn finish(mut self, end_ns: u64, sessions: &SessionTracker) -> Totals {
        self.tick(end_ns);
        let mut live = Vec::with_capacity(self.live.len());
        for mut block in self.live.into_values() {
            block.session = block.session.map(|s| sessions.resolve(s));
            let worker_gone = block
                .session
                .and_then(|s| sessions.worker_end_ns(s))
                .is_some_and(|end| end + self.grace_ns <= end_ns);
            let totals = &mut self.categories[block.category];
            totals.live_at_end += block.size;
            if worker_gone {
                totals.retained += block.size;
            }
            if let Some(key) = block.session {
                let index = key as usize;
                if self.sessions.len() <= index {
                    self.sessions.resize(index + 1, SessionBytes::default());
                }
                let session = &mut self.sessions[index];
                session.live_at_end += block.size;
                session.parts
                    [Part::of(block.category, block.from_request, block.task.is_some())] +=
                    block.size;
                if worker_gone {
                    session.retained += block.size;
                }
            }
            live.push((block, worker_gone));
        }
        Totals {
            categories: self.categories,
            sessions: self.sessions,
            tasks: self.tasks,
            samples: self.sampler.samples,
            live,
            allocs: self.allocs,
            frees: self.frees,
        }
    }
}

/// A gap of more samples than this between two records (a long quiet spell, or a
/// corrupt or crafted timestamp) is bridged by one sample, not filled in: the
/// samples stay bounded by the records, not by the values of their timestamps.
const MAX_GAP_SAMPLES: u64 = 10_000;

/// Takes a [`Sample`] every `every_ns` of recording time.
struct Sampler {
    every_ns: u64,
    start_ns: Option<u64>,
    next_ns: u64,
    samples: Vec<Sample>,
}

impl Sampler {
    fn new(every_ns: u64) -> Self {
        Self {
            every_ns: every_ns.max(1),
            start_ns: None,
            next_ns: 0,
            samples: Vec::new(),
        }
    }

    fn tick(&mut self, ts: u64, live: PerCategory<u64>, reclaimed_total: u64, allocs: u64) {
        let start = *self.start_ns.get_or_insert(ts);
        if self.next_ns == 0 {
            self.next_ns = ts;
        }
        if ts >= self.next_ns && (ts - self.next_ns) / self.every_ns > MAX_GAP_SAMPLES {
            self.next_ns = ts;
        }
        while ts >= self.next_ns {
            self.samples.push(Sample {
                t_s: self.next_ns.saturating_sub(start) as f64 / 1e9,
                live,
                reclaimed_total,
                allocs,
            });
            self.next_ns = self.next_ns.saturating_add(self.every_ns);
            if self.next_ns == u64::MAX {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
