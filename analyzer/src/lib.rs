//! leakscope's analyzer: recordings in, attribution, timelines, reports out.
//!
//! A pipeline of small stages, each its own module and tested alone:
//! recording (`leakscope_probe::recording`, read with a tolerated torn tail) ->
//! [`symbolize`] (blazesym over the recorded mappings) -> [`attribute`] (category
//! rules) -> [`timeline`] (sessions, live/reclaimed/transient/retained over time) ->
//! [`summary`] (`summary.json`), [`report`] (`report.md`), [`charts`] (SVG/PNG),
//! [`flamegraph`] and [`trace`] (Perfetto). [`dhat`] imports DHAT's own profiles.

pub mod attribute;
pub mod charts;
pub mod dhat;
pub mod flamegraph;
pub mod report;
pub mod summary;
pub mod symbolize;
pub mod timeline;
pub mod trace;

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

/// Reads a recording in one streaming pass into a [`Timeline`], with a progress
/// bar on a terminal.
pub fn analyze(path: &Path, rules: Rules, grace_ns: u64) -> Result<Timeline> {
    let mut reader = RecordingReader::open(path)?;
    let header = reader.header().clone();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let progress = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(size)
    } else {
        indicatif::ProgressBar::hidden()
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template("reading {bar:30} {bytes}/{total_bytes} {msg}")
            .expect("valid template"),
    );
    let mut builder = Builder::new(rules, grace_ns, 100_000_000);
    let mut n: u64 = 0;
    while let Some(record) = reader.next() {
        builder.push(record);
        n += 1;
        if n.is_multiple_of(65_536) {
            progress.set_position(reader.offset());
        }
    }
    progress.finish_and_clear();
    let tail = reader.tail().cloned().expect("the reader was drained");
    if let leakscope_probe::recording::Tail::Torn { offset, reason } = &tail {
        eprintln!(
            "leakscope: warning: {} is truncated at byte {offset} ({reason}); reporting its readable prefix",
            path.display()
        );
    }
    Ok(builder.finish(header, tail))
}

/// `leakscope report`: writes `summary.json`, `report.md`, `trace.json`,
/// `flamegraph.svg` and the charts (SVG and PNG) into `out_dir`.
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
    std::fs::write(
        options.out_dir.join("trace.json"),
        serde_json::to_string(&trace::chrome_trace(&timeline))?,
    )?;
    let exe = timeline.header.exe.rsplit('/').next().unwrap_or("target");
    flamegraph::write(
        &timeline.sites,
        &format!(
            "Bytes live at the end of the recording: {exe} (pid {})",
            timeline.header.pid
        ),
        &options.out_dir.join("flamegraph.svg"),
    )?;
    charts::write_all(&timeline, &options.out_dir)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every output of a report, from the checked-in leaky sample recording.
    #[test]
    fn report_writes_every_output() {
        let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/leaky-5-sessions.lsrec");
        let out_dir =
            std::env::temp_dir().join(format!("leakscope-report-unit-{}", std::process::id()));
        let summary = report(
            &recording,
            &ReportOptions {
                out_dir: out_dir.clone(),
                rules: None,
                grace_ns: 1_000_000_000,
            },
        )
        .unwrap();
        assert_eq!(summary.sessions.count, 5);
        assert_eq!(summary.sessions.closed, 0);
        for (file, starts_with) in [
            ("summary.json", &b"{"[..]),
            ("report.md", b"# leakscope report"),
            ("trace.json", b"{"),
            ("flamegraph.svg", b"<?xml"),
            ("retained-vs-reclaimed.svg", b"<svg"),
            ("sessions.svg", b"<svg"),
            ("retained-vs-reclaimed.png", b"\x89PNG"),
            ("sessions.png", b"\x89PNG"),
        ] {
            let bytes = std::fs::read(out_dir.join(file)).unwrap();
            assert!(bytes.starts_with(starts_with), "{file}");
        }
        let trace: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out_dir.join("trace.json")).unwrap()).unwrap();
        let slices = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count();
        assert_eq!(slices, 5, "one slice per session");
        let markdown = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
        assert!(markdown.contains(&summary.verdict));
    }
}
