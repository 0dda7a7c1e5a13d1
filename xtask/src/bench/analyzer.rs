//! The analyzer's throughput on big recordings.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

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

/// Writes `out` with `source`'s memory records replayed until it holds at least
/// `events` of them: each copy's addresses and times are shifted past the
/// previous one's, so what one copy keeps adds to the live set, as in a server
/// that has leaked for longer. Returns the events written.
pub(super) fn replay(source: &Path, out: &Path, events: u64) -> Result<u64> {
    use leakscope_recording::{EndReason, Record, RecordingReader, RecordingWriter};
    let reader = RecordingReader::open(source)?;
    let header = reader.header().clone();
    let records: Vec<Record> = reader.collect();
    let (first, last) = records
        .iter()
        .filter_map(record_ts)
        .fold((u64::MAX, 0), |(lo, hi), ts| (lo.min(ts), hi.max(ts)));
    let span = last.saturating_sub(first) + 1_000_000;
    let mut writer = RecordingWriter::create(out, &header)?;
    let mut written = 0u64;
    let mut copy = 0u64;
    while written < events {
        for record in &records {
            let shifted = match record {
                Record::Alloc {
                    ts,
                    tid,
                    addr,
                    size,
                    stack,
                } => Record::Alloc {
                    ts: ts + copy * span,
                    tid: *tid,
                    addr: addr + (copy << 40),
                    size: *size,
                    stack: *stack,
                },
                Record::Free { ts, tid, addr } => Record::Free {
                    ts: ts + copy * span,
                    tid: *tid,
                    addr: addr + (copy << 40),
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
                    ts: ts + copy * span,
                    tid: *tid,
                    old: if *old == 0 { 0 } else { old + (copy << 40) },
                    new: if *new == 0 { 0 } else { new + (copy << 40) },
                    size: *size,
                    stack: *stack,
                    entry_ts: entry_ts + copy * span,
                },
                // Stacks and mappings once; lifecycle records only in the first copy.
                Record::Stack { .. } | Record::Mapping(_) if copy == 0 => record.clone(),
                Record::Scope { .. } | Record::Session { .. } if copy == 0 => record.clone(),
                _ => continue,
            };
            if matches!(
                shifted,
                Record::Alloc { .. } | Record::Free { .. } | Record::Realloc { .. }
            ) {
                written += 1;
            }
            writer.push(shifted)?;
            if written >= events {
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

pub(super) fn record_ts(record: &leakscope_recording::Record) -> Option<u64> {
    use leakscope_recording::Record;
    match record {
        Record::Alloc { ts, .. } | Record::Free { ts, .. } | Record::Realloc { ts, .. } => {
            Some(*ts)
        }
        _ => None,
    }
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
    let child = Command::new(leakscope)
        .arg("report")
        .arg(recording)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .spawn()?;
    let (status, max_rss_kib) = wait4(child.id())?;
    let seconds = start.elapsed().as_secs_f64();
    if status != 0 {
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

/// wait4(2) for `pid`: (wait status, peak RSS in KiB). Declared here rather than
/// pulling the libc crate into xtask for one call.
pub(super) fn wait4(pid: u32) -> Result<(i32, u64)> {
    unsafe extern "C" {
        fn wait4(pid: i32, status: *mut i32, options: i32, rusage: *mut i64) -> i32;
    }
    let mut status = 0i32;
    // struct rusage on x86_64 Linux: two timevals (4 x i64), then 14 longs;
    // ru_maxrss (KiB) is the first of those.
    let mut rusage = [0i64; 18];
    // SAFETY: `status` and `rusage` are valid for writes of their sizes.
    let got = unsafe { wait4(pid as i32, &mut status, 0, rusage.as_mut_ptr()) };
    if got != pid as i32 {
        bail!("wait4({pid}) failed");
    }
    Ok((status, rusage[4] as u64))
}
