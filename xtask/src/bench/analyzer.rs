//! The analyzer's throughput on big recordings.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Allocation, free and realloc records in a recording.
pub(super) fn count_events(path: &Path) -> Result<u64> {
    use leakscope_recording::{Record, RecordingReader};
    let reader = RecordingReader::open(path)?;
    Ok(reader
        .filter(|r| {
            matches!(
                r,
                Record::Alloc { .. } | Record::Free { .. } | Record::Realloc { .. }
            )
        })
        .count() as u64)
}

/// What each copy of a replay holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Copies {
    /// The memory records (lifecycle records in the first copy only): the
    /// analyzer's throughput on events. Counts memory records.
    Memory,
    /// Every record, lifecycle ones too: a longer run of the same load (a
    /// day of sessions). Counts every record.
    Whole,
}

/// Writes `out` with `source` replayed until it holds at least `count`
/// records (see [`Copies`]): each copy's addresses and times are shifted past
/// the previous one's, so what one copy keeps adds to the live set, as in a
/// server that has leaked for longer. Returns the records counted.
pub(super) fn replay(source: &Path, out: &Path, count: u64, copies: Copies) -> Result<u64> {
    use leakscope_recording::{EndReason, Record, RecordingReader, RecordingWriter};
    let reader = RecordingReader::open(source)?;
    let header = reader.header().clone();
    let records: Vec<Record> = reader.collect();
    let (first, last) = records
        .iter()
        .filter_map(Record::ts)
        .fold((u64::MAX, 0), |(lo, hi), ts| (lo.min(ts), hi.max(ts)));
    let span = last.saturating_sub(first) + 1_000_000;
    let mut writer = RecordingWriter::create(out, &header)?;
    let mut written = 0u64;
    let mut copy = 0u64;
    while written < count {
        for record in &records {
            let memory = matches!(
                record,
                Record::Alloc { .. } | Record::Free { .. } | Record::Realloc { .. }
            );
            let once = matches!(record, Record::Stack { .. } | Record::Mapping(_))
                || (copies == Copies::Memory && !memory);
            if (once && copy > 0) || matches!(record, Record::End { .. } | Record::Lost { .. }) {
                continue;
            }
            writer.push(shifted(record, copy, copy * span))?;
            if memory || copies == Copies::Whole {
                written += 1;
            }
            if written >= count {
                break;
            }
        }
        copy += 1;
    }
    writer.finish(Record::End {
        ts: first + copy * span,
        reason: EndReason::Finished,
    })?;
    Ok(written)
}

/// `record` of copy `copy`: its times `dt` later, its addresses in a range
/// of their own.
fn shifted(
    record: &leakscope_recording::Record,
    copy: u64,
    dt: u64,
) -> leakscope_recording::Record {
    use leakscope_recording::Record;
    let a = |addr: u64| if addr == 0 { 0 } else { addr + (copy << 40) };
    match record.clone() {
        Record::Alloc {
            ts,
            tid,
            addr,
            size,
            stack,
        } => Record::Alloc {
            ts: ts + dt,
            tid,
            addr: a(addr),
            size,
            stack,
        },
        Record::Free { ts, tid, addr } => Record::Free {
            ts: ts + dt,
            tid,
            addr: a(addr),
        },
        Record::Realloc {
            ts,
            tid,
            old,
            new,
            size,
            stack,
            entry_ts,
        } => Record::Realloc {
            ts: ts + dt,
            tid,
            old: a(old),
            new: a(new),
            size,
            stack,
            entry_ts: entry_ts + dt,
        },
        Record::Scope {
            ts,
            tid,
            kind,
            phase,
            arg,
        } => Record::Scope {
            ts: ts + dt,
            tid,
            kind,
            phase,
            arg: a(arg),
        },
        Record::Session { ts, tid, fact } => Record::Session {
            ts: ts + dt,
            tid,
            fact,
        },
        Record::Task {
            ts,
            tid,
            id,
            event,
            stack,
        } => Record::Task {
            ts: ts + dt,
            tid,
            id: a(id),
            event,
            stack,
        },
        other => other,
    }
}

/// Replays `source` into `out` until it holds `events` memory events, then
/// times `leakscope report` on it: one row of `results.json`'s analyzer runs.
pub(super) fn replay_and_time(
    leakscope: &Path,
    source: &Path,
    out: &Path,
    events: u64,
    scratch: &Path,
) -> Result<serde_json::Value> {
    let made = replay(source, out, events, Copies::Memory)?;
    let (seconds, peak_rss, live_blocks) = time_report(leakscope, out, scratch)?;
    Ok(serde_json::json!({
        "events": made,
        "file_bytes": std::fs::metadata(out)?.len(),
        "seconds": seconds,
        "events_per_s": made as f64 / seconds,
        "peak_rss_bytes": peak_rss,
        "live_blocks_at_end": live_blocks,
    }))
}

/// `leakscope report FILE`: (seconds, peak RSS in bytes, blocks live at the
/// end from its summary.json: what the analyzer's memory should follow).
pub(super) fn time_report(
    leakscope: &Path,
    recording: &Path,
    scratch: &Path,
) -> Result<(f64, u64, Option<u64>)> {
    let out = scratch.join("report");
    let start = Instant::now();
    let mut child = Command::new(leakscope)
        .arg("report")
        .arg(recording)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .spawn()?;
    // Peak RSS is the child's VmHWM, polled. Not wait4's ru_maxrss: the child
    // is spawned sharing this process's memory until it execs (vfork), and the
    // kernel folds that memory's high-water mark into the child's maxrss, so it
    // would report this process's own peak (the replayed records) instead.
    let mut max_rss_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        max_rss_kib = max_rss_kib.max(vm_hwm_kib(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(1));
    };
    let seconds = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("leakscope report {} failed", recording.display());
    }
    let live_blocks = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|summary| {
            let events = &summary["events"];
            Some(
                events["alloc"]
                    .as_u64()?
                    .saturating_sub(events["free"].as_u64()?),
            )
        });
    Ok((seconds, max_rss_kib * 1024, live_blocks))
}

/// The high-water mark of a live process's resident set (`VmHWM`), in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
