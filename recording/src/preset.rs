//! Presets: which functions and `tracing` spans of a target mark a session's lifecycle.
//!
//! A preset is a small TOML file, so another rmcp version or another server is a
//! new preset, not new code. It lives in the format crate because every producer
//! reads it: the eBPF probe attaches to its `[[scope]]` functions (demangled-name
//! patterns per [`ScopeKind`]), the in-process mode follows its `[[span]]`s. The
//! built-in one is `presets/rmcp.toml`.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::ScopeKind;

/// The built-in rmcp preset.
pub const RMCP: &str = include_str!("../presets/rmcp.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    #[serde(rename = "scope", default)]
    pub scopes: Vec<ScopeRule>,
    #[serde(rename = "span", default)]
    pub spans: Vec<SpanRule>,
    #[serde(rename = "event", default)]
    pub events: Vec<EventRule>,
}

/// A `tracing` event that announces a session's creation (in-process mode).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRule {
    /// The event's target starts with this (its module path, for rmcp).
    pub target: String,
    /// The event's message.
    pub message: String,
    /// The field that carries the session id.
    pub id_field: String,
}

/// Functions of one scope kind (eBPF probe).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeRule {
    pub kind: ScopeKind,
    /// Demangled names without hash; `*` matches any text.
    pub patterns: Vec<String>,
    /// Also probe the return (a uretprobe): needed for windows, not for one-shot events.
    pub returns: bool,
    /// The session model does without it (e.g. a function that is inlined in
    /// release builds); its absence is still reported, as optional.
    #[serde(default)]
    pub optional: bool,
}

/// A `tracing` span that marks session work (in-process mode).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpanRule {
    /// The span's name (`tracing` metadata name).
    pub name: String,
    /// The field that carries the session id.
    pub id_field: String,
    /// The span instruments the session worker: its close is the worker's end.
    #[serde(default)]
    pub worker: bool,
}

impl Preset {
    pub fn builtin() -> Self {
        Self::parse(RMCP).expect("the built-in preset parses")
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read preset {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a valid preset", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| toml_error(text, &e))
    }

    /// The span rule for a span named `name`, if the preset has one.
    pub fn span(&self, name: &str) -> Option<&SpanRule> {
        self.spans.iter().find(|s| s.name == name)
    }
}

/// A TOML error as one line: `line L, column C: what`. (toml's own Display draws
/// a multi-line snippet; errors here are one line.)
pub fn toml_error(text: &str, error: &toml::de::Error) -> anyhow::Error {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            anyhow::anyhow!("line {line}, column {column}: {message}")
        }
        None => anyhow::anyhow!("{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_preset_names_every_lifecycle_kind() {
        let preset = Preset::builtin();
        for kind in [
            ScopeKind::SessionCreate,
            ScopeKind::WorkerSpawn,
            ScopeKind::WorkerPoll,
            ScopeKind::WorkerDrop,
        ] {
            assert!(preset.scopes.iter().any(|s| s.kind == kind), "{kind:?}");
        }
        assert!(preset.spans.iter().any(|s| s.worker), "a worker span");
        assert!(!preset.events.is_empty(), "the session-created event");
    }

    #[test]
    fn syntax_errors_are_one_line_with_their_place() {
        let err = Preset::parse("name = \"x\"\n[[scope]\n")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.starts_with("line 2, column"), "{err}");
    }

    #[test]
    fn a_misspelt_key_is_an_error() {
        let err = Preset::parse("name = \"x\"\n[[span]]\nname = \"s\"\nid = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("id"), "{err}");
    }
}
