//! A frame of a stack, as the symbolize stage names it.

/// One frame after symbolization; inlined calls become frames of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Demangled, without hash; `0x...` when unknown.
    pub function: String,
    pub location: Option<String>,
}
