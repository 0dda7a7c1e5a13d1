//! `trace.json`: the Chrome trace event format, which Perfetto opens.
//!
//! Each session is a slice on its own track from birth to its worker's end (or
//! the end of the recording); memory is counter tracks: live bytes per category
//! and cumulative reclaimed bytes. Times are microseconds since the recording began.

use leakscope_recording::Header;
use serde_json::{Value, json};

use crate::attribute::Category;
use crate::timeline::{Sample, Session};

/// The trace of a recording of `header`'s target from `start_ns` to `end_ns`.
pub fn chrome_trace(
    header: &Header,
    start_ns: u64,
    end_ns: u64,
    sessions: &[Session],
    samples: &[Sample],
) -> Value {
    let pid = header.pid;
    let us = |ns: u64| (ns.saturating_sub(start_ns)) as f64 / 1e3;
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": pid,
        "args": {"name": format!("{} (pid {pid})", header.exe)}
    })];
    for (i, session) in sessions.iter().enumerate() {
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
    for sample in samples {
        let ts = sample.t_s * 1e6;
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
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}
