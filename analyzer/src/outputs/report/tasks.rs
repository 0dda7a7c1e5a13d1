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
    // Sampled, a task's own figure is its cell and the few samples that fell
    // in it: the mean over tasks is the estimate (as for sessions).
    let sampled = summary.sampling.estimated;
    let each = |held: &crate::model::stats::Retained, running: u64| {
        if sampled {
            format!("~{}", bytes(held.total / running.max(1)))
        } else {
            bytes(held.p50)
        }
    };
    let _ = writeln!(
        md,
        "{} tasks seen polling: {} ended, {} alive, {} parked (not polled for most of their life). Tasks still running hold {} each ({}), {}{} in all; ended tasks left {}{} behind. A task's bytes are its cell and what its polls allocated and is still live; a session's tasks count in its footprint too.\n",
        tasks.count,
        state("ended"),
        state("alive"),
        state("parked"),
        each(&tasks.alive_bytes, state("alive") + state("parked")),
        if sampled {
            "on average, estimated from samples"
        } else {
            "p50"
        },
        if sampled { "~" } else { "" },
        bytes(tasks.alive_bytes.total),
        if sampled { "~" } else { "" },
        bytes(tasks.retained_bytes.total),
    );
    let _ = writeln!(
        md,
        "| spawned from | tasks | ended | alive | parked | in sessions | each holds ({}) | held | leak |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        if sampled { "mean" } else { "p50" }
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
            each(&site.alive_bytes, site.alive + site.parked),
            if sampled { "~" } else { "" }.to_owned() + &bytes(site.alive_bytes.total),
            if site.leak { "yes" } else { "" }
        );
    }
}
