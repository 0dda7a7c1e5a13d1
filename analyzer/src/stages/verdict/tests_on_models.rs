//! The verdict over whole models: timelines built by the timeline stage from
//! records (or from none), then given by hand the sessions, tasks, sites and
//! categories a rule is about, on both sides. `tests.rs` checks each rule on
//! its evidence; these check that the evidence is the model's.

use leakscope_recording::{EndReason, Record, Tail};

use super::verdict;
use crate::model::{Category, Session, SessionState, Task, TaskState, Timeline, VerdictKind};
use crate::stages::attribute::Rules;
use crate::stages::objects::spawn_sites::spawn_sites;
use crate::stages::timeline::Builder;
use crate::stages::timeline::tests::header;

const S: u64 = 1_000_000_000;

/// The timeline of a recording of `allocations` unfreed 64-byte blocks over
/// 100 s, with `rmcp` as the target's release.
fn model(allocations: u64, rmcp: Option<&str>) -> Timeline {
    let mut builder = Builder::new(Rules::builtin(), S, S);
    for i in 0..allocations {
        builder.push(Record::Alloc {
            ts: S + i * S / 10,
            tid: 1,
            addr: 0x1000 + i * 64,
            size: 64,
            stack: None,
        });
    }
    builder.push(Record::End {
        ts: 100 * S,
        reason: EndReason::Finished,
    });
    let mut header = header();
    header.rmcp_version = rmcp.map(str::to_owned);
    builder.finish(header, Tail::Clean)
}

fn session(state: SessionState, retained: u64, idle_s: u64) -> Session {
    Session {
        state,
        retained,
        live_at_end: retained,
        idle_ns: idle_s * S,
        worker_end_ns: (state != SessionState::Live).then_some(50 * S),
        polls: 3,
        ..Session::default()
    }
}

#[test]
fn the_timeline_stage_ends_with_the_verdict() {
    let nothing = model(0, None);
    assert_eq!(nothing.verdict.kind, VerdictKind::Undecided);
    assert!(
        nothing
            .verdict
            .text
            .starts_with("No allocations were recorded"),
        "{}",
        nothing.verdict.text
    );
    let recorded = model(20, None);
    assert_eq!(recorded.allocs, 20);
    assert!(
        !recorded.verdict.text.starts_with("No allocations"),
        "{}",
        recorded.verdict.text
    );
}

#[test]
fn leaked_sessions_are_counted_and_their_bytes_quoted_from_the_model() {
    let mut leaky = model(20, Some("3.11.0"));
    leaky.sessions = vec![
        session(SessionState::Leaked, 4096, 60),
        session(SessionState::Leaked, 8192, 60),
        session(SessionState::Leaked, 2048, 60),
        session(SessionState::Closed, 0, 0),
    ];
    leaky.categories[Category::SessionMap].retained = 3 << 10;
    leaky.categories[Category::WorkerChannel].retained = 1 << 10;
    let v = verdict(&leaky);
    assert_eq!(v.kind, VerdictKind::Leak, "{}", v.text);
    assert!(
        v.text
            .starts_with("3 of 4 sessions are still in the map after their worker ended"),
        "{}",
        v.text
    );
    // The p50 of 2, 4 and 8 KiB; 3 KiB of the 4 retained in the map.
    assert!(v.text.contains("each retains 4.0 KiB (p50)"), "{}", v.text);
    assert!(v.text.contains("75% of it"), "{}", v.text);
    assert!(v.text.contains("(session-map)"), "{}", v.text);

    let mut fixed = model(20, Some("3.11.0"));
    fixed.sessions = vec![session(SessionState::Closed, 0, 0); 4];
    let v = verdict(&fixed);
    assert_ne!(v.kind, VerdictKind::Leak, "{}", v.text);
    assert!(
        v.text.starts_with("4 of 4 sessions left the map"),
        "{}",
        v.text
    );
}

#[test]
fn live_sessions_read_their_idle_time_and_the_release_from_the_model() {
    let live = || {
        vec![
            session(SessionState::Live, 1000, 30),
            session(SessionState::Live, 3000, 90),
            session(SessionState::Live, 2000, 60),
        ]
    };
    let mut reaped = model(20, Some("3.11.0"));
    reaped.sessions = live();
    let v = verdict(&reaped);
    assert_eq!(v.kind, VerdictKind::Undecided, "{}", v.text);
    assert!(v.text.contains("idle for 60 s (p50)"), "{}", v.text);
    assert!(
        v.text.contains("reaps a session idle for 300 s"),
        "{}",
        v.text
    );

    let mut never = model(20, Some("1.3.0"));
    never.sessions = live();
    let v = verdict(&never);
    assert_eq!(v.kind, VerdictKind::Leak, "{}", v.text);
    assert!(v.text.contains("They are never reaped"), "{}", v.text);
}

/// A task spawned from `site` at activity `seq`, parked or ended.
fn task(site: &str, seq: u64, state: TaskState) -> Task {
    Task {
        born_ns: Some(seq * S / 10),
        born_seq: seq,
        end_ns: (state == TaskState::Ended).then_some(90 * S),
        state,
        polls: 1,
        idle_ns: 50 * S,
        live_bytes: if state == TaskState::Ended { 0 } else { 512 },
        cell_size: 512,
        allocated: 512,
        spawned_from: Some(site.into()),
        stack: None,
        parent: None,
        session: None,
    }
}

#[test]
fn parked_tasks_spawned_across_the_activity_are_a_leak_and_ended_ones_are_not() {
    let mut piling = model(200, None);
    piling.tasks = (0..20)
        .map(|i| task("subscribe", i * 10, TaskState::Parked))
        .collect();
    piling.spawn_sites = spawn_sites(&piling.tasks, piling.allocs);
    assert!(piling.spawn_sites[0].leak, "{:?}", piling.spawn_sites);
    let v = verdict(&piling);
    assert_eq!(v.kind, VerdictKind::Leak, "{}", v.text);
    assert!(
        v.text
            .starts_with("20 tasks spawned from `subscribe` are parked"),
        "{}",
        v.text
    );

    let mut ending = model(200, None);
    ending.tasks = (0..20)
        .map(|i| task("subscribe", i * 10, TaskState::Ended))
        .collect();
    ending.spawn_sites = spawn_sites(&ending.tasks, ending.allocs);
    assert!(!ending.spawn_sites[0].leak, "{:?}", ending.spawn_sites);
    let v = verdict(&ending);
    assert!(!v.text.contains("tasks spawned"), "{}", v.text);

    // Spawned in a burst at start-up, not one per request: no finding.
    let mut burst = model(200, None);
    burst.tasks = (0..20)
        .map(|i| task("subscribe", i, TaskState::Parked))
        .collect();
    burst.spawn_sites = spawn_sites(&burst.tasks, burst.allocs);
    assert!(!burst.spawn_sites[0].leak, "{:?}", burst.spawn_sites);
}
