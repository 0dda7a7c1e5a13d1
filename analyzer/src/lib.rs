//! leakscope's analyzer: recordings in, attribution, timelines, reports out.
//!
//! A pipeline of small stages (inferno's style: plain data between stages), then
//! the outputs that read what the stages produced:
//!
//! ```text
//! recording (leakscope_recording, read with a tolerated torn tail)
//!   stages/     symbolize (blazesym over the recorded mappings) -> stacks (deduplicated,
//!               allocator frames trimmed, named) -> attribute (category rules) ->
//!               objects (sessions and tokio tasks: who owns a block) -> accounting (live,
//!               reclaimed, transient, retained over time) -> sites (what is still live, by
//!               call site) -> profile (every stack's allocations and live blocks)
//!               => timeline (the result of one streaming pass) -> verdict (what it comes to)
//!   model/      the plain data the stages write and the outputs read (the timeline)
//!   outputs/    summary (summary.json, quoting the verdict), report (report.md), charts
//!               (SVG/PNG), flamegraph, trace (Perfetto), pprof (profile.pb.gz), diff;
//!               written to one directory, through --redact, by `outputs::OutputDir`
//! ```
//! [`dhat`] imports DHAT's own profiles into the same categories. Library code
//! returns what happened (warnings, progress through a callback); the
//! `leakscope` binary decides what to print. What the binaries, the fixtures and
//! the fuzz targets use is re-exported here; the rest is private to the crate.
//!
//! The entry points follow one rule: a function per subcommand, named for it
//! ([`analyze`], [`report`], [`diff`], [`pprof`]), taking its inputs and then
//! its options; each has a `_with_progress` twin that takes a progress callback
//! last. Options have defaults (`ReportOptions { out_dir, ..Default::default() }`).

pub mod dhat;
mod model;
mod outputs;
mod stages;
mod units;

pub use leakscope_recording::frames::short_name;
pub use model::{
    Category, Frame, Session, SessionState, Site, Task, TaskState, Timeline, Verdict, percentile,
};
pub use outputs::diff::Diff;
/// The diff of two analysed recordings, each (its name, summary, timeline).
pub use outputs::diff::diff as diff_timelines;
/// `summary.json`'s types (see [`Summary`]): what other tools and the
/// fixtures' tests read back with serde.
pub use outputs::summary::{
    CategorySummary, Events, FORMAT_VERSION, Finding, IdleSpread, ObjectKind, ObjectSummary,
    PerEvent, Retained, SamplingSummary, SessionStates, Sessions, SiteSummary, SpawnSite, Spread,
    Summary, VerdictKind, summarize,
};
pub use outputs::{InMemory, OutputDir, Sink, write_diff, write_report};
pub use stages::attribute::Rules;
pub use stages::symbolize::Symbolizer;
pub use stages::timeline::Builder;

use std::path::{Path, PathBuf};

use anyhow::Result;
use leakscope_recording::segments::Chain;

use crate::stages::accounting::SAMPLE_INTERVAL_NS;
pub use leakscope_recording::output::Owner;

/// Progress is reported every this many records.
const PROGRESS_EVERY_RECORDS: u64 = 65_536;

/// Decoded frames the reading thread may hold ahead of the builder (each is
/// at most a writer's frame of records), so memory stays bounded.
const READ_AHEAD_FRAMES: usize = 4;

/// How long after a worker's end its session's frees still count as
/// transient, unless told (`--grace`).
pub const DEFAULT_GRACE_NS: u64 = 1_000_000_000;

/// What `report` and `diff` are asked for. The default writes to `report/`
/// with the built-in rules, as `leakscope report` does without flags.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub out_dir: PathBuf,
    pub rules: Option<PathBuf>,
    /// How long after a worker's end its session's frees still count as transient.
    pub grace_ns: u64,
    /// An application trace (`tracing-chrome` JSON) to merge into `trace.json`.
    pub app_trace: Option<PathBuf>,
    /// Take the machine's paths and hostnames out of every output (`--redact`).
    pub redact: bool,
    /// Who the outputs are handed to (the user who ran sudo), if not the runner.
    pub owner: Option<Owner>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            out_dir: PathBuf::from("report"),
            rules: None,
            grace_ns: DEFAULT_GRACE_NS,
            app_trace: None,
            redact: false,
            owner: None,
        }
    }
}

/// What `pprof` is asked for.
#[derive(Debug, Clone)]
pub struct PprofOptions {
    /// The profile's file (`profile.proto`, gzipped).
    pub out: PathBuf,
    pub rules: Option<PathBuf>,
    pub grace_ns: u64,
    /// Who the file is handed to (the user who ran sudo), if not the runner.
    pub owner: Option<Owner>,
}

impl Default for PprofOptions {
    fn default() -> Self {
        Self {
            out: PathBuf::from("profile.pb.gz"),
            rules: None,
            grace_ns: DEFAULT_GRACE_NS,
            owner: None,
        }
    }
}

/// How far reading a recording has got.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Bytes of the file read so far.
    pub read: u64,
    /// The file's size.
    pub total: u64,
}

/// What `report` produced.
pub struct Report {
    pub summary: Summary,
    /// Things the user should know about the recording (e.g. it was truncated).
    pub warnings: Vec<String>,
}

/// Reads a recording in one streaming pass into a [`Timeline`].
pub fn analyze(path: &Path, rules: Rules, grace_ns: u64) -> Result<Timeline> {
    analyze_with_progress(path, rules, grace_ns, |_| {})
}

/// [`analyze`], telling `on_progress` how far it has read.
pub fn analyze_with_progress(
    path: &Path,
    rules: Rules,
    grace_ns: u64,
    mut on_progress: impl FnMut(Progress),
) -> Result<Timeline> {
    // A recording written in segments (`attach --rotate`) reads as one.
    let mut reader = Chain::open(path)?;
    let header = reader.header().clone();
    let total = reader.total_bytes();
    let mut builder = Builder::new(rules, grace_ns, SAMPLE_INTERVAL_NS)
        .scope_functions(&header.settings.scope_functions)
        .producer(header.producer)
        .sampling(header.sampling);
    // Reading (file, zstd, postcard) runs on a thread of its own, a few frames
    // ahead of the builder: on a recording of millions of events it is a third
    // of the work, and this way it costs no time on the builder's thread.
    let tail = std::thread::scope(|scope| {
        let (batches, received) = std::sync::mpsc::sync_channel(READ_AHEAD_FRAMES);
        let reading = scope.spawn(move || {
            while let Some(batch) = reader.next_frame() {
                if batches.send((batch, reader.offset())).is_err() {
                    break;
                }
            }
            reader.tail().cloned()
        });
        let mut since_progress = 0;
        for (batch, read) in received {
            since_progress += batch.len() as u64;
            for record in batch {
                builder.push(record);
            }
            if since_progress >= PROGRESS_EVERY_RECORDS {
                since_progress = 0;
                on_progress(Progress { read, total });
            }
        }
        reading.join().expect("the reading thread does not panic")
    });
    on_progress(Progress { read: total, total });
    let tail = tail.expect("the reader was drained");
    Ok(builder.finish(header, tail))
}

/// `leakscope report`: writes `summary.json`, `report.md`, `trace.json`,
/// `flamegraph.svg`, `profile.pb.gz` and the charts (SVG and PNG) into `out_dir`.
pub fn report(recording: &Path, options: &ReportOptions) -> Result<Report> {
    report_with_progress(recording, options, |_| {})
}

/// [`report`], telling `on_progress` how far it has read the recording.
pub fn report_with_progress(
    recording: &Path,
    options: &ReportOptions,
    on_progress: impl FnMut(Progress),
) -> Result<Report> {
    let timeline = analyze_with_progress(
        recording,
        rules(options.rules.as_deref())?,
        options.grace_ns,
        on_progress,
    )?;
    let summary = summarize(&timeline);
    let out = OutputDir::create(&options.out_dir, options.redact, options.owner)?;
    let warnings = outputs::write_report(&out, &summary, &timeline, options.app_trace.as_deref())?;
    Ok(Report { summary, warnings })
}

/// The built-in category rules, with a user's rules file tried first.
fn rules(user_file: Option<&Path>) -> Result<Rules> {
    match user_file {
        Some(path) => Rules::with_user_file(path),
        None => Ok(Rules::builtin()),
    }
}

/// What `diff` produced.
pub struct DiffReport {
    pub diff: Diff,
    /// Warnings about either recording, each naming it.
    pub warnings: Vec<String>,
}

/// `leakscope diff`: analyses `before` and `after` with the same options and
/// writes `diff.md`, `diff.json` and the diff charts (SVG and PNG) into
/// `options.out_dir`.
pub fn diff(before: &Path, after: &Path, options: &ReportOptions) -> Result<DiffReport> {
    diff_with_progress(before, after, options, |_| {})
}

/// [`diff`], telling `on_progress` how far it has read each recording.
pub fn diff_with_progress(
    before: &Path,
    after: &Path,
    options: &ReportOptions,
    mut on_progress: impl FnMut(Progress),
) -> Result<DiffReport> {
    let mut warnings = Vec::new();
    let mut read = |path: &Path| -> Result<(Timeline, Summary)> {
        let timeline = analyze_with_progress(
            path,
            rules(options.rules.as_deref())?,
            options.grace_ns,
            &mut on_progress,
        )?;
        warnings.extend(
            timeline
                .warnings
                .iter()
                .map(|w| format!("{}: {w}", path.display())),
        );
        let summary = summarize(&timeline);
        Ok((timeline, summary))
    };
    let (old, old_summary) = read(before)?;
    let (new, new_summary) = read(after)?;
    let diff = outputs::diff::diff(
        (&before.display().to_string(), &old_summary, &old),
        (&after.display().to_string(), &new_summary, &new),
    );
    let out = OutputDir::create(&options.out_dir, options.redact, options.owner)?;
    outputs::write_diff(&out, &diff, &old, &new)?;
    let warnings = warnings.into_iter().map(|w| out.redacted(w)).collect();
    Ok(DiffReport { diff, warnings })
}

/// `leakscope pprof`: writes the recording's heap profile (`profile.proto`,
/// gzipped) to `options.out`; returns the recording's warnings.
pub fn pprof(recording: &Path, options: &PprofOptions) -> Result<Vec<String>> {
    pprof_with_progress(recording, options, |_| {})
}

/// [`pprof`], telling `on_progress` how far it has read the recording.
pub fn pprof_with_progress(
    recording: &Path,
    options: &PprofOptions,
    on_progress: impl FnMut(Progress),
) -> Result<Vec<String>> {
    let timeline = analyze_with_progress(
        recording,
        rules(options.rules.as_deref())?,
        options.grace_ns,
        on_progress,
    )?;
    let profile = outputs::pprof::of_timeline(&timeline, None)?;
    outputs::write_file(&options.out, &profile, options.owner)?;
    Ok(timeline.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--redact`: no output names a directory of this machine.
    #[test]
    fn redacted_reports_name_no_path() {
        let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/leaky-5-sessions.lsrec");
        let temp = tempfile::tempdir().unwrap();
        let out_dir = temp.path().join("leakscope-redacted");
        report(
            &recording,
            &ReportOptions {
                out_dir: out_dir.clone(),
                redact: true,
                ..Default::default()
            },
        )
        .unwrap();
        let header = leakscope_recording::RecordingReader::open(&recording)
            .unwrap()
            .header()
            .clone();
        let exe_dir = header.exe.rsplit_once('/').unwrap().0.to_owned();
        assert!(exe_dir.len() > 1, "the sample names a directory: {exe_dir}");
        for file in ["report.md", "summary.json", "trace.json", "flamegraph.svg"] {
            let text = std::fs::read_to_string(out_dir.join(file)).unwrap();
            assert!(!text.contains(&exe_dir), "{file} names {exe_dir}");
            assert!(!text.contains("/.cargo/"), "{file} names a cargo path");
        }
        let mut profile = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(
                std::fs::File::open(out_dir.join("profile.pb.gz")).unwrap(),
            ),
            &mut profile,
        )
        .unwrap();
        let profile =
            <outputs::pprof::Profile as prost::Message>::decode(profile.as_slice()).unwrap();
        assert!(
            profile
                .string_table
                .iter()
                .all(|s| !s.contains(&exe_dir) && !s.starts_with('/')),
            "{:?}",
            profile.string_table
        );
        assert!(profile.string_table.iter().any(|s| s == "fixture-server"));
    }

    /// `summary.json` reads back into [`Summary`] (what the fixtures' tests and
    /// other tools read), and that writes out the same fields and values.
    #[test]
    fn summary_json_reads_back_into_its_type() {
        let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/leaky-5-sessions.lsrec");
        let temp = tempfile::tempdir().unwrap();
        let out_dir = temp.path().join("leakscope-summary-type");
        let summary = report(
            &recording,
            &ReportOptions {
                out_dir: out_dir.clone(),
                ..Default::default()
            },
        )
        .unwrap()
        .summary;
        let text = std::fs::read_to_string(out_dir.join("summary.json")).unwrap();
        let read: Summary = serde_json::from_str(&text).unwrap();
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        );
        assert_eq!(read.verdict, summary.verdict);
        assert_eq!(read.verdict_kind, summary.verdict_kind);
        assert_eq!(read.producer, summary.producer);
        assert_eq!(
            read.objects.keys().collect::<Vec<_>>(),
            summary.objects.keys().collect::<Vec<_>>()
        );
        assert_eq!(
            read.objects[&ObjectKind::Session].states,
            summary.objects[&ObjectKind::Session].states
        );
    }

    /// Every output of a report, from the checked-in leaky sample recording.
    #[test]
    fn report_writes_every_output() {
        let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/recordings/leaky-5-sessions.lsrec");
        let temp = tempfile::tempdir().unwrap();
        let out_dir = temp.path().join("leakscope-report-unit");
        let summary = report(
            &recording,
            &ReportOptions {
                out_dir: out_dir.clone(),
                ..Default::default()
            },
        )
        .unwrap()
        .summary;
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
            ("profile.pb.gz", b"\x1f\x8b"),
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
        let verdict_line = markdown
            .lines()
            .find_map(|l| l.strip_prefix("**Verdict:** "))
            .unwrap();
        assert!(verdict_line.contains("](#per-session)"), "{verdict_line}");
        // Without its links, the verdict line is summary.json's verdict.
        let mut plain = String::new();
        let mut rest = verdict_line;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find("](").unwrap() + open;
            let end = rest[close..].find(')').unwrap() + close;
            plain.push_str(&rest[..open]);
            plain.push_str(&rest[open + 1..close]);
            rest = &rest[end + 1..];
        }
        plain.push_str(rest);
        assert_eq!(plain, summary.verdict);
        let opening: Vec<&str> = markdown.lines().filter(|l| !l.is_empty()).take(5).collect();
        assert!(opening[2].starts_with("**Sessions:**"), "{opening:?}");
        assert!(opening[3].starts_with("**Recording:**"), "{opening:?}");
        assert!(
            opening[4].contains("(retained-vs-reclaimed.png)"),
            "{opening:?}"
        );
    }
}
