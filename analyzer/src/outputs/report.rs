//! `report.md`: the summary in a form to paste into a GitHub issue.

use std::fmt::Write as _;

use leakscope_recording::Tail;

use crate::model::Timeline;
use crate::outputs::objects::ObjectKind;
use crate::outputs::summary::Summary;
use crate::units::keeps;
use crate::units::{bytes, estimated_bytes, estimated_count};

/// Names longer than this lose their generic arguments in the report.
const READABLE_NAME: usize = 120;

/// Where each part of the report is (GitHub's heading anchors).
const PER_SESSION: &str = "#per-session";
const BY_CATEGORY: &str = "#memory-by-category";
const TOP_SITES: &str = "#top-retaining-call-sites";
const FINDINGS: &str = "#findings-no-preset-needed";
const RECORDING: &str = "#recording";
const TASKS: &str = "#tasks";
const CHART: &str = "retained-vs-reclaimed.png";

/// `report.md`. It opens with three lines (the verdict, the evidence, the
/// recording) and the one chart a reader needs; the details follow, and every
/// figure in the verdict links to the table or chart it comes from.
pub fn render(summary: &Summary, timeline: &Timeline) -> String {
    let mut md = String::new();
    let h = &timeline.header;
    let exe = h.exe.rsplit('/').next().unwrap_or(&h.exe);
    let _ = writeln!(md, "# leakscope report: {exe} (pid {})\n", h.pid);
    let _ = writeln!(
        md,
        "**Verdict:** {}\n",
        link_figures(&summary.verdict, &verdict_figures(summary, timeline))
    );
    let _ = writeln!(md, "{}\n", evidence_line(summary, timeline));
    let rmcp = h
        .rmcp_version
        .as_deref()
        .map(|v| format!(", rmcp {v}"))
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "**Recording:** {exe} (pid {}{rmcp}), {:.1} s by the {} producer, {} allocations, {} frees, {} lost events ([details]({RECORDING})).\n",
        h.pid,
        summary.duration_s,
        summary.producer,
        summary.events.alloc,
        summary.events.free,
        summary.events.lost
    );
    if h.sampling.is_sampled() {
        let _ = writeln!(
            md,
            "**Sampled:** allocations were {} (a Poisson sample by bytes, as jemalloc's and Go's heap profilers take): every byte and block figure is an estimate from the samples, each weighted by itself, with its relative standard error where it matters (±). Sessions and tasks are counted whole.\n",
            h.sampling.describe()
        );
    }
    let _ = writeln!(
        md,
        "[![Live bytes by category over time; reclaimed bytes, session births and worker exits]({CHART})]({CHART})\n"
    );

    let task_leak = summary
        .objects
        .get(&ObjectKind::Task)
        .is_some_and(|t| t.spawn_sites.iter().any(|s| s.leak));
    if task_leak {
        tasks_section(&mut md, summary);
    }
    if summary.sessions.count > 0 {
        sessions_sections(&mut md, summary, timeline);
        findings_section(&mut md, summary, timeline);
    } else {
        // Nothing of sessions was observed: one line, and the findings lead.
        findings_section(&mut md, summary, timeline);
        let why = if summary.missing_signals.is_empty() {
            "no session lifecycle was recorded"
        } else {
            "the preset matched no lifecycle function of the target"
        };
        let _ = writeln!(
            md,
            "\n## Sessions\n\nNo rmcp sessions in this process ({why}): the findings above are the whole evidence.\n"
        );
    }

    if !task_leak {
        tasks_section(&mut md, summary);
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
        "- producer: {} ({}), allocation layer: {}: {}",
        summary.producer,
        h.producer_version,
        h.settings.alloc_layer.name(),
        h.settings.alloc_layer_reason
    );
    let _ = writeln!(
        md,
        "- duration {:.1} s, {} allocations, {} frees, {} lost events",
        summary.duration_s, summary.events.alloc, summary.events.free, summary.events.lost
    );
    let _ = writeln!(md, "- allocations recorded: {}", h.sampling.describe());
    if let Some(segment) = h.segment {
        let _ = writeln!(
            md,
            "- written in segments (`attach --rotate`): read from segment {} on, as if attached when it began; what older segments held is not in this report",
            segment.index
        );
    }
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

/// The findings: what is live at the end by call site, no preset needed.
fn findings_section(md: &mut String, summary: &Summary, timeline: &Timeline) {
    let sampling = timeline.header.sampling;
    let _ = writeln!(md, "\n## Findings (no preset needed)\n");
    let _ = writeln!(
        md,
        "Blocks allocated during the recording and still live at the end, by call site (allocator \
         frames trimmed; a site is named by its first frame outside the allocator and the standard \
         library). A *leak candidate* keeps a block (or a fixed group) per request or event: its live \
         bytes grew linearly with the target's activity over most of the recording and were never \
         given back.\n"
    );
    if summary.findings.is_empty() {
        let _ = writeln!(
            md,
            "Nothing allocated during the recording is live at its end."
        );
        return;
    }
    // Bytes per session only where there are sessions to divide by.
    let per_session = summary.sessions.count > 0;
    let (column, rule) = if per_session {
        (" per session |", " ---: |")
    } else {
        ("", "")
    };
    let _ = writeln!(
        md,
        "| site | live | blocks | growth |{column} oldest | candidate |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: |{rule} ---: | --- |");
    for finding in summary.findings.iter().take(10) {
        let name = &finding.name;
        let per_event = match (per_session, &finding.bytes_per_event) {
            (false, _) => String::new(),
            (true, Some(e)) => format!(" {} |", bytes(e.bytes)),
            (true, None) => " - |".to_owned(),
        };
        let _ = writeln!(
            md,
            "| `{name}` | {} | {} | {}/s |{per_event} {:.1} s | {} |",
            estimated_bytes(finding.live_bytes, sampling),
            estimated_count(finding.live_blocks, sampling),
            bytes(finding.growth_bytes_per_s.max(0.0) as u64),
            finding.oldest_age_s,
            if finding.leak_candidate { "yes" } else { "" }
        );
    }
}

/// The second line: what the verdict rests on.
fn evidence_line(summary: &Summary, timeline: &Timeline) -> String {
    let s = &summary.sessions;
    let sampling = timeline.header.sampling;
    if s.count > 0 {
        let st = s.states;
        let retained = if st.leaked == 0 {
            String::new()
        } else if sampling.is_sampled() {
            // A session's own figure rests on the few samples that fell in
            // it (most fall in none: their p50 is the blocks recorded whole
            // alone); their mean over many sessions is the estimate.
            format!(
                "; a leaked session retains ~{} on average, {} in all (estimated from samples)",
                bytes(s.retained_bytes.total / st.leaked),
                estimated_bytes(s.retained_bytes.total, sampling)
            )
        } else {
            format!(
                "; a leaked session retains {} (p50), {} in all",
                bytes(s.retained_bytes.p50),
                bytes(s.retained_bytes.total)
            )
        };
        return format!(
            "**Sessions:** {} born: {} leaked, {} closed, {} live, {} unknown{retained} ([per session]({PER_SESSION}), [by category]({BY_CATEGORY})).",
            s.count, st.leaked, st.closed, st.live, st.unknown
        );
    }
    match summary.findings.first() {
        Some(f) => format!(
            "**Top site:** `{}` {}, growing at {}/s{} ([findings]({FINDINGS})).",
            f.name,
            keeps(f.live_bytes, f.live_blocks, sampling),
            bytes(f.growth_bytes_per_s.max(0.0) as u64),
            if f.leak_candidate {
                ", a leak candidate"
            } else {
                ""
            }
        ),
        None => format!(
            "**Sites:** nothing allocated during the recording is still live ([findings]({FINDINGS}))."
        ),
    }
}

/// The figures the verdict may quote, each with where it comes from. The verdict
/// is prose built from these same numbers (`summary::verdict`), formatted the
/// same way.
fn verdict_figures(summary: &Summary, timeline: &Timeline) -> Vec<(String, &'static str)> {
    let s = &summary.sessions;
    let st = s.states;
    let mut figures: Vec<(String, &'static str)> = Vec::new();
    for n in [st.leaked, st.closed, st.live, st.unknown] {
        figures.push((format!("{n} of {} sessions", s.count), PER_SESSION));
    }
    figures.push((
        format!("{} (p50)", bytes(s.retained_bytes.p50)),
        PER_SESSION,
    ));
    figures.push((
        format!("{} each (p50)", bytes(s.live_bytes.p50)),
        PER_SESSION,
    ));
    figures.push((
        format!("idle for {:.0} s (p50)", s.live_idle_s.p50),
        PER_SESSION,
    ));
    let total_retained: u64 = summary.categories.iter().map(|c| c.retained_bytes).sum();
    for c in &summary.categories {
        let share = 100.0 * c.retained_bytes as f64 / total_retained.max(1) as f64;
        figures.push((format!("{share:.0}% of it"), TOP_SITES));
        figures.push((format!("({})", c.name), BY_CATEGORY));
    }
    let sampling = timeline.header.sampling;
    for f in &summary.findings {
        figures.push((keeps(f.live_bytes, f.live_blocks, sampling), FINDINGS));
        figures.push((
            format!(
                "growing at {}/s",
                bytes(f.growth_bytes_per_s.max(0.0) as u64)
            ),
            CHART,
        ));
    }
    if let Some(tasks) = summary.objects.get(&ObjectKind::Task) {
        for site in &tasks.spawn_sites {
            figures.push((format!("{} tasks spawned", site.parked), TASKS));
        }
    }
    let live: u64 = timeline.sites.iter().map(|s| s.retained_bytes).sum();
    figures.push((
        format!("{} allocated during the recording", bytes(live)),
        FINDINGS,
    ));
    figures.push((
        format!("{} events were lost", summary.events.lost),
        RECORDING,
    ));
    figures.push((
        format!(
            "{} allocations, {} frees",
            summary.events.alloc, summary.events.free
        ),
        RECORDING,
    ));
    figures
}

/// `text` with the first occurrence of each figure made a Markdown link to its
/// anchor; longer figures first, and never inside a link already made.
fn link_figures(text: &str, figures: &[(String, &str)]) -> String {
    // Segments of the text: (content, already a link).
    let mut segments: Vec<(String, bool)> = vec![(text.to_owned(), false)];
    let mut figures: Vec<&(String, &str)> = figures.iter().collect();
    figures.sort_by_key(|(figure, _)| std::cmp::Reverse(figure.len()));
    for (figure, anchor) in figures {
        if figure.is_empty() {
            continue;
        }
        let Some((i, at)) = segments
            .iter()
            .enumerate()
            .filter(|(_, (_, linked))| !linked)
            .find_map(|(i, (content, _))| content.find(figure.as_str()).map(|at| (i, at)))
        else {
            continue;
        };
        let (content, _) = segments.remove(i);
        let (before, rest) = content.split_at(at);
        let after = &rest[figure.len()..];
        let mut replacement = Vec::new();
        if !before.is_empty() {
            replacement.push((before.to_owned(), false));
        }
        replacement.push((format!("[{figure}]({anchor})"), true));
        if !after.is_empty() {
            replacement.push((after.to_owned(), false));
        }
        for (k, segment) in replacement.into_iter().enumerate() {
            segments.insert(i + k, segment);
        }
    }
    segments.into_iter().map(|(content, _)| content).collect()
}

mod sessions;
mod tasks;

use sessions::sessions_sections;
use tasks::tasks_section;

#[cfg(test)]
mod tests;
