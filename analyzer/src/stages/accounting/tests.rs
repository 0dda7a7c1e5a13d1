use super::*;
use leakscope_recording::{Phase, ScopeKind};

fn block(size: u64, session: Option<SessionKey>) -> Block {
    Block {
        ts: 0,
        seq: 0,
        size,
        extent: size,
        weight: 1.0,
        category: Category::Other,
        stack: None,
        session,
        task: None,
    }
}

/// Timestamps out of order and a huge one: no underflow, no unbounded sampling.
#[test]
fn crafted_timestamps_keep_the_samples_bounded() {
    let mut books = Accounting::new(1, SAMPLE_INTERVAL_NS);
    books.tick(5_000_000_000);
    books.tick(1_000);
    books.alloc(0x10, block(8, None));
    books.tick(u64::MAX - 1);
    books.tick(u64::MAX);
    let totals = books.finish(u64::MAX, &SessionTracker::default());
    assert!(totals.samples.len() < 10, "{}", totals.samples.len());
}

#[test]
fn frees_after_the_workers_end_are_transient_within_grace_and_the_rest_retained() {
    let s = 1_000_000_000;
    let mut sessions = SessionTracker::default();
    sessions.scope(0, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    let key = sessions.alloc(1, 0x1000, 100, Category::Other, false);
    let mut books = Accounting::new(s, s);
    books.tick(0);
    books.alloc(0x1000, block(100, key));
    books.alloc(0x2000, block(40, key));
    books.alloc(0x3000, block(7, None));
    sessions.scope(2 * s, 1, ScopeKind::WorkerDrop, Phase::Enter, 0x1000);
    books.tick(2 * s);
    books.free(2 * s + 1, 0x2000, &sessions);
    let totals = books.finish(10 * s, &sessions);
    let bytes = totals.sessions[0];
    assert_eq!(bytes.allocated, 140);
    assert_eq!(bytes.transient, 40);
    assert_eq!(bytes.retained, 100);
    assert_eq!(totals.categories[Category::Other].live_at_end, 107);
    assert_eq!(totals.samples.len(), 11, "one per second from 0 to 10 s");
    assert_eq!(totals.samples[1].live[Category::Other], 147);
}
