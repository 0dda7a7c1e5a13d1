//! End to end: probe a real rmcp fixture, churn abandoned sessions, report, and check the
//! report's figures against the fixture's own heap figure (needs root; see `ebpf_gate`).

use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use leakscope_fixtures::ebpf_gate::ebpf_available;
use leakscope_fixtures::process::{FixtureProcess, ProbeProcess, workspace_binary};
use leakscope_fixtures::testkit::{Churn, report, scratch};
use serde_json::Value;

const SESSIONS: u64 = 50;

fn churn(url: &str, delete: bool) {
    Churn::abandon(SESSIONS).delete(delete).run(url);
}

/// (summary.json, the fixture's own retained bytes per session)
fn run(composition: &str) -> (Value, f64) {
    let server = FixtureProcess::start(
        &workspace_binary("fixture-server").unwrap(),
        &["--composition", composition, "--keep-alive", "2s"],
    )
    .unwrap();
    // Warm up: first-use allocations of tokio, hyper and the session map are not per session.
    churn(&server.mcp_url, true);
    sleep(Duration::from_secs(4));
    let before = server.debug_sessions().unwrap();
    let recording = scratch(&format!("{composition}.lsrec"));
    let probe = ProbeProcess::attach(server.pid(), &recording, &[]).unwrap();
    churn(&server.mcp_url, false);
    sleep(Duration::from_secs(4));
    let after = server.debug_sessions().unwrap();
    assert!(probe.signal_and_wait(libc::SIGINT).unwrap().success());
    let fixture_per_session =
        (after.heap_in_use_bytes as f64 - before.heap_in_use_bytes as f64) / SESSIONS as f64;

    let out = scratch(&format!("{composition}-report"));
    let summary = report(&recording, &out);
    eprintln!("{composition}: fixture {fixture_per_session:.0} B/session; summary {summary:#}");
    (summary, fixture_per_session)
}

fn category(summary: &Value, name: &str) -> f64 {
    summary["categories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["retained_bytes"]
        .as_f64()
        .unwrap()
}

#[test]
fn leaky_report_matches_the_fixtures_own_figure_and_fixed_and_service_do_not_leak() {
    if !ebpf_available("leaky_report_matches_the_fixtures_own_figure") {
        return;
    }
    let (leaky, fixture) = run("leaky");
    assert_eq!(leaky["format_version"], 2);
    assert_eq!(leaky["producer"], "ebpf");
    assert_eq!(leaky["sessions"]["count"], SESSIONS);
    assert_eq!(
        leaky["sessions"]["states"]["leaked"], SESSIONS,
        "every entry is still in the map after its worker ended"
    );
    assert_eq!(leaky["verdict_kind"], "leak");
    let p50 = leaky["sessions"]["retained_bytes"]["p50"].as_f64().unwrap();
    assert!(
        (p50 - fixture).abs() <= 0.10 * fixture,
        "retained p50 {p50} B within 10% of the fixture's {fixture:.0} B"
    );
    let total: f64 = ["session-map", "worker-channel", "worker-other", "other"]
        .iter()
        .map(|c| category(&leaky, c))
        .sum();
    assert!(
        category(&leaky, "session-map") >= 0.9 * total,
        "session-map holds >= 90%"
    );
    let verdict = leaky["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with(&format!(
            "{SESSIONS} of {SESSIONS} sessions are still in the map"
        )) && verdict.contains("create_local_session_with_event_store"),
        "{verdict}"
    );

    for composition in ["fixed", "service"] {
        let (summary, _) = run(composition);
        assert_eq!(summary["sessions"]["count"], SESSIONS, "{composition}");
        assert_eq!(
            summary["sessions"]["states"]["closed"], SESSIONS,
            "{composition}: every entry seen leaving the map: {summary:#}"
        );
        assert_eq!(summary["sessions"]["states"]["leaked"], 0, "{composition}");
        assert_eq!(
            summary["verdict_kind"], "no-leak",
            "{composition}: {summary:#}"
        );
        assert_eq!(
            summary["sessions"]["retained_bytes"]["total"], 0,
            "{composition}: no session retains anything"
        );
    }
}

#[test]
fn bad_input_gets_one_clear_line() {
    let run = |path: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .arg("report")
            .arg(path)
            .arg("--out")
            .arg(scratch("bad"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(Path::new("/nonexistent.lsrec"));
    assert!(
        !ok && err.lines().count() == 1 && err.contains("cannot read"),
        "{err}"
    );
    let junk = scratch("junk.lsrec");
    std::fs::write(&junk, "hello").unwrap();
    let (ok, err) = run(&junk);
    assert!(!ok && err.contains("not a leakscope recording"), "{err}");
    let mut newer = b"LSREC\0\r\n".to_vec();
    newer.extend_from_slice(&99u32.to_le_bytes());
    let newer_path = scratch("newer.lsrec");
    std::fs::write(&newer_path, newer).unwrap();
    let (ok, err) = run(&newer_path);
    assert!(!ok && err.contains("format version 99"), "{err}");
    // A truncated recording still reports its readable prefix, and says so in one line.
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/leaky-5-sessions.lsrec");
    let bytes = std::fs::read(sample).unwrap();
    let truncated = scratch("truncated.lsrec");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (ok, err) = run(&truncated);
    assert!(ok, "{err}");
    // Warnings only, one line each (the sample's binary may also be missing here).
    assert!(
        err.lines().all(|l| l.starts_with("leakscope: warning: ")),
        "{err}"
    );
    let truncation: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("truncated at byte"))
        .collect();
    assert!(
        truncation.len() == 1 && truncation[0].contains("readable prefix"),
        "{err}"
    );
}

/// More bad input, each one clear line and a non-zero exit (or, for damage
/// after the header, a report of the readable prefix with a one-line warning).
#[test]
fn damaged_files_and_bad_rules_get_one_clear_line() {
    let leakscope = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let out_dir = scratch("damaged-report");
    let report = |path: &Path, extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["report".as_ref(), path.as_os_str()];
        args.extend(["--out".as_ref(), out_dir.as_os_str()]);
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        leakscope(&args)
    };
    // An empty file.
    let empty = scratch("empty.lsrec");
    std::fs::write(&empty, b"").unwrap();
    let (ok, err) = report(&empty, &[]);
    assert!(
        !ok && err.lines().count() == 1 && err.contains("not a leakscope recording"),
        "{err}"
    );
    // A flipped bit inside a frame: the frames before it are reported, with one warning.
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/leaky-5-sessions.lsrec");
    let mut bytes = std::fs::read(&sample).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    let flipped = scratch("flipped.lsrec");
    std::fs::write(&flipped, &bytes).unwrap();
    let (ok, err) = report(&flipped, &[]);
    assert!(ok, "{err}");
    assert!(
        err.lines().all(|l| l.starts_with("leakscope: warning: ")),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("checksum")).count(),
        1,
        "{err}"
    );
    // A flipped bit in the header.
    let mut header = std::fs::read(&sample).unwrap();
    header[20] ^= 0xff;
    let bad_header = scratch("bad-header.lsrec");
    std::fs::write(&bad_header, &header).unwrap();
    let (ok, err) = report(&bad_header, &[]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    // A rules file with a syntax error names the file and the place, in one line.
    let rules = scratch("bad-rules.toml");
    std::fs::write(&rules, "[[rule]\ncategory = \"other\"\n").unwrap();
    let (ok, err) = report(&sample, &["--rules", rules.to_str().unwrap()]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("bad-rules.toml") && err.contains("line 1"),
        "{err}"
    );
    // A malformed dhat-heap.json.
    let dhat = scratch("dhat-heap.json");
    std::fs::write(&dhat, "{\"dhatFileVersion\": 2, \"pps\": [").unwrap();
    let (ok, err) = leakscope(&["dhat".as_ref(), dhat.as_os_str()]);
    assert!(!ok && err.lines().count() == 1, "{err}");
}
