//! `bench/results.json`, typed: what the measuring modules produce and the
//! renderer reads back. The file is these types through serde_json (its keys
//! sorted, as a `serde_json::Value` writes them), so the renderer sees exactly
//! what the file holds, whether a run just wrote it or `--render` reads it.
//!
//! Floats written as `null` when they are not finite (serde_json's rule) are
//! `Option<f64>` here where a run can make one (a ratio over a count or a time
//! that can be zero, a figure passed on from another tool's output); the
//! renderer's fallbacks for them are the ones it had for a missing number.

mod always_on;
mod pairs;
mod server;

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub(crate) use always_on::{AlwaysOn, DayRead, Detection, Disk, DiskRow};
pub(crate) use pairs::{Pairs, ProgramStat, Timing, Timings};
pub(crate) use server::{
    CpuPerSession, LoadRow, RoundRatio, SaturationRounds, ServerInstructions, ServerLoad,
    ServerProgram, ServerPrograms, ToolLoads,
};

/// The version of the file's layout.
pub(crate) const FORMAT_VERSION: u32 = 2;

/// The whole file. A section a run did not measure (`--only`) is left out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Results {
    pub format_version: u32,
    /// `--quick`: the page says which command wrote it.
    pub quick: bool,
    pub machine: Machine,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<Pairs>,
    /// The same pairs deep in a frame-pointer stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_deep: Option<Pairs>,
    /// The deep pairs again, built without frame pointers (walked by table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_nofp: Option<Pairs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerLoad>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_programs: Option<Outcome<ServerPrograms>>,
    /// Saturation side by side, in rounds: what the sampled modes keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation_rounds: Option<Outcome<SaturationRounds>>,
    /// Instructions per session under callgrind: the cooperative build's
    /// cost without the machine's noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_instructions: Option<Outcome<ServerInstructions>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_process: Option<InProcess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<Recording>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analyzer: Option<Analyzer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always_on: Option<AlwaysOn>,
    /// The run's wall time.
    pub seconds: f64,
}

impl Results {
    /// The file's text: pretty JSON, keys sorted, a final newline.
    pub fn to_json(&self) -> Result<String> {
        // Through a Value: its maps sort their keys, as the file always had them.
        let value = serde_json::to_value(self)?;
        Ok(serde_json::to_string_pretty(&value)? + "\n")
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
    }
}

/// A part that ran, or why it could not: `{"skipped": "reason"}` in the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Outcome<T> {
    Skipped { skipped: String },
    Measured(T),
}

impl<T> Outcome<T> {
    /// A measurement, or its error (with its causes) as the reason it was skipped.
    pub fn of(result: Result<T>) -> Self {
        match result {
            Ok(measured) => Outcome::Measured(measured),
            Err(why) => Outcome::Skipped {
                skipped: format!("{why:#}"),
            },
        }
    }

    pub fn measured(&self) -> Option<&T> {
        match self {
            Outcome::Measured(measured) => Some(measured),
            Outcome::Skipped { .. } => None,
        }
    }

    pub fn skipped(&self) -> Option<&str> {
        match self {
            Outcome::Skipped { skipped } => Some(skipped),
            Outcome::Measured(_) => None,
        }
    }
}

/// The machine the figures are from (`None`: it would not say).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Machine {
    pub kernel: Option<String>,
    pub cpu: Option<String>,
    pub cpus: usize,
    pub date: Option<String>,
}

/// The in-process mode on `Box` pairs: ns per pair, medians over rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InProcess {
    pub n: u64,
    pub rounds: usize,
    pub system_ns: f64,
    /// `None` when heaptrack could not run (`heaptrack_skipped` says why).
    pub heaptrack_ns: Option<f64>,
    pub heaptrack_skipped: Option<String>,
    pub wrapper_idle_ns: f64,
    pub recorder_only_ns: f64,
    pub recording_ns: f64,
    pub cooperative_off_ns: f64,
    pub cooperative_on_ns: f64,
    pub cooperative_sampled_ns: f64,
    /// Recording on, stacks walked by the unwind tables (as a build without
    /// frame pointers walks them) on the same program; `None` in results
    /// from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooperative_on_tables_ns: Option<f64>,
    /// The same, walked by `_Unwind_Backtrace` (as dhat walks them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooperative_on_libgcc_ns: Option<f64>,
}

/// The probe's recording of `fixture-server` under churn.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Recording {
    /// `None` (null) for a recording of no events.
    pub bytes_per_event: Option<f64>,
    pub events: u64,
    pub file_bytes: u64,
    pub source: String,
}

/// `leakscope report` on replayed recordings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Analyzer {
    /// The largest run's.
    pub events_per_s: Option<f64>,
    /// Between the two largest runs (`None` with fewer than two).
    pub marginal_events_per_s: Option<f64>,
    /// The report on the recording itself: its fixed start.
    pub start_seconds: f64,
    pub start_events: u64,
    pub runs: Vec<AnalyzerRun>,
    /// The pairs recording replayed as far as the largest run.
    pub flat_live_set: Outcome<AnalyzerRun>,
}

/// One timed report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AnalyzerRun {
    pub events: u64,
    pub file_bytes: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    pub peak_rss_bytes: u64,
    /// From the report's summary.json (`None` when it had none).
    pub live_blocks_at_end: Option<u64>,
}

#[cfg(test)]
mod tests {
    /// The committed `bench/results.json` reads into these types and writes
    /// back to the same JSON: no field is lost, renamed or retyped.
    #[test]
    fn the_committed_results_round_trip() {
        let text = include_str!("../../../../bench/results.json");
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        let typed: super::Results = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), value);
        // And the file's text itself: sorted keys, the same numbers.
        assert_eq!(typed.to_json().unwrap(), text);
    }

    /// A skipped part is its reason alone; a measured one is its fields.
    #[test]
    fn skipped_parts_are_their_reason() {
        use super::{DayRead, Outcome};
        let skipped: Outcome<DayRead> =
            serde_json::from_value(serde_json::json!({ "skipped": "no day estimate" })).unwrap();
        assert_eq!(skipped.skipped(), Some("no day estimate"));
        let day = serde_json::json!({
            "records": 3, "file_bytes": 4, "report_seconds": 1.5, "peak_rss_bytes": 5
        });
        let measured: Outcome<DayRead> = serde_json::from_value(day.clone()).unwrap();
        assert_eq!(measured.measured().map(|d| d.records), Some(3));
        assert_eq!(serde_json::to_value(&measured).unwrap(), day);
        let error: Outcome<DayRead> = Outcome::of(Err(anyhow::anyhow!("inner").context("outer")));
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!({ "skipped": "outer: inner" })
        );
    }
}
