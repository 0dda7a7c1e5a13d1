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
//! * 3: `objects`, keyed by kind (`session`, `task`): each kind's `count`,
//!   `states`, `alive_bytes`, `retained_bytes`, `idle_s` and (tasks)
//!   `spawn_sites` ([`crate::objects`]). `sessions` stays as it was, a view of
//!   `objects.session`; a session's bytes now include its tasks'. Other fields
//!   keep their meaning.
//!
//! The verdict's rules are in [`crate::verdict`].

use serde::Serialize;

use crate::attribute::Category;
use crate::sessions::SessionState;
use crate::sites::Site;
use crate::timeline::Timeline;

pub const FORMAT_VERSION: u32 = 3;

/// Findings listed in `summary.json` at most.
const MAX_FINDINGS: usize = 20;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub format_version: u32,
    pub producer: &'static str,
    pub duration_s: f64,
    pub events: Events,
    pub sessions: Sessions,
    /// Every kind of lifecycle object the recording shows (sessions, tasks).
    pub objects:
        std::collections::BTreeMap<crate::objects::ObjectKind, crate::objects::ObjectSummary>,
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

#[derive(Debug, Serialize, Default, Clone)]
pub struct Retained {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
    pub total: u64,
}

impl Retained {
    pub(crate) fn of(mut values: Vec<u64>) -> Self {
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
    /// Keeps a block (or a fixed group) per request or event: see `sites::Site::is_leak_candidate`.
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
        objects: crate::objects::objects(timeline),
        categories,
        top_sites,
        findings: findings(timeline),
        missing_signals: timeline.missing_signals.clone(),
        warnings: timeline.warnings.clone(),
        verdict_kind: VerdictKind::Undecided,
        verdict: String::new(),
    };
    (summary.verdict_kind, summary.verdict) = crate::verdict::verdict(&summary, timeline);
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
            leak_candidate: site.is_leak_candidate(),
        })
        .collect()
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

/// A frame of the standard library or its collections.
pub fn is_library_frame(name: &str) -> bool {
    LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
        || LIBRARY_IMPLS.iter().any(|p| name.contains(p))
}

/// The innermost frame of the program itself: not the allocator (a
/// `#[global_allocator]` of any kind, rustc's shims), not the standard library
/// or its collections, and not an inlined frame's bare short name; the
/// innermost frame when none qualifies. Names, innermost first.
pub fn own_frame<'a>(frames: impl IntoIterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let candidate = |name: &&str| {
        let short = short_name(name);
        !short.is_empty()
            && !short.starts_with(['{', ':'])
            && !is_library_frame(name)
            && !crate::sites::is_allocator_frame(name)
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

/// A function name without its generic arguments, for prose (`->` inside them
/// is not a closing bracket). A qualified name keeps its self type and trait:
/// `<my::Handler as rmcp::ServerHandler>::call_tool`.
pub fn short_name(name: &str) -> String {
    if name.starts_with('<')
        && let Some(close) = matching_close(name)
    {
        let inner = &name[1..close];
        let inner = match top_level_split(inner, " as ") {
            Some((ty, tr)) => format!("{} as {}", without_generics(ty), without_generics(tr)),
            None => without_generics(inner),
        };
        return format!("<{inner}>{}", without_generics(&name[close + 1..]));
    }
    without_generics(name)
}

/// `name` with every `<...>` taken out.
fn without_generics(name: &str) -> String {
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

/// The index of the `>` that closes the `<` `name` starts with.
fn matching_close(name: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut previous = ' ';
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        previous = c;
    }
    None
}

/// `text` split at the first `separator` outside any `<...>`.
fn top_level_split<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let mut depth = 0i32;
    let mut previous = ' ';
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            _ if depth == 0 && text[i..].starts_with(separator) => {
                return Some((&text[..i], &text[i + separator.len()..]));
            }
            _ => {}
        }
        previous = c;
    }
    None
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
    fn qualified_names_keep_their_type_and_trait() {
        assert_eq!(
            super::short_name("<my::Handler<u8> as rmcp::ServerHandler>::call_tool<T>"),
            "<my::Handler as rmcp::ServerHandler>::call_tool"
        );
        assert_eq!(super::short_name("<my::Cache>::get"), "<my::Cache>::get");
    }

    /// A `#[global_allocator]` wrapper of the program's own is the allocator,
    /// not the site: the site is the code that asked (`render`).
    #[test]
    fn own_frames_skip_any_global_allocator() {
        let frames = [
            "<my_server::Counting as core::alloc::global::GlobalAlloc>::alloc",
            "__rustc::__rust_alloc",
            "alloc::alloc::alloc",
            "alloc_impl_runtime",
            "<alloc::raw_vec::RawVecInner>::try_allocate_in",
            "<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc",
            "my_server::render",
            "main",
        ];
        assert_eq!(
            super::own_frame(frames.iter().copied()),
            Some("my_server::render")
        );
        let handler = ["<my::Handler as rmcp::handler::server::ServerHandler>::call_tool"];
        assert_eq!(super::own_frame(handler.iter().copied()), Some(handler[0]));
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
