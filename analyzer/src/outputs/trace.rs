//! `trace.json`: the Chrome trace event format, which Perfetto opens.
//!
//! Each session is a slice on its own track from birth to its worker's end (or
//! the end of the recording); memory is counter tracks: live bytes per category
//! and cumulative reclaimed bytes. A recording of more sessions or samples
//! than a viewer draws shows a few thousand of each, evenly spaced
//! ([`thin`](crate::outputs::thin); `otherData` says how many).
//!
//! Times are microseconds since the application trace's origin when the
//! recording has one (`Record::TraceOrigin`, written by the in-process mode's
//! `tracing-chrome` layer), else since the recording began. With an origin, the
//! application's own trace (its spans: requests, sessions, rmcp's workers) is on
//! the same clock, and [`merge_app_trace`] puts both into one file.

use leakscope_recording::Header;
use serde_json::{Value, json};

use crate::model::Category;
use crate::model::{Sample, Session};
use crate::outputs::thin::{MAX_MARKERS, MAX_POINTS, thinned};

/// The trace of a recording of `header`'s target from `start_ns` to `end_ns`,
/// with times counted from `origin_ns` (may be before or after `start_ns`).
pub fn chrome_trace(
    header: &Header,
    (start_ns, end_ns, origin_ns): (u64, u64, u64),
    sessions: &[Session],
    samples: &[Sample],
) -> Value {
    let pid = header.pid;
    let us = |ns: u64| (ns as f64 - origin_ns as f64) / 1e3;
    let start_us = us(start_ns);
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": pid,
        "args": {"name": format!("{} (pid {pid})", header.exe)}
    })];
    // A day's sessions are millions of tracks: a few thousand of them, evenly
    // spaced, keep their numbers (see `thin`).
    for (i, session) in thinned(sessions, MAX_MARKERS) {
        let end = session.worker_end_ns.unwrap_or(end_ns);
        events.push(json!({
            "name": format!("session {i}"), "cat": "session", "ph": "X", "pid": pid, "tid": 1000 + i,
            "ts": us(session.born_ns), "dur": us(end) - us(session.born_ns),
            "args": {
                "allocated_bytes": session.allocated, "reclaimed_bytes": session.reclaimed,
                "transient_bytes": session.transient, "retained_bytes": session.retained,
                "worker_ended": session.worker_end_ns.is_some()
            }
        }));
    }
    for (_, sample) in thinned(samples, MAX_POINTS) {
        let ts = start_us + sample.t_s * 1e6;
        let live: serde_json::Map<String, Value> = sample
            .live
            .entries()
            .map(|(c, bytes): (Category, &u64)| (c.name().to_owned(), json!(bytes)))
            .collect();
        events.push(json!({"name": "live bytes", "ph": "C", "pid": pid, "ts": ts, "args": live}));
        events.push(json!({
            "name": "reclaimed bytes (cumulative)", "ph": "C", "pid": pid, "ts": ts,
            "args": {"reclaimed": sample.reclaimed_total}
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "sessions": sessions.len(),
            "sessions_shown": sessions.len().min(MAX_MARKERS),
        },
    })
}

/// Reads an application trace written by `tracing-chrome` (a JSON array of
/// events, possibly unterminated when the application was killed) and adds its
/// events to `trace`, under the recording's process id so that Perfetto shows
/// the application's spans and leakscope's memory tracks in one process.
pub fn merge_app_trace(trace: &mut Value, app: &str, pid: u32) -> anyhow::Result<usize> {
    let events: Vec<Value> = match serde_json::from_str::<Value>(app) {
        Ok(Value::Array(events)) => events,
        Ok(Value::Object(mut object)) => match object.remove("traceEvents") {
            Some(Value::Array(events)) => events,
            _ => anyhow::bail!("no traceEvents array"),
        },
        Ok(_) => anyhow::bail!("not a Chrome trace (neither an array nor an object)"),
        Err(first) => {
            // Cut short: close the array after the last complete event.
            let body = app.trim_end().trim_end_matches(',');
            match serde_json::from_str::<Value>(&format!("{body}]")) {
                Ok(Value::Array(events)) => events,
                _ => anyhow::bail!("not a Chrome trace: {first}"),
            }
        }
    };
    let merged = trace["traceEvents"]
        .as_array_mut()
        .ok_or_else(|| anyhow::anyhow!("leakscope's trace has no traceEvents"))?;
    let n = events.len();
    for mut event in events {
        if event.get("pid").is_some() {
            event["pid"] = json!(pid);
        }
        merged.push(event);
    }
    Ok(n)
}
