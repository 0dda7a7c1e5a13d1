//! leakscope's analyzer: recordings in, attribution, timelines, reports out.
//!
//! A pipeline of small stages, each its own module and tested alone:
//! recording (`leakscope_probe::recording`, read with a tolerated torn tail) ->
//! [`symbolize`] (blazesym over the recorded mappings) -> [`attribute`] (category
//! rules) -> [`timeline`] (sessions, live/reclaimed/transient/retained over time) ->
//! [`summary`] (`summary.json`) and [`report`] (`report.md`).

pub mod attribute;
pub mod report;
pub mod summary;
pub mod symbolize;
pub mod timeline;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use leakscope_probe::recording::RecordingReader;

use crate::attribute::Rules;
use crate::summary::{Summary, summarize};
use crate::timeline::{Builder, Timeline};

pub struct ReportOptions {
    pub out_dir: PathBuf,
    pub rules: Option<PathBuf>,
    /// How long after a worker's end its session's frees still count as transient.
    pub grace_ns: u64,
}

/// Reads a recording in one streaming pass into a [`Timeline`].
pub fn analyze(path: &Path, rules: Rules, grace_ns: u64) -> Result<Timeline> {
    let mut reader = RecordingReader::open(path)?;
    let header = reader.header().clone();
    let mut builder = Builder::new(rules, grace_ns, 100_000_000);
    for record in reader.by_ref() {
        builder.push(record);
    }
    let tail = reader.tail().cloned().expect("the reader was drained");
    Ok(builder.finish(header, tail))
}

/// `leakscope report`: writes `summary.json` and `report.md` into `out_dir`.
pub fn report(recording: &Path, options: &ReportOptions) -> Result<Summary> {
    let rules = match &options.rules {
        Some(path) => Rules::with_user_file(path)?,
        None => Rules::builtin(),
    };
    let timeline = analyze(recording, rules, options.grace_ns)?;
    let summary = summarize(&timeline);
    std::fs::create_dir_all(&options.out_dir)
        .with_context(|| format!("cannot create {}", options.out_dir.display()))?;
    std::fs::write(
        options.out_dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    std::fs::write(
        options.out_dir.join("report.md"),
        report::render(&summary, &timeline),
    )?;
    Ok(summary)
}
