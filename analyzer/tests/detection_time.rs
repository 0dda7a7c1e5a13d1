//! How long a sampled recording takes to name a leak, against the rule
//! docs/report.md states: a leak candidate needs 10 samples, so at a mean
//! spacing `T` a site leaking `L` bytes/s is named after about `10 T / L`
//! (51 s at 100 KiB/s, 8.5 min at 10 KiB/s, at 512 KiB).
//!
//! Ground truth made here, no probe: a program allocating a known stream,
//! 1 KiB blocks kept at `L` bytes/s beside 1 MiB/s of 256-byte blocks freed
//! 50 ms later, sampled as the probe and the in-process allocator sample
//! (`leakscope_recording::sampling::Countdown`). The recording cut at half the
//! predicted time names no leak, and says no "no leak" either (too few
//! samples to tell); cut at twice that, it names the leaking site, its bytes
//! estimated within three standard errors (the ± it prints) of what it kept.
//! Its fix (each block kept for a while only) reads as no leak once the
//! bounded rest holds enough samples to say so. Both sides of the verdict,
//! both rates of the docs.

use leakscope_analyzer::{Builder, Rules, VerdictKind, summarize};
use leakscope_recording::sampling::{Countdown, Sampling};
use leakscope_recording::{
    AllocLayer, ClockOrigin, EndReason, FramePointers, Header, Producer, Record, Settings, Tail,
};

const T: u64 = 512 * 1024;
const MS: u64 = 1_000_000;
const LEAK_BLOCK: u64 = 1024;
const NOISE_BLOCK: u64 = 256;
/// Noise blocks per 10 ms tick: 1 MiB/s.
const NOISE_PER_TICK: u64 = 40;

fn header() -> Header {
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
            stack_depth: 2,
            preset: None,
            scope_probes: vec![],
            missing_scopes: vec![],
            scope_functions: vec![],
            notes: vec![],
        },
        frame_pointers: FramePointers::Unknown,
        sampling: Sampling::every_bytes(T),
        segment: None,
        stack_walk: Default::default(),
    }
}

/// The sampled records of `seconds` of the program leaking `leak` bytes/s
/// (its fix: keeping each block `ttl` seconds only), and the bytes it really
/// kept by each 10 ms tick.
fn sampled_program(leak: u64, seconds: u64, ttl: Option<u64>) -> (Vec<Record>, Vec<u64>) {
    let mut records = vec![
        Record::Stack {
            id: 0,
            frames: vec![0x1000, 0x2000],
        },
        Record::Stack {
            id: 1,
            frames: vec![0x3000, 0x4000],
        },
    ];
    let mut countdown = Countdown::new(T, 7);
    let mut kept = Vec::new();
    let mut owed = 0u64;
    let mut total = 0u64;
    let mut addr = 0x10_0000u64;
    let mut frees: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut expiring: std::collections::VecDeque<(u64, u64)> = Default::default();
    for tick in 0..seconds * 100 {
        let ts = (tick + 1) * 10 * MS;
        while frees.front().is_some_and(|(at, _)| *at <= ts) {
            let (at, block) = frees.pop_front().unwrap();
            records.push(Record::Free {
                ts: at,
                tid: 1,
                addr: block,
            });
        }
        owed += leak / 100;
        while owed >= LEAK_BLOCK {
            owed -= LEAK_BLOCK;
            total += LEAK_BLOCK;
            addr += 4096;
            if countdown.sample(LEAK_BLOCK) {
                records.push(Record::Alloc {
                    ts,
                    tid: 1,
                    addr,
                    size: LEAK_BLOCK,
                    stack: Some(0),
                });
                if let Some(ttl) = ttl {
                    expiring.push_back((ts + ttl * 1000 * MS, addr));
                }
            }
        }
        while expiring.front().is_some_and(|(at, _)| *at <= ts) {
            let (at, block) = expiring.pop_front().unwrap();
            records.push(Record::Free {
                ts: at,
                tid: 1,
                addr: block,
            });
        }
        for _ in 0..NOISE_PER_TICK {
            addr += 4096;
            if countdown.sample(NOISE_BLOCK) {
                records.push(Record::Alloc {
                    ts,
                    tid: 1,
                    addr,
                    size: NOISE_BLOCK,
                    stack: Some(1),
                });
                frees.push_back((ts + 50 * MS, addr));
            }
        }
        kept.push(total);
    }
    (records, kept)
}

/// The verdict on the first `seconds` of `records`, and the top finding's
/// estimated bytes and samples.
fn verdict_after(records: &[Record], seconds: u64) -> (VerdictKind, String, u64, u64, f64) {
    let cut = seconds * 1000 * MS;
    let mut builder =
        Builder::new(Rules::builtin(), 1_000_000_000, 100 * MS).sampling(Sampling::every_bytes(T));
    for record in records
        .iter()
        .take_while(|r| r.ts().is_none_or(|t| t <= cut))
    {
        builder.push(record.clone());
    }
    builder.push(Record::End {
        ts: cut,
        reason: EndReason::Interrupted,
    });
    let summary = summarize(&builder.finish(header(), Tail::Clean));
    let top = summary.findings.first();
    (
        summary.verdict_kind,
        summary.verdict.clone(),
        top.map_or(0, |f| f.live_bytes),
        top.map_or(0, |f| f.samples),
        top.map_or(0.0, |f| f.relative_error),
    )
}

#[test]
fn a_sampled_leak_is_named_after_about_ten_samples() {
    for leak in [100 * 1024, 10 * 1024] {
        let predicted = 10 * T / leak;
        let (records, kept) = sampled_program(leak, 2 * predicted, None);

        let (early, said, _, samples, _) = verdict_after(&records, predicted / 2);
        eprintln!(
            "{leak} B/s at {} s: {said} ({samples} samples)",
            predicted / 2
        );
        assert_eq!(
            early,
            VerdictKind::Undecided,
            "{leak} B/s, half the time: {said}"
        );

        let (late, said, estimate, samples, error) = verdict_after(&records, 2 * predicted);
        eprintln!(
            "{leak} B/s at {} s: {said} ({samples} samples)",
            2 * predicted
        );
        assert_eq!(
            late,
            VerdictKind::Leak,
            "{leak} B/s, twice the time: {said}"
        );
        let truth = kept[(2 * predicted * 100) as usize - 1];
        // Within three of its own standard errors (the ± the report prints).
        assert!(
            estimate.abs_diff(truth) as f64 <= 3.0 * error * truth as f64,
            "{leak} B/s: estimated {estimate} B ±{:.0}% from {samples} samples, kept {truth} B",
            error * 100.0
        );

        // The fix keeps each block twice the predicted time (~20 samples
        // alive once full): past that, bounded; no leak.
        let ttl = 2 * predicted;
        let (records, _) = sampled_program(leak, 3 * ttl, Some(ttl));
        let (fixed, said, _, _, _) = verdict_after(&records, 3 * ttl);
        eprintln!("{leak} B/s fixed at {} s: {said}", 3 * ttl);
        assert_eq!(fixed, VerdictKind::NoLeak, "{leak} B/s fixed: {said}");
    }
}
