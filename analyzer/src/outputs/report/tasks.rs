//! The report's Tasks section: tokio's tasks by the function that spawned them.

use std::fmt::Write as _;

use crate::outputs::objects::ObjectKind;
use crate::outputs::summary::Summary;
use crate::units::bytes;

/// Tokio's tasks, by the function that spawned them; one line when the
/// process has none (or the probe found no tokio).
pub(super) fn tasks_section(md: &mut String, summary: &Summary) {
    let _ = writeln!(md, "\n## Tasks\n");
    let Some(tasks) = summary.objects.get(&ObjectKind::Task) else {
        let _ = writeln!(
            md,
            "No tokio task was seen polling (no tokio runtime in the process, or its task functions were not found).\n"
        );
        return;
    };
    let state = |name: &str| tasks.states.get(name).copied().unwrap_or(0);
    let _ = writeln!(
        md,
        "{} tasks seen polling: {} ended, {} alive, {} parked (not polled for most of their life). Tasks still running hold {} each (p50), {} in all; ended tasks left {} behind. A task's bytes are its cell and what its polls allocated and is still live; a session's tasks count in its footprint too.\n",
        tasks.count,
        state("ended"),
        state("alive"),
        state("parked"),
        bytes(tasks.alive_bytes.p50),
        bytes(tasks.alive_bytes.total),
        bytes(tasks.retained_bytes.total),
    );
    let _ = writeln!(
        md,
        "| spawned from | tasks | ended | alive | parked | in sessions | each holds (p50) | held | leak |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    for site in &tasks.spawn_sites {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            site.site,
            site.count,
            site.ended,
            site.alive,
            site.parked,
            site.in_sessions,
            bytes(site.alive_bytes.p50),
            bytes(site.alive_bytes.total),
            if site.leak { "yes" } else { "" }
        );
    }
}
