//! The diff's verdict: whether the change fixed the session leak, and
//! whether it retains anything new.

use super::{Change, DiffKind, Side, SiteDelta};
use crate::outputs::summary::VerdictKind;
use crate::units::bytes;

/// Sites that retain session bytes after and did not before: a new leak.
fn new_retention(sites: &[SiteDelta]) -> Vec<&SiteDelta> {
    sites
        .iter()
        .filter(|s| s.after.session_bytes > 0 && s.before.session_bytes == 0)
        .filter(|s| matches!(s.change, Change::Appeared | Change::Grew))
        .collect()
}

pub(super) fn decide(
    before: &Side,
    after: &Side,
    before_p50: u64,
    after_p50: u64,
    removed_share: f64,
    sites: &[SiteDelta],
) -> (DiffKind, String) {
    let fresh = new_retention(sites);
    let new_part = match fresh.first() {
        None => "nothing new is retained".to_owned(),
        Some(site) => format!(
            "but `{}` now retains {} it did not before",
            site.name,
            bytes(site.after.session_bytes)
        ),
    };
    if before.verdict_kind == VerdictKind::Undecided || after.verdict_kind == VerdictKind::Undecided
    {
        let which = if before.verdict_kind == VerdictKind::Undecided {
            "before"
        } else {
            "after"
        };
        return (
            DiffKind::Undecided,
            format!(
                "Cannot compare: the {which} recording is undecided ({}).",
                if which == "before" {
                    &before.verdict
                } else {
                    &after.verdict
                }
            ),
        );
    }
    if before.leaked > 0 && before_p50 > 0 {
        let sentence = format!(
            "the change removes {} per abandoned session: {:.0}% of what was retained ({} of {} sessions leaked before, {} of {} after)",
            bytes(before_p50.saturating_sub(after_p50)),
            (removed_share * 100.0).max(0.0),
            before.leaked,
            before.sessions,
            after.leaked,
            after.sessions
        );
        let kind = if after.leaked == 0 && fresh.is_empty() {
            DiffKind::Fixed
        } else if after_p50 < before_p50 && fresh.is_empty() {
            DiffKind::Reduced
        } else if after_p50 > before_p50 || !fresh.is_empty() {
            DiffKind::Regressed
        } else {
            DiffKind::Unchanged
        };
        if kind == DiffKind::Unchanged {
            return (
                kind,
                format!(
                    "The change does not alter the leak: each of {} leaked sessions still retains {}; {new_part}.",
                    after.leaked,
                    bytes(after_p50)
                ),
            );
        }
        return (kind, format!("{}; {new_part}.", capitalize(&sentence)));
    }
    if after.leaked > 0 {
        return (
            DiffKind::Regressed,
            format!(
                "The change introduces a leak: {} of {} sessions leak after (none before), each retaining {}.",
                after.leaked,
                after.sessions,
                bytes(after_p50)
            ),
        );
    }
    // No session leaked on either side: the verdicts outside sessions (a
    // growing site, parked tasks) decide.
    if before.verdict_kind == VerdictKind::Leak && after.verdict_kind != VerdictKind::Leak {
        return (
            DiffKind::Fixed,
            format!(
                "The change fixes the leak outside sessions ({} parked tasks before, {} after; {} live at the end before, {} after); {new_part}. Before: {}",
                before.parked_tasks,
                after.parked_tasks,
                bytes(before.live_at_end_bytes),
                bytes(after.live_at_end_bytes),
                before.verdict
            ),
        );
    }
    if before.verdict_kind == VerdictKind::Leak && fresh.is_empty() {
        return (
            DiffKind::Unchanged,
            format!(
                "Both recordings leak outside sessions ({} parked tasks before, {} after). After: {}",
                before.parked_tasks, after.parked_tasks, after.verdict
            ),
        );
    }
    if !fresh.is_empty() || after.verdict_kind == VerdictKind::Leak {
        return (
            DiffKind::Regressed,
            format!(
                "No session leaked before or after, {new_part}; after: {}",
                after.verdict
            ),
        );
    }
    (
        DiffKind::Unchanged,
        format!(
            "No session leaks before or after ({} and {} sessions closed); {new_part}.",
            before.closed, after.closed
        ),
    )
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}
