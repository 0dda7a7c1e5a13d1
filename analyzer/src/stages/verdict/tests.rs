//! Each rule of the verdict (`docs/report.md`, "How the verdict is decided")
//! on cases built by hand, on both sides.

use super::evidence::SessionFigures;
use super::*;
use crate::model::Category;
use crate::model::Rest;
use crate::model::sites::MIN_SETTLED_ALLOCATIONS;
use crate::model::{Retained, SessionStates, SpawnSite};
use leakscope_recording::sampling::Sampling;

#[test]
fn each_release_line_says_when_it_reaps() {
    assert_eq!(
        Reaping::of(Some("1.3.0")),
        Reaping::Never {
            version: "1.3.0".into()
        }
    );
    assert_eq!(
        Reaping::of(Some("1.5.0")),
        Reaping::After {
            version: "1.5.0".into(),
            keep_alive_s: 300,
            init_timeout_s: None
        }
    );
    assert_eq!(
        Reaping::of(Some("3.11.0")),
        Reaping::After {
            version: "3.11.0".into(),
            keep_alive_s: 300,
            init_timeout_s: Some(60)
        }
    );
    assert_eq!(Reaping::of(None), Reaping::Unknown);
}

fn candidate(bytes: u64, rate: f64) -> Site {
    Site {
        stack: None,
        frames: vec![],
        category: Category::Other,
        decided_by: None,
        retained_bytes: bytes,
        blocks: 56,
        samples: 56,
        session_bytes: 0,
        growth_bytes_per_s: rate,
        linearity: 1.0,
        first_alloc_ns: 0,
        last_alloc_ns: 0,
        activity_span: 1.0,
    }
}

/// A site holding `bytes` that does not grow: no leak candidate.
fn steady(bytes: u64) -> Site {
    Site {
        linearity: 0.0,
        activity_span: 0.1,
        ..candidate(bytes, 0.0)
    }
}

/// The Apollo case: 8.1 KiB at 12 B/s (1 MiB a day) is no leak to claim;
/// the cache server's 49 KiB at 10 KiB/s is; and a fast rate seen for a
/// moment (a few KiB) or a large but slow one is not yet.
#[test]
fn a_leak_claim_needs_a_rate_that_matters() {
    assert!(candidate(8_300, 12.0).is_leak_candidate());
    assert!(!matters(&candidate(8_300, 12.0)));
    assert!(matters(&candidate(49 * 1024, 10_240.0)));
    assert!(!matters(&candidate(4 * 1024, 100_000.0)), "too little seen");
    assert!(!matters(&candidate(10 << 20, 100.0)), "8 MiB a day");
}

/// A recording that saw allocations and frees, no sessions, nothing else.
fn recorded<'a>() -> Evidence<'a> {
    Evidence {
        allocs: 1000,
        frees: 1000,
        duration_s: 60.0,
        ..Evidence::default()
    }
}

#[test]
fn rule_1_nothing_recorded_is_undecided_and_names_the_probed_layer() {
    let nothing = Evidence {
        alloc_layer_reason: "jemalloc's mallocx",
        ..Evidence::default()
    };
    let (kind, text) = decide(&nothing);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("jemalloc's mallocx"), "{text}");
    assert_ne!(decide(&recorded()).0, VerdictKind::Undecided);
}

#[test]
fn rule_3_every_byte_freed_is_no_leak() {
    let (kind, text) = decide(&recorded());
    assert_eq!(kind, VerdictKind::NoLeak);
    assert!(text.contains("every byte"), "{text}");
}

#[test]
fn rule_3_a_growing_site_is_a_leak_and_a_steady_one_is_not() {
    let sites = [candidate(1 << 20, 10_240.0)];
    let leak = Evidence {
        sites: &sites,
        ..recorded()
    };
    let (kind, text) = decide(&leak);
    assert_eq!(kind, VerdictKind::Leak);
    assert!(text.starts_with("Top leak candidate"), "{text}");
    // The same bytes, not growing, with a bounded rest: no leak.
    let sites = [steady(1 << 20)];
    let bounded = Evidence {
        sites: &sites,
        rest: Rest {
            allocations: MIN_SETTLED_ALLOCATIONS * 10,
            early_bytes: 1 << 20,
            live_at_half: 1 << 20,
            survivors: 56,
            ..Rest::default()
        },
        ..recorded()
    };
    let (kind, text) = decide(&bounded);
    assert_eq!(kind, VerdictKind::NoLeak, "{text}");
    assert!(text.contains("bounded"), "{text}");
}

#[test]
fn rule_3_growth_too_small_to_matter_is_said_never_called_a_leak() {
    let sites = [candidate(8_300, 12.0)];
    let (kind, text) = decide(&Evidence {
        sites: &sites,
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("too little to call a leak"), "{text}");
}

#[test]
fn rule_3_only_blocks_in_flight_at_the_end_is_no_leak() {
    let sites = [steady(4096)];
    let (kind, text) = decide(&Evidence {
        sites: &sites,
        rest: Rest {
            allocations: MIN_SETTLED_ALLOCATIONS,
            in_flight_bytes: 4096,
            ..Rest::default()
        },
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::NoLeak, "{text}");
    assert!(text.contains("in flight"), "{text}");
}

#[test]
fn rule_3_a_rest_that_cannot_be_judged_is_undecided_with_the_reason() {
    let sites = [steady(1 << 20)];
    let settled = Rest {
        allocations: MIN_SETTLED_ALLOCATIONS * 10,
        early_bytes: 1 << 20,
        live_at_half: 1 << 20,
        survivors: 56,
        ..Rest::default()
    };
    let case = |rest: Rest, sampling: Sampling| {
        decide(&Evidence {
            sites: &sites,
            rest,
            sampling,
            ..recorded()
        })
    };
    let few = Rest {
        allocations: MIN_SETTLED_ALLOCATIONS - 1,
        ..settled
    };
    let (kind, text) = case(few, Sampling::Every);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("allocations are too few"), "{text}");
    // One sample standing for many, its stack keeping all it made.
    let sampled = Sampling::Bytes { mean: 512 * 1024 };
    let one = Rest {
        survivors: 1,
        sampled: true,
        surviving_blocks: 500,
        allocated_at_survivors: 500,
        ..settled
    };
    let (kind, text) = case(one, sampled);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("1 sample is too few"), "{text}");
    // ...and its stack freeing nearly all it made: bounded.
    let freed = Rest {
        allocated_at_survivors: 50_000,
        ..one
    };
    assert_eq!(case(freed, sampled).0, VerdictKind::NoLeak);
    // Past what was live half-way: still growing.
    let grew = Rest {
        early_bytes: 3 << 20,
        ..settled
    };
    let (kind, text) = case(grew, Sampling::Every);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("grew past"), "{text}");
    assert_eq!(case(settled, Sampling::Every).0, VerdictKind::NoLeak);
}

fn parked_tasks() -> SpawnSite {
    SpawnSite {
        site: "subscribe".into(),
        known: true,
        count: 200,
        ended: 0,
        alive: 200,
        parked: 200,
        in_sessions: 0,
        alive_bytes: Retained::default(),
        leak: true,
    }
}

#[test]
fn rule_4_parked_tasks_are_a_leak_before_a_site_s_growth() {
    let sites = [candidate(1 << 20, 10_240.0)];
    let tasks = parked_tasks();
    let (kind, text) = decide(&Evidence {
        sites: &sites,
        parked: Some(&tasks),
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::Leak);
    assert!(
        text.starts_with("200 tasks spawned from `subscribe`"),
        "{text}"
    );
    // With sessions all closed, the tasks still are.
    let (kind, text) = decide(&Evidence {
        parked: Some(&tasks),
        sessions: sessions(SessionStates {
            closed: 5,
            ..SessionStates::default()
        }),
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::Leak);
    assert!(text.contains("but outside sessions, 200 tasks"), "{text}");
}

fn sessions(states: SessionStates) -> SessionFigures {
    SessionFigures {
        count: states.closed + states.leaked + states.live + states.unknown,
        states,
        top_category: "session-map",
        top_category_share: 0.6,
        ..SessionFigures::default()
    }
}

#[test]
fn rule_2_a_leaked_session_is_a_leak_and_closed_ones_are_not() {
    let leaked = Evidence {
        sessions: sessions(SessionStates {
            leaked: 3,
            closed: 2,
            ..SessionStates::default()
        }),
        ..recorded()
    };
    let (kind, text) = decide(&leaked);
    assert_eq!(kind, VerdictKind::Leak);
    assert!(
        text.starts_with("3 of 5 sessions are still in the map"),
        "{text}"
    );
    assert!(text.contains("60% of it"), "{text}");
    let closed = Evidence {
        sessions: sessions(SessionStates {
            closed: 5,
            ..SessionStates::default()
        }),
        ..recorded()
    };
    let (kind, text) = decide(&closed);
    assert_eq!(kind, VerdictKind::NoLeak);
    assert!(text.starts_with("5 of 5 sessions left the map"), "{text}");
}

#[test]
fn rule_2_closed_sessions_and_a_site_growing_outside_them() {
    let growing = [candidate(1 << 20, 10_240.0)];
    let small = [candidate(8_300, 12.0)];
    let all_closed = sessions(SessionStates {
        closed: 5,
        ..SessionStates::default()
    });
    let with = |sites| {
        decide(&Evidence {
            sites,
            sessions: all_closed,
            ..recorded()
        })
    };
    let (kind, text) = with(&growing);
    assert_eq!(kind, VerdictKind::Leak);
    assert!(text.contains("outside sessions (see findings)"), "{text}");
    let (kind, text) = with(&small);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("too little to call a leak"), "{text}");
}

#[test]
fn rule_2_an_undecidable_session_makes_the_verdict_undecided() {
    let signals = vec!["worker-drop: no worker ends".to_owned()];
    let (kind, text) = decide(&Evidence {
        sessions: sessions(SessionStates {
            unknown: 1,
            closed: 4,
            ..SessionStates::default()
        }),
        missing_signals: &signals,
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("missing signals: worker-drop"), "{text}");
    // Sampled in-process: said why; a growing site is said, but decides
    // nothing (live sessions awaiting their keep-alive grow sites too).
    let unknown = sessions(SessionStates {
        unknown: 300,
        ..SessionStates::default()
    });
    let sampled = |sites| {
        decide(&Evidence {
            sessions: unknown,
            births_sampled: true,
            sites,
            ..recorded()
        })
    };
    let (kind, text) = sampled(&[]);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("sampled in-process recording"), "{text}");
    let growing = [candidate(1 << 20, 10_240.0)];
    let (kind, text) = sampled(&growing);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("meanwhile `"), "{text}");
    // A leaked one still decides.
    let (kind, _) = decide(&Evidence {
        sessions: sessions(SessionStates {
            unknown: 1,
            leaked: 1,
            ..SessionStates::default()
        }),
        ..recorded()
    });
    assert_eq!(kind, VerdictKind::Leak);
}

/// Sessions live at the end are never "no leak": the release says whether
/// they will be reaped.
#[test]
fn rule_2_live_sessions_are_a_leak_only_when_the_release_never_reaps_them() {
    let live = |version: Option<&'static str>, worker_ended: u64, uninitialized: u64| {
        decide(&Evidence {
            sessions: SessionFigures {
                worker_ended,
                uninitialized,
                ..sessions(SessionStates {
                    live: 3,
                    ..SessionStates::default()
                })
            },
            rmcp_version: version,
            ..recorded()
        })
    };
    let (kind, text) = live(Some("1.3.0"), 0, 0);
    assert_eq!(kind, VerdictKind::Leak);
    assert!(text.contains("never reaped"), "{text}");
    let (kind, text) = live(Some("1.3.0"), 2, 0);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("may set one"), "{text}");
    let (kind, text) = live(Some("1.5.0"), 0, 2);
    assert_eq!(kind, VerdictKind::Leak);
    assert!(text.contains("no init timeout"), "{text}");
    let (kind, text) = live(Some("1.5.0"), 0, 0);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("reaps a session idle for 300 s"), "{text}");
    // 1.6 on has an init timeout: an uninitialized session is reaped too.
    assert_eq!(live(Some("3.11.0"), 0, 2).0, VerdictKind::Undecided);
    let (kind, text) = live(None, 0, 0);
    assert_eq!(kind, VerdictKind::Undecided);
    assert!(text.contains("release is not known"), "{text}");
}

#[test]
fn lost_events_are_said_with_every_verdict() {
    let lossy = Evidence {
        lost: 7,
        ..recorded()
    };
    assert!(decide(&lossy).1.contains("7 events were lost"));
    assert!(!decide(&recorded()).1.contains("lost"));
}
