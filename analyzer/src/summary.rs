//! `summary.json`: the stable, machine-readable result of a report, and the verdict.
//!
//! Field names are a contract (tests and other tools read them): change them only
//! together with `FORMAT_VERSION`.
//!
//! * 1: the first contract.
//! * 2: `sessions.states` (observed: closed / leaked / live / unknown),
//!   `sessions.retained_bytes` over the leaked sessions, `sessions.live_bytes`
//!   over the live ones, `findings` (preset-free, by call site, with growth),
//!   `verdict_kind`, `missing_signals`. Other fields keep their meaning.
//!
//! The verdict is decided in this order: session states when the recording has
//! sessions (a leaked session is a leak; an undecidable one makes the verdict
//! undecided unless another one leaked); else the findings (the top leak
//! candidate); else "no leak" only when the recording is long enough to have
//! seen growth ([`MIN_DECIDE_S`]).

use serde::Serialize;

use crate::attribute::Category;
use crate::sessions::SessionState;
use crate::sites::Site;
use crate::timeline::Timeline;
use crate::units::bytes;

pub const FORMAT_VERSION: u32 = 2;

/// Below this, a recording without sessions or growing sites is too short to
/// say that nothing grows.
pub const MIN_DECIDE_S: f64 = 10.0;

/// Live sessions idle this long (and for at least half the recording) may never
/// be reclaimed (no keep-alive): the verdict cannot call them fine.
pub const LONG_IDLE_S: f64 = 30.0;

/// Findings listed in `summary.json` at most.
const MAX_FINDINGS: usize = 20;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub format_version: u32,
    pub producer: &'static str,
    pub duration_s: f64,
    pub events: Events,
    pub sessions: Sessions,
    pub categories: Vec<CategorySummary>,
    pub top_sites: Vec<SiteSummary>,
    /// Blocks allocated during the recording and still live at the end, by call
    /// site, most live bytes first; no preset needed.
    pub findings: Vec<Finding>,
    /// Lifecycle signals the recording lacks, and what the verdict cannot claim.
    pub missing_signals: Vec<String>,
    /// What else limits the figures (a torn recording, files that could not be
    /// matched for symbols).
    pub warnings: Vec<String>,
    pub verdict_kind: VerdictKind,
    pub verdict: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictKind {
    Leak,
    NoLeak,
    Undecided,
}

#[derive(Debug, Serialize)]
pub struct Events {
    pub alloc: u64,
    pub free: u64,
    pub lost: u64,
}

#[derive(Debug, Serialize)]
pub struct Sessions {
    pub count: u64,
    pub worker_ended: u64,
    /// Format 1's figure, kept: sessions whose worker ended and that retain no
    /// byte. The verdict reads `states` instead.
    pub closed: u64,
    /// Sessions per observed state at the end of the recording.
    pub states: States,
    /// Per leaked session: bytes still live after its worker ended.
    pub retained_bytes: Retained,
    /// Per live session: bytes it holds at the end.
    pub live_bytes: Retained,
    /// Per live session: seconds since it last did anything (p50, max).
    pub live_idle_s: IdleSpread,
    pub transient_bytes: Spread,
}

#[derive(Debug, Serialize, Default, Clone, Copy)]
pub struct States {
    pub closed: u64,
    pub leaked: u64,
    pub live: u64,
    pub unknown: u64,
}

impl States {
    fn count(&mut self, state: SessionState) {
        match state {
            SessionState::Closed => self.closed += 1,
            SessionState::Leaked => self.leaked += 1,
            SessionState::Live => self.live += 1,
            SessionState::Unknown => self.unknown += 1,
        }
    }
}

#[derive(Debug, Serialize, Default)]
pub struct Retained {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
    pub total: u64,
}

impl Retained {
    fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        Self {
            p50: percentile(&values, 50.0),
            p90: percentile(&values, 90.0),
            max: values.last().copied().unwrap_or(0),
            total: values.iter().sum(),
        }
    }
}

#[derive(Debug, Serialize, Default)]
pub struct IdleSpread {
    pub p50: f64,
    pub max: f64,
}

#[derive(Debug, Serialize, Default)]
pub struct Spread {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
}

#[derive(Debug, Serialize)]
pub struct CategorySummary {
    pub name: &'static str,
    pub allocated_bytes: u64,
    pub reclaimed_bytes: u64,
    pub retained_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct SiteSummary {
    pub frames: Vec<String>,
    pub retained_bytes: u64,
    pub blocks: u64,
}

#[derive(Debug, Serialize)]
pub struct Finding {
    /// The frame that best names the site, shortened for reading: the one whose
    /// rule chose its category, else the program's innermost own frame.
    pub name: String,
    /// Function names, innermost first, allocator frames trimmed (full names).
    pub frames: Vec<String>,
    pub live_bytes: u64,
    pub live_blocks: u64,
    /// Fitted growth of the site's surviving bytes over the recording.
    pub growth_bytes_per_s: f64,
    /// Live bytes per lifecycle event, where the recording has such events.
    pub bytes_per_event: Option<PerEvent>,
    /// How long the oldest of its blocks has been live at the end.
    pub oldest_age_s: f64,
    /// Grows linearly over most of the recording: see `sites::Site::is_leak_candidate`.
    pub leak_candidate: bool,
}

#[derive(Debug, Serialize)]
pub struct PerEvent {
    pub event: &'static str,
    pub bytes: u64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(timeline: &Timeline) -> Summary {
    let ended: Vec<_> = timeline
        .sessions
        .iter()
        .filter(|s| s.worker_end_ns.is_some())
        .collect();
    let mut transient: Vec<u64> = ended.iter().map(|s| s.transient).collect();
    transient.sort_unstable();
    let mut states = States::default();
    for session in &timeline.sessions {
        states.count(session.state);
    }
    let of_state = |state: SessionState, bytes: fn(&crate::timeline::Session) -> u64| {
        timeline
            .sessions
            .iter()
            .filter(|s| s.state == state)
            .map(bytes)
            .collect::<Vec<u64>>()
    };
    let categories = Category::ALL
        .iter()
        .map(|c| {
            let t = timeline.categories[*c];
            CategorySummary {
                name: c.name(),
                allocated_bytes: t.allocated,
                reclaimed_bytes: t.reclaimed,
                retained_bytes: t.retained,
            }
        })
        .collect();
    let top_sites = timeline
        .sites
        .iter()
        .filter(|s| s.session_bytes > 0)
        .take(10)
        .map(|s| SiteSummary {
            frames: s.frames.iter().map(|f| f.function.clone()).collect(),
            retained_bytes: s.session_bytes,
            blocks: s.blocks,
        })
        .collect();
    let mut summary = Summary {
        format_version: FORMAT_VERSION,
        producer: timeline.header.producer.as_str(),
        duration_s: timeline.duration_s(),
        events: Events {
            alloc: timeline.allocs,
            free: timeline.frees,
            lost: timeline.lost,
        },
        sessions: Sessions {
            count: timeline.sessions.len() as u64,
            worker_ended: ended.len() as u64,
            closed: ended.iter().filter(|s| s.retained == 0).count() as u64,
            states,
            retained_bytes: Retained::of(of_state(SessionState::Leaked, |s| s.retained)),
            live_bytes: Retained::of(of_state(SessionState::Live, |s| s.live_at_end)),
            live_idle_s: {
                let mut idle = of_state(SessionState::Live, |s| s.idle_ns);
                idle.sort_unstable();
                IdleSpread {
                    p50: percentile(&idle, 50.0) as f64 / 1e9,
                    max: idle.last().copied().unwrap_or(0) as f64 / 1e9,
                }
            },
            transient_bytes: Spread {
                p50: percentile(&transient, 50.0),
                p90: percentile(&transient, 90.0),
                max: transient.last().copied().unwrap_or(0),
            },
        },
        categories,
        top_sites,
        findings: findings(timeline),
        missing_signals: timeline.missing_signals.clone(),
        warnings: timeline.warnings.clone(),
        verdict_kind: VerdictKind::Undecided,
        verdict: String::new(),
    };
    (summary.verdict_kind, summary.verdict) = verdict(&summary, timeline);
    summary
}

/// The sites by live bytes, as findings.
fn findings(timeline: &Timeline) -> Vec<Finding> {
    let births = timeline.sessions.len() as u64;
    let mut sites: Vec<&Site> = timeline.sites.iter().collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.retained_bytes));
    sites
        .into_iter()
        .take(MAX_FINDINGS)
        .map(|site| Finding {
            name: site_name(site),
            frames: site.frames.iter().map(|f| f.function.clone()).collect(),
            live_bytes: site.retained_bytes,
            live_blocks: site.blocks,
            growth_bytes_per_s: site.growth_bytes_per_s,
            bytes_per_event: (births > 0).then(|| PerEvent {
                event: "session",
                bytes: site.retained_bytes / births,
            }),
            oldest_age_s: timeline.end_ns.saturating_sub(site.first_alloc_ns) as f64 / 1e9,
            leak_candidate: site.is_leak_candidate(timeline.start_ns, timeline.end_ns),
        })
        .collect()
}

/// The report's first line, in plain words, and its kind.
fn verdict(summary: &Summary, timeline: &Timeline) -> (VerdictKind, String) {
    let s = &summary.sessions;
    let st = s.states;
    let caveat = caveat(summary);
    let candidate = timeline
        .sites
        .iter()
        .filter(|site| site.is_leak_candidate(timeline.start_ns, timeline.end_ns))
        .max_by_key(|site| site.retained_bytes);
    if s.count > 0 {
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
        let idle = s.live_idle_s.p50;
        if st.live > 0 && idle >= LONG_IDLE_S && idle >= summary.duration_s / 2.0 {
            return (
                VerdictKind::Undecided,
                format!(
                    "{} of {} sessions are still in the map with their worker running, idle for {idle:.0} s (p50) and holding {} each (p50); {} closed. If the server has no session keep-alive (rmcp's default before 1.4.0), abandoned sessions are never reclaimed: record past the keep-alive to tell{caveat}.",
                    st.live,
                    s.count,
                    bytes(s.live_bytes.p50),
                    st.closed
                ),
            );
        }
        let live = if st.live > 0 {
            format!(
                "; {} still live (worker running, idle {idle:.1} s p50), holding {} each (p50)",
                st.live,
                bytes(s.live_bytes.p50)
            )
        } else {
            String::new()
        };
        let mut text = format!(
            "{} of {} sessions left the map (closed){live}: no session retains memory after its worker ended",
            st.closed, s.count
        );
        if let Some(site) = candidate {
            text.push_str(&format!(
                "; but {} outside sessions (see findings)",
                describe_growth(site)
            ));
            return (VerdictKind::Leak, format!("{text}{caveat}."));
        }
        return (VerdictKind::NoLeak, format!("{text}{caveat}."));
    }
    let no_sessions = if summary.missing_signals.is_empty() {
        "No session lifecycle was recorded".to_owned()
    } else {
        "No session lifecycle was recorded (the preset matched no lifecycle function)".to_owned()
    };
    if let Some(site) = candidate {
        return (
            VerdictKind::Leak,
            format!(
                "{no_sessions}. Top leak candidate: {}{caveat}.",
                describe_growth(site)
            ),
        );
    }
    if summary.duration_s < MIN_DECIDE_S {
        return (
            VerdictKind::Undecided,
            format!(
                "{no_sessions}, and {:.1} s is too short to tell growth from warm-up: record at least a minute under steady load (e.g. `leakscope-probe attach --pid PID --duration 2m`){caveat}.",
                summary.duration_s
            ),
        );
    }
    let live: u64 = timeline.sites.iter().map(|s| s.retained_bytes).sum();
    (
        VerdictKind::NoLeak,
        format!(
            "{no_sessions}; no call site grows steadily: {} allocated during the recording is still live in {} sites, none growing linearly{caveat}.",
            bytes(live),
            timeline.sites.len()
        ),
    )
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

/// Library frames a reader skips to find the code that asked for the memory.
const LIBRARY_PREFIXES: &[&str] = &[
    "core::",
    "alloc::",
    "std::",
    "hashbrown::",
    "<core::",
    "<alloc::",
    "<std::",
    "<hashbrown::",
];

/// Trait impls of the standard library (`<u8 as alloc::vec::...>::from_elem`).
const LIBRARY_IMPLS: &[&str] = &[" as alloc::", " as core::", " as std::", " as hashbrown::"];

/// The innermost frame of the program itself: not the standard library or its
/// collections, and not an inlined frame's bare short name; the innermost frame
/// when none qualifies. Names, innermost first.
pub fn own_frame<'a>(frames: impl IntoIterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let candidate = |name: &&str| {
        let short = short_name(name);
        !short.is_empty()
            && !short.starts_with(['{', '<', ':'])
            && !LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
            && !LIBRARY_IMPLS.iter().any(|p| name.contains(p))
    };
    // A full path first (inlined frames carry bare short names), then any.
    frames
        .clone()
        .into_iter()
        .filter(candidate)
        .find(|name| short_name(name).contains("::"))
        .or_else(|| frames.clone().into_iter().find(candidate))
        .or_else(|| frames.into_iter().next())
}

/// The frame that best names a site, shortened: the one whose rule chose its
/// category, else the program's innermost own frame.
pub fn site_name(site: &Site) -> String {
    site.decided_by
        .and_then(|i| site.frames.get(i))
        .map(|f| f.function.as_str())
        .or_else(|| own_frame(site.frames.iter().map(|f| f.function.as_str())))
        .map(short_name)
        .unwrap_or_else(|| "[unknown stack]".into())
}

/// "`site` keeps 1.2 MiB in 500 blocks never freed, growing at 3.4 KiB/s".
fn describe_growth(site: &Site) -> String {
    let name = site_name(site);
    format!(
        "`{name}` keeps {} in {} blocks allocated during the recording and never freed, growing at {}/s",
        bytes(site.retained_bytes),
        site.blocks,
        bytes(site.growth_bytes_per_s.max(0.0) as u64)
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

/// A function name without its generic arguments, for prose (`->` inside them
/// is not a closing bracket).
pub fn short_name(name: &str) -> String {
    let mut depth = 0i32;
    let mut out = String::new();
    let mut previous = ' ';
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
        previous = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn short_names_drop_generics() {
        assert_eq!(super::short_name("channel<rmcp::X<u8>>"), "channel");
        assert_eq!(super::short_name("a::b<T>::c"), "a::b::c");
        assert_eq!(
            super::short_name("{async_block#0}<fn(u8) -> x::Y<u8>, z>"),
            "{async_block#0}"
        );
    }

    #[test]
    fn own_frames_skip_the_standard_library_and_inlined_short_names() {
        let frames = [
            "from_elem<u8>",
            "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "alloc::vec::from_elem",
            "my_server::cache::remember",
            "main",
        ];
        assert_eq!(
            super::own_frame(frames.iter().copied()),
            Some("my_server::cache::remember")
        );
        assert_eq!(
            super::own_frame(["alloc::x"].iter().copied()),
            Some("alloc::x")
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 50.0), 5);
        assert_eq!(percentile(&v, 90.0), 9);
        assert_eq!(percentile(&v, 100.0), 10);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
