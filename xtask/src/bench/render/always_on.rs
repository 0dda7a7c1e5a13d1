//! The left-on section: detection in both modes, the disk a day takes, a day read.

use super::shown;
use crate::bench::always_on::CUT_EVERY_S;
use crate::bench::results::{AlwaysOn, Outcome};

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

/// The section of BENCHMARKS.md for the always-on results.
pub(super) fn section(md: &mut String, a: &AlwaysOn) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "## Left on: sampled at 512 KiB\n\n`cache-server` leaking 1 KiB per request at {} \
         requests/s ({:.0} KiB/s), recorded with `attach --sample` (512 KiB) for {} s in each \
         mode; the recording's first N seconds cut every {CUT_EVERY_S} s and reported until the \
         verdict names `cache::remember` (docs/report.md predicts `10 T / L` = {:.0} s), and the \
         whole recording's estimate against what the server kept (requests x 1 KiB).\n\n\
         | mode | named after | estimated | kept | estimate / kept | samples | ± | file |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        shown(&a.cache_requests_per_s),
        a.cache_leak_bytes_per_s / 1024.0,
        shown(&a.ebpf.measured().map(|d| d.seconds)),
        a.predicted_detection_s,
    );
    for (mode, label) in [
        (&a.ebpf, "eBPF probe (`cache-server-jemalloc`)"),
        (
            &a.cooperative,
            "cooperative allocator (`cache-server-cooperative`)",
        ),
    ] {
        let r = match mode {
            Outcome::Skipped { skipped: why } => {
                let _ = writeln!(md, "| {label} | skipped: {why} | | | | | | |");
                continue;
            }
            Outcome::Measured(r) => r,
        };
        let _ = writeln!(
            md,
            "| {label} | {} | {:.2} MiB | {:.2} MiB | {:.2} | {} | {:.0}% | {:.0} KiB |",
            r.named_after_s
                .map_or("not named".to_owned(), |s| format!("{s} s")),
            mib(r.estimated_bytes as f64),
            mib(r.kept_bytes as f64),
            r.estimate_vs_kept.unwrap_or(0.0),
            shown(&r.samples),
            r.relative_error.unwrap_or(0.0) * 100.0,
            r.file_bytes as f64 / 1024.0,
        );
    }
    let _ = writeln!(
        md,
        "\nWhat a sampled recording writes, per second and scaled to a day at 10 k allocations/s \
         (the load's allocations/s counted by a recording of every call under the same load):\n\n\
         | load | allocations/s | sampled records/s | sampled bytes/s | a day at 10 k allocations/s |\n\
         | --- | ---: | ---: | ---: | ---: |"
    );
    for (key, row) in [
        ("cache_server", &a.disk.cache_server),
        ("fixture_server_sessions", &a.disk.fixture_server_sessions),
    ] {
        let r = match row {
            Outcome::Skipped { skipped: why } => {
                let _ = writeln!(md, "| {key} | skipped: {why} | | | |");
                continue;
            }
            Outcome::Measured(r) => r,
        };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} MiB |",
            r.load,
            r.allocs_per_s,
            r.sampled_records_per_s,
            r.sampled_bytes_per_s,
            mib(r.day_bytes_at_10k_allocs_per_s.unwrap_or(0.0)),
        );
    }
    let _ = writeln!(
        md,
        "\nA session's lifecycle is recorded whole (its birth's blocks, its scopes, its tasks' \
         first polls), so a server that makes a new session for every few hundred allocations, \
         as the churn does, writes most for its sessions; one whose allocations are requests \
         writes its samples only."
    );
    if let Some(day) = a.day_read.as_ref().and_then(Outcome::measured) {
        let _ = writeln!(
            md,
            "\nA day read: the session churn's sampled recording replayed to a day's records at \
             10 k allocations/s ({} records, {:.0} MiB), then `leakscope report` on it: {:.1} s, \
             peak RSS {:.0} MiB.",
            day.records,
            mib(day.file_bytes as f64),
            day.report_seconds,
            mib(day.peak_rss_bytes as f64),
        );
    }
    let _ = writeln!(md);
}
