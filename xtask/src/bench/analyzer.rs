//! The analyzer's throughput on big recordings.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::results::{Analyzer, AnalyzerRun, Outcome, Recording};

/// The recording section and the analyzer's: a recording of the probe on
/// `fixture-server` under churn, the report's fixed start timed on it, then
/// the report on that recording replayed to each of `events`, and on the
/// pairs section's recording (a flat live set) replayed to the largest.
/// `clean`: remove the replayed recordings once timed (`--only` keeps them,
/// for profiling the analyzer on them).
pub(super) fn analyzer_section(
    bin: &Path,
    probe: &Path,
    scratch: &Path,
    analyzer_events: &[u64],
    quick: bool,
    clean: bool,
) -> Result<(Recording, Analyzer)> {
    // A realistic recording: the probe on fixture-server under churn.
    let recording = scratch.join("churn.lsrec");
    let sessions = if quick { 50 } else { 200 };
    crate::demo::record_churn(bin, probe, "leaky", sessions, 1, &recording)?;
    let recorded = count_events(&recording)?;
    let recording_bytes = std::fs::metadata(&recording)?.len();
    let bytes_per_event = recording_bytes as f64 / recorded as f64;
    let section = Recording {
        bytes_per_event: bytes_per_event.is_finite().then_some(bytes_per_event),
        events: recorded,
        file_bytes: recording_bytes,
        source: format!(
            "leakscope-probe attached to fixture-server --composition leaky, churn of {sessions} abandoned sessions"
        ),
    };
    let leakscope = bin.join("leakscope");
    // The report's start, whatever the events: naming frames from the
    // server binary's debug info, the charts. Timed on the recording itself.
    let (start_seconds, _, _) = time_report(&leakscope, &recording, scratch)?;
    let mut runs = Vec::new();
    for &events in analyzer_events {
        let big = scratch.join(format!("replayed-{events}.lsrec"));
        let row = replay_and_time(&leakscope, &recording, &big, events, scratch)?;
        eprintln!("analyzer: {}", serde_json::to_string(&row)?);
        runs.push(row);
        if clean {
            let _ = std::fs::remove_file(&big);
        }
    }
    // The same analyzer on as many events whose live set stays flat: the
    // pairs section's recording (malloc+free pairs), replayed. Its peak RSS
    // beside the runs above says what the memory follows.
    let pairs_recording = scratch.join("pairs.lsrec");
    let largest = analyzer_events.iter().copied().max().unwrap_or(1_000_000);
    let flat = if pairs_recording.exists() {
        let big = scratch.join("replayed-pairs.lsrec");
        let row = replay_and_time(&leakscope, &pairs_recording, &big, largest, scratch)?;
        eprintln!("analyzer, flat live set: {}", serde_json::to_string(&row)?);
        if clean {
            let _ = std::fs::remove_file(&big);
        }
        Outcome::Measured(row)
    } else {
        Outcome::Skipped {
            skipped: "no pairs recording (run the pairs section first)".into(),
        }
    };
    // What each event costs once the start is paid: between the two
    // largest runs, so the start cancels out.
    let marginal = match runs.as_slice() {
        [.., a, b] => {
            let events = b.events as f64 - a.events as f64;
            let seconds = b.seconds - a.seconds;
            (seconds > 0.0).then(|| events / seconds)
        }
        _ => None,
    };
    let analyzer = Analyzer {
        events_per_s: runs.last().map(|r| r.events_per_s),
        marginal_events_per_s: marginal,
        start_seconds,
        start_events: recorded,
        runs,
        flat_live_set: flat,
    };
    Ok((section, analyzer))
}

/// Allocation, free and realloc records in a recording.
fn count_events(path: &Path) -> Result<u64> {
    use leakscope_recording::{Record, RecordingReader};
    let reader = RecordingReader::open(path)?;
    Ok(reader
        .filter(|r| {
            matches!(
                r,
                Record::Alloc { .. }
                    | Record::WholeAlloc { .. }
                    | Record::WholeAllocInPoll { .. }
                    | Record::Free { .. }
                    | Record::Realloc { .. }
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
                Record::Alloc { .. }
                    | Record::WholeAlloc { .. }
                    | Record::WholeAllocInPoll { .. }
                    | Record::Free { .. }
                    | Record::Realloc { .. }
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

/// `record` of copy `copy`: its times `dt` later (the recording crate's one
/// list of which records carry a time), its addresses in a range of their
/// own.
fn shifted(
    record: &leakscope_recording::Record,
    copy: u64,
    dt: u64,
) -> leakscope_recording::Record {
    use leakscope_recording::Record;
    let a = |addr: &mut u64| {
        if *addr != 0 {
            *addr += copy << 40;
        }
    };
    let mut record = record.clone();
    // The application trace's time zero is the same for every copy.
    if !matches!(record, Record::TraceOrigin { .. })
        && let Some(ts) = record.ts_mut()
    {
        *ts += dt;
    }
    match &mut record {
        Record::Alloc { addr, .. }
        | Record::WholeAlloc { addr, .. }
        | Record::Free { addr, .. } => a(addr),
        Record::WholeAllocInPoll { addr, span, .. } => {
            a(addr);
            a(span);
        }
        Record::Realloc {
            old, new, entry_ts, ..
        } => {
            a(old);
            a(new);
            *entry_ts += dt;
        }
        Record::Scope { arg, .. } => a(arg),
        Record::Task { id, .. } => a(id),
        _ => {}
    }
    record
}

/// Replays `source` into `out` until it holds `events` memory events, then
/// times `leakscope report` on it: one row of `results.json`'s analyzer runs.
fn replay_and_time(
    leakscope: &Path,
    source: &Path,
    out: &Path,
    events: u64,
    scratch: &Path,
) -> Result<AnalyzerRun> {
    let made = replay(source, out, events, Copies::Memory)?;
    let (seconds, peak_rss, live_blocks) = time_report(leakscope, out, scratch)?;
    Ok(AnalyzerRun {
        events: made,
        file_bytes: std::fs::metadata(out)?.len(),
        seconds,
        events_per_s: made as f64 / seconds,
        peak_rss_bytes: peak_rss,
        live_blocks_at_end: live_blocks,
    })
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

#[cfg(test)]
mod tests {
    use super::shifted;
    use leakscope_recording::Record;

    #[test]
    fn a_copy_moves_times_and_addresses_but_not_the_trace_origin() {
        let realloc = Record::Realloc {
            ts: 10,
            tid: 1,
            old: 0,
            new: 0x100,
            size: 8,
            stack: None,
            entry_ts: 9,
        };
        assert_eq!(
            shifted(&realloc, 1, 1000),
            Record::Realloc {
                ts: 1010,
                tid: 1,
                old: 0,
                new: 0x100 + (1 << 40),
                size: 8,
                stack: None,
                entry_ts: 1009,
            }
        );
        let whole = Record::WholeAlloc {
            ts: 5,
            tid: 2,
            addr: 0x200,
            size: 128,
            stack: None,
        };
        assert_eq!(
            shifted(&whole, 2, 1000),
            Record::WholeAlloc {
                ts: 1005,
                tid: 2,
                addr: 0x200 + (2 << 40),
                size: 128,
                stack: None,
            }
        );
        let origin = Record::TraceOrigin { ts: 7 };
        assert_eq!(shifted(&origin, 3, 1000), origin);
    }
}
