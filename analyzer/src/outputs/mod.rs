//! The outputs: what a report writes, each from the data it needs. Every
//! output renders to text or bytes into a [`Sink`]: [`OutputDir`] is the one
//! place that writes them to disk and applies `--redact`; [`InMemory`] keeps
//! them (tests, the fuzz target that runs every output).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use leakscope_recording::output::{self, Existing, Owner};

use crate::model::Timeline;

pub mod charts;
pub mod diff;
pub mod flamegraph;
pub mod objects;
pub mod pprof;
pub mod redact;
pub mod report;
pub mod summary;
pub mod thin;
pub mod trace;

/// Where rendered outputs go.
pub trait Sink {
    /// A text output (redacted when asked).
    fn text(&self, name: &str, text: String) -> Result<()>;

    /// A binary output (a PNG, a gzipped profile already redacted by its
    /// renderer), as is.
    fn bytes(&self, name: &str, bytes: &[u8]) -> Result<()>;

    /// What takes this machine's paths and hostnames out, when asked.
    fn redactor(&self) -> Option<&redact::Redactor>;

    /// `text` as these outputs read it: redacted when asked.
    fn redacted(&self, text: String) -> String {
        match self.redactor() {
            Some(r) => r.text(&text),
            None => text,
        }
    }

    /// Charts as `NAME.svg` and `NAME.png`.
    fn charts(&self, charts: Vec<charts::Rendered>) -> Result<()> {
        for chart in charts {
            self.text(&format!("{}.svg", chart.name), chart.svg)?;
            self.bytes(&format!("{}.png", chart.name), &chart.png)?;
        }
        Ok(())
    }
}

/// Outputs kept in memory, by file name, in the order they were rendered.
#[derive(Default)]
pub struct InMemory {
    files: std::cell::RefCell<Vec<(String, Vec<u8>)>>,
}

impl InMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every output rendered so far: (file name, contents).
    pub fn files(self) -> Vec<(String, Vec<u8>)> {
        self.files.into_inner()
    }
}

impl Sink for InMemory {
    fn text(&self, name: &str, text: String) -> Result<()> {
        self.bytes(name, text.as_bytes())
    }

    fn bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.files
            .borrow_mut()
            .push((name.to_owned(), bytes.to_vec()));
        Ok(())
    }

    fn redactor(&self) -> Option<&redact::Redactor> {
        None
    }
}

/// A directory that outputs are written into, redacted when asked.
pub struct OutputDir {
    dir: PathBuf,
    redactor: Option<redact::Redactor>,
    owner: Option<Owner>,
}

impl OutputDir {
    /// Creates `dir` (and its parents, mode 0700) if needed, never through a
    /// symbolic link; `redact`: take this machine's paths and hostnames out
    /// of every text written; `owner`: who the directory and files are
    /// handed to (the user who ran sudo).
    pub fn create(dir: &Path, redact: bool, owner: Option<Owner>) -> Result<Self> {
        output::create_dir(dir, owner)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            redactor: redact.then(redact::Redactor::new),
            owner,
        })
    }
}

impl Sink for OutputDir {
    fn text(&self, name: &str, text: String) -> Result<()> {
        write_file(
            &self.dir.join(name),
            self.redacted(text).as_bytes(),
            self.owner,
        )
    }

    fn bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        write_file(&self.dir.join(name), bytes, self.owner)
    }

    fn redactor(&self) -> Option<&redact::Redactor> {
        self.redactor.as_ref()
    }
}

/// Writes `bytes` to `path` (replacing a regular file there, never writing
/// through a symbolic link; mode 0600, handed to `owner`), naming it in the error.
pub fn write_file(path: &Path, bytes: &[u8], owner: Option<Owner>) -> Result<()> {
    use std::io::Write as _;
    output::create_file(path, Existing::Replace, owner)
        .and_then(|mut file| file.write_all(bytes))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Every output of `leakscope report` for `timeline` (summarized as
/// `summary`), into `out`: `summary.json`, `report.md`, `trace.json` (with
/// the application's trace `app_trace` merged), `flamegraph.svg`,
/// `profile.pb.gz` and the charts. Returns the timeline's warnings and any
/// the merge added, redacted like the outputs.
pub fn write_report(
    out: &impl Sink,
    summary: &summary::Summary,
    timeline: &Timeline,
    app_trace: Option<&Path>,
) -> Result<Vec<String>> {
    out.text("summary.json", serde_json::to_string_pretty(summary)?)?;
    out.text("report.md", report::render(summary, timeline))?;
    let mut trace = trace::chrome_trace(
        &timeline.header,
        (
            timeline.start_ns,
            timeline.end_ns,
            timeline.trace_origin_ns.unwrap_or(timeline.start_ns),
        ),
        &timeline.sessions,
        &timeline.samples,
    );
    let mut warnings = timeline.warnings.clone();
    if let Some(app) = app_trace {
        // Under sudo, with the invoking user's rights (see `Rules`).
        let text = leakscope_recording::output::read_as_invoking_user(app, 4 << 30)
            .with_context(|| format!("cannot read {}", app.display()))?;
        trace::merge_app_trace(&mut trace, &text, timeline.header.pid)
            .with_context(|| format!("{} is not a Chrome trace", app.display()))?;
        if timeline.trace_origin_ns.is_none() {
            warnings.push(format!(
                "the recording has no trace origin (it was not made with leakscope_inproc::chrome_layer): {} is merged into trace.json but its clock may not line up",
                app.display()
            ));
        }
    }
    out.text("trace.json", serde_json::to_string(&trace)?)?;
    let exe = timeline.header.exe.rsplit('/').next().unwrap_or("target");
    let title = format!(
        "Bytes live at the end of the recording: {exe} (pid {})",
        timeline.header.pid
    );
    out.text("flamegraph.svg", flamegraph::svg(&timeline.sites, &title)?)?;
    out.charts(charts::all(timeline)?)?;
    out.bytes(
        "profile.pb.gz",
        &pprof::of_timeline(timeline, out.redactor())?,
    )?;
    Ok(warnings.into_iter().map(|w| out.redacted(w)).collect())
}

/// Every output of `leakscope diff` into `out`: `diff.json`, `diff.md` and
/// the diff charts.
pub fn write_diff(
    out: &impl Sink,
    diff: &diff::Diff,
    before: &Timeline,
    after: &Timeline,
) -> Result<()> {
    out.text("diff.json", serde_json::to_string_pretty(diff)?)?;
    out.text("diff.md", diff::render(diff))?;
    out.charts(charts::diff(before, after, diff)?)
}
