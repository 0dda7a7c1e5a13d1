//! Left on, sampled at the default mean (`always_on`).

use serde::{Deserialize, Serialize};

use super::Outcome;

/// Detection in both modes, the disk a day takes, and a day read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AlwaysOn {
    /// `attach --sample`'s mean.
    pub mean_bytes: u64,
    pub cache_requests_per_s: f64,
    pub cache_leak_bytes_per_s: f64,
    /// docs/report.md's `10 T / L`.
    pub predicted_detection_s: f64,
    /// The eBPF probe on `cache-server-jemalloc`.
    pub ebpf: Outcome<Detection>,
    /// The cooperative allocator on `cache-server-cooperative`.
    pub cooperative: Outcome<Detection>,
    pub disk: Disk,
    /// Left out by `--quick`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_read: Option<Outcome<DayRead>>,
}

/// How soon and how well one mode names the cache server's leak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Detection {
    pub server: String,
    /// How long the server was driven.
    pub seconds: u64,
    pub requests: u64,
    /// What the server kept: requests x 1 KiB.
    pub kept_bytes: u64,
    /// The first cut whose report named `cache::remember` (`None`: none did).
    pub named_after_s: Option<u64>,
    pub verdict: String,
    /// The top finding of the whole recording's report (`None`: no finding).
    pub site: Option<String>,
    pub estimated_bytes: u64,
    pub samples: Option<u64>,
    pub relative_error: Option<f64>,
    /// `None` (null) when the server kept nothing.
    pub estimate_vs_kept: Option<f64>,
    pub recorded_events: u64,
    pub file_bytes: u64,
}

/// What a sampled recording writes under each load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Disk {
    pub cache_server: Outcome<DiskRow>,
    pub fixture_server_sessions: Outcome<DiskRow>,
}

/// A sampled recording's bytes and records per second, and a day's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DiskRow {
    /// Written once per file, before any event.
    pub file_start_bytes: u64,
    pub sampled_bytes_per_s: f64,
    pub sampled_records_per_s: f64,
    /// Counted by a recording of every call under the same load.
    pub allocs_per_s: f64,
    /// Scaled to 10 k allocations/s; `None` (null) when the load made no
    /// allocation to scale by.
    pub day_bytes_at_10k_allocs_per_s: Option<f64>,
    pub day_records_at_10k_allocs_per_s: Option<f64>,
    pub load: String,
    /// The session churn's rate (the fixture's row only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_per_s: Option<u64>,
}

/// The fixture's sampled recording replayed to a day, and the report on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DayRead {
    pub records: u64,
    pub file_bytes: u64,
    pub report_seconds: f64,
    pub peak_rss_bytes: u64,
}
