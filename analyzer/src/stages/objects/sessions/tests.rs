use super::*;

#[test]
fn a_poll_belongs_to_the_session_whose_birth_block_contains_its_argument() {
    let mut t = SessionTracker::default();
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    assert_eq!(
        t.alloc(1, 0x1000, 100, Category::WorkerOther, false),
        Some(0),
        "in the birth window"
    );
    t.scope(2, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    assert_eq!(
        t.alloc(1, 0x9000, 8, Category::WorkerOther, false),
        None,
        "after the window"
    );
    t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
    assert_eq!(
        t.alloc(2, 0x2000, 8, Category::WorkerOther, false),
        Some(0),
        "inside the poll"
    );
    t.scope(4, 2, ScopeKind::WorkerPoll, Phase::Exit, 0);
    assert_eq!(
        t.alloc(2, 0x3000, 8, Category::WorkerOther, false),
        None,
        "after the poll"
    );
    t.scope(5, 2, ScopeKind::WorkerDrop, Phase::Enter, 0x1050);
    assert_eq!(t.worker_end_ns(0), Some(5));
    t.free(0x1000);
    t.scope(6, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1010);
    assert_eq!(
        t.alloc(2, 0x4000, 8, Category::WorkerOther, false),
        None,
        "a freed block contains nothing"
    );
}

#[test]
fn what_runs_between_create_and_spawn_is_not_the_sessions() {
    let mut t = SessionTracker::default();
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    assert_eq!(t.alloc(1, 0x1000, 64, Category::SessionMap, false), Some(0));
    t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
    // Awaiting the map's lock: another task's block, then the map's table resize.
    assert_eq!(t.alloc(1, 0x5000, 64, Category::Other, false), None);
    // The creating task resumed on thread 2, which spawns its worker.
    t.scope(3, 2, ScopeKind::WorkerSpawn, Phase::Enter, 0);
    assert_eq!(
        t.alloc(2, 0x2000, 64, Category::WorkerChannel, false),
        Some(0)
    );
    t.scope(4, 2, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    assert_eq!(t.alloc(2, 0x3000, 64, Category::Other, false), None);
    // The worker's poll points into the task allocated by the spawn.
    t.scope(5, 1, ScopeKind::WorkerPoll, Phase::Enter, 0x2008);
    assert_eq!(t.alloc(1, 0x4000, 8, Category::Other, false), Some(0));
}

/// Polls probed at entry only: the thread's latest poll holds for the blocks
/// whose stacks pass through the poll function, and for no other.
#[test]
fn polls_without_exits_are_read_from_the_stack() {
    let mut t = SessionTracker::default();
    t.polls_by_stack();
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    assert_eq!(
        t.alloc(1, 0x1000, 64, Category::WorkerChannel, false),
        Some(0)
    );
    t.scope(2, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1008);
    assert!(t.wants_poll_stack(2));
    assert_eq!(
        t.alloc(2, 0x2000, 8, Category::Other, true),
        Some(0),
        "inside the poll"
    );
    assert_eq!(
        t.alloc(2, 0x3000, 8, Category::Other, false),
        None,
        "another task"
    );
}

#[test]
fn a_loss_ends_what_each_thread_was_inside() {
    let mut t = SessionTracker::default();
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    assert_eq!(t.alloc(1, 0x1000, 64, Category::SessionMap, false), Some(0));
    t.scope(2, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1000);
    // The exits of both were among the lost records.
    t.forget_threads();
    assert_eq!(t.alloc(1, 0x2000, 8, Category::Other, false), None);
    assert_eq!(t.alloc(2, 0x3000, 8, Category::Other, false), None);
    // Containment still links the next poll.
    t.scope(3, 2, ScopeKind::WorkerPoll, Phase::Enter, 0x1008);
    assert_eq!(t.alloc(2, 0x4000, 8, Category::Other, false), Some(0));
}

#[test]
fn nested_create_and_spawn_scopes_count_once() {
    let mut t = SessionTracker::default();
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    t.scope(1, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
    assert_eq!(
        t.alloc(1, 0x100, 8, Category::SessionMap, false),
        Some(0),
        "still inside"
    );
    t.scope(2, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
    t.scope(3, 1, ScopeKind::WorkerSpawn, Phase::Enter, 0);
    t.scope(3, 1, ScopeKind::WorkerSpawn, Phase::Enter, 0);
    assert_eq!(
        t.alloc(1, 0x200, 8, Category::WorkerChannel, false),
        Some(0)
    );
    t.scope(4, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    assert_eq!(
        t.alloc(1, 0x300, 8, Category::WorkerChannel, false),
        Some(0)
    );
    t.scope(4, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    assert_eq!(t.alloc(1, 0x400, 8, Category::Other, false), None);
    let (lives, _) = t.finish();
    assert_eq!(lives.len(), 1, "one session, not two");
}

/// A span in which its session is born (the application's around
/// `create_session`) holds shared work after the birth: the map's insert and
/// its table's growth. The session's other spans (its worker's, its service
/// loop's) hold its own work only, whatever the category.
#[test]
fn in_process_a_birth_span_keeps_only_session_memory_after_the_birth() {
    let mut t = SessionTracker::default();
    t.requests_end_at_facts();
    t.scope(1, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
    t.name(1, 1, String::new());
    assert_eq!(t.alloc(1, 0x100, 8, Category::SessionMap, false), Some(0));
    assert_eq!(
        t.alloc(1, 0x180, 8, Category::Other, false),
        Some(0),
        "before the birth: its id"
    );
    let (session, _, _) = t.created(2, 1, "a".into());
    assert_eq!(
        t.alloc(1, 0x200, 8, Category::Other, false),
        None,
        "the map's table grows inside the application's span: shared"
    );
    assert_eq!(t.alloc(1, 0x280, 8, Category::SessionMap, false), Some(0));
    // The span learns its id: the same session, still its birth span.
    t.name(3, 1, "a".into());
    assert_eq!(t.resolve(0), session);
    assert_eq!(t.alloc(1, 0x300, 8, Category::Other, false), None);
    t.scope(4, 1, ScopeKind::SessionSpan, Phase::Exit, 10);
    // Its service loop's span, on another thread: everything is the session's.
    t.scope(5, 2, ScopeKind::SessionSpan, Phase::Enter, 20);
    t.name(5, 2, "a".into());
    assert_eq!(
        t.alloc(2, 0x400, 8, Category::Other, false)
            .map(|s| t.resolve(s)),
        Some(session)
    );
    t.scope(6, 2, ScopeKind::SessionSpan, Phase::Exit, 20);
    // The birth span's key reused by a new span of another session: no birth in it.
    t.scope(7, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
    t.name(7, 1, "b".into());
    assert!(t.alloc(1, 0x500, 8, Category::Other, false).is_some());
}

#[test]
fn an_anonymous_span_that_learns_a_known_id_is_merged() {
    let mut t = SessionTracker::default();
    // The worker's span names session "a" first.
    t.scope(1, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
    t.name(1, 1, "a".into());
    t.scope(2, 1, ScopeKind::SessionSpan, Phase::Exit, 10);
    // The creating span announced itself anonymously, then learns it is "a".
    t.scope(3, 2, ScopeKind::SessionSpan, Phase::Enter, 20);
    t.name(3, 2, String::new());
    assert_eq!(t.alloc(2, 0x100, 8, Category::WorkerOther, false), Some(1));
    t.name(4, 2, "a".into());
    assert_eq!(t.resolve(1), 0);
    t.scope(5, 2, ScopeKind::SessionSpan, Phase::Exit, 20);
    // The span that was anonymous, polled again on another thread: still
    // bound to the key folded away, it reads as "a".
    t.scope(6, 3, ScopeKind::SessionSpan, Phase::Enter, 20);
    assert_eq!(t.alloc(3, 0x200, 8, Category::WorkerOther, false), Some(0));
    t.scope(7, 3, ScopeKind::SessionSpan, Phase::Exit, 20);
    let (lives, index) = t.finish();
    assert_eq!(lives.len(), 1);
    assert_eq!(index, vec![0, 0]);
    assert_eq!(lives[0].born_ns, 1);
}

/// The creating poll's request handler: before the birth its blocks wait for
/// it, after it they are the session's; a poll that made no session adopts
/// nothing, and neither does a poll on another thread.
#[test]
fn the_creating_polls_request_blocks_are_the_sessions() {
    let mut t = SessionTracker::default();
    t.tasks_probed();
    assert!(t.wants_request_stack(true));
    assert!(
        !t.wants_request_stack(false),
        "outside a task poll: no request"
    );
    // A request that makes no session (a tool call): its blocks are forgotten
    // when its poll ends.
    assert_eq!(t.request_alloc(1, 1, 0x100), None);
    t.task_poll_boundary(1);
    // The creating poll: the service instance, then the birth.
    assert_eq!(t.request_alloc(2, 1, 0x200), None);
    assert_eq!(t.request_alloc(3, 2, 0x300), None, "another thread's poll");
    let adopted = t
        .scope(4, 1, ScopeKind::SessionCreate, Phase::Enter, 0)
        .expect("the session adopts its request's blocks");
    assert_eq!(adopted.session, 0);
    assert_eq!(Vec::from(adopted.blocks), vec![(0x200, 2)]);
    t.scope(5, 1, ScopeKind::SessionCreate, Phase::Exit, 0);
    t.scope(6, 1, ScopeKind::WorkerSpawn, Phase::Enter, 0);
    t.scope(7, 1, ScopeKind::WorkerSpawn, Phase::Exit, 0);
    // After the birth, until the poll returns.
    assert_eq!(t.request_alloc(8, 1, 0x400), Some(0));
    t.task_poll_boundary(1);
    assert_eq!(t.request_alloc(9, 1, 0x500), None, "the next poll");
    // Thread 2's poll ends with no birth: nothing of it is adopted later.
    t.task_poll_boundary(2);
    assert!(
        t.scope(10, 2, ScopeKind::SessionCreate, Phase::Enter, 0)
            .is_none()
    );
}

/// In-process: a birth fact adopts the newest request blocks of its thread,
/// whatever task polls say, and a later fact on the thread does not adopt
/// them again.
#[test]
fn in_process_a_birth_fact_adopts_its_threads_request_blocks_and_what_follows() {
    let mut t = SessionTracker::default();
    t.requests_end_at_facts();
    assert!(t.wants_request_stack(false));
    for i in 0..(MAX_REQUEST_BLOCKS as u64 + 2) {
        assert_eq!(t.request_alloc(i, 1, 0x1000 + i * 16), None);
    }
    t.task_poll_boundary(1);
    let (session, _, adopted) = t.created(100, 1, "a".into());
    let adopted = adopted.expect("the request's blocks");
    assert_eq!(adopted.session, session);
    assert_eq!(adopted.blocks.len(), MAX_REQUEST_BLOCKS, "the newest kept");
    assert_eq!(
        adopted.blocks.back(),
        Some(&(
            0x1000 + (MAX_REQUEST_BLOCKS as u64 + 1) * 16,
            MAX_REQUEST_BLOCKS as u64 + 1
        ))
    );
    // After the fact, the request's blocks are the session's (the task it
    // spawns to serve it), until the thread enters a session span.
    assert_eq!(t.request_alloc(101, 1, 0x9000), Some(session));
    t.scope(102, 1, ScopeKind::SessionSpan, Phase::Enter, 10);
    assert_eq!(t.request_alloc(103, 1, 0x9100), None);
    t.scope(104, 1, ScopeKind::SessionSpan, Phase::Exit, 10);
    let (_, _, again) = t.created(105, 1, "b".into());
    assert_eq!(
        again.map(|a| Vec::from(a.blocks)),
        Some(vec![(0x9100, 103)]),
        "only what came after the first birth's request ended"
    );
}
