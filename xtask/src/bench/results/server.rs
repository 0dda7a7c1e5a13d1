//! The server under load (`server`) and where the probe's time goes on it
//! (`server_programs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Outcome;

/// Every tool at every load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerLoad {
    pub seconds_per_load: u64,
    /// The rated loads, sessions/s, in the order they ran; saturation follows.
    pub rates: Vec<f64>,
    /// Sessions in flight at most, at every load.
    pub saturation_concurrency: usize,
    /// The server's command line.
    pub server: String,
    /// By the tool's key (`ServerTool::key`).
    pub tools: BTreeMap<String, Outcome<ToolLoads>>,
}

/// One tool's server through the loads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ToolLoads {
    /// By load: `10_per_s`, ..., `saturation` (`server::load_key`).
    pub loads: BTreeMap<String, LoadRow>,
    /// Events the recording says it dropped (`None`: the tool writes no recording).
    pub lost_events: Option<u64>,
}

/// One load point, from `churn`'s report and the processes' CPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LoadRow {
    /// Sessions created (a float, as the file has always had it).
    pub sessions: f64,
    pub failed: u64,
    /// `None` (null) when churn reported no elapsed time.
    pub sessions_per_s: Option<f64>,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub server_cpu_ms_per_session: f64,
    /// The tool's own processes (`None`: it has none).
    pub tool_cpu_s: Option<f64>,
}

/// The server's CPU with nothing attached, the floor and the probe, and the
/// kernel's timing of each of the probe's programs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerPrograms {
    /// Sessions/s.
    pub rate: f64,
    pub seconds: u64,
    pub server_cpu_ms_per_session: CpuPerSession,
    /// `None` (null) when the floor added nothing.
    pub leakscope_vs_floor: Option<f64>,
    pub programs: Vec<ServerProgram>,
}

/// Server CPU ms per session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CpuPerSession {
    pub unprobed: f64,
    pub floor: f64,
    pub leakscope: f64,
}

/// One of the probe's programs, per session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerProgram {
    pub program: String,
    pub runs_per_session: f64,
    pub ns_per_run: f64,
    pub us_per_session: f64,
}

/// The saturation comparison the server's load table cannot make: one 10 s
/// run per tool is within this machine's noise (two back-to-back unprobed
/// runs differed by up to 20%), so here each round starts a fresh server per
/// tool, tools alternating, and each ratio is taken within its round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SaturationRounds {
    pub seconds: u64,
    pub rounds: usize,
    /// Per tool key: sessions/s at saturation, one per round.
    pub sessions_per_s: BTreeMap<String, Vec<f64>>,
    /// Per tool key: the server's CPU ms per session, one per round.
    pub server_cpu_ms_per_session: BTreeMap<String, Vec<f64>>,
    /// Per tool key with a process of its own (the probe, attached or
    /// relaying a cooperative target's stream): its CPU ms per session, one
    /// per round. On this 2-core machine it runs on the cores the server
    /// and the client share, so it costs the server's throughput as its
    /// own CPU does. Absent from results before it was measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_cpu_ms_per_session: BTreeMap<String, Vec<f64>>,
    /// Per tool key but `unprobed`: its sessions/s over the unprobed server's
    /// in the same round, the median of the rounds and their range.
    pub vs_unprobed: BTreeMap<String, RoundRatio>,
}

/// Instructions retired per session under callgrind (see
/// `instructions::instructions`): per composition, per tool key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ServerInstructions {
    /// Sessions counted per run (after a warm-up).
    pub sessions: u64,
    pub per_session: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per composition, per tool key but `unprobed`: its instructions over
    /// the unprobed server's.
    pub vs_unprobed: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per composition, where the sampled recording's instructions over the
    /// cooperative build switched off go: instructions per session by part
    /// (callgrind's self cost of each function, sorted into parts by name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sampled_over_off: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per composition, what the sampled recording held per session (the
    /// warm-up's included): `whole` blocks (aligned for tokio's task cells
    /// and channels), `sampled` allocations, and `frees`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recorded_per_session: BTreeMap<String, BTreeMap<String, f64>>,
}

/// A ratio measured once per round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RoundRatio {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}
