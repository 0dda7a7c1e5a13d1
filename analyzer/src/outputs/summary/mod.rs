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
//!   `spawn_sites` ([`crate::stages::objects`]). `sessions` stays as it was, a view of
//!   `objects.session`; a session's bytes now include its tasks'. Other fields
//!   keep their meaning.
//! * 4: `sampling` (how the recording chose its allocations). In a sampled
//!   recording every byte and block figure is an estimate (each sample
//!   weighted by itself), `events.alloc`/`free` count the samples recorded,
//!   and each finding says how many samples it rests on (`samples`) and the
//!   relative standard error of its `live_bytes` (`relative_error`, 0 when
//!   exact). Session and task counts and states stay exact.
//! * 5: `sessions.parts`: a live and a leaked session's mean bytes by part
//!   (map entry, channels, the creating request's, tasks, its own scopes),
//!   adding up to `total_bytes`. A session's bytes now include what the
//!   request that created it allocated for it. Other fields keep their
//!   meaning.
//!
//! The verdict is the model's (`stages/verdict/` decides it); the summary quotes it.

pub(crate) mod schema;

pub use schema::*;

use crate::model::{Category, Part, PerPart, SessionState, Site, Timeline, percentile, site_name};

pub const FORMAT_VERSION: u32 = 5;

/// Findings listed in `summary.json` at most.
const MAX_FINDINGS: usize = 20;

pub fn summarize(timeline: &Timeline) -> Summary {
    let ended: Vec<_> = timeline
        .sessions
        .iter()
        .filter(|s| s.worker_end_ns.is_some())
        .collect();
    let mut transient: Vec<u64> = ended.iter().map(|s| s.transient).collect();
    transient.sort_unstable();
    let of_state = |state: SessionState, bytes: fn(&crate::model::Session) -> u64| {
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
                name: c.name().to_owned(),
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
    Summary {
        format_version: FORMAT_VERSION,
        producer: timeline.header.producer.as_str().to_owned(),
        sampling: SamplingSummary {
            mean_bytes: timeline.header.sampling.mean_bytes(),
            estimated: timeline.header.sampling.is_sampled(),
        },
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
            states: SessionStates::of(timeline.sessions.iter().map(|s| s.state)),
            retained_bytes: Retained::of(of_state(SessionState::Leaked, |s| s.retained)),
            live_bytes: Retained::of(of_state(SessionState::Live, |s| s.live_at_end)),
            live_idle_s: IdleSpread::of_ns(of_state(SessionState::Live, |s| s.idle_ns)),
            transient_bytes: Spread {
                p50: percentile(&transient, 50.0),
                p90: percentile(&transient, 90.0),
                max: transient.last().copied().unwrap_or(0),
            },
            parts: PartsByState {
                live: parts(timeline, SessionState::Live),
                leaked: parts(timeline, SessionState::Leaked),
            },
        },
        objects: crate::outputs::objects::objects(timeline),
        categories,
        top_sites,
        findings: findings(timeline),
        missing_signals: timeline.missing_signals.clone(),
        warnings: timeline.warnings.clone(),
        verdict_kind: timeline.verdict.kind,
        verdict: timeline.verdict.text.clone(),
    }
}

/// The mean session of `state` by part: each part's mean rounded, the total
/// their sum (so the parts add up to what is shown).
fn parts(timeline: &Timeline, state: SessionState) -> SessionParts {
    let mut sum = PerPart::default();
    let mut sessions = 0u64;
    for s in timeline.sessions.iter().filter(|s| s.state == state) {
        sum += s.parts;
        sessions += 1;
    }
    if sessions == 0 {
        return SessionParts::default();
    }
    let mean = |part: Part| (sum[part] as f64 / sessions as f64).round() as u64;
    let mut parts = SessionParts {
        sessions,
        map_entry_bytes: mean(Part::MapEntry),
        channels_bytes: mean(Part::Channels),
        request_bytes: mean(Part::Request),
        tasks_bytes: mean(Part::Tasks),
        scopes_bytes: mean(Part::Scopes),
        total_bytes: 0,
    };
    parts.total_bytes = parts.map_entry_bytes
        + parts.channels_bytes
        + parts.request_bytes
        + parts.tasks_bytes
        + parts.scopes_bytes;
    parts
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
            samples: site.samples,
            relative_error: match timeline
                .header
                .sampling
                .relative_error(site.retained_bytes as f64)
            {
                error if error.is_finite() => error,
                _ => 1.0,
            },
            growth_bytes_per_s: site.growth_bytes_per_s,
            bytes_per_event: (births > 0).then(|| PerEvent {
                event: "session".to_owned(),
                bytes: site.retained_bytes / births,
            }),
            oldest_age_s: timeline.end_ns.saturating_sub(site.first_alloc_ns) as f64 / 1e9,
            leak_candidate: site.is_leak_candidate(),
        })
        .collect()
}
