//! Stacks: the recording's deduplicated stacks, symbolized and categorized once each.
//!
//! The accounting stage asks "which category is this block" once per allocation;
//! this stage answers from a cache keyed by stack id, so each distinct stack is
//! symbolized ([`crate::stages::symbolize`]) and matched against the rules
//! ([`crate::stages::attribute`]) once.

mod trim;

pub use leakscope_recording::frames::is_allocator_frame;
pub use trim::Trimmer;

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::{Mapping, ScopeFunction, ScopeKind, StackId};

use crate::model::{Category, Frame};
use crate::stages::attribute::Rules;
use crate::stages::symbolize::Symbolizer;

pub struct Stacks {
    rules: Rules,
    symbolizer: Symbolizer,
    raw: HashMap<StackId, Vec<u64>>,
    category: HashMap<StackId, Category>,
    /// Per function name, which rules match it ([`Rules::matching`]).
    rules_matching: HashMap<String, Option<u64>>,
    mappings: Vec<Mapping>,
    /// The probed lifecycle functions (from the recording's header).
    scope_functions: Vec<ScopeFunction>,
    /// Per stack and scope kind: does the stack pass through such a function.
    inside: HashMap<(StackId, ScopeKind), bool>,
    /// Per stack: does it pass through a session request's handler.
    in_session_request: HashMap<StackId, bool>,
    /// Stacks cut at a frame outside every mapped executable ([`Stacks::add`]).
    cut: u64,
}

impl Stacks {
    pub fn new(rules: Rules) -> Self {
        Self {
            rules,
            symbolizer: Symbolizer::new(),
            raw: HashMap::default(),
            category: HashMap::default(),
            rules_matching: HashMap::default(),
            mappings: Vec::new(),
            scope_functions: Vec::new(),
            inside: HashMap::default(),
            in_session_request: HashMap::default(),
            cut: 0,
        }
    }

    pub fn add_mapping(&mut self, mapping: Mapping) {
        self.mappings.push(mapping.clone());
        self.symbolizer.add_mapping(mapping);
    }

    /// The lifecycle functions the producer probed, for [`inside`](Self::inside).
    pub fn set_scope_functions(&mut self, functions: Vec<ScopeFunction>) {
        self.scope_functions = functions;
    }

    /// Whether `stack` passes through a probed function of scope `kind`: by
    /// address (each return address's file offset against the function's
    /// range), so it needs no symbols. False without a stack.
    pub fn inside(&mut self, stack: Option<StackId>, kind: ScopeKind) -> bool {
        let Some(id) = stack else {
            return false;
        };
        if let Some(&known) = self.inside.get(&(id, kind)) {
            return known;
        }
        let functions: Vec<&ScopeFunction> = self
            .scope_functions
            .iter()
            .filter(|f| f.kind == kind)
            .collect();
        let found = self.raw.get(&id).is_some_and(|ips| {
            ips.iter().any(|&ip| {
                // A return address points just past the call: look one byte back.
                let ip = ip.saturating_sub(1);
                self.mappings.iter().any(|m| {
                    m.contains(ip)
                        && functions.iter().any(|f| {
                            let offset = ip - m.start + m.file_offset;
                            f.path == m.path
                                && (f.file_offset..f.file_offset + f.size.max(1)).contains(&offset)
                        })
                })
            })
        });
        self.inside.insert((id, kind), found);
        found
    }

    /// Whether `stack` passes through the handler of a request that creates
    /// a session (the rules' `[session-request]`). False without a stack.
    pub fn in_session_request(&mut self, stack: Option<StackId>) -> bool {
        let Some(id) = stack else {
            return false;
        };
        if let Some(&known) = self.in_session_request.get(&id) {
            return known;
        }
        let frames = self.frames(Some(id));
        let found = self
            .rules
            .in_session_request(frames.iter().map(|f| f.function.as_str()));
        self.in_session_request.insert(id, found);
        found
    }

    /// A `Stack` record: return addresses, innermost first. The stack stops at
    /// its first frame outside every mapped executable: a frame-pointer walk
    /// through code built without them reads data as return addresses, and
    /// a report showed `make_cycle / 0x288 / 0x4274c085000000f0` as frames.
    /// Without mappings (a recording that has none) it is kept whole.
    pub fn add(&mut self, id: StackId, mut frames: Vec<u64>) {
        if !self.mappings.is_empty()
            && let Some(first_unmapped) = frames.iter().position(|&ip| !self.mapped(ip))
        {
            frames.truncate(first_unmapped);
            self.cut += 1;
        }
        self.raw.insert(id, frames);
    }

    /// Whether a return address `ip` (or the call just before it) is in a
    /// mapped executable.
    fn mapped(&self, ip: u64) -> bool {
        self.mappings
            .iter()
            .any(|m| m.contains(ip) || m.contains(ip.saturating_sub(1)))
    }

    /// Stacks cut at a frame outside every mapped executable.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// Stacks seen.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// The category of a block allocated under `stack` (`other` without one).
    pub fn category(&mut self, stack: Option<StackId>) -> Category {
        let Some(id) = stack else {
            return Category::Other;
        };
        if let Some(category) = self.category.get(&id) {
            return *category;
        }
        let frames = self.frames(Some(id));
        let masks: Option<Vec<u64>> = frames
            .iter()
            .map(|f| match self.rules_matching.get(f.function.as_str()) {
                Some(known) => *known,
                None => {
                    let mask = self.rules.matching(&f.function);
                    self.rules_matching.insert(f.function.clone(), mask);
                    mask
                }
            })
            .collect();
        let category = match masks {
            Some(masks) => self.rules.decide_by_masks(&masks).0,
            None => self
                .rules
                .categorize(frames.iter().map(|f| f.function.as_str())),
        };
        self.category.insert(id, category);
        category
    }

    /// The symbolized frames of `stack`, innermost (inlined) first.
    pub fn frames(&mut self, stack: Option<StackId>) -> Vec<Frame> {
        let ips = stack
            .and_then(|id| self.raw.get(&id))
            .cloned()
            .unwrap_or_default();
        self.symbolizer.stack(&ips)
    }

    /// A stack's return addresses, innermost first (empty when unknown).
    pub fn ips(&self, stack: Option<StackId>) -> &[u64] {
        stack
            .and_then(|id| self.raw.get(&id))
            .map_or(&[], Vec::as_slice)
    }

    /// The frames one return address symbolizes to, innermost (inlined) first.
    pub fn ip_frames(&mut self, ip: u64) -> Vec<Frame> {
        self.symbolizer.frames(ip).to_vec()
    }

    /// The recorded mappings, in record order.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// Files a stack needed that could not be used for names, with why.
    pub fn unmatched_files(&self) -> &std::collections::BTreeMap<String, String> {
        self.symbolizer.unmatched()
    }

    /// The index in `frames` of the frame whose rule decided the category.
    pub fn decided_by(&self, frames: &[Frame]) -> Option<usize> {
        self.rules
            .decide(frames.iter().map(|f| f.function.as_str()))
            .1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_stops_at_its_first_frame_outside_every_mapping() {
        let mut stacks = Stacks::new(Rules::builtin());
        stacks.add(1, vec![0x288, 0x1000]);
        assert_eq!(
            stacks.ips(Some(1)),
            [0x288, 0x1000],
            "no mappings: kept whole"
        );
        stacks.add_mapping(Mapping {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: "/bin/server".into(),
            build_id: None,
        });
        stacks.add(2, vec![0x1010, 0x1fff, 0x288, 0x1020, 0x4274c085000000f0]);
        assert_eq!(stacks.ips(Some(2)), [0x1010, 0x1fff]);
        // A return address just past a mapping's end: its call is inside.
        stacks.add(3, vec![0x1010, 0x2000]);
        assert_eq!(stacks.ips(Some(3)), [0x1010, 0x2000]);
        assert_eq!((stacks.cut(), stacks.len()), (1, 3));
    }
}
