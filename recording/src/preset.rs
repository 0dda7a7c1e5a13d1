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

/// A preset file larger than this is not a preset.
pub const MAX_PRESET_BYTES: u64 = 1 << 20;

/// The built-in tokio signals (task polls), added to whichever preset runs.
pub const TOKIO: &str = include_str!("../presets/tokio.toml");

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
    /// What each release line does with an idle session by default: what a
    /// report needs to say when sessions still live at the end will be reaped.
    #[serde(rename = "release", default)]
    pub releases: Vec<ReleaseRule>,
}

/// The defaults of a range of releases of the preset's library (rmcp).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRule {
    /// The first release it covers (`1.4.0`); none: from the first.
    pub from: Option<String>,
    /// The first release it no longer covers; none: up to the newest.
    pub until: Option<String>,
    /// Seconds a session's worker waits idle before it ends; none: it never
    /// ends on its own (an abandoned session lives as long as the server).
    pub keep_alive_s: Option<u64>,
    /// Seconds a new session's worker waits for `initialize`; none: forever
    /// (a session whose client never initializes is never reaped).
    pub init_timeout_s: Option<u64>,
}

impl ReleaseRule {
    /// Whether `version` (`1.5.0`, `3.0.0-beta.1`) is in the range.
    pub fn covers(&self, version: &str) -> bool {
        let Some(v) = release_number(version) else {
            return false;
        };
        self.from
            .as_deref()
            .and_then(release_number)
            .is_none_or(|from| v >= from)
            && self
                .until
                .as_deref()
                .and_then(release_number)
                .is_none_or(|until| v < until)
    }
}

/// `major.minor.patch` of a release, pre-release tags aside.
fn release_number(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
        parts.next().flatten().unwrap_or(0),
    ))
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
    /// Which argument the entry records (0: the first, up to 5). An async
    /// block's poll that returns a large value takes the return slot first and
    /// `self` second (`arg = 1`).
    #[serde(default)]
    pub arg: u8,
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
    /// The field that carries the session id (every span but a serving one).
    #[serde(default)]
    pub id_field: Option<String>,
    /// The span instruments the session worker: its close is the worker's end.
    #[serde(default)]
    pub worker: bool,
    /// The span runs a session's service loop and names no session (rmcp's
    /// `serve_inner`): the in-process layer gives it the session created
    /// most recently on its thread and not served yet, else the oldest one
    /// not served yet (the task that serves a session is spawned right
    /// after its creation, and mostly polled first on the same thread).
    #[serde(default)]
    pub serves: bool,
}

impl SpanRule {
    /// How the span names its session.
    pub fn naming(&self) -> SpanNaming<'_> {
        match &self.id_field {
            Some(field) => SpanNaming::Field(field),
            None => SpanNaming::Unserved,
        }
    }
}

/// How a session span says which session it is ([`SpanRule::naming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanNaming<'a> {
    /// Its field of this name carries the session id.
    Field(&'a str),
    /// The newest session created on its thread and not served yet, else
    /// the oldest such ([`SpanRule::serves`]).
    Unserved,
}

impl Preset {
    pub fn builtin() -> Self {
        Self::parse(RMCP).expect("the built-in preset parses")
    }

    /// tokio's task polls: probed in every target, whatever its preset.
    pub fn tokio() -> Self {
        Self::parse(TOKIO).expect("the built-in tokio preset parses")
    }

    /// Reads a preset the user named. The probe runs as root, so the file is
    /// read as the user who ran `sudo` would read it (an error quotes the
    /// offending line: it must not be one of `/etc/shadow`'s), must be a
    /// regular file (a FIFO would hang the probe) and at most
    /// [`MAX_PRESET_BYTES`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::output::read_as_invoking_user(path, MAX_PRESET_BYTES)
            .with_context(|| format!("cannot read preset {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a valid preset", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let preset: Self = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        for span in &preset.spans {
            match (&span.id_field, span.serves) {
                (None, false) => anyhow::bail!(
                    "span `{}`: needs `id_field` (the field with the session id) or `serves = true`",
                    span.name
                ),
                (Some(_), true) => anyhow::bail!(
                    "span `{}`: a serving span (`serves = true`) names no session: drop `id_field`",
                    span.name
                ),
                _ => {}
            }
        }
        Ok(preset)
    }

    /// The defaults of release `version`, if the preset knows them.
    pub fn release(&self, version: &str) -> Option<&ReleaseRule> {
        self.releases.iter().find(|r| r.covers(version))
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
        assert!(
            preset
                .spans
                .iter()
                .any(|s| s.naming() == SpanNaming::Unserved),
            "the serving loop's span"
        );
        assert!(!preset.events.is_empty(), "the session-created event");
    }

    /// rmcp's defaults, from the releases' `SessionConfig` (docs/presets.md).
    #[test]
    fn each_rmcp_release_line_has_its_keep_alive() {
        let preset = Preset::builtin();
        let of = |v: &str| {
            let r = preset.release(v).unwrap_or_else(|| panic!("{v}"));
            (r.keep_alive_s, r.init_timeout_s)
        };
        assert_eq!(of("0.2.0"), (None, None));
        assert_eq!(of("1.3.0"), (None, None));
        assert_eq!(of("1.4.0"), (Some(300), None));
        assert_eq!(of("1.5.0"), (Some(300), None));
        assert_eq!(of("1.6.0"), (Some(300), Some(60)));
        assert_eq!(of("3.0.0-beta.1"), (Some(300), Some(60)));
        assert_eq!(of("3.11.0"), (Some(300), Some(60)));
        assert!(preset.release("not a version").is_none());
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

    /// A span says how it names its session: by a field, or as a serving
    /// span; both or neither is an error that says which span.
    #[test]
    fn a_span_names_its_session_by_a_field_or_serves() {
        let span =
            |body: &str| Preset::parse(&format!("name = \"x\"\n[[span]]\nname = \"s\"\n{body}"));
        let by_field = span("id_field = \"id\"").unwrap();
        assert_eq!(by_field.spans[0].naming(), SpanNaming::Field("id"));
        let serving = span("serves = true").unwrap();
        assert_eq!(serving.spans[0].naming(), SpanNaming::Unserved);
        let neither = span("worker = true").unwrap_err().to_string();
        assert!(neither.contains("span `s`: needs `id_field`"), "{neither}");
        let both = span("id_field = \"id\"\nserves = true")
            .unwrap_err()
            .to_string();
        assert!(both.contains("names no session"), "{both}");
    }
}
