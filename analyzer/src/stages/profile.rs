//! The heap profile: each stack's allocations over the whole recording and its
//! blocks still live at the end, labelled with their category and their
//! session's state. These are the four sample types heap profilers share
//! (`alloc_objects`/`alloc_space`, `inuse_objects`/`inuse_space`), so the
//! [`crate::outputs::pprof`] output opens in `go tool pprof`, Pyroscope or Parca.
//!
//! Stacks keep their return addresses (one location each) and the mapping each
//! falls in, so a viewer can show addresses and build-ids. The allocator's own
//! frames are trimmed from the inner end exactly as the findings trim them
//! ([`crate::stages::sites`]): a viewer's top function is then the report's top site,
//! not `malloc`.

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::{Mapping, StackId};

use crate::stages::accounting::Block;
use crate::stages::attribute::Category;
use crate::stages::objects::sessions::{SessionKey, SessionState};
use crate::stages::stacks::Stacks;
use crate::stages::stacks::Trimmer;
use crate::stages::symbolize::Frame;

/// Objects and bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Blocks (estimated, in a sampled recording: each sample's weight).
    pub objects: f64,
    pub bytes: u64,
}

impl Usage {
    fn add(&mut self, bytes: u64, objects: f64) {
        self.objects += objects;
        self.bytes += bytes;
    }
}

/// One code address of a stack, with what it symbolizes to.
#[derive(Debug, Clone)]
pub struct Location {
    pub address: u64,
    /// Index in [`HeapProfile::mappings`].
    pub mapping: Option<usize>,
    /// Innermost (inlined) first; allocator frames already trimmed.
    pub frames: Vec<Frame>,
}

/// One stack under one label set.
#[derive(Debug, Clone)]
pub struct ProfileSample {
    /// Indices in [`HeapProfile::locations`], innermost first.
    pub locations: Vec<usize>,
    pub category: Category,
    /// The state of the session the blocks belong to; `None` outside sessions.
    pub session: Option<SessionState>,
    /// Everything allocated under this stack during the recording.
    pub alloc: Usage,
    /// What of it is live at the end.
    pub inuse: Usage,
}

#[derive(Debug, Clone, Default)]
pub struct HeapProfile {
    pub samples: Vec<ProfileSample>,
    pub locations: Vec<Location>,
    pub mappings: Vec<Mapping>,
}

impl HeapProfile {
    /// Totals over every sample: (allocated, in use).
    pub fn totals(&self) -> (Usage, Usage) {
        self.samples
            .iter()
            .fold((Usage::default(), Usage::default()), |(a, i), s| {
                (
                    Usage {
                        objects: a.objects + s.alloc.objects,
                        bytes: a.bytes + s.alloc.bytes,
                    },
                    Usage {
                        objects: i.objects + s.inuse.objects,
                        bytes: i.bytes + s.inuse.bytes,
                    },
                )
            })
    }
}

/// Allocation totals gathered while the recording is read, by stack and by the
/// session the block was charged to.
#[derive(Debug, Default)]
pub struct Allocated {
    by: HashMap<(Option<StackId>, Option<SessionKey>), Usage>,
}

impl Allocated {
    pub fn add(
        &mut self,
        stack: Option<StackId>,
        session: Option<SessionKey>,
        bytes: u64,
        objects: f64,
    ) {
        self.by
            .entry((stack, session))
            .or_default()
            .add(bytes, objects);
    }

    /// The same totals with each session key mapped through `resolve` (sessions
    /// merged while reading fold into one).
    pub fn resolved(self, resolve: impl Fn(SessionKey) -> SessionKey) -> Self {
        let mut by: HashMap<_, Usage> = HashMap::default();
        for ((stack, session), usage) in self.by {
            let total = by.entry((stack, session.map(&resolve))).or_default();
            total.objects += usage.objects;
            total.bytes += usage.bytes;
        }
        Self { by }
    }
}

/// The profile from what was allocated and what is `live` at the end, both with
/// resolved session keys; `state` gives a key's session state.
pub fn build(
    allocated: Allocated,
    live: &[(Block, bool)],
    state: impl Fn(SessionKey) -> Option<SessionState>,
    stacks: &mut Stacks,
) -> HeapProfile {
    let label = |session: Option<SessionKey>| session.and_then(&state);
    let mut by_key: HashMap<(Option<StackId>, Option<SessionState>), (Usage, Usage)> =
        HashMap::default();
    for ((stack, session), usage) in allocated.by {
        let entry = by_key.entry((stack, label(session))).or_default();
        entry.0.objects += usage.objects;
        entry.0.bytes += usage.bytes;
    }
    for (block, _) in live {
        by_key
            .entry((block.stack, label(block.session)))
            .or_default()
            .1
            .add(block.size, block.weight);
    }

    let trim = Trimmer::new();
    let mut profile = HeapProfile {
        mappings: stacks.mappings().to_vec(),
        ..HeapProfile::default()
    };
    // A location is an address with some of its inlined frames trimmed.
    let mut location_index: HashMap<(u64, usize), usize> = HashMap::default();
    let mut stack_locations: HashMap<Option<StackId>, Vec<usize>> = HashMap::default();
    let mut keys: Vec<_> = by_key.into_iter().collect();
    keys.sort_by_key(|((stack, state), _)| (*stack, state.map(|s| s.name())));
    for ((stack, session), (alloc, inuse)) in keys {
        let locations = match stack_locations.entry(stack) {
            std::collections::hash_map::Entry::Occupied(known) => known.get().clone(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let ips = stacks.ips(stack).to_vec();
                let per_ip: Vec<Vec<Frame>> = ips.iter().map(|ip| stacks.ip_frames(*ip)).collect();
                let all: Vec<Frame> = per_ip.iter().flatten().cloned().collect();
                let mut drop = trim.allocator_frames(&all);
                let mut locations = Vec::new();
                for (ip, frames) in ips.iter().zip(per_ip) {
                    if drop >= frames.len() {
                        drop -= frames.len();
                        continue;
                    }
                    let skip = std::mem::take(&mut drop);
                    let index = *location_index.entry((*ip, skip)).or_insert_with(|| {
                        profile.locations.push(Location {
                            address: *ip,
                            mapping: profile.mappings.iter().position(|m| m.contains(*ip)),
                            frames: frames[skip..].to_vec(),
                        });
                        profile.locations.len() - 1
                    });
                    locations.push(index);
                }
                slot.insert(locations).clone()
            }
        };
        profile.samples.push(ProfileSample {
            locations,
            category: stacks.category(stack),
            session,
            alloc,
            inuse,
        });
    }
    profile
}
