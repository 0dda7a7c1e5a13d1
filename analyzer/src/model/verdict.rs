//! The verdict, as the model holds it: the verdict stage
//! (`stages/verdict/`) decides it from the rest of the model, and the
//! outputs quote it (`summary.json`'s `verdict_kind` and `verdict`, the
//! report's first line).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictKind {
    Leak,
    NoLeak,
    Undecided,
}

/// The report's first line, in plain words, and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: VerdictKind,
    pub text: String,
}

impl Default for Verdict {
    /// What a model says before the verdict stage has run.
    fn default() -> Self {
        Self {
            kind: VerdictKind::Undecided,
            text: String::new(),
        }
    }
}
