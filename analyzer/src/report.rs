//! `report.md`: the summary in a form to paste into a GitHub issue.

use std::fmt::Write as _;

use leakscope_recording::Tail;

use crate::summary::Summary;
use crate::timeline::Timeline;
use crate::units::bytes;

/// Names longer than this lose their generic arguments in the report.
const READABLE_NAME: usize = 120;

pub fn render(summary: &Summary, timeline: &Timeline) -> String {
    let mut md = String::new();
    let h = &timeline.header;
    let exe = h.exe.rsplit('/').next().unwrap_or(&h.exe);
    let _ = writeln!(md, "# leakscope report: {exe} (pid {})\n", h.pid);
    let _ = writeln!(md, "**Verdict:** {}\n", summary.verdict);

    let _ = writeln!(md, "## Memory by category\n");
    let _ = writeln!(
        md,
        "| category | allocated | reclaimed | retained by ended sessions |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: |");
    for c in &summary.categories {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            c.name,
            bytes(c.allocated_bytes),
            bytes(c.reclaimed_bytes),
            bytes(c.retained_bytes)
        );
    }

    let s = &summary.sessions;
    let _ = writeln!(md, "\n## Per session\n");
    let _ = writeln!(
        md,
        "{} sessions born, {} workers ended. Grace period: {} ms after the worker's end.\n",
        s.count,
        s.worker_ended,
        timeline.grace_ns / 1_000_000
    );
    let _ = writeln!(md, "| state at the end | sessions | meaning |");
    let _ = writeln!(md, "| --- | ---: | --- |");
    let states = [
        (
            "closed",
            s.states.closed,
            "the map entry's memory (its handle's channel) was released: the entry left the map",
        ),
        (
            "leaked",
            s.states.leaked,
            "the entry is still in the map after its worker ended",
        ),
        (
            "live",
            s.states.live,
            "the entry is in the map and its worker still runs",
        ),
        (
            "unknown",
            s.states.unknown,
            "a signal needed to decide was missing",
        ),
    ];
    for (name, count, meaning) in states {
        let _ = writeln!(md, "| {name} | {count} | {meaning} |");
    }
    if !summary.missing_signals.is_empty() {
        let _ = writeln!(md, "\nLifecycle signals this recording lacks:\n");
        for signal in &summary.missing_signals {
            let _ = writeln!(md, "- {signal}");
        }
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "| per session | p50 | p90 | max |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: |");
    let _ = writeln!(
        md,
        "| transient (freed within the grace period after the worker ended) | {} | {} | {} |",
        bytes(s.transient_bytes.p50),
        bytes(s.transient_bytes.p90),
        bytes(s.transient_bytes.max)
    );
    let _ = writeln!(
        md,
        "| retained by a leaked session (still live, worker gone) | {} | {} | {} |",
        bytes(s.retained_bytes.p50),
        bytes(s.retained_bytes.p90),
        bytes(s.retained_bytes.max)
    );

    let _ = writeln!(md, "\n## Plateau model\n");
    let duration = timeline.duration_s().max(1e-9);
    let rate = s.count as f64 / duration;
    let lifetimes: Vec<f64> = timeline
        .sessions
        .iter()
        .filter_map(|x| {
            x.worker_end_ns
                .map(|end| end.saturating_sub(x.born_ns) as f64 / 1e9)
        })
        .collect();
    let lifetime = median(&lifetimes);
    let model_transient = rate * lifetime * s.transient_bytes.p50 as f64;
    let model_retained = rate * duration * s.retained_bytes.p50 as f64;
    let observed: u64 = timeline.categories.iter().map(|c| c.live_at_end).sum();
    let _ = writeln!(
        md,
        "With sessions created at {rate:.2}/s living {lifetime:.1} s each (worker lifetime, i.e. keep-alive for \
         abandoned sessions): `rate x lifetime x transient` = {} held by live sessions at any time, plus \
         `rate x elapsed x retained` = {} after {duration:.1} s, growing without bound. Observed live at the end \
         of the recording: {} (all categories).\n",
        bytes(model_transient as u64),
        bytes(model_retained as u64),
        bytes(observed)
    );

    let _ = writeln!(md, "## Top retaining call sites\n");
    for (i, site) in summary.top_sites.iter().take(5).enumerate() {
        let _ = writeln!(
            md,
            "{}. {} in {} blocks",
            i + 1,
            bytes(site.retained_bytes),
            site.blocks
        );
        let _ = writeln!(md, "   ```");
        // Long generic arguments dropped for reading; summary.json keeps the full names.
        for frame in site.frames.iter().take(14) {
            let shown = if frame.len() > READABLE_NAME {
                crate::summary::short_name(frame)
            } else {
                frame.clone()
            };
            let _ = writeln!(md, "   {shown}");
        }
        let _ = writeln!(md, "   ```");
    }
    if summary.top_sites.is_empty() {
        let _ = writeln!(
            md,
            "No session whose worker ended holds memory; see the findings below for everything else."
        );
    }

    let _ = writeln!(md, "\n## Findings (no preset needed)\n");
    let _ = writeln!(
        md,
        "Blocks allocated during the recording and still live at the end, by call site (allocator \
         frames trimmed). A *leak candidate* grew linearly over most of the recording and was never \
         given back.\n"
    );
    if summary.findings.is_empty() {
        let _ = writeln!(
            md,
            "Nothing allocated during the recording is live at its end."
        );
    } else {
        let _ = writeln!(
            md,
            "| site | live | blocks | growth | per session | oldest | candidate |"
        );
        let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    }
    for finding in summary.findings.iter().take(10) {
        let name = &finding.name;
        let per_event = finding
            .bytes_per_event
            .as_ref()
            .map(|e| bytes(e.bytes))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            md,
            "| `{name}` | {} | {} | {}/s | {per_event} | {:.1} s | {} |",
            bytes(finding.live_bytes),
            finding.live_blocks,
            bytes(finding.growth_bytes_per_s.max(0.0) as u64),
            finding.oldest_age_s,
            if finding.leak_candidate { "yes" } else { "" }
        );
    }

    let _ = writeln!(md, "\n## Recording\n");
    let _ = writeln!(
        md,
        "- target: `{}` (pid {}, build-id {})",
        h.exe,
        h.pid,
        h.build_id.as_deref().unwrap_or("unknown")
    );
    let _ = writeln!(
        md,
        "- producer: {} ({}), allocation layer: {:?}: {}",
        summary.producer, h.producer_version, h.settings.alloc_layer, h.settings.alloc_layer_reason
    );
    let _ = writeln!(
        md,
        "- duration {:.1} s, {} allocations, {} frees, {} lost events",
        summary.duration_s, summary.events.alloc, summary.events.free, summary.events.lost
    );
    let ending = match (&timeline.tail, timeline.end_reason) {
        (Tail::Torn { offset, reason }, _) => {
            format!("torn at byte {offset} ({reason}); the readable prefix was analyzed")
        }
        (Tail::Clean, Some(reason)) => format!("ended cleanly ({reason:?})"),
        (Tail::Clean, None) => "no end record (the producer was stopped abruptly)".into(),
    };
    let _ = writeln!(md, "- recording: {ending}");
    for warning in &timeline.warnings {
        let _ = writeln!(md, "- warning: {warning}");
    }
    for probe in &h.settings.scope_probes {
        let _ = writeln!(md, "- lifecycle probe: `{probe}`");
    }
    md
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
