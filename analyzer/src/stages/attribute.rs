//! Categories by call site: which kind of memory a block is, from its stack.
//!
//! Rules are demangled-name patterns per category (built-in rmcp preset in
//! `rules/rmcp.toml`, plus an optional user file put first). The first rule with a
//! pattern matching any frame of the block's stack decides; no match is `other`.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use wildmatch::WildMatch;

/// The built-in rmcp rules.
pub const RMCP_RULES: &str = include_str!("../../rules/rmcp.toml");

use crate::model::Category;

#[derive(Debug, Deserialize)]
struct RulesFile {
    #[serde(rename = "rule", default)]
    rules: Vec<RuleText>,
    #[serde(rename = "session-request", default)]
    session_request: Option<PatternsText>,
}

#[derive(Debug, Deserialize)]
struct PatternsText {
    patterns: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RuleText {
    category: Category,
    patterns: Vec<String>,
}

struct Rule {
    category: Category,
    patterns: Vec<WildMatch>,
}

pub struct Rules {
    rules: Vec<Rule>,
    /// The functions that handle the request creating a session (`[session-request]`):
    /// what they allocate for it in the poll that creates it is the session's
    /// (the sessions stage, `SessionTracker::alloc`).
    session_request: Vec<WildMatch>,
}

impl Rules {
    pub fn builtin() -> Self {
        Self::parse(RMCP_RULES).expect("built-in rules parse")
    }

    /// The user's rules first, then the built-in ones.
    pub fn with_user_file(path: &Path) -> Result<Self> {
        // Under sudo, with the invoking user's rights: root reads (and a
        // parse error echoes) only what that user may read.
        let text = leakscope_recording::output::read_as_invoking_user(path, 16 << 20)
            .with_context(|| format!("cannot read rules {}", path.display()))?;
        let mut rules = Self::parse(&text)
            .with_context(|| format!("{} is not a valid rules file", path.display()))?;
        let builtin = Self::builtin();
        rules.rules.extend(builtin.rules);
        rules.session_request.extend(builtin.session_request);
        Ok(rules)
    }

    fn parse(text: &str) -> Result<Self> {
        let file: RulesFile =
            toml::from_str(text).map_err(|e| leakscope_recording::preset::toml_error(text, &e))?;
        Ok(Self {
            rules: file
                .rules
                .into_iter()
                .map(|r| Rule {
                    category: r.category,
                    patterns: r.patterns.iter().map(|p| WildMatch::new(p)).collect(),
                })
                .collect(),
            session_request: file
                .session_request
                .into_iter()
                .flat_map(|r| r.patterns)
                .map(|p| WildMatch::new(&p))
                .collect(),
        })
    }

    /// Whether a stack (function names) passes through the handler of the
    /// request that creates a session.
    pub fn in_session_request<'a>(&self, mut frames: impl Iterator<Item = &'a str>) -> bool {
        frames.any(|frame| self.session_request.iter().any(|p| p.matches(frame)))
    }

    /// Which rules have a pattern matching `frame`: bit `i` for rule `i`. `None`
    /// when there are too many rules for a mask ([`decide`](Self::decide) then).
    /// Function names repeat across stacks, so a caller memoizes this per name
    /// and decides each new stack with [`decide_by_masks`](Self::decide_by_masks)
    /// without matching a pattern again.
    pub fn matching(&self, frame: &str) -> Option<u64> {
        if self.rules.len() > 64 {
            return None;
        }
        Some(
            self.rules
                .iter()
                .enumerate()
                .filter(|(_, rule)| rule.patterns.iter().any(|p| p.matches(frame)))
                .fold(0, |mask, (i, _)| mask | 1 << i),
        )
    }

    /// [`decide`](Self::decide) from each frame's [`matching`](Self::matching) mask.
    pub fn decide_by_masks(&self, masks: &[u64]) -> (Category, Option<usize>) {
        for (i, rule) in self.rules.iter().enumerate() {
            if let Some(index) = masks.iter().position(|mask| mask & (1 << i) != 0) {
                return (rule.category, Some(index));
            }
        }
        (Category::Other, None)
    }

    /// The category of a block allocated under `frames` (function names, innermost first).
    pub fn categorize<'a>(&self, frames: impl IntoIterator<Item = &'a str> + Clone) -> Category {
        self.decide(frames).0
    }

    /// The category and the index of the frame that decided it (`None` for `other`).
    pub fn decide<'a>(
        &self,
        frames: impl IntoIterator<Item = &'a str> + Clone,
    ) -> (Category, Option<usize>) {
        for rule in &self.rules {
            let matched = frames
                .clone()
                .into_iter()
                .position(|frame| rule.patterns.iter().any(|p| p.matches(frame)));
            if let Some(index) = matched {
                return (rule.category, Some(index));
            }
        }
        (Category::Other, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_channel_is_session_map_and_first_rule_wins() {
        let rules = Rules::builtin();
        let frames = [
            "tokio::sync::mpsc::bounded::channel",
            "rmcp::transport::streamable_http_server::session::local::create_local_session_with_event_store",
        ];
        assert_eq!(
            rules.categorize(frames.iter().copied()),
            Category::SessionMap
        );
        assert_eq!(
            rules.categorize(
                ["tokio::sync::mpsc::bounded::channel", "main"]
                    .iter()
                    .copied()
            ),
            Category::WorkerChannel
        );
        assert_eq!(rules.categorize(["main"].iter().copied()), Category::Other);
    }

    #[test]
    fn deciding_by_masks_agrees_with_matching_every_pattern() {
        let rules = Rules::builtin();
        let stacks: [&[&str]; 3] = [
            &[
                "tokio::sync::mpsc::bounded::channel",
                "rmcp::transport::streamable_http_server::session::local::create_local_session_with_event_store",
            ],
            &["tokio::sync::mpsc::bounded::channel", "main"],
            &["main"],
        ];
        for frames in stacks {
            let masks: Vec<u64> = frames.iter().map(|f| rules.matching(f).unwrap()).collect();
            assert_eq!(
                rules.decide_by_masks(&masks),
                rules.decide(frames.iter().copied())
            );
        }
    }

    #[test]
    fn user_rules_come_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.toml");
        std::fs::write(
            &path,
            "[[rule]]\ncategory = \"other\"\npatterns = [\"tokio::*\"]\n",
        )
        .unwrap();
        let rules = Rules::with_user_file(&path).unwrap();
        assert_eq!(
            rules.categorize(["tokio::sync::mpsc::bounded::channel"].iter().copied()),
            Category::Other
        );
    }
}
