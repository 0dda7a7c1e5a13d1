//! Every stack's allocations and live blocks (the profile stage gathers it;
//! the pprof output writes it).

use leakscope_recording::Mapping;

use super::{Category, Frame, SessionState};

/// Objects and bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Blocks (estimated, in a sampled recording: each sample's weight).
    pub objects: f64,
    pub bytes: u64,
}

impl Usage {
    pub(crate) fn add(&mut self, bytes: u64, objects: f64) {
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
