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
use serde_json::{Value, json};

use super::analyzer::{Copies, replay, time_report};

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
const CUT_EVERY_S: u64 = 5;

pub(super) struct AlwaysOnEnv<'a> {
    pub bin: &'a Path,
    pub probe: &'a Path,
    pub scratch: &'a Path,
    /// How long the cache server is driven per mode.
    pub seconds: u64,
    /// Replay the fixture's recording to a day and time the report on it.
    pub day: bool,
}

pub(super) fn always_on(env: &AlwaysOnEnv) -> Result<Value> {
    let mut out = json!({
        "mean_bytes": MEAN_BYTES,
        "cache_requests_per_s": REQUESTS_PER_S,
        "cache_leak_bytes_per_s": REQUESTS_PER_S * ENTRY_BYTES as f64,
        "predicted_detection_s": 10.0 * MEAN_BYTES as f64 / (REQUESTS_PER_S * ENTRY_BYTES as f64),
    });
    for (mode, server) in [
        ("ebpf", "cache-server-jemalloc"),
        ("cooperative", "cache-server-cooperative"),
    ] {
        eprintln!("always on: {mode} ({server}), {} s", env.seconds);
        out[mode] = detection(env, mode, server).unwrap_or_else(|e| {
            eprintln!("always on, {mode}: {e:#}");
            json!({ "skipped": format!("{e:#}") })
        });
    }
    out["disk"] = json!({
        "cache_server": disk_cache(env).unwrap_or_else(skipped),
        "fixture_server_sessions": disk_sessions(env).unwrap_or_else(skipped),
    });
    if env.day {
        out["day_read"] =
            day_read(env, &out["disk"]["fixture_server_sessions"]).unwrap_or_else(skipped);
    }
    Ok(out)
}

fn skipped(e: anyhow::Error) -> Value {
    eprintln!("always on: {e:#}");
    json!({ "skipped": format!("{e:#}") })
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

fn detection(env: &AlwaysOnEnv, mode: &str, server: &str) -> Result<Value> {
    let (recording, sent, _) =
        record_cache(env, server, &["--sample"], &format!("always-on-{mode}"))?;
    let leakscope = env.bin.join("leakscope");
    let summary = report(&leakscope, &recording, env.scratch)?;
    let kept = sent * ENTRY_BYTES as u64;
    let top = &summary["findings"][0];
    let estimate = top["live_bytes"].as_u64().unwrap_or(0);
    let mut named_after = None;
    let mut cut = CUT_EVERY_S;
    while cut < env.seconds + CUT_EVERY_S {
        let prefix = env.scratch.join(format!("always-on-{mode}-{cut}s.lsrec"));
        cut_recording(&recording, &prefix, cut)?;
        let s = report(&leakscope, &prefix, env.scratch)?;
        let _ = std::fs::remove_file(&prefix);
        let named = s["verdict_kind"] == "leak"
            && s["findings"][0]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("cache::remember"));
        eprintln!("always on, {mode}: first {cut} s: {}", s["verdict"]);
        if named {
            named_after = Some(cut);
            break;
        }
        cut += CUT_EVERY_S;
    }
    Ok(json!({
        "server": server,
        "seconds": env.seconds,
        "requests": sent,
        "kept_bytes": kept,
        "named_after_s": named_after,
        "verdict": summary["verdict"],
        "site": top["name"],
        "estimated_bytes": estimate,
        "samples": top["samples"],
        "relative_error": top["relative_error"],
        "estimate_vs_kept": estimate as f64 / kept as f64,
        "recorded_events": summary["events"]["alloc"],
        "file_bytes": std::fs::metadata(&recording)?.len(),
    }))
}

/// Bytes a sampled recording writes per second and allocations per second
/// under the same load, and what a day at 10 k allocations/s writes.
fn per_day(sampled: &Path, sampled_s: f64, every: &Path, every_s: f64) -> Result<Value> {
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
    Ok(json!({
        "file_start_bytes": once,
        "sampled_bytes_per_s": bytes_per_s,
        "sampled_records_per_s": records_per_s,
        "allocs_per_s": allocs_per_s,
        "day_bytes_at_10k_allocs_per_s": bytes_per_s * scale * DAY_S,
        "day_records_at_10k_allocs_per_s": records_per_s * scale * DAY_S,
    }))
}

fn disk_cache(env: &AlwaysOnEnv) -> Result<Value> {
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
    let mut row = per_day(&sampled, sampled_s, &every, every_s)?;
    row["load"] = json!(format!(
        "cache-server-jemalloc, {REQUESTS_PER_S} requests/s"
    ));
    Ok(row)
}

/// Sessions at a rate for `seconds` under the probe (`extra` its flags).
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
    if !probe.signal_and_wait(SIGINT)?.success() {
        bail!("leakscope-probe failed on {name}");
    }
    Ok((recording, elapsed))
}

const SESSIONS_PER_S: u64 = 30;

fn disk_sessions(env: &AlwaysOnEnv) -> Result<Value> {
    let (sampled, sampled_s) = record_sessions(
        env,
        &["--sample"],
        "disk-sessions-sampled",
        60,
        SESSIONS_PER_S,
    )?;
    let (every, every_s) = record_sessions(env, &[], "disk-sessions-every", 10, SESSIONS_PER_S)?;
    let mut row = per_day(&sampled, sampled_s, &every, every_s)?;
    row["load"] = json!(format!(
        "fixture-server --composition service, {SESSIONS_PER_S} new sessions/s (churn)"
    ));
    row["sessions_per_s"] = json!(SESSIONS_PER_S);
    Ok(row)
}

/// The fixture's sampled recording replayed to a day's records at 10 k
/// allocations/s, and the report timed on it.
fn day_read(env: &AlwaysOnEnv, disk: &Value) -> Result<Value> {
    let source = env.scratch.join("disk-sessions-sampled.lsrec");
    let records = disk["day_records_at_10k_allocs_per_s"]
        .as_f64()
        .context("no day estimate")? as u64;
    let day = env.scratch.join("always-on-day.lsrec");
    let written = replay(&source, &day, records, Copies::Whole)?;
    let leakscope = env.bin.join("leakscope");
    let (seconds, peak_rss, _) = time_report(&leakscope, &day, env.scratch)?;
    let bytes = std::fs::metadata(&day)?.len();
    let _ = std::fs::remove_file(&day);
    Ok(json!({
        "records": written,
        "file_bytes": bytes,
        "report_seconds": seconds,
        "peak_rss_bytes": peak_rss,
    }))
}

fn report(leakscope: &Path, recording: &Path, scratch: &Path) -> Result<Value> {
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

/// The section of BENCHMARKS.md for [`always_on`]'s results.
pub(super) fn render(md: &mut String, a: &Value) {
    use std::fmt::Write as _;
    if a.is_null() {
        return;
    }
    let mib = |v: &Value| v.as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    let _ = writeln!(
        md,
        "## Left on: sampled at 512 KiB\n\n`cache-server` leaking 1 KiB per request at {} \
         requests/s ({:.0} KiB/s), recorded with `attach --sample` (512 KiB) for {} s in each \
         mode; the recording's first N seconds cut every {CUT_EVERY_S} s and reported until the \
         verdict names `cache::remember` (docs/report.md predicts `10 T / L` = {:.0} s), and the \
         whole recording's estimate against what the server kept (requests x 1 KiB).\n\n\
         | mode | named after | estimated | kept | estimate / kept | samples | ± | file |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        a["cache_requests_per_s"],
        a["cache_leak_bytes_per_s"].as_f64().unwrap_or(0.0) / 1024.0,
        a["ebpf"]["seconds"],
        a["predicted_detection_s"].as_f64().unwrap_or(0.0),
    );
    for (mode, label) in [
        ("ebpf", "eBPF probe (`cache-server-jemalloc`)"),
        (
            "cooperative",
            "cooperative allocator (`cache-server-cooperative`)",
        ),
    ] {
        let r = &a[mode];
        if let Some(why) = r["skipped"].as_str() {
            let _ = writeln!(md, "| {label} | skipped: {why} | | | | | | |");
            continue;
        }
        let _ = writeln!(
            md,
            "| {label} | {} | {:.2} MiB | {:.2} MiB | {:.2} | {} | {:.0}% | {:.0} KiB |",
            r["named_after_s"]
                .as_u64()
                .map_or("not named".to_owned(), |s| format!("{s} s")),
            mib(&r["estimated_bytes"]),
            mib(&r["kept_bytes"]),
            r["estimate_vs_kept"].as_f64().unwrap_or(0.0),
            r["samples"],
            r["relative_error"].as_f64().unwrap_or(0.0) * 100.0,
            r["file_bytes"].as_f64().unwrap_or(0.0) / 1024.0,
        );
    }
    let _ = writeln!(
        md,
        "\nWhat a sampled recording writes, per second and scaled to a day at 10 k allocations/s \
         (the load's allocations/s counted by a recording of every call under the same load):\n\n\
         | load | allocations/s | sampled records/s | sampled bytes/s | a day at 10 k allocations/s |\n\
         | --- | ---: | ---: | ---: | ---: |"
    );
    for key in ["cache_server", "fixture_server_sessions"] {
        let r = &a["disk"][key];
        if let Some(why) = r["skipped"].as_str() {
            let _ = writeln!(md, "| {key} | skipped: {why} | | | |");
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} MiB |",
            r["load"].as_str().unwrap_or(key),
            r["allocs_per_s"].as_f64().unwrap_or(0.0),
            r["sampled_records_per_s"].as_f64().unwrap_or(0.0),
            r["sampled_bytes_per_s"].as_f64().unwrap_or(0.0),
            mib(&r["day_bytes_at_10k_allocs_per_s"]),
        );
    }
    let _ = writeln!(
        md,
        "\nA session's lifecycle is recorded whole (its birth's blocks, its scopes, its tasks' \
         first polls), so a server that makes a new session for every few hundred allocations, \
         as the churn does, writes most for its sessions; one whose allocations are requests \
         writes its samples only."
    );
    if let Some(day) = a.get("day_read").filter(|d| d["skipped"].is_null()) {
        let _ = writeln!(
            md,
            "\nA day read: the session churn's sampled recording replayed to a day's records at \
             10 k allocations/s ({} records, {:.0} MiB), then `leakscope report` on it: {:.1} s, \
             peak RSS {:.0} MiB.",
            day["records"],
            mib(&day["file_bytes"]),
            day["report_seconds"].as_f64().unwrap_or(0.0),
            mib(&day["peak_rss_bytes"]),
        );
    }
    let _ = writeln!(md);
}
