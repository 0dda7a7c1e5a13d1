use super::*;

#[test]
fn figures_link_once_and_never_inside_a_link() {
    let figures = vec![
        ("50 of 50 sessions".to_owned(), "#per-session"),
        ("12.3 KiB (p50)".to_owned(), "#per-session"),
        ("50".to_owned(), "#elsewhere"),
    ];
    let linked = link_figures(
        "50 of 50 sessions leaked; each retains 12.3 KiB (p50), 50 more",
        &figures,
    );
    assert_eq!(
        linked,
        "[50 of 50 sessions](#per-session) leaked; each retains [12.3 KiB (p50)](#per-session), [50](#elsewhere) more"
    );
}

/// What a session holds is shown by part, and the parts add up to the total
/// shown (each part's mean rounded, the total their sum), in the report and
/// in `summary.json`.
#[test]
fn a_sessions_parts_add_up_to_the_total_shown() {
    use crate::model::{PerPart, SessionState};
    let mut timeline = sessions_born(3, crate::stages::timeline::tests::header());
    let parts = [
        [100, 40, 0, 16, 8],
        [100, 40, 96, 16, 8],
        [100, 40, 0, 16, 9],
    ];
    for (session, parts) in timeline.sessions.iter_mut().zip(parts) {
        session.state = SessionState::Live;
        session.parts = PerPart(parts);
        session.live_at_end = session.parts.total();
    }
    let summary = crate::outputs::summary::summarize(&timeline);
    let live = &summary.sessions.parts.live;
    assert_eq!(
        (live.sessions, live.request_bytes, live.scopes_bytes),
        (3, 32, 8)
    );
    assert_eq!(live.total_bytes, 100 + 40 + 32 + 16 + 8);
    assert_eq!(summary.sessions.parts.leaked.sessions, 0);
    let mut md = String::new();
    sessions::sessions_sections(&mut md, &summary, &timeline);
    assert!(
        md.contains("| part | live (3 sessions) | meaning |"),
        "{md}"
    );
    assert!(md.contains("| creating request | 32 B |"), "{md}");
    assert!(md.contains("| **total** | **196 B** |"), "{md}");
    assert!(
        !md.contains("leaked ("),
        "no column for a state no session is in"
    );
}

/// Sampled, a leaked session's own figure is its blocks recorded whole and
/// the few samples that fell in it (most sessions: none), so its p50 says
/// far less than it keeps: the report gives the mean over sessions, the
/// estimate the verdict gives, and keeps p50 and p90 for a recording of
/// every call.
#[test]
fn a_sampled_recording_gives_a_sessions_mean_not_its_p50() {
    use crate::model::SessionState;
    use leakscope_recording::sampling::Sampling;
    let report = |sampling: Sampling| {
        let mut header = crate::stages::timeline::tests::header();
        header.sampling = sampling;
        let mut timeline = sessions_born(10, header);
        // Nine hold their 512-byte entry alone; one was sampled too.
        for (i, session) in timeline.sessions.iter_mut().enumerate() {
            session.state = SessionState::Leaked;
            session.worker_end_ns = Some(50);
            session.retained = if i == 0 { 512 + 115_200 } else { 512 };
        }
        let summary = crate::outputs::summary::summarize(&timeline);
        let mut md = super::evidence_line(&summary, &timeline);
        sessions::sessions_sections(&mut md, &summary, &timeline);
        md
    };
    let sampled = report(Sampling::Bytes { mean: 512 << 10 });
    assert!(
        sampled.contains("a leaked session retains ~11.8 KiB on average"),
        "{sampled}"
    );
    assert!(
        sampled.contains(
            "| retained by a leaked session (still live, worker gone) | 10 | ~11.8 KiB |"
        ),
        "{sampled}"
    );
    assert!(
        !sampled.contains("512 B"),
        "no session's own p50: {sampled}"
    );
    let every = report(Sampling::Every);
    assert!(
        every.contains("a leaked session retains 512 B (p50), 117.5 KiB in all"),
        "{every}"
    );
    assert!(
        every.contains("| per session | p50 | p90 | max |"),
        "{every}"
    );
}

/// A timeline of `count` sessions, each born on a thread of its own (a
/// session-create scope entered and left), 10 ns apart.
fn sessions_born(count: u32, header: leakscope_recording::Header) -> crate::model::Timeline {
    use leakscope_recording::{EndReason, Phase, Record, ScopeKind, Tail};
    let mut builder = crate::stages::timeline::Builder::new(
        crate::stages::attribute::Rules::builtin(),
        1,
        1_000_000_000,
    );
    for tid in 1..=count {
        for phase in [Phase::Enter, Phase::Exit] {
            builder.push(Record::Scope {
                ts: 10 * u64::from(tid),
                tid,
                kind: ScopeKind::SessionCreate,
                phase,
                arg: 0,
            });
        }
    }
    builder.push(Record::End {
        ts: 10 * u64::from(count) + 100,
        reason: EndReason::Finished,
    });
    let timeline = builder.finish(header, Tail::Clean);
    assert_eq!(timeline.sessions.len(), count as usize);
    timeline
}
