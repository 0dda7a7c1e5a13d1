//! `summary.json`: the stable, machine-readable result of a report.
//!
//! Field names are a contract (tests and other tools read them): change them only
//! together with `FORMAT_VERSION`.

use serde::Serialize;

use crate::attribute::Category;
use crate::timeline::Timeline;

pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
pub struct Summary {
    pub format_version: u32,
    pub producer: &'static str,
    pub duration_s: f64,
    pub events: Events,
    pub sessions: Sessions,
    pub categories: Vec<CategorySummary>,
    pub top_sites: Vec<SiteSummary>,
    pub verdict: String,
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
    /// Sessions whose worker ended and that retain nothing (their map entry went away).
    pub closed: u64,
    pub retained_bytes: Retained,
    pub transient_bytes: Spread,
}

#[derive(Debug, Serialize, Default)]
pub struct Retained {
    pub p50: u64,
    pub p90: u64,
    pub max: u64,
    pub total: u64,
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
    let mut retained: Vec<u64> = ended.iter().map(|s| s.retained).collect();
    let mut transient: Vec<u64> = ended.iter().map(|s| s.transient).collect();
    retained.sort_unstable();
    transient.sort_unstable();
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
            retained_bytes: Retained {
                p50: percentile(&retained, 50.0),
                p90: percentile(&retained, 90.0),
                max: retained.last().copied().unwrap_or(0),
                total: retained.iter().sum(),
            },
            transient_bytes: Spread {
                p50: percentile(&transient, 50.0),
                p90: percentile(&transient, 90.0),
                max: transient.last().copied().unwrap_or(0),
            },
        },
        categories,
        top_sites,
        verdict: String::new(),
    };
    summary.verdict = verdict(&summary, timeline);
    summary
}

/// The report's first line, in plain words.
fn verdict(summary: &Summary, timeline: &Timeline) -> String {
    let s = &summary.sessions;
    let lower_bound = if summary.events.lost > 0 {
        format!(
            " ({} events were lost: figures are lower bounds)",
            summary.events.lost
        )
    } else {
        String::new()
    };
    if s.count == 0 {
        return format!(
            "No session lifecycle was recorded; see the per-category table for all memory{lower_bound}."
        );
    }
    let leaking = s.worker_ended - s.closed;
    if leaking == 0 {
        return format!(
            "{} of {} sessions retain memory after their worker exited: no session leak{lower_bound}.",
            0, s.worker_ended
        );
    }
    let total_retained: u64 = summary.categories.iter().map(|c| c.retained_bytes).sum();
    let top = summary
        .categories
        .iter()
        .max_by_key(|c| c.retained_bytes)
        .expect("four categories");
    let share = 100.0 * top.retained_bytes as f64 / total_retained.max(1) as f64;
    let site = timeline
        .sites
        .iter()
        .find(|site| site.category.name() == top.name && site.session_bytes > 0)
        .map(describe_site)
        .unwrap_or_default();
    format!(
        "{leaking} of {} sessions were never closed; each retains {} after its worker exited (p50), {share:.0}% of it {site}({}){lower_bound}.",
        s.count,
        crate::units::bytes(s.retained_bytes.p50),
        top.name
    )
}

/// "allocated by `rule frame` -> `its callee` " for a site.
fn describe_site(site: &crate::timeline::Site) -> String {
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

/// A function name without its generic arguments, for prose.
fn short_name(name: &str) -> String {
    let mut depth = 0;
    let mut out = String::new();
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
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
