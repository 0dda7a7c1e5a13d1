//! Capture's unit tests: records in, recording out.

use super::pairing::STALE_CALL_NS;
use super::*;
use leakscope_probe_ebpf::{
    ALLOC_FLAG_RUST, AllocCall, MAX_STACK_DEPTH, PHASE_EXIT, RETURN_SP_OFFSET,
    TRAMPOLINE_SLOT_MARK, scope_cookie,
};
use leakscope_recording::{
    AllocLayer, EndReason, Header, Producer, RecordingReader, Settings, target::Target,
};

fn capture() -> Capture<Vec<u8>> {
    let target = Target::inspect(std::process::id()).expect("inspect self");
    let settings = Settings {
        alloc_layer: AllocLayer::Libc,
        alloc_layer_reason: "test".into(),
        stack_depth: MAX_STACK_DEPTH as u32,
        preset: None,
        scope_probes: vec![],
        missing_scopes: vec![],
        scope_functions: vec![],
        notes: vec![],
    };
    let header = Header::new(
        Producer::Ebpf,
        "test".into(),
        target.identity(None),
        settings,
    );
    Capture::new(RecordingWriter::new(Vec::new(), &header).expect("header"))
}

/// Every record a capture wrote.
fn written(capture: Capture<Vec<u8>>) -> impl Iterator<Item = Record> {
    let bytes = capture
        .writer
        .finish(Record::End {
            ts: 0,
            reason: EndReason::Finished,
        })
        .expect("finish");
    RecordingReader::new(std::io::Cursor::new(bytes), std::path::Path::new("test"))
        .expect("readable")
}

/// The memory records a capture wrote.
fn records(capture: Capture<Vec<u8>>) -> Vec<Record> {
    written(capture)
        .filter(|r| matches!(r, Record::Alloc { .. } | Record::Realloc { .. }))
        .collect()
}

fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
    // SAFETY: T is a plain-old-data #[repr(C)] record.
    unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
        .to_vec()
}

/// An entry at `sp`, at time `sp` unless `at` says otherwise.
fn enter(c: &mut Capture<Vec<u8>>, tid: u32, sp: u64, call: AllocCall, size: u64, old: u64) {
    enter_at(c, tid, sp, sp, 0, call, size, old);
}

/// The entry of a Rust allocator shim.
fn enter_rust(c: &mut Capture<Vec<u8>>, tid: u32, sp: u64, call: AllocCall, size: u64) {
    enter_flagged(c, tid, sp, sp, 0, ALLOC_FLAG_RUST, call, size, 0);
}

fn header(kind: RecordKind, tid: u32, ts_ns: u64) -> RecordHeader {
    RecordHeader {
        kind: kind as u32,
        tid,
        ts_ns,
    }
}

/// `drops`: records the ring buffer had dropped when it was entered.
#[allow(clippy::too_many_arguments)]
fn enter_at(
    c: &mut Capture<Vec<u8>>,
    tid: u32,
    sp: u64,
    at: u64,
    drops: u64,
    call: AllocCall,
    size: u64,
    old: u64,
) {
    enter_flagged(c, tid, sp, at, drops, 0, call, size, old);
}

#[allow(clippy::too_many_arguments)]
fn enter_flagged(
    c: &mut Capture<Vec<u8>>,
    tid: u32,
    sp: u64,
    at: u64,
    drops: u64,
    flags: u32,
    call: AllocCall,
    size: u64,
    old: u64,
) {
    let record = AllocEnterRecord {
        header: header(RecordKind::AllocEnter, tid, at),
        call: call as u32,
        flags,
        size,
        ptr_arg: old,
        sp,
        drops,
    };
    c.handle(&bytes_of(&record)).unwrap();
}

fn exit(c: &mut Capture<Vec<u8>>, tid: u32, entry_sp: u64, call: AllocCall, addr: u64) {
    exit_at(c, tid, entry_sp, entry_sp + 1, call, addr);
}

fn exit_at(c: &mut Capture<Vec<u8>>, tid: u32, entry_sp: u64, at: u64, call: AllocCall, addr: u64) {
    exit_flagged(c, tid, entry_sp, at, 0, call, addr);
}

fn exit_flagged(
    c: &mut Capture<Vec<u8>>,
    tid: u32,
    entry_sp: u64,
    at: u64,
    flags: u32,
    call: AllocCall,
    addr: u64,
) {
    let record = AllocExitRecord {
        header: header(RecordKind::AllocExit, tid, at),
        call: call as u32,
        flags,
        addr,
        sp: entry_sp + RETURN_SP_OFFSET,
        stack_bytes: 8,
        stack: [0x1000 + entry_sp; MAX_STACK_DEPTH],
    };
    c.handle(&bytes_of(&record)).unwrap();
}

#[test]
fn entry_and_return_make_one_allocation_with_the_return_stack() {
    let mut c = capture();
    enter(&mut c, 7, 1000, AllocCall::Calloc, 64, 0);
    exit(&mut c, 7, 1000, AllocCall::Malloc, 0x5000);
    assert_eq!(c.stats.unpaired, 0);
    match &records(c)[..] {
        [
            Record::Alloc {
                tid: 7,
                addr: 0x5000,
                size: 64,
                stack: Some(_),
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

fn free(c: &mut Capture<Vec<u8>>, kind: RecordKind, tid: u32, addr: u64) {
    let record = FreeRecord {
        header: header(kind, tid, 10),
        addr,
    };
    c.handle(&bytes_of(&record)).unwrap();
}

/// Both layers probed: a global allocator wrapping `System` passes each
/// call on to libc. The libc calls made inside a shim are that call;
/// a libc call of the thread's own, between shim calls, is recorded.
#[test]
fn a_global_allocator_passing_calls_on_to_libc_counts_each_once() {
    let mut c = capture();
    // __rust_alloc -> malloc.
    enter_rust(&mut c, 1, 1000, AllocCall::Malloc, 40);
    enter(&mut c, 1, 900, AllocCall::Malloc, 40, 0);
    exit(&mut c, 1, 900, AllocCall::Malloc, 0x100);
    exit(&mut c, 1, 1000, AllocCall::Malloc, 0x100);
    // __rust_realloc moving the block: malloc + free inside.
    enter_flagged(
        &mut c,
        1,
        1000,
        1000,
        0,
        ALLOC_FLAG_RUST,
        AllocCall::Realloc,
        80,
        0x100,
    );
    enter(&mut c, 1, 900, AllocCall::Malloc, 80, 0);
    exit(&mut c, 1, 900, AllocCall::Malloc, 0x200);
    free(&mut c, RecordKind::Free, 1, 0x100);
    exit(&mut c, 1, 1000, AllocCall::Realloc, 0x200);
    // __rust_dealloc -> free of the same block: one free.
    free(&mut c, RecordKind::RustFree, 1, 0x200);
    free(&mut c, RecordKind::Free, 1, 0x200);
    // C code's own malloc and free on the same thread.
    enter(&mut c, 1, 1000, AllocCall::Malloc, 8, 0);
    exit(&mut c, 1, 1000, AllocCall::Malloc, 0x300);
    free(&mut c, RecordKind::RustFree, 2, 0x400);
    free(&mut c, RecordKind::Free, 1, 0x300);
    // A libc free that is not the block the Rust free gave back.
    free(&mut c, RecordKind::RustFree, 1, 0x500);
    free(&mut c, RecordKind::Free, 1, 0x600);
    assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
    let (mut allocs, mut frees) = (Vec::new(), Vec::new());
    for record in written(c) {
        match record {
            Record::Alloc { addr, size, .. } => allocs.push((addr, size)),
            Record::Realloc { old, new, size, .. } => allocs.push((old + new, size)),
            Record::Free { addr, .. } => frees.push(addr),
            _ => {}
        }
    }
    assert_eq!(allocs, [(0x100, 40), (0x100 + 0x200, 80), (0x300, 8)]);
    assert_eq!(frees, [0x200, 0x400, 0x300, 0x500, 0x600]);
}

#[test]
fn a_nested_call_is_not_recorded_and_threads_do_not_mix() {
    let mut c = capture();
    enter(&mut c, 1, 1000, AllocCall::Realloc, 128, 0x4000);
    enter(&mut c, 2, 5000, AllocCall::Malloc, 32, 0);
    enter(&mut c, 1, 900, AllocCall::Malloc, 128, 0);
    exit(&mut c, 1, 900, AllocCall::Malloc, 0x6000);
    exit(&mut c, 2, 5000, AllocCall::Malloc, 0x7000);
    exit(&mut c, 1, 1000, AllocCall::Realloc, 0x6000);
    assert_eq!(c.stats.unpaired, 0);
    match &records(c)[..] {
        [
            Record::Alloc {
                tid: 2,
                addr: 0x7000,
                size: 32,
                ..
            },
            Record::Realloc {
                tid: 1,
                old: 0x4000,
                new: 0x6000,
                size: 128,
                entry_ts: 1000,
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

/// The kernel times only realloc's entries; the others come with time 0 and
/// are timed on arrival. Such a call, and one nested in it, pair as usual
/// with returns timed by the kernel (earlier than the arrival, here).
#[test]
fn untimed_entries_pair_and_nest_like_timed_ones() {
    let mut c = capture();
    enter_at(&mut c, 3, 1000, 0, 0, AllocCall::AlignedAlloc, 48, 0);
    enter_at(&mut c, 3, 900, 0, 0, AllocCall::Malloc, 64, 0);
    exit_at(&mut c, 3, 900, 5, AllocCall::Malloc, 0x8000);
    exit_at(&mut c, 3, 1000, 6, AllocCall::Malloc, 0x8000);
    assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
    match &records(c)[..] {
        [
            Record::Alloc {
                ts: 6,
                addr: 0x8000,
                size: 48,
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

/// glibc's `realloc(NULL, n)` jumps to `malloc`: both are entered at the
/// same stack pointer, and both return probes fire at the one return.
#[test]
fn a_tail_call_is_nested_in_the_call_that_made_it() {
    let mut c = capture();
    enter(&mut c, 1, 1000, AllocCall::Realloc, 64, 0);
    enter(&mut c, 1, 1000, AllocCall::Malloc, 64, 0);
    exit(&mut c, 1, 1000, AllocCall::Malloc, 0x3000);
    exit(&mut c, 1, 1000, AllocCall::Realloc, 0x3000);
    assert_eq!((c.stats.unpaired, c.stats.lost), (0, 0));
    match &records(c)[..] {
        [
            Record::Realloc {
                old: 0,
                new: 0x3000,
                size: 64,
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn lost_halves_drop_their_pair_and_nothing_else() {
    let mut c = capture();
    // The nested call's return was lost: the outer one still pairs.
    enter(&mut c, 1, 1000, AllocCall::Malloc, 16, 0);
    enter(&mut c, 1, 900, AllocCall::Malloc, 99, 0);
    exit(&mut c, 1, 1000, AllocCall::Malloc, 0x5000);
    // A return whose entry was lost.
    exit(&mut c, 1, 2000, AllocCall::Malloc, 0x9000);
    // A failed posix_memalign has no block.
    enter(&mut c, 1, 1000, AllocCall::PosixMemalign, 64, 0x100);
    exit(&mut c, 1, 1000, AllocCall::PosixMemalign, 0);
    assert_eq!(c.stats.unpaired, 2);
    assert!(c.in_progress.is_empty());
    match &records(c)[..] {
        [
            Record::Alloc {
                addr: 0x5000,
                size: 16,
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
}

/// A record that does not decode used to be counted in a figure nobody
/// printed: it is a lost event, written as one at the end.
#[test]
fn records_that_do_not_decode_are_lost_events_in_the_recording() {
    let mut c = capture();
    c.handle(&[1, 2, 3]).unwrap();
    let mut bogus = bytes_of(&header(RecordKind::AllocExit, 1, 5));
    bogus.truncate(bogus.len() - 1);
    c.handle(&bogus).unwrap();
    c.finish(9).unwrap();
    assert_eq!((c.stats.malformed, c.stats.lost), (2, 2));
    let lost: Vec<(leakscope_recording::LostReason, u64)> = written(c)
        .filter_map(|r| match r {
            Record::Lost { reason, count, .. } => Some((reason, count)),
            _ => None,
        })
        .collect();
    assert_eq!(lost, [(leakscope_recording::LostReason::Malformed, 2)]);
}

#[test]
fn a_call_whose_return_was_dropped_is_lost_and_does_not_hide_later_ones() {
    let mut c = capture();
    // Same frame again, a record dropped in between: the first call's
    // return was that record.
    enter_at(&mut c, 1, 1000, 10, 0, AllocCall::Malloc, 8, 0);
    enter_at(&mut c, 1, 1000, 20, 1, AllocCall::Malloc, 16, 0);
    exit_at(&mut c, 1, 1000, 21, AllocCall::Malloc, 0x1000);
    assert_eq!(c.stats.lost, 1);
    // A deeper frame, long after an open call: that call is not open.
    enter_at(&mut c, 1, 2000, 30, 1, AllocCall::Malloc, 8, 0);
    enter_at(
        &mut c,
        1,
        900,
        30 + 2 * STALE_CALL_NS,
        1,
        AllocCall::Malloc,
        32,
        0,
    );
    exit_at(
        &mut c,
        1,
        900,
        31 + 2 * STALE_CALL_NS,
        AllocCall::Malloc,
        0x2000,
    );
    assert_eq!(c.stats.lost, 2);
    // Detached inside a call: lost too.
    enter(&mut c, 1, 1000, AllocCall::Malloc, 64, 0);
    c.finish(u64::MAX).unwrap();
    assert_eq!(c.stats.lost, 3);
    let lost: u64 = {
        let bytes = c
            .writer
            .finish(Record::End {
                ts: 0,
                reason: EndReason::Finished,
            })
            .unwrap();
        let records: Vec<Record> = RecordingReader::new(&bytes[..], std::path::Path::new("test"))
            .unwrap()
            .collect();
        let allocs: Vec<u64> = records
            .iter()
            .filter_map(|r| match r {
                Record::Alloc { addr, .. } => Some(*addr),
                _ => None,
            })
            .collect();
        assert_eq!(allocs, [0x1000, 0x2000]);
        records
            .iter()
            .filter_map(|r| match r {
                Record::Lost { count, .. } => Some(*count),
                _ => None,
            })
            .sum()
    };
    assert_eq!(lost, 3, "each lost call is in the recording once");
}

/// The frames of every stack a capture wrote, in order.
fn stacks(capture: Capture<Vec<u8>>) -> Vec<Vec<u64>> {
    written(capture)
        .filter_map(|r| match r {
            Record::Stack { frames, .. } => Some(frames),
            _ => None,
        })
        .collect()
}

/// The kinds the tests' preset probes with a return probe.
const RETURNING: [ScopeKind; 2] = [ScopeKind::SessionCreate, ScopeKind::WorkerSpawn];

fn scope(c: &mut Capture<Vec<u8>>, tid: u32, kind: ScopeKind, phase: u32, sp: u64, ret: u64) {
    scope_probe(c, tid, kind, RETURNING.contains(&kind), phase, sp, ret);
}

/// A scope record from a function probed with (`returns`) or without a
/// return probe.
fn scope_probe(
    c: &mut Capture<Vec<u8>>,
    tid: u32,
    kind: ScopeKind,
    returns: bool,
    phase: u32,
    sp: u64,
    ret: u64,
) {
    let record = ScopeRecord {
        header: header(RecordKind::Scope, tid, 1),
        scope: scope_cookie(kind as u32, returns, 0) as u32,
        phase,
        arg: 0,
        sp,
        ret,
    };
    c.handle(&bytes_of(&record)).unwrap();
}

/// An allocation at `entry_sp` whose stack is `frames`.
fn alloc_with_stack(c: &mut Capture<Vec<u8>>, tid: u32, entry_sp: u64, frames: &[u64]) {
    enter(c, tid, entry_sp, AllocCall::Malloc, 16, 0);
    let mut stack = [0; MAX_STACK_DEPTH];
    stack[..frames.len()].copy_from_slice(frames);
    let record = AllocExitRecord {
        header: header(RecordKind::AllocExit, tid, entry_sp + 1),
        call: AllocCall::Malloc as u32,
        flags: 0,
        addr: 0x5000 + entry_sp,
        sp: entry_sp + RETURN_SP_OFFSET,
        stack_bytes: (frames.len() * 8) as i64,
        stack,
    };
    c.handle(&bytes_of(&record)).unwrap();
}

const TRAMPOLINE: u64 = 0x7fff_f000;

/// A frame the walk marked: the trampoline was read from `slot`.
fn slot(slot: u64) -> u64 {
    slot | TRAMPOLINE_SLOT_MARK
}

fn returning_capture() -> Capture<Vec<u8>> {
    let mut c = capture();
    c.set_trampoline(TRAMPOLINE..TRAMPOLINE + 0x1000);
    c
}

#[test]
fn a_marked_trampoline_becomes_the_return_address_sent_from_its_slot() {
    let mut c = returning_capture();
    // session-create entered at sp 9000 (returns to 0xc1), worker-spawn
    // inside it at sp 8000 (returns to 0xc2); a poll (no return probe)
    // at 7000 sends a word that is no return address.
    scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
    scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
    scope(&mut c, 3, ScopeKind::WorkerPoll, PHASE_ENTER, 7000, 0xdead);
    alloc_with_stack(&mut c, 3, 6000, &[0xa0, slot(8000), 0xa1, slot(9000), 0xa2]);
    // Another thread's open calls are not this one's.
    alloc_with_stack(&mut c, 4, 6000, &[0xb0, slot(8000), 0xb1]);
    // worker-spawn returns; session-create is still open.
    scope(
        &mut c,
        3,
        ScopeKind::WorkerSpawn,
        PHASE_EXIT,
        8000 + RETURN_SP_OFFSET,
        0,
    );
    alloc_with_stack(&mut c, 3, 5000, &[0xa3, slot(9000), 0xa4]);
    // A slot no open call entered at (another tool's uretprobe).
    alloc_with_stack(&mut c, 3, 5000, &[0xa5, slot(8500), 0xa6]);
    assert_eq!(c.stats.trampolines_unresolved, 2);
    assert_eq!(
        stacks(c),
        vec![
            vec![0xa0, 0xc2, 0xa1, 0xc1, 0xa2],
            vec![0xb0],
            vec![0xa3, 0xc1, 0xa4],
            vec![0xa5],
        ]
    );
}

#[test]
fn a_call_whose_return_was_dropped_takes_no_other_calls_frame() {
    let mut c = returning_capture();
    scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
    // Entered at 8000 and returned, its return record dropped.
    scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc3);
    // An allocation in a sibling call, deeper than the lost one's frame.
    alloc_with_stack(&mut c, 3, 7000, &[0xa0, slot(9000), 0xa1]);
    // A later call at the same depth: the one before has returned.
    scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
    alloc_with_stack(&mut c, 3, 6000, &[0xa2, slot(8000), 0xa3, slot(9000)]);
    // session-create returns, taking any call left open inside it.
    scope(
        &mut c,
        3,
        ScopeKind::SessionCreate,
        PHASE_EXIT,
        9000 + RETURN_SP_OFFSET,
        0,
    );
    assert!(!c.pending_returns.contains_key(&3));
    assert_eq!(c.stats.trampolines_unresolved, 0);
    assert_eq!(
        stacks(c),
        vec![vec![0xa0, 0xc1, 0xa1], vec![0xa2, 0xc2, 0xa3, 0xc1]]
    );
}

/// `bpf_get_stack` on a kernel that leaves the trampoline's address in
/// its stacks (older kernels): paired innermost first, like the kernel.
#[test]
fn bare_trampoline_addresses_take_the_open_calls_innermost_first() {
    let mut c = returning_capture();
    scope(&mut c, 3, ScopeKind::SessionCreate, PHASE_ENTER, 9000, 0xc1);
    scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
    alloc_with_stack(
        &mut c,
        3,
        6000,
        &[0xa0, TRAMPOLINE, 0xa1, TRAMPOLINE + 1, 0xa2],
    );
    alloc_with_stack(
        &mut c,
        3,
        6000,
        &[0xa0, TRAMPOLINE, 0xa1, TRAMPOLINE, TRAMPOLINE],
    );
    assert_eq!(c.stats.trampolines_unresolved, 1);
    assert_eq!(
        stacks(c),
        vec![
            vec![0xa0, 0xc2, 0xa1, 0xc1, 0xa2],
            vec![0xa0, 0xc2, 0xa1, 0xc1]
        ]
    );
}

/// A preset may probe one kind's functions with and without a return
/// probe: only the calls that will return hide a return address, so only
/// they take a trampoline's place, however the kind is probed elsewhere.
#[test]
fn only_calls_with_a_return_probe_stand_for_trampolines() {
    let mut c = returning_capture();
    scope(&mut c, 3, ScopeKind::WorkerSpawn, PHASE_ENTER, 8000, 0xc2);
    // The same kind, another function, entry only: nothing was hidden.
    scope_probe(
        &mut c,
        3,
        ScopeKind::WorkerSpawn,
        false,
        PHASE_ENTER,
        7000,
        0,
    );
    alloc_with_stack(&mut c, 3, 6000, &[0xa0, 0xa1, TRAMPOLINE, 0xa2]);
    alloc_with_stack(&mut c, 3, 6000, &[0xa3, 0xa1, slot(8000), 0xa2]);
    assert_eq!(c.stats.trampolines_unresolved, 0);
    assert_eq!(
        stacks(c),
        vec![vec![0xa0, 0xa1, 0xc2, 0xa2], vec![0xa3, 0xa1, 0xc2, 0xa2]]
    );
}

/// A call the programs recorded whole (`ALLOC_FLAG_WHOLE`: a block aligned
/// for a task cell or a channel) is written as `Record::WholeAlloc`, so the
/// analyzer counts it for itself in a sampled recording; a whole realloc
/// writes the old block's free and the new block. The programs and the
/// in-process allocator draw the line at the same alignment.
#[test]
fn a_call_recorded_whole_is_written_whole() {
    assert_eq!(
        leakscope_probe_ebpf::WHOLE_ALIGN,
        leakscope_recording::WHOLE_ALIGN as u64
    );
    let whole = leakscope_probe_ebpf::ALLOC_FLAG_WHOLE;
    let mut c = capture();
    enter_flagged(
        &mut c,
        7,
        0x7000,
        0x7000,
        0,
        whole,
        AllocCall::Malloc,
        512,
        0,
    );
    exit(&mut c, 7, 0x7000, AllocCall::Malloc, 0xa000);
    enter_flagged(
        &mut c,
        7,
        0x7000,
        0x8000,
        0,
        whole,
        AllocCall::Realloc,
        1024,
        0xa000,
    );
    // The allocator frees the old block itself (`mi_realloc_aligned` calls
    // `mi_free`): written once, at the return.
    free(&mut c, RecordKind::Free, 7, 0xa000);
    exit(&mut c, 7, 0x7000, AllocCall::Realloc, 0xb000);
    enter(&mut c, 7, 0x7000, AllocCall::Malloc, 64, 0);
    exit(&mut c, 7, 0x7000, AllocCall::Malloc, 0xc000);
    let got: Vec<_> = written(c)
        .filter_map(|r| match r {
            Record::WholeAlloc { addr, size, .. } => Some(("whole", addr, size)),
            Record::Alloc { addr, size, .. } => Some(("alloc", addr, size)),
            Record::Free { addr, .. } => Some(("free", addr, 0)),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        [
            ("whole", 0xa000, 512),
            ("free", 0xa000, 0),
            ("whole", 0xb000, 1024),
            ("alloc", 0xc000, 64)
        ]
    );
}

/// Once the kernel's map of sampled blocks has been full, a block it could
/// not take comes marked `EXIT_FLAG_UNFILED` and every other free and
/// realloc comes too (`UnfiledFree`, `ALLOC_FLAG_OLD_UNFILED`): the frees
/// and reallocs of the blocks that came marked are written, once; those of
/// blocks the recording never had are not; a block the kernel filed is
/// freed as before.
#[test]
fn blocks_the_kernels_full_map_could_not_take_are_matched_here() {
    use leakscope_probe_ebpf::{
        ALLOC_FLAG_NEW_UNSAMPLED, ALLOC_FLAG_OLD_UNFILED, ALLOC_FLAG_WHOLE, EXIT_FLAG_UNFILED,
    };
    let mut c = capture();
    let (whole, unfiled) = (ALLOC_FLAG_WHOLE, EXIT_FLAG_UNFILED);
    // A whole block and a sampled one the map could not take, one it took.
    enter_flagged(&mut c, 7, 0x7000, 1, 0, whole, AllocCall::Malloc, 512, 0);
    exit_flagged(&mut c, 7, 0x7000, 2, unfiled, AllocCall::Malloc, 0xa000);
    enter(&mut c, 7, 0x7000, AllocCall::Malloc, 64, 0);
    exit_flagged(
        &mut c,
        7,
        0x7000,
        0x7001,
        unfiled,
        AllocCall::Malloc,
        0xb000,
    );
    assert!(c.stats.sampled_map_full);
    enter(&mut c, 7, 0x7000, AllocCall::Malloc, 32, 0);
    exit(&mut c, 7, 0x7000, AllocCall::Malloc, 0xc000);
    // Frees of blocks never recorded, and one twice: dropped.
    free(&mut c, RecordKind::UnfiledFree, 7, 0xd000);
    free(&mut c, RecordKind::UnfiledFree, 7, 0xb000);
    free(&mut c, RecordKind::UnfiledFree, 8, 0xb000);
    // A whole realloc of the unfiled whole block, into another unfiled one.
    let resized = whole | ALLOC_FLAG_OLD_UNFILED;
    enter_flagged(
        &mut c,
        7,
        0x7000,
        3,
        0,
        resized,
        AllocCall::Realloc,
        1024,
        0xa000,
    );
    exit_flagged(&mut c, 7, 0x7000, 4, unfiled, AllocCall::Realloc, 0xe000);
    // Reallocs into unsampled blocks: of a block never recorded (nothing),
    // of the unfiled one (its free).
    let gone = ALLOC_FLAG_NEW_UNSAMPLED | ALLOC_FLAG_OLD_UNFILED;
    enter_flagged(&mut c, 7, 0x7000, 5, 0, gone, AllocCall::Realloc, 8, 0xf000);
    exit_flagged(&mut c, 7, 0x7000, 6, 0, AllocCall::Realloc, 0xf100);
    enter_flagged(&mut c, 7, 0x7000, 7, 0, gone, AllocCall::Realloc, 8, 0xe000);
    exit_flagged(&mut c, 7, 0x7000, 8, 0, AllocCall::Realloc, 0xe100);
    free(&mut c, RecordKind::UnfiledFree, 7, 0xe000);
    // The block the kernel filed: its free comes as before.
    free(&mut c, RecordKind::Free, 7, 0xc000);
    let got: Vec<_> = written(c)
        .filter_map(|r| match r {
            Record::WholeAlloc { addr, .. } => Some(("whole", addr)),
            Record::Alloc { addr, .. } => Some(("alloc", addr)),
            Record::Realloc { old, new, .. } => Some(("realloc", old ^ new)),
            Record::Free { addr, .. } => Some(("free", addr)),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        [
            ("whole", 0xa000),
            ("alloc", 0xb000),
            ("alloc", 0xc000),
            ("free", 0xb000),
            ("free", 0xa000),
            ("whole", 0xe000),
            ("free", 0xe000),
            ("free", 0xc000),
        ]
    );
}

/// In a sampled recording the programs record every block made inside a
/// session's birth (a birth scope's entry to its return) whole: the status
/// line counts it for its bytes, as a block recorded whole, not weighed as
/// a sample of the mean's bytes; outside the window a block is a sample.
#[test]
fn a_block_of_a_sessions_birth_counts_for_itself_on_the_status_line() {
    use leakscope_recording::sampling::Sampling;
    let sampling = Sampling::every_bytes(512 * 1024);
    let mut c = capture();
    c.set_live(crate::attach::LiveBytes::new(sampling, None), sampling);
    // An address the status line counts blocks recorded whole at (one in 16).
    let counted = (0x10_0000u64..)
        .step_by(16)
        .find(|a| a.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60 == 0)
        .unwrap();
    scope(
        &mut c,
        7,
        ScopeKind::SessionCreate,
        PHASE_ENTER,
        0x9000,
        0x1234,
    );
    enter(&mut c, 7, 0x7000, AllocCall::Malloc, 64, 0);
    exit(&mut c, 7, 0x7000, AllocCall::Malloc, counted);
    assert_eq!(c.stats.live_bytes, 64 * 16, "a birth block, for its bytes");
    scope(&mut c, 7, ScopeKind::SessionCreate, PHASE_EXIT, 0x9008, 0);
    enter(&mut c, 7, 0x7000, AllocCall::Malloc, 64, 0);
    exit(&mut c, 7, 0x7000, AllocCall::Malloc, counted + 0x1000);
    let sample = sampling.weight(64).bytes.round() as u64;
    assert_eq!(
        c.stats.live_bytes,
        64 * 16 + sample,
        "past the birth, a sample"
    );
}
