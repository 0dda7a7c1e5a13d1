use std::path::PathBuf;

use leakscope_recording::{AllocLayer, ClockOrigin, Phase, Producer, Record, ScopeKind, Settings};

use super::*;
use crate::analyze;
use crate::model::Category;

const GRACE: u64 = 1_000_000_000;

fn recording(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/recordings")
        .join(name)
}

pub(crate) fn header() -> Header {
    Header {
        producer: Producer::InProcess,
        producer_version: "test".into(),
        pid: 1,
        exe: "/nonexistent".into(),
        build_id: None,
        clock: ClockOrigin {
            monotonic_ns: 0,
            unix_ns: 0,
        },
        rmcp_version: None,
        settings: Settings {
            alloc_layer: AllocLayer::GlobalAllocator,
            alloc_layer_reason: String::new(),
            stack_depth: 0,
            preset: None,
            scope_probes: vec![],
            missing_scopes: vec![],
            scope_functions: vec![],
            notes: vec![],
        },
        frame_pointers: leakscope_recording::FramePointers::Unknown,
        sampling: leakscope_recording::sampling::Sampling::Every,
        segment: None,
        stack_walk: Default::default(),
    }
}

fn scope(ts: u64, tid: u32, kind: ScopeKind, phase: Phase, arg: u64) -> Record {
    Record::Scope {
        ts,
        tid,
        kind,
        phase,
        arg,
    }
}

/// A block allocated without a stack.
fn alloc(ts: u64, tid: u32, addr: u64, size: u64) -> Record {
    Record::Alloc {
        ts,
        tid,
        addr,
        size,
        stack: None,
    }
}

#[test]
fn polls_and_worker_end_are_linked_by_containment() {
    let s = 1_000_000_000;
    let records = vec![
        scope(s, 1, ScopeKind::SessionCreate, Phase::Enter, 0),
        alloc(s, 1, 0x1000, 100),
        scope(s, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0),
        // Not in the window: belongs to no session.
        alloc(s, 1, 0x9000, 7),
        // A poll on another thread whose argument points inside the task block.
        scope(2 * s, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010),
        alloc(2 * s, 2, 0x2000, 50),
        scope(2 * s, 2, ScopeKind::WorkerPoll, Phase::Exit, 0),
        scope(3 * s, 2, ScopeKind::WorkerDrop, Phase::Enter, 0x1020),
        Record::Free {
            ts: 3 * s + 10,
            tid: 2,
            addr: 0x2000,
        },
        Record::End {
            ts: 10 * s,
            reason: EndReason::Finished,
        },
    ];
    let mut builder = Builder::new(Rules::builtin(), GRACE, s);
    for record in records {
        builder.push(record);
    }
    let timeline = builder.finish(header(), Tail::Clean);
    assert_eq!(timeline.sessions.len(), 1);
    let session = &timeline.sessions[0];
    assert_eq!(
        session.allocated, 150,
        "the birth block and the poll's block"
    );
    assert_eq!(session.worker_end_ns, Some(3 * s));
    assert_eq!(session.transient, 50, "freed right after the worker ended");
    assert_eq!(session.retained, 100, "the task block outlived its worker");
    assert_eq!(timeline.categories[Category::Other].live_at_end, 107);
    assert_eq!(timeline.worker_ends_s, vec![2.0]);
}

/// A drop that may have taken a scope exit makes the threads' open windows
/// unknown; a block the probe could not learn (a posix_memalign whose
/// slot another thread took) takes no record, so the windows stand.
#[test]
fn only_losses_that_may_drop_scope_records_close_open_windows() {
    let s = 1_000_000_000;
    let allocated_after = |reason| {
        let mut builder = Builder::new(Rules::builtin(), GRACE, s);
        for record in [
            scope(s, 1, ScopeKind::SessionCreate, Phase::Enter, 0),
            alloc(s, 1, 0x1000, 100),
            Record::Lost {
                ts: s,
                reason,
                count: 1,
            },
            alloc(s, 1, 0x2000, 20),
            scope(s, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0),
            Record::End {
                ts: 10 * s,
                reason: EndReason::Finished,
            },
        ] {
            builder.push(record);
        }
        let timeline = builder.finish(header(), Tail::Clean);
        timeline.sessions.iter().map(|s| s.allocated).sum::<u64>()
    };
    assert_eq!(allocated_after(LostReason::PendingFull), 120);
    assert_eq!(allocated_after(LostReason::Stack), 120);
    assert_eq!(allocated_after(LostReason::RingFull), 100);
}

/// realloc frees its old block inside the call: another thread can be handed
/// that address before the realloc's record; the late free must not delete
/// the other thread's live block.
#[test]
fn a_reused_address_is_not_freed_by_a_late_realloc() {
    let records = vec![
        alloc(10, 1, 0x100, 64),
        // Thread 2 gets 0x100 at ts 30, after thread 1's realloc began (20)...
        alloc(30, 2, 0x100, 32),
        // ...and thread 1's realloc (entered at 20) is recorded at 40.
        Record::Realloc {
            ts: 40,
            tid: 1,
            old: 0x100,
            new: 0x200,
            size: 128,
            stack: None,
            entry_ts: 20,
        },
        Record::End {
            ts: 50,
            reason: EndReason::Finished,
        },
    ];
    let mut builder = Builder::new(Rules::builtin(), GRACE, 1_000_000_000);
    for record in records {
        builder.push(record);
    }
    let timeline = builder.finish(header(), Tail::Clean);
    assert_eq!(
        timeline.categories[Category::Other].live_at_end,
        32 + 128,
        "thread 2's block and the realloc's new block are both live"
    );
}

/// In a sampled recording, a block recorded whole stands for itself (one
/// block, its bytes), and a sampled one for what its sampling weight says:
/// 512 B sampled at a 512 KiB mean stands for ~1024 blocks.
#[test]
fn a_block_recorded_whole_stands_for_itself_in_a_sampled_recording() {
    let sampling = leakscope_recording::sampling::Sampling::every_bytes(512 * 1024);
    let mut builder = Builder::new(Rules::builtin(), GRACE, 1_000_000_000).sampling(sampling);
    for i in 0..10 {
        builder.push(Record::WholeAlloc {
            ts: 10 + i,
            tid: 1,
            addr: 0x1000 * (i + 1),
            size: 512,
            stack: None,
        });
    }
    // One whole block freed: its free is recorded like a sampled block's.
    builder.push(Record::Free {
        ts: 30,
        tid: 1,
        addr: 0x1000,
    });
    builder.push(alloc(40, 1, 0x100_000, 512));
    builder.push(Record::End {
        ts: 50,
        reason: EndReason::Finished,
    });
    let mut header = header();
    header.sampling = sampling;
    let timeline = builder.finish(header, Tail::Clean);
    let sampled = sampling.weight(512).bytes.round() as u64;
    assert!(sampled > 500_000, "{sampled}");
    assert_eq!(timeline.whole_allocs, 10);
    assert_eq!(
        timeline.categories[Category::Other].live_at_end,
        9 * 512 + sampled
    );
}

#[test]
fn leaky_recording_retains_the_session_channel_per_session() {
    let timeline = analyze(
        &recording("leaky-5-sessions.lsrec"),
        Rules::builtin(),
        GRACE,
    )
    .unwrap();
    assert_eq!(timeline.sessions.len(), 5);
    assert!(timeline.sessions.iter().all(|s| s.worker_end_ns.is_some()));
    let exact = timeline
        .sessions
        .iter()
        .filter(|s| s.retained == 12_064 + 512)
        .count();
    assert!(
        exact >= 4,
        "the SessionEvent channel's two blocks per session: {:?}",
        timeline.sessions
    );
    assert!(timeline.sessions.iter().all(|s| s.transient > 20_000));
    assert_eq!(timeline.end_reason, Some(EndReason::Interrupted));
}

#[test]
fn fixed_recording_retains_nothing_per_session() {
    let timeline = analyze(
        &recording("fixed-5-sessions.lsrec"),
        Rules::builtin(),
        GRACE,
    )
    .unwrap();
    assert_eq!(timeline.sessions.len(), 5);
    // At most a table resize of the map lands in one session; no channel survives.
    let sessions = &timeline.sessions;
    assert!(sessions.iter().all(|s| s.retained < 1024), "{sessions:?}");
    assert!(
        sessions.iter().filter(|s| s.retained == 0).count() >= 4,
        "{sessions:?}"
    );
    assert!(timeline.sessions.iter().all(|s| s.transient > 20_000));
}

/// Sites that tie on bytes come in the order the recording fixes, not a hash
/// map's (whose seed differs between maps): one recording, one report.
#[test]
fn one_recording_gives_one_order_of_sites() {
    let order = || {
        analyze(
            &recording("leaky-5-sessions.lsrec"),
            Rules::builtin(),
            GRACE,
        )
        .unwrap()
        .sites
        .iter()
        .map(|s| (s.stack, s.retained_bytes))
        .collect::<Vec<_>>()
    };
    let first = order();
    assert!(
        first.windows(2).any(|w| w[0].1 == w[1].1),
        "the recording has sites that tie: {first:?}"
    );
    for _ in 0..8 {
        assert_eq!(order(), first);
    }
}

/// A block recorded whole in a session span's poll the recorder left
/// unwritten (`Record::WholeAllocInPoll`) is that session's, as the same
/// block between the poll's entry and end is: the sessions read alike.
#[test]
fn a_block_recorded_whole_in_a_poll_is_its_sessions_as_inside_the_poll() {
    let sampling = leakscope_recording::sampling::Sampling::every_bytes(512 * 1024);
    let read = |in_poll: bool| {
        let mut builder = Builder::new(Rules::builtin(), GRACE, 1_000_000_000)
            .producer(Producer::InProcess)
            .sampling(sampling);
        // Two sessions, named by their spans' first polls.
        for (ts, key, id) in [(1, 10, "a"), (4, 20, "b")] {
            builder.push(scope(ts, 1, ScopeKind::SessionSpan, Phase::Enter, key));
            builder.push(Record::Session {
                ts: ts + 1,
                tid: 1,
                fact: SessionFact::Id(id.into()),
            });
            builder.push(scope(ts + 2, 1, ScopeKind::SessionSpan, Phase::Exit, key));
        }
        // A block of each, on another thread; then one of "a" freed.
        for (ts, key, addr) in [(10, 10, 0x1000), (12, 20, 0x2000), (14, 10, 0x3000)] {
            if in_poll {
                builder.push(Record::WholeAllocInPoll {
                    ts,
                    tid: 2,
                    addr,
                    size: 4480,
                    stack: None,
                    span: key,
                });
            } else {
                builder.push(scope(ts, 2, ScopeKind::SessionSpan, Phase::Enter, key));
                builder.push(Record::WholeAlloc {
                    ts,
                    tid: 2,
                    addr,
                    size: 4480,
                    stack: None,
                });
                builder.push(scope(ts, 2, ScopeKind::SessionSpan, Phase::Exit, key));
            }
        }
        builder.push(Record::Free {
            ts: 20,
            tid: 2,
            addr: 0x3000,
        });
        builder.push(Record::End {
            ts: 30,
            reason: EndReason::Finished,
        });
        let mut header = header();
        header.sampling = sampling;
        let timeline = builder.finish(header, Tail::Clean);
        assert_eq!(timeline.whole_allocs, 3);
        let mut sessions: Vec<_> = timeline
            .sessions
            .iter()
            .map(|s| (s.id.clone(), s.allocated, s.live_at_end, s.polls))
            .collect();
        sessions.sort();
        sessions
    };
    let in_poll = read(true);
    assert_eq!(
        in_poll,
        vec![
            (Some("a".into()), 2 * 4480, 4480, in_poll[0].3),
            (Some("b".into()), 4480, 4480, in_poll[1].3)
        ]
    );
    assert_eq!(in_poll, read(false));
}
