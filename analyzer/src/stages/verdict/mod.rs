//! The verdict, the last stage: what the rest of the model comes to
//! (`summary.json`'s `verdict_kind` and `verdict`, the report's first line).
//! Every rule rests on something observed, never on silence (`docs/report.md`
//! states them for readers):
//!
//! 1. Nothing was recorded: the allocator was not found (undecided).
//! 2. With sessions: a leaked session (its map entry kept after its worker
//!    ended) is a leak; an undecidable one makes the verdict undecided;
//!    sessions still live at the end are never "no leak": either the release
//!    reaps them later (undecided, and when: [`Reaping`]), or it never does
//!    (a leak, and why). Only when every session left the map is it "no leak",
//!    unless a site outside sessions grows.
//! 3. Without sessions: a site that keeps a block per request or event (a
//!    leak candidate, [`crate::model::Site::is_leak_candidate`]) is a leak;
//!    "no leak" when every byte allocated during the recording was freed, or
//!    all but a bounded rest, no more than what was live half-way through
//!    the activity ([`crate::model::Rest::settled`]);
//!    else undecided, with what a longer recording would tell.
//! 4. Tasks, with or without sessions: tasks spawned from one function outside
//!    sessions that pile up parked, none ending, are a leak
//!    ([`crate::model::SpawnSite`]); they come before a site's growth,
//!    which they explain.

mod describe;
mod evidence;
mod reaping;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_on_models;

use describe::{describe_growth, describe_parked, describe_site, describe_small};
pub use evidence::Evidence;
pub use reaping::Reaping;

use crate::model::{Site, Timeline, Verdict, VerdictKind};
use crate::units::bytes;

/// What `timeline` comes to: the report's first line, in plain words, and its kind.
pub fn verdict(timeline: &Timeline) -> Verdict {
    let (kind, text) = decide(&Evidence::of(timeline));
    Verdict { kind, text }
}

/// The verdict from what was observed (rules 1 to 4 above).
pub fn decide(evidence: &Evidence) -> (VerdictKind, String) {
    let caveat = caveat(evidence.lost);
    if evidence.allocs == 0 && evidence.frees == 0 {
        return (
            VerdictKind::Undecided,
            format!(
                "No allocations were recorded: the allocator was not found (probed: {}), or the process made none while it was recorded{caveat}.",
                evidence.alloc_layer_reason
            ),
        );
    }
    let candidate = evidence
        .sites
        .iter()
        .filter(|site| site.is_leak_candidate() && matters(site))
        .max_by_key(|site| site.retained_bytes);
    // Growth too small, or seen too briefly, to claim: said, never a leak.
    let small = evidence
        .sites
        .iter()
        .filter(|site| site.is_leak_candidate() && !matters(site))
        .max_by_key(|site| site.retained_bytes);
    if evidence.sessions.count > 0 {
        return sessions_verdict(evidence, candidate, small, &caveat);
    }
    let no_sessions = if evidence.missing_signals.is_empty() {
        "no rmcp sessions in this process"
    } else {
        "no rmcp sessions in this process: the preset matched no lifecycle function"
    };
    if let Some(site) = evidence.parked {
        return (
            VerdictKind::Leak,
            format!(
                "{} ({no_sessions}){caveat}.",
                describe_parked(site, evidence.sampling)
            ),
        );
    }
    if let Some(site) = candidate {
        return (
            VerdictKind::Leak,
            format!(
                "Top leak candidate: {} ({no_sessions}){caveat}.",
                describe_growth(site, evidence.sampling)
            ),
        );
    }
    if let Some(site) = small {
        return (
            VerdictKind::Undecided,
            format!(
                "{} ({no_sessions}){caveat}.",
                describe_small(site, evidence.sampling, evidence.duration_s)
            ),
        );
    }
    let rest = evidence.rest;
    let live: u64 = evidence.sites.iter().map(|s| s.retained_bytes).sum();
    if live == 0 {
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: every byte allocated during the recording was freed ({} allocations, {} frees; {no_sessions}){caveat}.",
                evidence.allocs, evidence.frees
            ),
        );
    }
    if rest.settled() && rest.early_bytes + rest.late_bytes == 0 {
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: every byte allocated during the recording was freed but {} still in flight at the end ({} sites; {no_sessions}){caveat}.",
                bytes(rest.in_flight_bytes),
                evidence.sites.len()
            ),
        );
    }
    if rest.settled() {
        let kept = rest.early_bytes + rest.late_bytes;
        let bound = if !rest.few_samples() {
            format!(
                "no more than the {} live half-way through the activity",
                bytes(rest.live_at_half)
            )
        } else if kept < MIN_LEAK_BYTES {
            format!(
                "less than the {} a leak is claimed from",
                bytes(MIN_LEAK_BYTES)
            )
        } else {
            "its stacks freed nearly all they made".to_owned()
        };
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: all but {} allocated during the recording was freed, and that rest is bounded: {bound} ({} more in flight at the end; {} sites; {no_sessions}){caveat}.",
                bytes(kept),
                bytes(rest.in_flight_bytes),
                evidence.sites.len()
            ),
        );
    }
    let why = if rest.allocations < crate::model::sites::MIN_SETTLED_ALLOCATIONS {
        format!(
            "{} {} too few to tell a bounded rest from growth",
            rest.allocations,
            if evidence.sampling.is_sampled() {
                "sampled allocations are"
            } else {
                "allocations are"
            }
        )
    } else if !rest.enough_survivors() {
        format!(
            "{} {} too few to tell a bounded rest from growth (a sampled recording needs {})",
            rest.survivors,
            if rest.survivors == 1 {
                "sample is"
            } else {
                "samples are"
            },
            crate::model::sites::MIN_BLOCKS
        )
    } else {
        format!(
            "it grew past the {} live half-way through the activity",
            bytes(rest.live_at_half)
        )
    };
    (
        VerdictKind::Undecided,
        format!(
            "{} allocated during the recording is still live in {} sites, none keeping a block per request, but {why}: record longer under steady load to tell growth from warm-up, e.g. `leakscope-probe attach --pid PID --duration 2m` ({no_sessions}){caveat}.",
            bytes(live),
            evidence.sites.len(),
        ),
    )
}

fn sessions_verdict(
    evidence: &Evidence,
    candidate: Option<&Site>,
    small: Option<&Site>,
    caveat: &str,
) -> (VerdictKind, String) {
    let s = &evidence.sessions;
    let st = s.states;
    if st.leaked > 0 {
        let site = evidence
            .sites
            .iter()
            .find(|site| site.category.name() == s.top_category && site.session_bytes > 0)
            .map(describe_site)
            .unwrap_or_default();
        return (
            VerdictKind::Leak,
            format!(
                "{} of {} sessions are still in the map after their worker ended (leaked); each retains {}, {:.0}% of it {site}({}){caveat}.",
                st.leaked,
                s.count,
                if evidence.sampling.is_sampled() {
                    format!(
                        "~{} on average (estimated from samples)",
                        bytes(s.retained_mean)
                    )
                } else {
                    format!("{} (p50)", bytes(s.retained_p50))
                },
                s.top_category_share * 100.0,
                s.top_category
            ),
        );
    }
    if st.unknown > 0 {
        let why = if evidence.births_sampled {
            "this sampled in-process recording holds no block recorded whole, so it sees a session's map entry only when it is sampled (a recording of format 11 or older, from before leakscope recorded tokio's channels whole, or a runtime that aligns them below 128 bytes); record again with this leakscope, every call (no --sample), or with eBPF as root, for every session's state".to_owned()
        } else if evidence.missing_signals.is_empty() {
            "their map entry's memory was not identified (no allocation matched the session-map rules)".to_owned()
        } else {
            format!("missing signals: {}", evidence.missing_signals.join("; "))
        };
        let undecided = format!(
            "{} of {} sessions could not be decided ({why}); {} closed, {} live, none seen leaking",
            st.unknown, s.count, st.closed, st.live
        );
        // What grows is said, but decides nothing here: sessions that live
        // until their keep-alive reaps them grow the same sites.
        let seen = candidate.map_or(String::new(), |site| {
            format!(
                "; meanwhile {} (see findings)",
                describe_growth(site, evidence.sampling)
            )
        });
        return (
            VerdictKind::Undecided,
            format!("{undecided}{seen}{caveat}."),
        );
    }
    if st.live > 0 {
        let holding = if evidence.sampling.is_sampled() {
            format!(
                "~{} each on average (estimated from samples)",
                bytes(s.live_bytes_mean)
            )
        } else {
            format!("{} each (p50)", bytes(s.live_bytes_p50))
        };
        let live = format!(
            "{} of {} sessions are still in the map with their worker running, idle for {:.0} s (p50) and holding {holding}; {} closed",
            st.live, s.count, s.live_idle_p50_s, st.closed
        );
        let uninitialized = s.uninitialized;
        return match Reaping::of(evidence.rmcp_version) {
            Reaping::Never { version } if s.worker_ended == 0 => (
                VerdictKind::Leak,
                format!(
                    "{live}. They are never reaped: rmcp {version} has no session keep-alive by default, and no session's worker ended during the recording, so an abandoned session stays in the map for the server's life{caveat}."
                ),
            ),
            Reaping::Never { version } => (
                VerdictKind::Undecided,
                format!(
                    "{live}. rmcp {version} has no session keep-alive by default, but {} workers ended during the recording, so this server may set one: a recording past it decides{caveat}.",
                    s.worker_ended
                ),
            ),
            Reaping::After {
                version,
                init_timeout_s: None,
                ..
            } if uninitialized > 0 => (
                VerdictKind::Leak,
                format!(
                    "{live}. {uninitialized} of them never received a message after their worker started: rmcp {version} has no init timeout, so a session whose client never sent `initialize` waits for it forever and is never reaped{caveat}."
                ),
            ),
            Reaping::After {
                version,
                keep_alive_s,
                ..
            } => (
                VerdictKind::Undecided,
                format!(
                    "{live}. rmcp {version} reaps a session idle for {keep_alive_s} s (its default keep-alive; a server may set another): a recording that runs {keep_alive_s} s past their last request decides{caveat}."
                ),
            ),
            Reaping::Unknown => (
                VerdictKind::Undecided,
                format!(
                    "{live}. The rmcp release is not known, so neither is its keep-alive: a recording that runs past the server's session keep-alive decides{caveat}."
                ),
            ),
        };
    }
    let mut text = format!(
        "{} of {} sessions left the map (closed): no session retains memory after its worker ended",
        st.closed, s.count
    );
    if let Some(site) = evidence.parked {
        text.push_str(&format!(
            "; but outside sessions, {}",
            describe_parked(site, evidence.sampling)
        ));
        return (VerdictKind::Leak, format!("{text}{caveat}."));
    }
    if let Some(site) = candidate {
        text.push_str(&format!(
            "; but {} outside sessions (see findings)",
            describe_growth(site, evidence.sampling)
        ));
        return (VerdictKind::Leak, format!("{text}{caveat}."));
    }
    if let Some(site) = small {
        text.push_str(&format!(
            "; outside sessions, {}",
            describe_small(site, evidence.sampling, evidence.duration_s)
        ));
        return (VerdictKind::Undecided, format!("{text}{caveat}."));
    }
    (VerdictKind::NoLeak, format!("{text}{caveat}."))
}

/// What lost events do to the figures, when there were any.
fn caveat(lost: u64) -> String {
    if lost == 0 {
        return String::new();
    }
    format!(
        " ({lost} events were lost: a lost free makes a block look live, a lost allocation hides one)"
    )
}

/// A leak claim needs growth that matters: at least [`MIN_LEAK_BYTES`] kept...
pub use crate::model::sites::MIN_LEAK_BYTES;
/// ...at a rate that comes to at least this much a day. A server that
/// grows 1 MiB a day is not the one a user is hunting, and growth of a few
/// KiB in minutes is as likely a map settling to its size: on Apollo MCP
/// Server 2.1.0, a 12-minute recording saw `RawTable::reserve_rehash` keep
/// 8.1 KiB at 12 B/s (1 MiB a day) on a heap the server's own figure showed
/// steady, and called it a leak.
pub const MIN_LEAK_BYTES_PER_DAY: f64 = 64.0 * 1024.0 * 1024.0;

const DAY_S: f64 = 86_400.0;

/// Whether a leak candidate's growth is enough to claim a leak.
fn matters(site: &Site) -> bool {
    site.retained_bytes >= MIN_LEAK_BYTES
        && site.growth_bytes_per_s * DAY_S >= MIN_LEAK_BYTES_PER_DAY
}
