//! What the verdict reads: plain figures taken from the model, so that each
//! rule can be tested on a case built by hand (`tests.rs`), as inferno's
//! renderers take plain data. The figures are the ones `summary.json`
//! quotes, computed the same way (one [`percentile`]).

use leakscope_recording::sampling::Sampling;

use crate::model::{Category, Rest, SessionStates, Site, SpawnSite, percentile};
use crate::model::{SessionState, Timeline};

/// Everything a verdict rests on.
#[derive(Debug, Clone, Default)]
pub struct Evidence<'a> {
    pub allocs: u64,
    pub frees: u64,
    pub lost: u64,
    /// Which allocator layer was probed, and why (said when nothing was recorded).
    pub alloc_layer_reason: &'a str,
    /// The call sites still holding memory at the end.
    pub sites: &'a [Site],
    /// What survives of the recording's own allocations, and whether it is bounded.
    pub rest: Rest,
    pub sampling: Sampling,
    pub duration_s: f64,
    /// A spawn site whose tasks pile up parked, none ending.
    pub parked: Option<&'a SpawnSite>,
    pub sessions: SessionFigures,
    /// Lifecycle signals the recording lacks (the preset's functions not found).
    pub missing_signals: &'a [String],
    /// The rmcp release the target was built with, when known.
    pub rmcp_version: Option<&'a str>,
    /// A sampled in-process recording made before leakscope recorded
    /// cache-line-aligned blocks whole (format 11 and older): session births
    /// were sampled like any allocation, so a session's map entry was seen
    /// only when sampled and its state mostly not observed.
    pub births_sampled: bool,
}

/// The sessions' figures a verdict quotes.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionFigures {
    pub count: u64,
    pub states: SessionStates,
    pub worker_ended: u64,
    /// p50 of what a leaked session retains.
    pub retained_p50: u64,
    /// The mean of what a leaked session retains: what a sampled recording
    /// quotes, as each session's figure is a sum of a few weighted samples
    /// (most sessions hold none but their blocks recorded whole, a few one
    /// of ~T bytes), whose p50 is far below what a session keeps.
    pub retained_mean: u64,
    /// p50 of a live session's idle time, and of what it holds.
    pub live_idle_p50_s: f64,
    pub live_bytes_p50: u64,
    /// The mean of what a live session holds (a sampled recording's figure,
    /// for the reason `retained_mean` gives).
    pub live_bytes_mean: u64,
    /// Live sessions whose worker was polled at most once (when it started):
    /// their client never sent `initialize`.
    pub uninitialized: u64,
    /// The category retaining the most of the sessions' memory, and its share
    /// (0 to 1) of all that is retained.
    pub top_category: &'static str,
    pub top_category_share: f64,
}

impl<'a> Evidence<'a> {
    pub fn of(timeline: &'a Timeline) -> Self {
        let sessions = &timeline.sessions;
        let p50_of = |state: SessionState, figure: fn(&crate::model::Session) -> u64| {
            let mut values: Vec<u64> = sessions
                .iter()
                .filter(|s| s.state == state)
                .map(figure)
                .collect();
            values.sort_unstable();
            percentile(&values, 50.0)
        };
        let mean_of = |state: SessionState, figure: fn(&crate::model::Session) -> u64| {
            let (n, sum) = sessions
                .iter()
                .filter(|s| s.state == state)
                .fold((0u64, 0u64), |(n, sum), s| (n + 1, sum + figure(s)));
            sum / n.max(1)
        };
        let retained = |c: &Category| timeline.categories[*c].retained;
        let total_retained: u64 = Category::ALL.iter().map(retained).sum();
        let top = Category::ALL.iter().max_by_key(|c| retained(c));
        Evidence {
            allocs: timeline.allocs,
            frees: timeline.frees,
            lost: timeline.lost,
            alloc_layer_reason: &timeline.header.settings.alloc_layer_reason,
            sites: &timeline.sites,
            rest: timeline.rest,
            sampling: timeline.header.sampling,
            duration_s: timeline.duration_s(),
            parked: timeline.spawn_sites.iter().find(|site| site.leak),
            sessions: SessionFigures {
                count: sessions.len() as u64,
                states: SessionStates::of(sessions.iter().map(|s| s.state)),
                worker_ended: sessions
                    .iter()
                    .filter(|s| s.worker_end_ns.is_some())
                    .count() as u64,
                retained_p50: p50_of(SessionState::Leaked, |s| s.retained),
                retained_mean: mean_of(SessionState::Leaked, |s| s.retained),
                live_idle_p50_s: p50_of(SessionState::Live, |s| s.idle_ns) as f64 / 1e9,
                live_bytes_p50: p50_of(SessionState::Live, |s| s.live_at_end),
                live_bytes_mean: mean_of(SessionState::Live, |s| s.live_at_end),
                uninitialized: sessions
                    .iter()
                    .filter(|s| s.state == SessionState::Live && s.polls <= 1)
                    .count() as u64,
                top_category: top.map_or("", |c| c.name()),
                top_category_share: top
                    .map_or(0.0, |c| retained(c) as f64 / total_retained.max(1) as f64),
            },
            missing_signals: &timeline.missing_signals,
            rmcp_version: timeline.header.rmcp_version.as_deref(),
            births_sampled: timeline.header.sampling.is_sampled()
                && timeline.header.producer == leakscope_recording::Producer::InProcess
                && timeline.whole_allocs == 0,
        }
    }
}
