//! `diff.md`: a diff in words and tables.

use super::{CHANGE_BYTES, CHANGE_SHARE, Change, Diff};
use crate::units::bytes;

/// `diff.md`.
pub fn render(diff: &Diff) -> String {
    use std::fmt::Write;
    let (b, a) = (&diff.before, &diff.after);
    let mut md = String::new();
    let _ = writeln!(md, "# leakscope diff: {} → {}\n", b.label(), a.label());
    let _ = writeln!(md, "**Verdict:** {}\n", diff.verdict);
    let _ = writeln!(md, "![live bytes before and after](diff-live.png)\n");
    let _ = writeln!(md, "| | before | after |\n| --- | ---: | ---: |");
    let rows: [(&str, String, String); 9] = [
        (
            "recording",
            format!("`{}`", b.recording),
            format!("`{}`", a.recording),
        ),
        ("target", b.label(), a.label()),
        (
            "duration",
            format!("{:.1} s", b.duration_s),
            format!("{:.1} s", a.duration_s),
        ),
        ("sessions", b.sessions.to_string(), a.sessions.to_string()),
        ("closed", b.closed.to_string(), a.closed.to_string()),
        ("leaked", b.leaked.to_string(), a.leaked.to_string()),
        (
            "live / unknown",
            format!("{} / {}", b.live, b.unknown),
            format!("{} / {}", a.live, a.unknown),
        ),
        (
            "retained per leaked session (p50)",
            bytes(b.retained_per_session_p50),
            bytes(a.retained_per_session_p50),
        ),
        (
            "retained by leaked sessions",
            bytes(b.retained_bytes),
            bytes(a.retained_bytes),
        ),
    ];
    for (what, before, after) in rows {
        let _ = writeln!(md, "| {what} | {before} | {after} |");
    }
    let _ = writeln!(
        md,
        "| live at the end | {} | {} |",
        bytes(b.live_at_end_bytes),
        bytes(a.live_at_end_bytes)
    );
    let _ = writeln!(
        md,
        "| tasks (parked / ended) | {} ({} / {}) | {} ({} / {}) |",
        b.tasks, b.parked_tasks, b.ended_tasks, a.tasks, a.parked_tasks, a.ended_tasks
    );
    let _ = writeln!(
        md,
        "| held by running tasks | {} | {} |\n",
        bytes(b.task_bytes),
        bytes(a.task_bytes)
    );
    let _ = writeln!(
        md,
        "## Per session\n\n![retained per session before and after](diff-sessions.png)\n"
    );
    let _ = writeln!(md, "## Sites\n");
    let _ = writeln!(
        md,
        "Bytes live at the end of each recording, by call site (the report's site names).\n"
    );
    let _ = writeln!(
        md,
        "| site | category | before | after | change |\n| --- | --- | ---: | ---: | --- |"
    );
    for site in diff.sites.iter().filter(|s| s.change != Change::Unchanged) {
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {:?} ({}{}) |",
            site.name,
            site.category,
            bytes(site.before.bytes),
            bytes(site.after.bytes),
            site.change,
            if site.delta_bytes >= 0 { "+" } else { "-" },
            bytes(site.delta_bytes.unsigned_abs())
        );
    }
    let unchanged = diff
        .sites
        .iter()
        .filter(|s| s.change == Change::Unchanged)
        .count();
    let _ = writeln!(
        md,
        "\n{unchanged} other sites changed by less than {:.0}% or {}.\n",
        CHANGE_SHARE * 100.0,
        bytes(CHANGE_BYTES)
    );
    let _ = writeln!(md, "## Each side's own verdict\n");
    let _ = writeln!(md, "- before: {}\n- after: {}", b.verdict, a.verdict);
    md
}
