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
        from_request: false,
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

/// A session's live bytes by part add up to its live bytes: each block
/// counts once, in the part of how it came to be the session's.
#[test]
fn a_sessions_live_bytes_add_up_by_part() {
    use crate::model::Part;
    let mut sessions = SessionTracker::default();
    sessions.scope(0, 1, ScopeKind::SessionCreate, Phase::Enter, 0);
    let key = sessions.alloc(1, 0x1000, 100, Category::SessionMap, false);
    let mut books = Accounting::new(1, SAMPLE_INTERVAL_NS);
    let of = |size, category| Block {
        category,
        ..block(size, key)
    };
    books.alloc(0x1000, of(100, Category::SessionMap));
    books.alloc(0x2000, of(40, Category::WorkerChannel));
    books.alloc(0x3000, of(8, Category::WorkerOther));
    books.alloc(
        0x4000,
        Block {
            task: Some(0),
            ..of(16, Category::Other)
        },
    );
    // The creating request's: one adopted after the fact (its poll is a
    // task's, the HTTP handler's), one after the birth.
    books.alloc(
        0x5000,
        Block {
            task: Some(1),
            ..block(32, None)
        },
    );
    books.adopt_request_block(0x5000, key.unwrap());
    books.alloc(
        0x6000,
        Block {
            from_request: true,
            ..of(64, Category::Other)
        },
    );
    books.alloc(0x7000, of(1000, Category::Other));
    books.free(2, 0x7000, &sessions);
    let bytes = books.finish(10, &sessions).sessions[0];
    assert_eq!(bytes.parts[Part::MapEntry], 100);
    assert_eq!(bytes.parts[Part::Channels], 40);
    assert_eq!(bytes.parts[Part::Scopes], 8);
    assert_eq!(bytes.parts[Part::Tasks], 16);
    assert_eq!(bytes.parts[Part::Request], 96);
    assert_eq!(bytes.parts.total(), bytes.live_at_end);
}
