//! `leakscope dhat`: the same category attribution for a DHAT profile.
//!
//! DHAT (`dhat-heap.json`, file version 2) groups allocations by program point
//! (`pps`): each has the bytes and blocks still live at the end (`eb`, `ebk`) and
//! its frames (`fs`, indices into the frame table `ftbl`, innermost first). Frame
//! strings look like `0x55d0c0ffee: crate::module::function (src/file.rs:10:5)`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::model::{Category, PerCategory};
use crate::stages::attribute::Rules;

#[derive(Debug, Deserialize)]
struct Profile {
    #[serde(rename = "dhatFileVersion")]
    version: u32,
    #[serde(default)]
    cmd: String,
    pps: Vec<ProgramPoint>,
    ftbl: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ProgramPoint {
    /// Bytes live at t-end.
    eb: u64,
    /// Blocks live at t-end.
    ebk: u64,
    fs: Vec<usize>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct DhatCategory {
    pub name: &'static str,
    pub t_end_bytes: u64,
    pub t_end_blocks: u64,
}

#[derive(Debug, Serialize)]
pub struct DhatAttribution {
    pub cmd: String,
    pub categories: Vec<DhatCategory>,
    pub t_end_bytes: u64,
}

/// The function name in a DHAT frame string.
fn function_of(frame: &str) -> &str {
    let after_addr = frame
        .split_once(": ")
        .map(|(_, rest)| rest)
        .unwrap_or(frame);
    match after_addr.rfind(" (") {
        Some(paren) if after_addr.ends_with(')') => &after_addr[..paren],
        _ => after_addr,
    }
}

pub fn attribute_profile(path: &Path, rules: &Rules) -> Result<DhatAttribution> {
    // Under sudo, with the invoking user's rights (see `Rules`).
    let text = leakscope_recording::output::read_as_invoking_user(path, 4 << 30)
        .with_context(|| format!("cannot read {}", path.display()))?;
    attribute_text(&text, rules).with_context(|| path.display().to_string())
}

/// [`attribute_profile`] of a profile's text (what the fuzz target feeds).
pub fn attribute_text(text: &str, rules: &Rules) -> Result<DhatAttribution> {
    let profile: Profile =
        serde_json::from_str(text).context("not a DHAT profile (dhat-heap.json)")?;
    if profile.version != 2 {
        bail!(
            "DHAT file version {} is not supported (2 is)",
            profile.version
        );
    }
    let mut totals: PerCategory<(u64, u64)> = PerCategory::default();
    for pp in &profile.pps {
        let frames = pp
            .fs
            .iter()
            .filter_map(|i| profile.ftbl.get(*i))
            .map(|f| function_of(f));
        let category = rules.categorize(frames);
        // Saturating: a crafted profile must not overflow.
        totals[category].0 = totals[category].0.saturating_add(pp.eb);
        totals[category].1 = totals[category].1.saturating_add(pp.ebk);
    }
    Ok(DhatAttribution {
        cmd: profile.cmd,
        t_end_bytes: totals.iter().fold(0u64, |sum, t| sum.saturating_add(t.0)),
        categories: Category::ALL
            .iter()
            .map(|c| DhatCategory {
                name: c.name(),
                t_end_bytes: totals[*c].0,
                t_end_blocks: totals[*c].1,
            })
            .collect(),
    })
}

/// A Markdown table of the attribution.
pub fn render(attribution: &DhatAttribution) -> String {
    let mut out = format!(
        "DHAT profile of `{}`: bytes live at t-end by category\n\n",
        attribution.cmd
    );
    out.push_str("| category | t-end bytes | t-end blocks |\n| --- | ---: | ---: |\n");
    for c in &attribution.categories {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            c.name,
            crate::units::bytes(c.t_end_bytes),
            c.t_end_blocks
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_come_out_of_frame_strings() {
        assert_eq!(function_of("0x55d0: a::b::c (src/x.rs:10:5)"), "a::b::c");
        assert_eq!(function_of("[root]"), "[root]");
        assert_eq!(function_of("0x1: <A as B>::f (x.rs:1:1)"), "<A as B>::f");
    }

    #[test]
    fn t_end_bytes_are_attributed_by_frames() {
        let json = r#"{"dhatFileVersion":2,"mode":"rust-heap","cmd":"server","pps":[
            {"tb":100,"tbk":1,"eb":12576,"ebk":2,"fs":[1,2]},
            {"tb":100,"tbk":1,"eb":64,"ebk":1,"fs":[3]}],
            "ftbl":["[root]","0x1: tokio::sync::mpsc::bounded::channel (b.rs:1:1)",
                    "0x2: rmcp::transport::streamable_http_server::session::local::create_local_session_with_event_store (l.rs:1:1)",
                    "0x3: main (m.rs:1:1)"]}"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dhat.json");
        std::fs::write(&path, json).unwrap();
        let attribution = attribute_profile(&path, &Rules::builtin()).unwrap();
        assert_eq!(attribution.t_end_bytes, 12640);
        assert_eq!(
            attribution.categories[0],
            DhatCategory {
                name: "session-map",
                t_end_bytes: 12576,
                t_end_blocks: 2
            }
        );
        assert_eq!(attribution.categories[3].t_end_bytes, 64);
    }
}
