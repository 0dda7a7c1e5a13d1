//! The verdict: `summary.json`'s `verdict_kind` and `verdict`, the report's
//! first line. Every rule rests on something observed, never on silence
//! (`docs/report.md` states them for readers):
//!
//! 1. Nothing was recorded: the allocator was not found (undecided).
//! 2. With sessions: a leaked session (its map entry kept after its worker
//!    ended) is a leak; an undecidable one makes the verdict undecided;
//!    sessions still live at the end are never "no leak": either the release
//!    reaps them later (undecided, and when: [`Reaping`]), or it never does
//!    (a leak, and why). Only when every session left the map is it "no leak",
//!    unless a site outside sessions grows.
//! 3. Without sessions: a site that keeps a block per request or event (a
//!    leak candidate, [`crate::stages::sites::Site::is_leak_candidate`]) is a leak;
//!    "no leak" when every byte allocated during the recording was freed, or
//!    all but a bounded rest, no more than what was live half-way through
//!    the activity ([`crate::stages::sites::Rest::settled`]);
//!    else undecided, with what a longer recording would tell.
//! 4. Tasks, with or without sessions: tasks spawned from one function outside
//!    sessions that pile up parked, none ending, are a leak
//!    ([`crate::outputs::objects::SpawnSite`]); they come before a site's growth,
//!    which they explain.

use leakscope_recording::preset::{Preset, ReleaseRule};

use crate::outputs::summary::schema::{ObjectKind, SpawnSite, Summary, VerdictKind};
use crate::stages::sites::Site;
use crate::stages::sites::site_name;
use crate::stages::timeline::{SessionState, Timeline};
use crate::units::{bytes, estimated_bytes, estimated_count};
use leakscope_recording::frames::short_name;
use leakscope_recording::sampling::Sampling;

/// What the release a recording's target was built with does with sessions
/// still live at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaping {
    /// It reaps a session idle this long (its default keep-alive). Without an
    /// init timeout (`init_timeout_s` none), a session whose client never
    /// sent `initialize` is not in its keep-alive loop and waits forever.
    After {
        version: String,
        keep_alive_s: u64,
        init_timeout_s: Option<u64>,
    },
    /// It has no keep-alive by default: an abandoned session's worker never ends.
    Never { version: String },
    /// The release is not known (no rmcp version in the binary, or one the
    /// preset has no defaults for).
    Unknown,
}

impl Reaping {
    /// What the built-in preset says of rmcp `version`.
    pub fn of(version: Option<&str>) -> Self {
        let Some(version) = version else {
            return Reaping::Unknown;
        };
        let preset = Preset::builtin();
        match preset.release(version) {
            Some(ReleaseRule {
                keep_alive_s: Some(keep_alive_s),
                init_timeout_s,
                ..
            }) => Reaping::After {
                version: version.to_owned(),
                keep_alive_s: *keep_alive_s,
                init_timeout_s: *init_timeout_s,
            },
            Some(_) => Reaping::Never {
                version: version.to_owned(),
            },
            None => Reaping::Unknown,
        }
    }
}

/// The report's first line, in plain words, and its kind.
pub fn verdict(summary: &Summary, timeline: &Timeline) -> (VerdictKind, String) {
    let caveat = caveat(summary);
    if summary.events.alloc == 0 && summary.events.free == 0 {
        return (
            VerdictKind::Undecided,
            format!(
                "No allocations were recorded: the allocator was not found (probed: {}), or the process made none while it was recorded{caveat}.",
                timeline.header.settings.alloc_layer_reason
            ),
        );
    }
    let candidate = timeline
        .sites
        .iter()
        .filter(|site| site.is_leak_candidate() && matters(site))
        .max_by_key(|site| site.retained_bytes);
    // Growth too small, or seen too briefly, to claim: said, never a leak.
    let small = timeline
        .sites
        .iter()
        .filter(|site| site.is_leak_candidate() && !matters(site))
        .max_by_key(|site| site.retained_bytes);
    let parked = summary
        .objects
        .get(&ObjectKind::Task)
        .and_then(|tasks| tasks.spawn_sites.iter().find(|site| site.leak));
    if summary.sessions.count > 0 {
        return sessions_verdict(summary, timeline, candidate, small, parked, &caveat);
    }
    let no_sessions = if summary.missing_signals.is_empty() {
        "no rmcp sessions in this process"
    } else {
        "no rmcp sessions in this process: the preset matched no lifecycle function"
    };
    if let Some(site) = parked {
        return (
            VerdictKind::Leak,
            format!("{} ({no_sessions}){caveat}.", describe_parked(site)),
        );
    }
    if let Some(site) = candidate {
        return (
            VerdictKind::Leak,
            format!(
                "Top leak candidate: {} ({no_sessions}){caveat}.",
                describe_growth(site, timeline.header.sampling)
            ),
        );
    }
    if let Some(site) = small {
        return (
            VerdictKind::Undecided,
            format!(
                "{} ({no_sessions}){caveat}.",
                describe_small(site, timeline)
            ),
        );
    }
    let rest = timeline.rest;
    let live: u64 = timeline.sites.iter().map(|s| s.retained_bytes).sum();
    if live == 0 {
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: every byte allocated during the recording was freed ({} allocations, {} frees; {no_sessions}){caveat}.",
                summary.events.alloc, summary.events.free
            ),
        );
    }
    if rest.settled() && rest.early_bytes + rest.late_bytes == 0 {
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: every byte allocated during the recording was freed but {} still in flight at the end ({} sites; {no_sessions}){caveat}.",
                bytes(rest.in_flight_bytes),
                timeline.sites.len()
            ),
        );
    }
    if rest.settled() {
        return (
            VerdictKind::NoLeak,
            format!(
                "No leak: all but {} allocated during the recording was freed, and that rest is bounded: no more than the {} live half-way through the activity ({} more in flight at the end; {} sites; {no_sessions}){caveat}.",
                bytes(rest.early_bytes + rest.late_bytes),
                bytes(rest.live_at_half),
                bytes(rest.in_flight_bytes),
                timeline.sites.len()
            ),
        );
    }
    let why = if rest.allocations < crate::stages::sites::MIN_SETTLED_ALLOCATIONS {
        format!(
            "{} {} too few to tell a bounded rest from growth",
            rest.allocations,
            if timeline.header.sampling.is_sampled() {
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
            crate::stages::sites::MIN_BLOCKS
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
            timeline.sites.len(),
        ),
    )
}

fn sessions_verdict(
    summary: &Summary,
    timeline: &Timeline,
    candidate: Option<&Site>,
    small: Option<&Site>,
    parked: Option<&SpawnSite>,
    caveat: &str,
) -> (VerdictKind, String) {
    let s = &summary.sessions;
    let st = s.states;
    if st.leaked > 0 {
        let total_retained: u64 = summary.categories.iter().map(|c| c.retained_bytes).sum();
        let top = summary
            .categories
            .iter()
            .max_by_key(|c| c.retained_bytes)
            .expect("every category is listed");
        let share = 100.0 * top.retained_bytes as f64 / total_retained.max(1) as f64;
        let site = timeline
            .sites
            .iter()
            .find(|site| site.category.name() == top.name && site.session_bytes > 0)
            .map(describe_site)
            .unwrap_or_default();
        return (
            VerdictKind::Leak,
            format!(
                "{} of {} sessions are still in the map after their worker ended (leaked); each retains {} (p50), {share:.0}% of it {site}({}){caveat}.",
                st.leaked,
                s.count,
                bytes(s.retained_bytes.p50),
                top.name
            ),
        );
    }
    if st.unknown > 0 {
        let why = if summary.missing_signals.is_empty() {
            "their map entry's memory was not identified (no allocation matched the session-map rules)".to_owned()
        } else {
            format!("missing signals: {}", summary.missing_signals.join("; "))
        };
        return (
            VerdictKind::Undecided,
            format!(
                "{} of {} sessions could not be decided ({why}); {} closed, {} live, none seen leaking{caveat}.",
                st.unknown, s.count, st.closed, st.live
            ),
        );
    }
    if st.live > 0 {
        let live = format!(
            "{} of {} sessions are still in the map with their worker running, idle for {:.0} s (p50) and holding {} each (p50); {} closed",
            st.live,
            s.count,
            s.live_idle_s.p50,
            bytes(s.live_bytes.p50),
            st.closed
        );
        let reaping = Reaping::of(timeline.header.rmcp_version.as_deref());
        // A worker polled once (when it started) never received a message:
        // its client never sent `initialize`.
        let uninitialized = timeline
            .sessions
            .iter()
            .filter(|s| s.state == SessionState::Live && s.polls <= 1)
            .count();
        return match reaping {
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
    if let Some(site) = parked {
        text.push_str(&format!(
            "; but outside sessions, {}",
            describe_parked(site)
        ));
        return (VerdictKind::Leak, format!("{text}{caveat}."));
    }
    if let Some(site) = candidate {
        text.push_str(&format!(
            "; but {} outside sessions (see findings)",
            describe_growth(site, timeline.header.sampling)
        ));
        return (VerdictKind::Leak, format!("{text}{caveat}."));
    }
    if let Some(site) = small {
        text.push_str(&format!(
            "; outside sessions, {}",
            describe_small(site, timeline)
        ));
        return (VerdictKind::Undecided, format!("{text}{caveat}."));
    }
    (VerdictKind::NoLeak, format!("{text}{caveat}."))
}

/// What lost events do to the figures, when there were any.
fn caveat(summary: &Summary) -> String {
    if summary.events.lost == 0 {
        return String::new();
    }
    format!(
        " ({} events were lost: a lost free makes a block look live, a lost allocation hides one)",
        summary.events.lost
    )
}

/// A leak claim needs growth that matters: at least this much kept...
pub const MIN_LEAK_BYTES: u64 = 32 * 1024;
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

/// "`site` keeps 1.2 MiB in 500 blocks never freed, growing at 3.4 KiB/s
/// (287 MiB a day)" (in a sampled recording, "~1.2 MiB ±14% in ~500
/// blocks").
fn describe_growth(site: &Site, sampling: Sampling) -> String {
    let name = site_name(site);
    let rate = site.growth_bytes_per_s.max(0.0);
    format!(
        "`{name}` {} allocated during the recording and never freed, growing at {}/s ({} a day)",
        keeps(site.retained_bytes, site.blocks, sampling),
        bytes(rate as u64),
        bytes((rate * DAY_S) as u64)
    )
}

/// A candidate whose growth is too small to claim, said as what was seen and
/// what decides: "`site` kept 8.1 KiB in 56 blocks over 12 min, growing at
/// 12 B/s (1.0 MiB a day): too little to call a leak from this recording; a
/// longer one decides".
fn describe_small(site: &Site, timeline: &Timeline) -> String {
    let name = site_name(site);
    let rate = site.growth_bytes_per_s.max(0.0);
    format!(
        "`{name}` {} over {}, growing at {}/s ({} a day): too little to call a leak (a leak is claimed from {} kept at {} a day); a longer recording decides, e.g. `leakscope-probe attach --pid PID --sample` left on for an hour",
        keeps(site.retained_bytes, site.blocks, timeline.header.sampling)
            .replacen("keeps", "kept", 1),
        minutes(timeline.duration_s()),
        bytes(rate as u64),
        bytes((rate * DAY_S) as u64),
        bytes(MIN_LEAK_BYTES),
        bytes(MIN_LEAK_BYTES_PER_DAY as u64)
    )
}

/// "12 min" or "45 s".
fn minutes(seconds: f64) -> String {
    if seconds >= 120.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

/// "keeps 1.2 MiB in 500 blocks", as the verdict and the report's links say it.
pub(crate) fn keeps(bytes: u64, blocks: u64, sampling: Sampling) -> String {
    format!(
        "keeps {} in {} blocks",
        estimated_bytes(bytes, sampling),
        estimated_count(blocks, sampling)
    )
}

/// "200 tasks spawned from `subscribe` are parked, each keeping 2.0 KiB (p50)
/// ...; none has ended".
fn describe_parked(site: &SpawnSite) -> String {
    let ended = match site.ended {
        0 => "none has ended".to_owned(),
        n => format!("only {n} of the {} it spawned ended", site.count),
    };
    let from = if site.known {
        format!("from `{}`", site.site)
    } else {
        format!(
            "from a function their stacks do not reach (they stop inside tokio; {}, one future type)",
            site.site
                .trim_start_matches(crate::outputs::objects::UNKNOWN_SITE)
                .trim()
                .trim_matches(['(', ')'])
        )
    };
    format!(
        "{} tasks spawned {from} are parked (not polled for most of their life), each keeping {} (p50), {} in all; {ended}",
        site.parked,
        bytes(site.alive_bytes.p50),
        bytes(site.alive_bytes.total),
    )
}

/// "allocated by `rule frame` -> `its callee` " for a site.
fn describe_site(site: &Site) -> String {
    let Some(index) = site.decided_by else {
        return String::new();
    };
    let outer = short_name(&site.frames[index].function);
    match index
        .checked_sub(1)
        .map(|i| short_name(&site.frames[i].function))
    {
        Some(inner) => format!("allocated by `{outer}` -> `{inner}` "),
        None => format!("allocated by `{outer}` "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_line_says_when_it_reaps() {
        assert_eq!(
            Reaping::of(Some("1.3.0")),
            Reaping::Never {
                version: "1.3.0".into()
            }
        );
        assert_eq!(
            Reaping::of(Some("1.5.0")),
            Reaping::After {
                version: "1.5.0".into(),
                keep_alive_s: 300,
                init_timeout_s: None
            }
        );
        assert_eq!(
            Reaping::of(Some("3.11.0")),
            Reaping::After {
                version: "3.11.0".into(),
                keep_alive_s: 300,
                init_timeout_s: Some(60)
            }
        );
        assert_eq!(Reaping::of(None), Reaping::Unknown);
    }

    fn candidate(bytes: u64, rate: f64) -> Site {
        Site {
            stack: None,
            frames: vec![],
            category: crate::stages::attribute::Category::Other,
            decided_by: None,
            retained_bytes: bytes,
            blocks: 56,
            samples: 56,
            session_bytes: 0,
            growth_bytes_per_s: rate,
            linearity: 1.0,
            first_alloc_ns: 0,
            last_alloc_ns: 0,
            activity_span: 1.0,
        }
    }

    /// The Apollo case: 8.1 KiB at 12 B/s (1 MiB a day) is no leak to claim;
    /// the cache server's 49 KiB at 10 KiB/s is; and a fast rate seen for a
    /// moment (a few KiB) or a large but slow one is not yet.
    #[test]
    fn a_leak_claim_needs_a_rate_that_matters() {
        assert!(candidate(8_300, 12.0).is_leak_candidate());
        assert!(!matters(&candidate(8_300, 12.0)));
        assert!(matters(&candidate(49 * 1024, 10_240.0)));
        assert!(!matters(&candidate(4 * 1024, 100_000.0)), "too little seen");
        assert!(!matters(&candidate(10 << 20, 100.0)), "8 MiB a day");
    }
}
