//! How the verdict says a site, a task spawn site and a duration.

use leakscope_recording::frames::short_name;
use leakscope_recording::sampling::Sampling;

use super::{DAY_S, MIN_LEAK_BYTES, MIN_LEAK_BYTES_PER_DAY};
use crate::model::{Site, SpawnSite, UNKNOWN_SITE, site_name};
use crate::units::{bytes, estimated_bytes, keeps};

/// "`site` keeps 1.2 MiB in 500 blocks never freed, growing at 3.4 KiB/s
/// (287 MiB a day)" (in a sampled recording, "~1.2 MiB ±14% in ~500
/// blocks").
pub(super) fn describe_growth(site: &Site, sampling: Sampling) -> String {
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
pub(super) fn describe_small(site: &Site, sampling: Sampling, duration_s: f64) -> String {
    let name = site_name(site);
    let rate = site.growth_bytes_per_s.max(0.0);
    format!(
        "`{name}` {} over {}, growing at {}/s ({} a day): too little to call a leak (a leak is claimed from {} kept at {} a day); a longer recording decides, e.g. `leakscope-probe attach --pid PID --sample` left on for an hour",
        keeps(site.retained_bytes, site.blocks, sampling).replacen("keeps", "kept", 1),
        minutes(duration_s),
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

/// "200 tasks spawned from `subscribe` are parked, each keeping 2.0 KiB (p50)
/// ...; none has ended".
pub(super) fn describe_parked(site: &SpawnSite, sampling: Sampling) -> String {
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
                .trim_start_matches(UNKNOWN_SITE)
                .trim()
                .trim_matches(['(', ')'])
        )
    };
    // Sampled, a task's own figure rests on the few samples in it: the mean.
    let each = if sampling.is_sampled() {
        format!(
            "~{} on average",
            bytes(site.alive_bytes.total / (site.alive + site.parked).max(1))
        )
    } else {
        format!("{} (p50)", bytes(site.alive_bytes.p50))
    };
    format!(
        "{} tasks spawned {from} are parked (not polled for most of their life), each keeping {each}, {} in all; {ended}",
        site.parked,
        estimated_bytes(site.alive_bytes.total, sampling),
    )
}

/// "allocated by `rule frame` -> `its callee` " for a site.
pub(super) fn describe_site(site: &Site) -> String {
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
