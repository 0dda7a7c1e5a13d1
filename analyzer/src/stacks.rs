//! Stacks: the recording's deduplicated stacks, symbolized and categorized once each.
//!
//! The accounting stage asks "which category is this block" once per allocation;
//! this stage answers from a cache keyed by stack id, so each distinct stack is
//! symbolized ([`crate::symbolize`]) and matched against the rules
//! ([`crate::attribute`]) once.

use std::collections::HashMap;

use leakscope_recording::{Mapping, StackId};

use crate::attribute::{Category, Rules};
use crate::symbolize::{Frame, Symbolizer};

pub struct Stacks {
    rules: Rules,
    symbolizer: Symbolizer,
    raw: HashMap<StackId, Vec<u64>>,
    category: HashMap<StackId, Category>,
}

impl Stacks {
    pub fn new(rules: Rules) -> Self {
        Self {
            rules,
            symbolizer: Symbolizer::new(),
            raw: HashMap::new(),
            category: HashMap::new(),
        }
    }

    pub fn add_mapping(&mut self, mapping: Mapping) {
        self.symbolizer.add_mapping(mapping);
    }

    /// A `Stack` record: return addresses, innermost first.
    pub fn add(&mut self, id: StackId, frames: Vec<u64>) {
        self.raw.insert(id, frames);
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
        let category = self
            .rules
            .categorize(frames.iter().map(|f| f.function.as_str()));
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
