//! The model: the plain data the stages produce and the outputs only read.
//!
//! A [`Timeline`] is what one pass over a recording made of it: its sessions
//! and tasks (each in a state of [`objects`]), live bytes over time
//! ([`figures`]), the survivors by call site and the rest ([`sites`]), every
//! stack's allocations ([`profile`]). The stages (`crate::stages`) fill it in
//! and may import it; the outputs (`crate::outputs`) read it, and import
//! nothing of the stages. One [`percentile`] and one [`median`] are quoted
//! everywhere ([`stats`]).
//!
//! The [`Verdict`] is one more stage's result over the rest
//! (`stages/verdict/`), held here for the outputs to quote.
//!
//! A new kind of lifecycle object is a tracker (`stages/objects/`), a kind
//! and its states here, and its view (`outputs/objects.rs`).

pub mod categories;
pub mod figures;
pub mod frame;
pub mod objects;
pub mod profile;
pub mod session_parts;
mod session_state;
pub mod sites;
pub mod stats;
pub mod timeline;
pub mod verdict;

pub use categories::{Category, PerCategory};
pub use figures::{CategoryTotals, Sample};
pub use frame::Frame;
pub use objects::{ObjectKind, SessionState, SessionStates, SpawnSite, TaskState, UNKNOWN_SITE};
pub use profile::{HeapProfile, Location, ProfileSample, Usage};
pub use session_parts::{Part, PerPart};
pub use sites::{Rest, STAND_IN_WEIGHT, Site, site_name};
pub use stats::{IdleSpread, Retained, Spread, median, percentile};
pub use timeline::{Session, Task, Timeline};
pub use verdict::{Verdict, VerdictKind};
