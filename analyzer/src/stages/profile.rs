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

use leakscope_recording::StackId;

use crate::model::Frame;
use crate::model::SessionState;
use crate::stages::accounting::Block;
use crate::stages::objects::sessions::SessionKey;
use crate::stages::stacks::Stacks;
use crate::stages::stacks::Trimmer;

use crate::model::{HeapProfile, Location, ProfileSample, Usage};

/// Allocation totals gathered while the recording is read, by stack and by the
/// session the block was charged to.
///
/// By session, because pprof labels what was allocated with the session's
/// state, known at the end; but a session closed for good (its map entry's
/// blocks all freed) stays closed, so its totals fold into one table by
/// stack: a day of session churn keeps a few entries per stack, not one per
/// session and stack (44 M of them, most of a day's report time and memory).
#[derive(Debug, Default)]
pub struct Allocated {
    /// Outside sessions, by stack.
    outside: HashMap<Option<StackId>, Usage>,
    /// Per session key, by stack: a few stacks each, found by a scan.
    sessions: Vec<Vec<(Option<StackId>, Usage)>>,
    /// Sessions closed for good, by stack.
    closed: HashMap<Option<StackId>, Usage>,
    /// Which session keys were folded into `closed`.
    folded: Vec<bool>,
}

impl Allocated {
    pub fn add(
        &mut self,
        stack: Option<StackId>,
        session: Option<SessionKey>,
        bytes: u64,
        objects: f64,
    ) {
        let Some(key) = session else {
            self.outside.entry(stack).or_default().add(bytes, objects);
            return;
        };
        let index = key as usize;
        if self.folded.get(index).copied().unwrap_or(false) {
            self.closed.entry(stack).or_default().add(bytes, objects);
            return;
        }
        if self.sessions.len() <= index {
            self.sessions.resize_with(index + 1, Vec::new);
        }
        let stacks = &mut self.sessions[index];
        match stacks.iter_mut().find(|(s, _)| *s == stack) {
            Some((_, usage)) => usage.add(bytes, objects),
            None => {
                let mut usage = Usage::default();
                usage.add(bytes, objects);
                stacks.push((stack, usage));
            }
        }
    }

    /// Session `key` is closed for good: its totals (and what it allocates
    /// from now on) fold into the closed sessions'.
    pub fn close(&mut self, key: SessionKey) {
        let index = key as usize;
        if self.folded.len() <= index {
            self.folded.resize(index + 1, false);
        }
        if std::mem::replace(&mut self.folded[index], true) {
            return;
        }
        if let Some(stacks) = self.sessions.get_mut(index) {
            for (stack, usage) in std::mem::take(stacks) {
                let total = self.closed.entry(stack).or_default();
                total.objects += usage.objects;
                total.bytes += usage.bytes;
            }
        }
    }

    /// The same totals with each session key mapped through `resolve` (sessions
    /// merged while reading fold into one).
    pub fn resolved(mut self, resolve: impl Fn(SessionKey) -> SessionKey) -> Self {
        for index in 0..self.sessions.len() {
            let into = resolve(index as SessionKey) as usize;
            if into == index || self.sessions[index].is_empty() {
                continue;
            }
            for (stack, usage) in std::mem::take(&mut self.sessions[index]) {
                self.add(stack, Some(into as SessionKey), usage.bytes, usage.objects);
            }
        }
        self
    }

    /// Blocks allocated per stack, whatever session (estimates when sampled).
    pub fn objects_by_stack(&self) -> HashMap<Option<StackId>, f64> {
        let mut by: HashMap<Option<StackId>, f64> = HashMap::default();
        let all = self
            .outside
            .iter()
            .chain(self.closed.iter())
            .map(|(stack, usage)| (*stack, usage.objects))
            .chain(
                self.sessions
                    .iter()
                    .flatten()
                    .map(|(stack, usage)| (*stack, usage.objects)),
            );
        for (stack, objects) in all {
            *by.entry(stack).or_default() += objects;
        }
        by
    }

    /// Every total with its session's label: `None` outside sessions.
    fn labelled(
        self,
        state: impl Fn(SessionKey) -> Option<SessionState>,
    ) -> impl Iterator<Item = ((Option<StackId>, Option<SessionState>), Usage)> {
        let outside = self
            .outside
            .into_iter()
            .map(|(stack, u)| ((stack, None), u));
        let closed = self
            .closed
            .into_iter()
            .map(|(stack, u)| ((stack, Some(SessionState::Closed)), u));
        let open = self
            .sessions
            .into_iter()
            .enumerate()
            .flat_map(move |(key, stacks)| {
                let label = state(key as SessionKey);
                stacks
                    .into_iter()
                    .map(move |(stack, u)| ((stack, label), u))
            });
        outside.chain(closed).chain(open)
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
    for (key, usage) in allocated.labelled(&state) {
        let entry = by_key.entry(key).or_default();
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
