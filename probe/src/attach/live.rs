//! What the live status line says while a recording runs: the live bytes
//! (in a sampled recording, the estimate of the heap the report will show)
//! and the site most likely leaking so far, the top leak candidate.
//!
//! Both backends count every block they write here with its stack. A
//! stack's site is named once, when the stack is first written, the way
//! the report names it (`leakscope_recording::frames`: the program's own
//! frame, past the allocator and the standard library), from the target
//! executable's symbol table: a function the compiler inlined reads as the
//! one it was inlined into, where the report (DWARF) may name it. The
//! candidate is the site keeping the most live bytes among those that grew
//! since the last look ([`LOOK_EVERY`]): a cache that filled up at the
//! start stops being one, a leak stays.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leakscope_recording::frames::{own_frame, short_name};
use leakscope_recording::sampling::Sampling;
use leakscope_recording::target::Target;
use leakscope_recording::{Mapping, StackId};

use super::Stats;
use crate::symbols::ElfSymbols;

/// How often the sites' growth is looked at.
pub const LOOK_EVERY: Duration = Duration::from_secs(30);

/// A site growing less than this since the last look is no candidate.
const MIN_GROWTH_BYTES: u64 = 4096;

/// Blocks counted at most (~50 MB of map): past it a block made is not
/// counted, and [`Stats::untracked`] says how many. The stream is the
/// target's (a cooperative one may be hostile) and the kernel's ring buffer
/// is bounded, but live blocks are not.
const MAX_BLOCKS: usize = 1 << 20;

/// Stack ids and distinct site names counted at most: the writer numbers
/// stacks densely from 0, so a larger id is a crafted one (its blocks count
/// under no site), and names past the cap share one.
const MAX_STACK_IDS: usize = 1 << 22;
const MAX_SITES: usize = 1 << 16;

/// The top leak candidate for the status line.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The site's name (its function, generics out), or its stack's first
    /// address when the executable does not say.
    pub site: String,
    /// Its live bytes (estimated, in a sampled recording).
    pub live_bytes: u64,
    /// What it grew by over the last look.
    pub grew_bytes: u64,
    pub over: Duration,
}

/// Names the site of a stack from the target executable's symbols.
pub struct SiteNamer {
    exe: ElfSymbols,
    /// The executable's mappings: runtime address -> file offset.
    mappings: Vec<Mapping>,
}

impl SiteNamer {
    /// For `target`'s executable; `None` when it cannot be read (the status
    /// line then names sites by address).
    pub fn of_target(target: &Target) -> Option<Self> {
        let exe = ElfSymbols::of_target(target, &target.exe).ok()?;
        let mappings = target
            .mappings
            .iter()
            .filter(|m| m.path == target.exe)
            .cloned()
            .collect();
        Some(Self { exe, mappings })
    }

    /// The name of the function `frame` (a return address) returns into.
    fn function(&self, frame: u64) -> Option<&str> {
        // The call is the byte before the return address.
        let pc = frame.checked_sub(1)?;
        let mapping = self.mappings.iter().find(|m| m.contains(pc))?;
        let vaddr = self
            .exe
            .vaddr_of_file_offset(pc - mapping.start + mapping.file_offset)?;
        self.exe.function_at(vaddr).map(|f| f.name.as_str())
    }

    /// The site `frames` (innermost first) are a stack of, named.
    pub fn site(&self, frames: &[u64]) -> Option<String> {
        let names: Vec<&str> = frames.iter().filter_map(|&f| self.function(f)).collect();
        own_frame(names.iter().copied()).map(short_name)
    }
}

#[derive(Debug)]
struct Site {
    name: String,
    live: u64,
    /// `live` at the look before last, and at the last look.
    older: u64,
    newer: u64,
}

/// The live blocks a recording has seen (address -> bytes and site), for
/// the status line only: the analyzer reads the recording itself. Both
/// backends count with it, so the figures mean the same in both; in a
/// sampled recording each block counts for the bytes it stands for, so the
/// figure is the estimate of the heap the report will show. Bounded by the
/// blocks alive and the program's distinct stacks, never by the events.
#[derive(Default)]
pub struct LiveBytes {
    /// foldhash, not std's SipHash: every block the recording writes is
    /// looked up here once made and once freed, on the probe's thread, which
    /// shares the target's cores (this map's lookups, SipHash's included, were
    /// ~12% of the probe's CPU relaying a cooperative server at saturation). Seeded per map, and
    /// bounded by [`MAX_BLOCKS`], against a stream crafted to collide.
    blocks: HashMap<u64, (u64, u32), foldhash::fast::RandomState>,
    /// A sampled recording's blocks recorded whole, one in [`WHOLE_EVERY`]:
    /// apart from the samples in `blocks`, so that a free looks up a map of
    /// the samples (few) and, for one address in [`WHOLE_EVERY`], this one.
    whole: HashMap<u64, (u64, u32), foldhash::fast::RandomState>,
    sampling: Sampling,
    namer: Option<SiteNamer>,
    /// Site index by stack id (the writer numbers stacks densely from 0,
    /// so a vector: no second hash lookup per recorded allocation); sites by
    /// name.
    site_of_stack: Vec<u32>,
    sites: Vec<Site>,
    site_named: HashMap<String, u32>,
    /// When the look before last and the last look were (the recording's
    /// start until there were two).
    older_at: Option<Instant>,
    newer_at: Option<Instant>,
    candidate: Option<Candidate>,
}

/// Of a sampled recording's blocks recorded whole, the status line counts
/// those at one address in this many, each for this many times its bytes:
/// a session's task cells and channels are recorded whole (~14 a session
/// on rmcp's stock service), and looking each one up here when made and
/// when freed was ~17% of the probe's CPU relaying a cooperative server
/// at saturation (`perf record` on the probe), on the cores the server
/// runs on. The figure stays the estimate it was (a sampled recording's
/// live bytes are one), now of these blocks too; the report reads every
/// one of them from the recording.
const WHOLE_EVERY: u64 = 16;

/// Whether a block recorded whole at `addr` is one the status line counts:
/// decided by the address alone, so its free, which has no size, finds it.
fn counts_whole(addr: u64) -> bool {
    addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60 == 0
}

/// Which of [`LiveBytes`]'s maps a block is counted in.
#[derive(Clone, Copy)]
enum Map {
    Blocks,
    Whole,
}

/// A block with no stack, or one whose stack was never written.
const NO_SITE: u32 = u32::MAX;

impl LiveBytes {
    /// Counting the blocks of a recording that chose them by `sampling`,
    /// naming sites with `namer`.
    pub fn new(sampling: Sampling, namer: Option<SiteNamer>) -> Self {
        Self {
            sampling,
            namer,
            ..Self::default()
        }
    }

    /// A stack was written under `id` (again, in a new segment, whose
    /// writer numbers its stacks afresh): its site is named now.
    pub fn stack(&mut self, id: StackId, frames: &[u64]) {
        let name = self
            .namer
            .as_ref()
            .and_then(|n| n.site(frames))
            .or_else(|| frames.first().map(|f| format!("{f:#x}")))
            .unwrap_or_else(|| "[empty stack]".into());
        let id = id as usize;
        if id >= MAX_STACK_IDS {
            return;
        }
        let name = if self.sites.len() >= MAX_SITES && !self.site_named.contains_key(&name) {
            "[other sites]".to_owned()
        } else {
            name
        };
        let next = self.sites.len() as u32;
        let index = *self.site_named.entry(name.clone()).or_insert(next);
        if index == next {
            self.sites.push(Site {
                name,
                live: 0,
                older: 0,
                newer: 0,
            });
        }
        if self.site_of_stack.len() <= id {
            self.site_of_stack.resize(id + 1, NO_SITE);
        }
        self.site_of_stack[id] = index;
    }

    /// A block of `size` bytes at `addr` was made, at `stack`.
    pub fn alloc(&mut self, stats: &mut Stats, addr: u64, size: u64, stack: Option<StackId>) {
        if addr == 0 {
            return;
        }
        let size = if self.sampling.is_sampled() {
            self.sampling.weight(size).bytes.round() as u64
        } else {
            size
        };
        self.insert(stats, addr, size, stack);
    }

    /// A block a sampled recording recorded whole (`Record::WholeAlloc`):
    /// counted only if its address is one of every [`WHOLE_EVERY`]
    /// ([`counts_whole`]), for that many times its bytes.
    pub fn alloc_whole(&mut self, stats: &mut Stats, addr: u64, size: u64, stack: Option<StackId>) {
        if addr != 0 && counts_whole(addr) {
            self.insert_into(Map::Whole, stats, addr, size * WHOLE_EVERY, stack);
        }
    }

    fn insert(&mut self, stats: &mut Stats, addr: u64, size: u64, stack: Option<StackId>) {
        self.insert_into(Map::Blocks, stats, addr, size, stack);
    }

    fn insert_into(
        &mut self,
        map: Map,
        stats: &mut Stats,
        addr: u64,
        size: u64,
        stack: Option<StackId>,
    ) {
        let site = stack
            .and_then(|s| self.site_of_stack.get(s as usize).copied())
            .unwrap_or(NO_SITE);
        let blocks = match map {
            Map::Blocks => &mut self.blocks,
            Map::Whole => &mut self.whole,
        };
        if blocks.len() >= MAX_BLOCKS && !blocks.contains_key(&addr) {
            stats.untracked += 1;
            return;
        }
        if let Some((old, old_site)) = blocks.insert(addr, (size, site)) {
            stats.live_bytes = stats.live_bytes.saturating_sub(old);
            self.uncount(old_site, old);
        }
        stats.live_bytes += size;
        if let Some(s) = self.sites.get_mut(site as usize) {
            s.live += size;
        }
    }

    /// The block at `addr` went back.
    pub fn free(&mut self, stats: &mut Stats, addr: u64) {
        let found = match self.blocks.remove(&addr) {
            None if counts_whole(addr) => self.whole.remove(&addr),
            found => found,
        };
        if let Some((size, site)) = found {
            stats.live_bytes = stats.live_bytes.saturating_sub(size);
            self.uncount(site, size);
        }
    }

    fn uncount(&mut self, site: u32, size: u64) {
        if let Some(s) = self.sites.get_mut(site as usize) {
            s.live = s.live.saturating_sub(size);
        }
    }

    /// The top leak candidate: the site keeping the most live bytes among
    /// those that grew by [`MIN_GROWTH_BYTES`] since the look before last,
    /// 30 to 60 s ago ([`LOOK_EVERY`]; since the start, at first).
    pub fn candidate(&mut self) -> Option<&Candidate> {
        let now = Instant::now();
        let newer_at = *self.newer_at.get_or_insert(now);
        let older_at = *self.older_at.get_or_insert(now);
        if now - newer_at >= LOOK_EVERY {
            for site in &mut self.sites {
                site.older = site.newer;
                site.newer = site.live;
            }
            self.older_at = Some(newer_at);
            self.newer_at = Some(now);
        }
        let over = now - older_at;
        self.candidate = self
            .sites
            .iter()
            .filter(|s| s.live >= s.older + MIN_GROWTH_BYTES)
            .max_by_key(|s| s.live)
            .map(|s| Candidate {
                site: s.name.clone(),
                live_bytes: s.live,
                grew_bytes: s.live - s.older,
                over,
            });
        self.candidate.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidate_is_the_largest_site_that_grew_and_frees_count() {
        let mut stats = Stats::default();
        let mut live = LiveBytes::new(Sampling::Every, None);
        live.stack(1, &[0x10, 0x20]);
        live.stack(2, &[0x30]);
        live.stack(3, &[0x10, 0x99]);
        // Stacks 1 and 3 share a first frame: one site, as unnamed ones.
        for i in 0..10 {
            live.alloc(&mut stats, 0x1000 + i, 1000, Some(1));
        }
        live.alloc(&mut stats, 0x9000, 8000, Some(3));
        live.alloc(&mut stats, 0x5000, 50_000, Some(2));
        live.free(&mut stats, 0x5000);
        assert_eq!(stats.live_bytes, 18_000);
        let top = live.candidate().cloned().unwrap();
        assert_eq!(top.site, "0x10");
        assert_eq!(top.live_bytes, 18_000);
        // Two looks later with nothing grown: no candidate until something does.
        for _ in 0..2 {
            live.newer_at = Some(Instant::now() - LOOK_EVERY);
            live.candidate();
        }
        assert_eq!(live.candidate(), None);
        live.alloc(&mut stats, 0x6000, 5000, Some(2));
        let top = live.candidate().unwrap();
        assert_eq!((top.site.as_str(), top.grew_bytes), ("0x30", 5000));
    }

    /// Blocks recorded whole are counted one address in `WHOLE_EVERY`, for
    /// that many: the figure is an estimate of their bytes, and their frees
    /// take back exactly what was counted; the samples beside them are all
    /// counted, and freed whatever their address.
    #[test]
    fn blocks_recorded_whole_are_estimated_from_one_address_in_sixteen() {
        let mut stats = Stats::default();
        let mut live = LiveBytes::new(Sampling::Bytes { mean: 512 << 10 }, None);
        live.stack(0, &[0x10]);
        // 100,000 task cells of 512 B, 128-aligned as tokio's are.
        let cells = (0..100_000u64).map(|i| 0x7f00_0000_0000 + i * 0x280);
        for addr in cells.clone() {
            live.alloc_whole(&mut stats, addr, 512, Some(0));
        }
        let truth = 100_000.0 * 512.0;
        let estimate = stats.live_bytes as f64;
        assert!(
            (estimate / truth - 1.0).abs() < 0.05,
            "{estimate} for {truth}"
        );
        assert!(
            live.whole.len() < 100_000 / 8,
            "{} counted",
            live.whole.len()
        );
        // A sample among them, at an address the whole blocks do not count.
        let sample = (0x5000_0000u64..)
            .step_by(4096)
            .find(|&a| !counts_whole(a))
            .unwrap();
        live.alloc(&mut stats, sample, 4096, Some(0));
        for addr in cells {
            live.free(&mut stats, addr);
        }
        let weight = Sampling::Bytes { mean: 512 << 10 }
            .weight(4096)
            .bytes
            .round() as u64;
        assert_eq!(stats.live_bytes, weight);
        live.free(&mut stats, sample);
        assert_eq!(stats.live_bytes, 0);
    }

    /// The blocks and stacks a (hostile) stream can make the status line
    /// keep are bounded: a crafted stack id is ignored, not a vector of its
    /// size, and blocks past the cap are counted as untracked.
    #[test]
    fn what_a_stream_can_make_it_keep_is_bounded() {
        let mut stats = Stats::default();
        let mut live = LiveBytes::new(Sampling::Every, None);
        live.stack(u32::MAX, &[0x10]);
        assert!(live.site_of_stack.len() < MAX_STACK_IDS);
        for addr in 1..=(MAX_BLOCKS as u64 + 10) {
            live.alloc(&mut stats, addr, 1, None);
        }
        assert_eq!(live.blocks.len(), MAX_BLOCKS);
        assert_eq!(stats.untracked, 10);
        assert_eq!(stats.live_bytes, MAX_BLOCKS as u64);
        // A freed block makes room again.
        live.free(&mut stats, 1);
        live.alloc(&mut stats, 0xffff_0000, 1, None);
        assert_eq!(stats.untracked, 10);
    }
}
