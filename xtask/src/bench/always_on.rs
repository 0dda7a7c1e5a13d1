//! Left on: what a sampled recording at the default mean (512 KiB) finds,
//! how soon, how well, and what it writes.
//!
//! * **Detection.** `cache-server` leaking 1 KiB per request at 100
//!   requests/s (100 KiB/s), in both modes (the eBPF probe on the jemalloc
//!   build; the cooperative allocator switched on by attach): the recording's
//!   first N seconds, cut every 5 s and reported, until the verdict names
//!   `cache::remember` (docs/report.md predicts `10 T / L`, ~51 s); and the
//!   whole recording's estimate of its bytes against what the server kept
//!   (the requests it answered x 1 KiB).
//! * **Disk.** The bytes a sampled recording writes per second, beside the
//!   allocations per second the server made (counted by a recording of every
//!   call under the same load), scaled to a day at 10 k allocations/s: for
//!   the cache server (no sessions) and for `fixture-server` under session
//!   churn (each session's lifecycle is recorded whole: the dear case).
//! * **A day, read.** The fixture's sampled recording replayed to a day's
//!   worth of records at 10 k allocations/s, and `leakscope report` timed on it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use leakscope_fixtures::cache::{self, ENTRY_BYTES};
use leakscope_fixtures::process::{FixtureProcess, ProbeProcess};
use leakscope_recording::{EndReason, Record, RecordingReader, RecordingWriter};
use serde::Deserialize;

use super::analyzer::{Copies, replay, time_report};
use super::results::{AlwaysOn, DayRead, Detection, Disk, DiskRow, Outcome};

/// The default mean, as `attach --sample` takes it.
const MEAN_BYTES: u64 = 512 * 1024;
/// The cache server's load: 100 KiB/s leaked.
const REQUESTS_PER_S: f64 = 100.0;
/// The allocation rate a day is scaled to.
const DAY_ALLOCS_PER_S: f64 = 10_000.0;
const DAY_S: f64 = 86_400.0;
/// The probe finishes its recording on it.
const SIGINT: i32 = 2;
/// Reports of the recording cut this often, to find when the leak is named.
pub(super) const CUT_EVERY_S: u64 = 5;

pub(super) struct AlwaysOnEnv<'a> {
    pub bin: &'a Path,
    pub probe: &'a Path,
    pub scratch: &'a Path,
    /// How long the cache server is driven per mode.
    pub seconds: u64,
    /// Replay the fixture's recording to a day and time the report on it.
    pub day: bool,
}

pub(super) fn always_on(env: &AlwaysOnEnv) -> Result<AlwaysOn> {
    let leak_bytes_per_s = REQUESTS_PER_S * ENTRY_BYTES as f64;
    let detect = |mode: &str, server: &str| {
        eprintln!("always on: {mode} ({server}), {} s", env.seconds);
        let detected = detection(env, mode, server);
        if let Err(e) = &detected {
            eprintln!("always on, {mode}: {e:#}");
        }
        Outcome::of(detected)
    };
    let ebpf = detect("ebpf", "cache-server-jemalloc");
    let cooperative = detect("cooperative", "cache-server-cooperative");
    let disk = Disk {
        cache_server: skipped(disk_cache(env)),
        fixture_server_sessions: skipped(disk_sessions(env)),
    };
    let day_read = env
        .day
        .then(|| skipped(day_read(env, &disk.fixture_server_sessions)));
    Ok(AlwaysOn {
        mean_bytes: MEAN_BYTES,
        cache_requests_per_s: REQUESTS_PER_S,
        cache_leak_bytes_per_s: leak_bytes_per_s,
        predicted_detection_s: 10.0 * MEAN_BYTES as f64 / leak_bytes_per_s,
        ebpf,
        cooperative,
        disk,
        day_read,
    })
}

/// `result`, or why it failed, said on stderr too.
fn skipped<T>(result: Result<T>) -> Outcome<T> {
    if let Err(e) = &result {
        eprintln!("always on: {e:#}");
    }
    Outcome::of(result)
}

/// A cache server recorded sampled for `env.seconds` at the load; the
/// recording's path and the requests it answered.
fn record_cache(
    env: &AlwaysOnEnv,
    server: &str,
    extra: &[&str],
    name: &str,
) -> Result<(std::path::PathBuf, u64, f64)> {
    let server = FixtureProcess::start(&env.bin.join(server), &[])?;
    let addr = server.addr()?;
    let recording = env.scratch.join(format!("{name}.lsrec"));
    let probe = attach(env, server.pid(), &recording, extra)?;
    let started = Instant::now();
    let sent = cache::drive(addr, REQUESTS_PER_S, Duration::from_secs(env.seconds))?;
    let seconds = started.elapsed().as_secs_f64();
    if !probe.signal_and_wait(SIGINT)?.success() {
        bail!("leakscope-probe failed on {name}");
    }
    Ok((recording, sent, seconds))
}

/// The probe on `pid`, writing `recording` (`extra`: its flags).
fn attach(env: &AlwaysOnEnv, pid: u32, recording: &Path, extra: &[&str]) -> Result<ProbeProcess> {
    let mut args = vec!["--force"];
    args.extend(extra);
    ProbeProcess::start(
        crate::shell::privileged(env.probe),
        pid,
        recording,
        &args,
        Stdio::inherit(),
    )
}

fn detection(env: &AlwaysOnEnv, mode: &str, server: &str) -> Result<Detection> {
    let (recording, sent, _) =
        record_cache(env, server, &["--sample"], &format!("always-on-{mode}"))?;
    let leakscope = env.bin.join("leakscope");
    let summary = report(&leakscope, &recording, env.scratch)?;
    let kept = sent * ENTRY_BYTES as u64;
    let top = summary.findings.first();
    let estimate = top.map_or(0, |f| f.live_bytes);
    let mut named_after = None;
    let mut cut = CUT_EVERY_S;
    while cut < env.seconds + CUT_EVERY_S {
        let prefix = env.scratch.join(format!("always-on-{mode}-{cut}s.lsrec"));
        cut_recording(&recording, &prefix, cut)?;
        let s = report(&leakscope, &prefix, env.scratch)?;
        let _ = std::fs::remove_file(&prefix);
        let named = s.verdict_kind == "leak"
            && s.findings
                .first()
                .is_some_and(|f| f.name.ends_with("cache::remember"));
        eprintln!("always on, {mode}: first {cut} s: {:?}", s.verdict);
        if named {
            named_after = Some(cut);
            break;
        }
        cut += CUT_EVERY_S;
    }
    let vs_kept = estimate as f64 / kept as f64;
    Ok(Detection {
        server: server.to_owned(),
        seconds: env.seconds,
        requests: sent,
        kept_bytes: kept,
        named_after_s: named_after,
        verdict: summary.verdict,
        site: top.map(|f| f.name.clone()),
        estimated_bytes: estimate,
        samples: top.map(|f| f.samples),
        relative_error: top.map(|f| f.relative_error),
        estimate_vs_kept: vs_kept.is_finite().then_some(vs_kept),
        recorded_events: summary.events.alloc,
        file_bytes: std::fs::metadata(&recording)?.len(),
    })
}

/// Bytes a sampled recording writes per second and allocations per second
/// under the same load (`load`), and what a day at 10 k allocations/s writes.
fn per_day(
    sampled: &Path,
    sampled_s: f64,
    every: &Path,
    every_s: f64,
    load: String,
) -> Result<DiskRow> {
    // What each file (or segment) writes once, before any event: its header
    // and the target's mappings, the probe's first frame. On a quiet load it
    // is most of a short recording, and no part of a day's rate.
    let mut reader = RecordingReader::open(sampled)?;
    reader.next_frame();
    let once = reader.offset();
    let bytes_per_s = std::fs::metadata(sampled)?.len().saturating_sub(once) as f64 / sampled_s;
    let allocs_per_s = allocations(every)? as f64 / every_s;
    let records_per_s = RecordingReader::open(sampled)?.count() as f64 / sampled_s;
    let scale = DAY_ALLOCS_PER_S / allocs_per_s;
    // No allocation to scale by: no day (null in the file).
    let day = |per_s: f64| Some(per_s * scale * DAY_S).filter(|v| v.is_finite());
    Ok(DiskRow {
        file_start_bytes: once,
        sampled_bytes_per_s: bytes_per_s,
        sampled_records_per_s: records_per_s,
        allocs_per_s,
        day_bytes_at_10k_allocs_per_s: day(bytes_per_s),
        day_records_at_10k_allocs_per_s: day(records_per_s),
        load,
        sessions_per_s: None,
    })
}

fn disk_cache(env: &AlwaysOnEnv) -> Result<DiskRow> {
    let short = AlwaysOnEnv {
        seconds: 20,
        ..*env
    };
    let (sampled, _, sampled_s) = record_cache(
        &short,
        "cache-server-jemalloc",
        &["--sample"],
        "disk-cache-sampled",
    )?;
    let (every, _, every_s) =
        record_cache(&short, "cache-server-jemalloc", &[], "disk-cache-every")?;
    let load = format!("cache-server-jemalloc, {REQUESTS_PER_S} requests/s");
    per_day(&sampled, sampled_s, &every, every_s, load)
}

/// Sessions at a rate for `seconds` under the probe (`extra` its flags).
/// How long a session churn's recording goes on after the churn: the
/// fixture's 5 s keep-alive, and 2 s for the reaping to be recorded.
const REAPED_AFTER: std::time::Duration = std::time::Duration::from_secs(7);

fn record_sessions(
    env: &AlwaysOnEnv,
    extra: &[&str],
    name: &str,
    seconds: u64,
    rate: u64,
) -> Result<(std::path::PathBuf, f64)> {
    let server = FixtureProcess::start(
        &env.bin.join("fixture-server"),
        &["--composition", "service", "--keep-alive", "5s"],
    )?;
    let recording = env.scratch.join(format!("{name}.lsrec"));
    let probe = attach(env, server.pid(), &recording, extra)?;
    let started = Instant::now();
    let count = (seconds * rate).to_string();
    let status = Command::new(env.bin.join("churn"))
        .args([
            "--url",
            &server.mcp_url,
            "--count",
            &count,
            "--rate",
            &rate.to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .context("cannot run churn")?;
    if !status.success() {
        bail!("churn failed ({status})");
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Past the keep-alive before stopping, so the recording holds each of
    // its sessions' ends too: a copy of it in the day's replay is then a
    // whole cycle of a server that reaps, as a day of a real one is. Stopped
    // at once, the last 5 s of sessions never closed, and the replay's 1,440
    // copies piled them up into ~170 k sessions open at once by the day's end
    // (the analyzer's tables growing with them: a quarter of the day read in
    // 11.4 s, the whole in 78 s). The rate stays per second of churn.
    std::thread::sleep(REAPED_AFTER);
    if !probe.signal_and_wait(SIGINT)?.success() {
        bail!("leakscope-probe failed on {name}");
    }
    Ok((recording, elapsed))
}

const SESSIONS_PER_S: u64 = 30;

fn disk_sessions(env: &AlwaysOnEnv) -> Result<DiskRow> {
    let (sampled, sampled_s) = record_sessions(
        env,
        &["--sample"],
        "disk-sessions-sampled",
        60,
        SESSIONS_PER_S,
    )?;
    let (every, every_s) = record_sessions(env, &[], "disk-sessions-every", 10, SESSIONS_PER_S)?;
    let load =
        format!("fixture-server --composition service, {SESSIONS_PER_S} new sessions/s (churn)");
    let row = per_day(&sampled, sampled_s, &every, every_s, load)?;
    Ok(DiskRow {
        sessions_per_s: Some(SESSIONS_PER_S),
        ..row
    })
}

/// The fixture's sampled recording replayed to a day's records at 10 k
/// allocations/s, and the report timed on it.
fn day_read(env: &AlwaysOnEnv, disk: &Outcome<DiskRow>) -> Result<DayRead> {
    let source = env.scratch.join("disk-sessions-sampled.lsrec");
    let records = disk
        .measured()
        .and_then(|row| row.day_records_at_10k_allocs_per_s)
        .context("no day estimate")? as u64;
    let day = env.scratch.join("always-on-day.lsrec");
    let written = replay(&source, &day, records, Copies::Whole)?;
    let leakscope = env.bin.join("leakscope");
    let (seconds, peak_rss, _) = time_report(&leakscope, &day, env.scratch)?;
    let bytes = std::fs::metadata(&day)?.len();
    let _ = std::fs::remove_file(&day);
    Ok(DayRead {
        records: written,
        file_bytes: bytes,
        report_seconds: seconds,
        peak_rss_bytes: peak_rss,
    })
}

/// What the bench reads of a report's summary.json.
#[derive(Deserialize)]
struct Summary {
    verdict_kind: String,
    verdict: String,
    /// Most live bytes first.
    findings: Vec<Finding>,
    events: Events,
}

#[derive(Deserialize)]
struct Finding {
    name: String,
    live_bytes: u64,
    samples: u64,
    relative_error: f64,
}

#[derive(Deserialize)]
struct Events {
    alloc: u64,
}

fn report(leakscope: &Path, recording: &Path, scratch: &Path) -> Result<Summary> {
    let out = scratch.join("always-on-report");
    let status = Command::new(leakscope)
        .arg("report")
        .arg(recording)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("leakscope report {} failed", recording.display());
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(
        out.join("summary.json"),
    )?)?)
}

/// Allocation records (and reallocs) of a recording of every call.
fn allocations(path: &Path) -> Result<u64> {
    Ok(RecordingReader::open(path)?
        .filter(|r| matches!(r, Record::Alloc { .. } | Record::Realloc { .. }))
        .count() as u64)
}

/// Writes the first `seconds` of `source` (from its first timed record) to
/// `out`, ended as if stopped then.
fn cut_recording(source: &Path, out: &Path, seconds: u64) -> Result<()> {
    let reader = RecordingReader::open(source)?;
    let header = reader.header().clone();
    let mut writer = RecordingWriter::create(out, &header)?;
    let mut first = None;
    let mut end = 0;
    for record in reader {
        if let Some(t) = record
            .ts()
            .filter(|_| !matches!(record, Record::End { .. }))
        {
            let start = *first.get_or_insert(t);
            end = start + seconds * 1_000_000_000;
            if t > end {
                break;
            }
        }
        if matches!(record, Record::End { .. }) {
            continue;
        }
        writer.push(record)?;
    }
    writer.finish(Record::End {
        ts: end,
        reason: EndReason::Interrupted,
    })?;
    Ok(())
}
