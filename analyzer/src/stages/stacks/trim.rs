//! Trimming: the allocator's own frames come off a stack's inner end, so a
//! site is named by the code that asked for the memory.

use wildmatch::WildMatch;

use leakscope_recording::frames::ALLOCATOR_FRAMES;

use crate::model::Frame;

/// Trims allocator frames from the inner end of a stack.
pub struct Trimmer {
    patterns: Vec<WildMatch>,
}

impl Trimmer {
    pub fn new() -> Self {
        Self {
            patterns: ALLOCATOR_FRAMES.iter().map(|p| WildMatch::new(p)).collect(),
        }
    }

    /// How many frames at the inner end are the allocator's. At least one frame
    /// is kept: an allocator-only stack still says something.
    pub fn allocator_frames(&self, frames: &[Frame]) -> usize {
        let inner = frames
            .iter()
            .take_while(|f| self.patterns.iter().any(|p| p.matches(&f.function)))
            .count();
        inner.min(frames.len().saturating_sub(1))
    }

    pub fn trim(&self, mut frames: Vec<Frame>) -> Vec<Frame> {
        frames.drain(..self.allocator_frames(&frames));
        frames
    }
}
