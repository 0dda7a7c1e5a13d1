//! Structure-aware: the fuzzer's bytes become a recording built record by
//! record through `RecordingWriter` (so every frame is valid, and the
//! analyzer sees plausible but hostile event streams, not mostly rejected
//! bytes), including `Mapping` records that name files to symbolize with: this
//! binary itself, a file that is not there, a device, a directory. The whole
//! pipeline runs on it, then every output `leakscope report` writes (summary,
//! report, trace, flame graph, charts as SVG and PNG, pprof) and a diff of the
//! recording against itself, all in memory. Never a panic, never unbounded work.
#![no_main]

use std::path::Path;

use leakscope_analyzer::{Builder, InMemory, Rules, summarize};
use leakscope_recording::{
    AllocLayer, EndReason, FramePointers, Header, Identity, LostReason, Mapping, Phase, Producer,
    Record, RecordingReader, RecordingWriter, ScopeFunction, ScopeKind, SessionFact, Settings,
    TaskEvent,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

/// Where the fuzzed executable's code is said to be mapped.
const BASE: u64 = 0x5555_0000_0000;

#[derive(Arbitrary, Debug)]
struct Input {
    in_process: bool,
    layer: u8,
    frame_pointers: u8,
    /// Sampled every this many bytes (0 and 1: every call).
    sample_mean: u16,
    /// Scope functions, each (kind, offset into the mapping, size, returns).
    scope_functions: Vec<(u8, u16, u16, bool)>,
    records: Vec<Op>,
    end: Option<u8>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// `whole`: a `WholeAlloc` (a block a sampled recording records whole).
    Alloc { dt: u16, tid: u8, addr: u16, size: u32, stack: Option<u8>, whole: bool },
    Free { dt: u16, tid: u8, addr: u16 },
    Realloc { dt: u16, tid: u8, old: u16, new: u16, size: u32, stack: Option<u8>, entered: u16 },
    Scope { dt: u16, tid: u8, kind: u8, exit: bool, arg: u16 },
    Session { dt: u16, tid: u8, fact: u8, id: u8 },
    Stack { id: u8, frames: Vec<u16> },
    Mapping { file: u8, start: u16, pages: u8, offset: u16 },
    Lost { dt: u16, reason: u8, count: u16 },
    TraceOrigin { dt: u16 },
    Task { dt: u16, tid: u8, id: u8, ended: bool, stack: Option<u8> },
    /// A `WholeAllocInPoll`: a whole block standing for the span poll around it.
    WholeInPoll { dt: u16, tid: u8, addr: u16, size: u32, stack: Option<u8>, span: u16 },
}

/// What a recording may name for symbols: only paths that are safe to open
/// on any machine the fuzzer runs on (never a FIFO someone could leave).
fn file(which: u8) -> String {
    match which % 5 {
        0 => std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        1 => "/nonexistent/leakscope-fuzz".into(),
        2 => "/dev/zero".into(),
        3 => "/".into(),
        _ => "/proc/self/exe".into(),
    }
}

fn build(input: &Input) -> Vec<u8> {
    let exe = file(0);
    let settings = Settings {
        alloc_layer: [
            AllocLayer::Libc,
            AllocLayer::RustShims,
            AllocLayer::GlobalAllocator,
            AllocLayer::RustShimsAndLibc,
            AllocLayer::AllocatorApiAndLibc,
        ][usize::from(input.layer) % 5],
        alloc_layer_reason: "fuzz".into(),
        stack_depth: 64,
        preset: Some("rmcp".into()),
        scope_probes: vec![],
        missing_scopes: vec![],
        scope_functions: input
            .scope_functions
            .iter()
            .take(16)
            .map(|&(kind, offset, size, returns)| ScopeFunction {
                kind: ScopeKind::ALL[usize::from(kind) % ScopeKind::ALL.len()],
                path: exe.clone(),
                file_offset: u64::from(offset),
                size: u64::from(size),
                returns,
            })
            .collect(),
        notes: vec![],
    };
    let producer = if input.in_process {
        Producer::InProcess
    } else {
        Producer::Ebpf
    };
    let identity = Identity {
        pid: 4242,
        exe: exe.clone(),
        build_id: None,
        rmcp_version: Some("3.11.0".into()),
    };
    let mut header = Header::new(producer, "fuzz".into(), identity, settings);
    header.frame_pointers = [
        FramePointers::Unknown,
        FramePointers::Kept,
        FramePointers::Omitted,
    ][usize::from(input.frame_pointers) % 3];
    header.sampling =
        leakscope_recording::sampling::Sampling::every_bytes(u64::from(input.sample_mean));
    let mut writer = RecordingWriter::new(Vec::new(), &header).expect("in memory");
    let mut ts = header.clock.monotonic_ns;
    let mut at = |dt: u16| {
        ts = ts.saturating_add(u64::from(dt) * 1_000);
        ts
    };
    let addr = |a: u16| 0x1000_0000 + u64::from(a) * 16;
    let stack = |s: Option<u8>| s.map(u32::from);
    for op in input.records.iter().take(4096) {
        let record = match op {
            Op::Alloc { dt, tid, addr: a, size, stack: s, whole: false } => Record::Alloc {
                ts: at(*dt),
                tid: u32::from(*tid),
                addr: addr(*a),
                size: u64::from(*size),
                stack: stack(*s),
            },
            Op::Alloc { dt, tid, addr: a, size, stack: s, whole: true } => Record::WholeAlloc {
                ts: at(*dt),
                tid: u32::from(*tid),
                addr: addr(*a),
                size: u64::from(*size),
                stack: stack(*s),
            },
            Op::WholeInPoll { dt, tid, addr: a, size, stack: s, span } => Record::WholeAllocInPoll {
                ts: at(*dt),
                tid: u32::from(*tid),
                addr: addr(*a),
                size: u64::from(*size),
                stack: stack(*s),
                span: u64::from(*span),
            },
            Op::Free { dt, tid, addr: a } => Record::Free {
                ts: at(*dt),
                tid: u32::from(*tid),
                addr: addr(*a),
            },
            Op::Realloc { dt, tid, old, new, size, stack: s, entered } => {
                let ts = at(*dt);
                Record::Realloc {
                    ts,
                    tid: u32::from(*tid),
                    old: if *old == 0 { 0 } else { addr(*old) },
                    new: if *new == 0 { 0 } else { addr(*new) },
                    size: u64::from(*size),
                    stack: stack(*s),
                    entry_ts: ts.saturating_sub(u64::from(*entered)),
                }
            }
            Op::Scope { dt, tid, kind, exit, arg } => Record::Scope {
                ts: at(*dt),
                tid: u32::from(*tid),
                kind: ScopeKind::ALL[usize::from(*kind) % ScopeKind::ALL.len()],
                phase: if *exit { Phase::Exit } else { Phase::Enter },
                arg: addr(*arg),
            },
            Op::Session { dt, tid, fact, id } => {
                let id = format!("session-{id}");
                Record::Session {
                    ts: at(*dt),
                    tid: u32::from(*tid),
                    fact: match fact % 3 {
                        0 => SessionFact::Id(id),
                        1 => SessionFact::Created(id),
                        _ => SessionFact::WorkerQuit("idle-timeout".into()),
                    },
                }
            }
            Op::Stack { id, frames } => Record::Stack {
                id: u32::from(*id),
                frames: frames
                    .iter()
                    .take(128)
                    .map(|f| BASE + u64::from(*f) * 8)
                    .collect(),
            },
            Op::Mapping { file: which, start, pages, offset } => {
                let start = BASE + u64::from(*start) * 4096;
                Record::Mapping(Mapping {
                    start,
                    end: start + (u64::from(*pages) + 1) * 4096,
                    file_offset: u64::from(*offset) * 4096,
                    path: file(*which),
                    build_id: None,
                })
            }
            Op::Lost { dt, reason, count } => Record::Lost {
                ts: at(*dt),
                reason: [
                    LostReason::RingFull,
                    LostReason::PendingFull,
                    LostReason::Stack,
                    LostReason::BufferFull,
                    LostReason::Malformed,
                    LostReason::SampledFull,
                ][usize::from(*reason) % 6],
                count: u64::from(*count),
            },
            Op::TraceOrigin { dt } => Record::TraceOrigin { ts: at(*dt) },
            Op::Task { dt, tid, id, ended, stack: s } => Record::Task {
                ts: at(*dt),
                tid: u32::from(*tid),
                id: u64::from(*id),
                event: if *ended {
                    TaskEvent::Ended
                } else {
                    TaskEvent::Spawned
                },
                stack: stack(*s),
            },
        };
        writer.push(record).expect("in memory");
    }
    let end = Record::End {
        ts: at(1),
        reason: [
            EndReason::Interrupted,
            EndReason::Duration,
            EndReason::TargetExited,
            EndReason::Finished,
            EndReason::TargetExeced,
        ][usize::from(input.end.unwrap_or(0)) % 5],
    };
    let mut bytes = writer.finish(end).expect("in memory");
    if input.end.is_none() {
        // Killed mid-write: the last frame is cut.
        bytes.truncate(bytes.len().saturating_sub(3));
    }
    bytes
}

fuzz_target!(|input: Input| {
    let bytes = build(&input);
    let mut reader = RecordingReader::new(&bytes[..], Path::new("fuzz.lsrec")).expect("valid");
    let header = reader.header().clone();
    let mut builder = Builder::new(Rules::builtin(), 1_000_000_000, 100_000_000)
        .scope_functions(&header.settings.scope_functions);
    for record in reader.by_ref() {
        builder.push(record);
    }
    let tail = reader.tail().cloned().expect("drained");
    let timeline = builder.finish(header, tail);
    let summary = summarize(&timeline);
    let out = InMemory::new();
    leakscope_analyzer::write_report(&out, &summary, &timeline, None).expect("renders");
    let diff = leakscope_analyzer::diff_timelines(
        ("before", &summary, &timeline),
        ("after", &summary, &timeline),
    );
    leakscope_analyzer::write_diff(&out, &diff, &timeline, &timeline).expect("renders");
    assert!(!out.files().is_empty());
});
