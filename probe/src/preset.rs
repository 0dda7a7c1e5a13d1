//! Presets: which functions of a target mark a session's lifecycle.
//!
//! A preset is a small TOML file of demangled-name patterns per [`ScopeKind`], so
//! another rmcp version or another server is a new preset, not new code. The
//! built-in one is `presets/rmcp.toml`.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::recording::ScopeKind;

/// The built-in rmcp preset.
pub const RMCP: &str = include_str!("../presets/rmcp.toml");

#[derive(Debug, Clone, Deserialize)]
pub struct Preset {
    pub name: String,
    #[serde(rename = "scope", default)]
    pub scopes: Vec<ScopeRule>,
}

/// Functions of one scope kind.
#[derive(Debug, Clone, Deserialize)]
pub struct ScopeRule {
    pub kind: ScopeKind,
    /// Demangled names without hash; `*` matches any text.
    pub patterns: Vec<String>,
    /// Also probe the return (a uretprobe): needed for windows, not for one-shot events.
    pub returns: bool,
}

impl Preset {
    pub fn builtin() -> Self {
        toml::from_str(RMCP).expect("the built-in preset parses")
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read preset {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{} is not a valid preset", path.display()))
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
    }
}
