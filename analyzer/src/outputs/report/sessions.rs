//! The report's session sections: memory by category, per session, the
//! plateau model and the top retaining call sites.

use std::fmt::Write as _;

use super::READABLE_NAME;
use crate::model::{Part, Timeline, median};
use crate::outputs::summary::{SessionParts, Summary};
use crate::units::{bytes, estimated_bytes};

/// The sessions' sections: categories, per session, the plateau model, and
/// the sites ended sessions retain.
pub(super) fn sessions_sections(md: &mut String, summary: &Summary, timeline: &Timeline) {
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
    per_session_bytes(md, summary, timeline);

    session_parts(md, summary);
    if s.worker_ended > 0 {
        plateau_model(md, summary, timeline);
    }
    top_sites(md, summary);
}

/// What a session's worker left behind and what a leaked session keeps.
/// Recorded whole, their spread over sessions; sampled, their mean: a
/// session's own figure rests on the few samples that fell in it (most fall
/// in none, so its p50 is its blocks recorded whole alone, and its largest
/// one sample's weight), while the mean over many sessions is the estimate
/// the verdict gives.
fn per_session_bytes(md: &mut String, summary: &Summary, timeline: &Timeline) {
    let s = &summary.sessions;
    const TRANSIENT: &str = "transient (freed within the grace period after the worker ended)";
    const RETAINED: &str = "retained by a leaked session (still live, worker gone)";
    let sampling = timeline.header.sampling;
    if !sampling.is_sampled() {
        let _ = writeln!(md, "| per session | p50 | p90 | max |");
        let _ = writeln!(md, "| --- | ---: | ---: | ---: |");
        let t = &s.transient_bytes;
        let r = &s.retained_bytes;
        let _ = writeln!(
            md,
            "| {TRANSIENT} | {} | {} | {} |\n| {RETAINED} | {} | {} | {} |",
            bytes(t.p50),
            bytes(t.p90),
            bytes(t.max),
            bytes(r.p50),
            bytes(r.p90),
            bytes(r.max)
        );
        return;
    }
    let (ended, transient) = timeline
        .sessions
        .iter()
        .filter(|session| session.worker_end_ns.is_some())
        .fold((0u64, 0u64), |(n, sum), session| {
            (n + 1, sum + session.transient)
        });
    let leaked = s.states.leaked;
    let _ = writeln!(
        md,
        "Estimated from samples: a session's own figure rests on the few samples that fell in it, so the mean over sessions is given, not their spread.\n"
    );
    let _ = writeln!(md, "| per session | sessions | mean | in all |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: |");
    for (what, count, total) in [
        (TRANSIENT, ended, transient),
        (RETAINED, leaked, s.retained_bytes.total),
    ] {
        let _ = writeln!(
            md,
            "| {what} | {count} | ~{} | {} |",
            bytes(total / count.max(1)),
            estimated_bytes(total, sampling)
        );
    }
}

/// What a live and a leaked session hold, by part: the mean session, whose
/// parts add up to the total shown.
fn session_parts(md: &mut String, summary: &Summary) {
    let parts = &summary.sessions.parts;
    let states = [("live", &parts.live), ("leaked", &parts.leaked)];
    let shown: Vec<_> = states.iter().filter(|(_, p)| p.sessions > 0).collect();
    if shown.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n### What a session holds\n");
    let _ = writeln!(
        md,
        "By how each of its blocks came to be the session's; the mean session of each state, so the parts add up to its total.\n"
    );
    let mut header = "| part |".to_owned();
    let mut rule = "| --- |".to_owned();
    for (state, p) in &shown {
        let _ = write!(header, " {state} ({} sessions) |", p.sessions);
        rule.push_str(" ---: |");
    }
    let _ = writeln!(md, "{header} meaning |\n{rule} --- |");
    for part in Part::ALL {
        let name = match part {
            Part::MapEntry => "map entry",
            Part::Channels => "channels",
            Part::Request => "creating request",
            Part::Tasks => "tasks",
            Part::Scopes => "own scopes",
        };
        let mut row = format!("| {name} |");
        for (_, p) in &shown {
            let _ = write!(row, " {} |", bytes(part_bytes(p, part)));
        }
        let _ = writeln!(md, "{row} {} |", part.meaning());
    }
    let mut row = "| **total** |".to_owned();
    for (_, p) in &shown {
        let _ = write!(row, " **{}** |", bytes(p.total_bytes));
    }
    let _ = writeln!(md, "{row} live at the end of the recording |");
}

/// The bytes of `part` in the summary's figures.
fn part_bytes(parts: &SessionParts, part: Part) -> u64 {
    match part {
        Part::MapEntry => parts.map_entry_bytes,
        Part::Channels => parts.channels_bytes,
        Part::Request => parts.request_bytes,
        Part::Tasks => parts.tasks_bytes,
        Part::Scopes => parts.scopes_bytes,
    }
}

/// `rate x lifetime x transient` against what was observed (only with
/// sessions whose worker ended: without them there is no lifetime to model).
fn plateau_model(md: &mut String, summary: &Summary, timeline: &Timeline) {
    let s = &summary.sessions;
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
}

/// The sites that sessions whose worker ended still hold.
fn top_sites(md: &mut String, summary: &Summary) {
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
                leakscope_recording::frames::short_name(frame)
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
}
