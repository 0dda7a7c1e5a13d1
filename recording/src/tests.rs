use std::path::Path;

use super::*;

pub(crate) fn header() -> Header {
    Header {
        producer: Producer::Ebpf,
        producer_version: "test".into(),
        pid: 42,
        exe: "/bin/true".into(),
        build_id: Some("abcd".into()),
        clock: ClockOrigin {
            monotonic_ns: 1,
            unix_ns: 2,
        },
        rmcp_version: Some("3.11.0".into()),
        settings: Settings {
            alloc_layer: AllocLayer::Libc,
            alloc_layer_reason: "test".into(),
            stack_depth: 32,
            preset: None,
            scope_probes: vec![],
            missing_scopes: vec![ScopeKind::SessionClose],
            scope_functions: vec![ScopeFunction {
                kind: ScopeKind::WorkerPoll,
                path: "/bin/true".into(),
                file_offset: 0x1000,
                size: 64,
                returns: false,
            }],
            notes: vec!["key: value".into()],
        },
        frame_pointers: FramePointers::Kept,
        sampling: crate::sampling::Sampling::Bytes { mean: 512 * 1024 },
        stack_walk: crate::StackWalk::EhFrame {
            mappings: 5,
            rows: 158_837,
            without_table: vec!["/jit.so (no .eh_frame)".into()],
        },
        segment: Some(Segment {
            index: 3,
            run_start_ns: 7,
        }),
    }
}

fn sample(n: u64) -> Vec<Record> {
    (0..n)
        .flat_map(|i| {
            [
                Record::Stack {
                    id: i as u32,
                    frames: vec![i, i + 1],
                },
                // Whole microseconds: the header is a sampled recording's.
                Record::Alloc {
                    ts: i * 1_000,
                    tid: 7,
                    addr: 0x1000 + i,
                    size: 16,
                    stack: Some(i as u32),
                },
                Record::Free {
                    ts: (i + 1) * 1_000,
                    tid: 7,
                    addr: 0x1000 + i,
                },
            ]
        })
        .collect()
}

fn write(records: &[Record], flush_every: usize) -> Vec<u8> {
    let mut writer = RecordingWriter::new(Vec::new(), &header()).unwrap();
    for (i, record) in records.iter().enumerate() {
        writer.push(record.clone()).unwrap();
        if (i + 1) % flush_every == 0 {
            writer.flush().unwrap();
        }
    }
    writer
        .finish(Record::End {
            ts: 99,
            reason: EndReason::Duration,
        })
        .unwrap()
}

fn read(bytes: &[u8]) -> Result<(Header, Vec<Record>, Tail), ReadError> {
    let mut reader = RecordingReader::new(bytes, Path::new("test.lsrec"))?;
    let records: Vec<Record> = reader.by_ref().collect();
    Ok((
        reader.header().clone(),
        records,
        reader.tail().cloned().unwrap(),
    ))
}

#[test]
fn round_trips_header_and_records() {
    let records = sample(100);
    let bytes = write(&records, 7);
    let (got_header, got, tail) = read(&bytes).unwrap();
    assert_eq!(got_header, header());
    assert_eq!(&got[..records.len()], &records[..]);
    assert!(matches!(got.last(), Some(Record::End { .. })));
    assert_eq!(tail, Tail::Clean);
}

/// A stream the probe re-encodes is stored, not compressed: it reads back
/// the same, in frames of one block and of several (a block holds 128 KiB).
#[test]
fn stored_frames_read_back_the_same() {
    for (n, flush_every) in [(1, 1), (100, 7), (20_000, 30_000)] {
        let records = sample(n);
        let mut writer = RecordingWriter::new(Vec::new(), &header()).unwrap();
        writer.relay();
        for (i, record) in records.iter().enumerate() {
            writer.push(record.clone()).unwrap();
            if (i + 1) % flush_every == 0 {
                writer.flush().unwrap();
            }
        }
        let bytes = writer
            .finish(Record::End {
                ts: 99,
                reason: EndReason::Duration,
            })
            .unwrap();
        let (_, got, tail) = read(&bytes).unwrap();
        assert_eq!(&got[..records.len()], &records[..], "{n} records");
        assert_eq!(tail, Tail::Clean);
        // Stored: no smaller than what was encoded.
        assert!(
            bytes.len() as u64 > 8 * n,
            "{} bytes for {n} records",
            bytes.len()
        );
    }
}

#[test]
fn every_truncation_reads_a_prefix() {
    let records = sample(20);
    let bytes = write(&records, 5);
    let header_end = {
        let reader = RecordingReader::new(&bytes[..], Path::new("x")).unwrap();
        reader.offset() as usize
    };
    let mut last_len = 0;
    for cut in header_end..bytes.len() {
        let (_, got, tail) = read(&bytes[..cut]).unwrap();
        assert!(got.len() >= last_len, "prefixes only grow");
        assert_eq!(
            &got[..],
            &records[..got.len()],
            "a prefix of what was written"
        );
        last_len = got.len();
        if cut > header_end && !matches!(tail, Tail::Torn { .. }) {
            // A cut exactly at a frame boundary is clean.
            assert!(got.len() % 5 == 0);
        }
    }
}

#[test]
fn corrupt_frame_is_a_torn_tail() {
    let bytes = write(&sample(10), 3);
    let mut corrupt = bytes.clone();
    let at = corrupt.len() - 3;
    corrupt[at] ^= 0xff;
    let (_, got, tail) = read(&corrupt).unwrap();
    assert!(matches!(tail, Tail::Torn { .. }));
    assert_eq!(got.len(), 30, "all complete frames before the last one");
}

#[test]
fn refuses_what_is_not_a_recording() {
    assert!(matches!(
        read(b"hello world, not a recording"),
        Err(ReadError::NotARecording { .. })
    ));
    assert!(matches!(read(b""), Err(ReadError::NotARecording { .. })));
    let mut newer = write(&sample(1), 1);
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert!(
        matches!(read(&newer), Err(ReadError::NewerVersion { found, .. }) if found == FORMAT_VERSION + 1)
    );
    let bytes = write(&sample(1), 1);
    assert!(matches!(
        read(&bytes[..14]),
        Err(ReadError::TruncatedHeader { .. })
    ));
}

#[test]
fn stacks_are_written_once_before_their_first_use() {
    let mut writer = RecordingWriter::new(Vec::new(), &header()).unwrap();
    assert_eq!(writer.stack(&[]).unwrap(), None, "no frames, no stack");
    let a = writer.stack(&[1, 2, 3]).unwrap();
    let b = writer.stack(&[4]).unwrap();
    assert_eq!(writer.stack(&[1, 2, 3]).unwrap(), a);
    assert_ne!(a, b);
    assert_eq!(writer.stacks(), 2);
    let bytes = writer
        .finish(Record::End {
            ts: 1,
            reason: EndReason::Finished,
        })
        .unwrap();
    let (_, records, _) = read(&bytes).unwrap();
    let stacks: Vec<&Record> = records
        .iter()
        .filter(|r| matches!(r, Record::Stack { .. }))
        .collect();
    assert_eq!(stacks.len(), 2, "{records:?}");
}

/// Version 1 wrote the rmcp version as a note and had no `missing_scopes`:
/// such a file (written here with v1's exact shape) still reads.
#[test]
fn reads_format_version_1() {
    #[derive(serde::Serialize)]
    struct SettingsV1 {
        alloc_layer: AllocLayer,
        alloc_layer_reason: String,
        stack_depth: u32,
        preset: Option<String>,
        scope_probes: Vec<String>,
        notes: Vec<String>,
    }
    #[derive(serde::Serialize)]
    struct HeaderV1 {
        producer: Producer,
        producer_version: String,
        pid: u32,
        exe: String,
        build_id: Option<String>,
        clock: ClockOrigin,
        settings: SettingsV1,
    }
    let v1 = HeaderV1 {
        producer: Producer::Ebpf,
        producer_version: "leakscope-probe 0.1.0".into(),
        pid: 7,
        exe: "/srv/mcp".into(),
        build_id: None,
        clock: ClockOrigin {
            monotonic_ns: 1,
            unix_ns: 2,
        },
        settings: SettingsV1 {
            alloc_layer: AllocLayer::Libc,
            alloc_layer_reason: "r".into(),
            stack_depth: 32,
            preset: Some("rmcp".into()),
            scope_probes: vec!["worker-drop: f".into()],
            notes: vec!["rmcp version: 3.11.0".into(), "free probed at 0x9".into()],
        },
    };
    let payload = postcard::to_stdvec(&v1).unwrap();
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    let body = postcard::to_stdvec(&sample(2)).unwrap();
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    // Version 1's realloc had no entry time (variant index 2, as today).
    #[derive(serde::Serialize)]
    #[allow(dead_code)]
    enum RecordV1 {
        Alloc,
        Free,
        Realloc {
            ts: u64,
            tid: u32,
            old: u64,
            new: u64,
            size: u64,
            stack: Option<u32>,
        },
    }
    let realloc = postcard::to_stdvec(&vec![RecordV1::Realloc {
        ts: 9,
        tid: 7,
        old: 0x10,
        new: 0x20,
        size: 48,
        stack: None,
    }])
    .unwrap();
    bytes.extend_from_slice(&(realloc.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&realloc).to_le_bytes());
    bytes.extend_from_slice(&realloc);

    let reader = RecordingReader::new(&bytes[..], Path::new("v1.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 1);
    let (header, records, tail) = read(&bytes).unwrap();
    assert_eq!(header.rmcp_version.as_deref(), Some("3.11.0"));
    assert_eq!(
        header.settings.notes,
        vec!["free probed at 0x9".to_string()]
    );
    assert!(header.settings.missing_scopes.is_empty());
    let mut expected = sample(2);
    expected.push(Record::Realloc {
        ts: 9,
        tid: 7,
        old: 0x10,
        new: 0x20,
        size: 48,
        stack: None,
        entry_ts: 0,
    });
    assert_eq!(records, expected);
    assert_eq!(tail, Tail::Clean);
    let mut older = bytes.clone();
    older[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        read(&older),
        Err(ReadError::OlderVersion { found: 0, .. })
    ));
}

/// Versions 2 to 4 had no `frame_pointers` in the header: such a file reads
/// with them unknown, and its records as today's.
#[test]
fn reads_format_version_4() {
    #[derive(serde::Serialize)]
    struct HeaderV4 {
        producer: Producer,
        producer_version: String,
        pid: u32,
        exe: String,
        build_id: Option<String>,
        clock: ClockOrigin,
        rmcp_version: Option<String>,
        settings: Settings,
    }
    let today = header();
    let v4 = HeaderV4 {
        producer: today.producer,
        producer_version: today.producer_version.clone(),
        pid: today.pid,
        exe: today.exe.clone(),
        build_id: today.build_id.clone(),
        clock: today.clock,
        rmcp_version: today.rmcp_version.clone(),
        settings: today.settings.clone(),
    };
    let mut bytes = file_with_header(4, &v4);
    let records = sample(3);
    let body = zstd::encode_all(&postcard::to_stdvec(&records).unwrap()[..], 1).unwrap();
    push_frame(&body, &mut bytes);
    let mut reader = RecordingReader::new(&bytes[..], Path::new("v4.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 4);
    assert_eq!(
        reader.header(),
        &Header {
            frame_pointers: FramePointers::Unknown,
            sampling: crate::sampling::Sampling::Every,
            segment: None,
            stack_walk: crate::StackWalk::FramePointers,
            ..today
        }
    );
    assert_eq!(reader.by_ref().collect::<Vec<_>>(), records);
    assert_eq!(reader.tail(), Some(&Tail::Clean));
}

/// The sample recordings checked in under `fixtures/recordings/` were made before
/// the crate split (format version 1) and must keep reading.
#[test]
fn reads_the_checked_in_sample_recordings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings");
    for name in ["leaky-5-sessions.lsrec", "fixed-5-sessions.lsrec"] {
        let mut reader = RecordingReader::open(&dir.join(name)).unwrap();
        assert!(reader.header().rmcp_version.is_some(), "{name}");
        assert!(reader.by_ref().count() > 100, "{name}");
        assert_eq!(reader.tail(), Some(&Tail::Clean), "{name}");
    }
}

/// A crafted file of ~100 KB whose frames each expand to 64 MiB used to cost
/// many GB to read: the whole file now has one decoding budget, and what is
/// past it is a torn tail saying why.
#[test]
fn a_file_that_expands_past_its_budget_stops_there() {
    let mut bytes = write(&[], 1);
    // `write` ends with the writer's end record; keep the header frame only.
    let header_end = RecordingReader::new(&bytes[..], Path::new("x.lsrec"))
        .unwrap()
        .offset() as usize;
    bytes.truncate(header_end);
    // Zeros decode as an empty list of records: every frame is valid.
    let bomb = zstd::bulk::compress(&vec![0u8; MAX_FRAME_BYTES as usize], 19).unwrap();
    let frames = 100_000 / bomb.len();
    for _ in 0..frames {
        push_frame(&bomb, &mut bytes);
    }
    assert!(bytes.len() < 200_000, "{} bytes", bytes.len());
    let mut reader = RecordingReader::new(&bytes[..], Path::new("bomb.lsrec")).unwrap();
    assert_eq!(reader.by_ref().count(), 0);
    match reader.tail() {
        Some(Tail::Torn { reason, .. }) => assert!(reason.contains("expand past"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(reader.decoded_bytes() <= decode_budget(bytes.len() as u64));
    assert!(
        (frames as u64) * u64::from(MAX_FRAME_BYTES) > 4 * decode_budget(bytes.len() as u64),
        "the file would expand far past the budget"
    );
}

/// The plaintext budget bounds bytes, not records: frames of tiny records
/// (a `Free` is 4 bytes) compress to almost nothing, and ~100 KB of them
/// decoded to 60 M records, gigabytes once in memory. The records decoded
/// are budgeted too, and a frame holds at most [`MAX_FRAME_RECORDS`].
#[test]
fn a_file_of_tiny_records_stops_at_its_record_budget() {
    let mut bytes = write(&[], 1);
    let header_end = RecordingReader::new(&bytes[..], Path::new("x.lsrec"))
        .unwrap()
        .offset() as usize;
    bytes.truncate(header_end);
    let free = Record::Free {
        ts: 0,
        tid: 0,
        addr: 0,
    };
    let tiny = |count: u64| {
        let plain = postcard::to_stdvec(&vec![free.clone(); count as usize]).unwrap();
        zstd::bulk::compress(&plain, 19).unwrap()
    };
    let full = tiny(MAX_FRAME_RECORDS);
    let frames = 100_000 / full.len();
    for _ in 0..frames {
        push_frame(&full, &mut bytes);
    }
    let mut reader = RecordingReader::new(&bytes[..], Path::new("tiny.lsrec")).unwrap();
    let decoded = reader.by_ref().count() as u64;
    assert!(
        decoded <= record_budget(bytes.len() as u64),
        "{decoded} records from {} bytes",
        bytes.len()
    );
    assert!(frames as u64 * MAX_FRAME_RECORDS > 4 * record_budget(bytes.len() as u64));
    match reader.tail() {
        Some(Tail::Torn { reason, .. }) => assert!(reason.contains("more records"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(reader.decoded_records(), decoded);

    // One frame past the cap is refused whole, before it is decoded.
    let mut bytes = bytes[..header_end].to_vec();
    push_frame(&tiny(MAX_FRAME_RECORDS + 1), &mut bytes);
    let mut reader = RecordingReader::new(&bytes[..], Path::new("big.lsrec")).unwrap();
    assert_eq!(reader.by_ref().count(), 0);
    match reader.tail() {
        Some(Tail::Torn { reason, .. }) => {
            assert!(reason.contains("more than a writer"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// Each frame is capped at [`MAX_FRAME_BYTES`], on disk and decompressed: a
/// length prefix past it is corruption (not an allocation of 4 GiB), and a
/// frame that says it expands past it is refused before it is decompressed.
#[test]
fn a_frame_past_the_cap_is_a_torn_tail() {
    let header_only = |bytes: &mut Vec<u8>| {
        let header_end = RecordingReader::new(&bytes[..], Path::new("x.lsrec"))
            .unwrap()
            .offset() as usize;
        bytes.truncate(header_end);
    };
    let torn = |bytes: &[u8]| {
        let mut reader = RecordingReader::new(bytes, Path::new("cap.lsrec")).unwrap();
        assert_eq!(reader.by_ref().count(), 0);
        match reader.tail() {
            Some(Tail::Torn { reason, .. }) => reason.clone(),
            other => panic!("{other:?}"),
        }
    };
    let mut bytes = write(&[], 1);
    header_only(&mut bytes);
    bytes.extend_from_slice(&(MAX_FRAME_BYTES + 1).to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    assert!(torn(&bytes).contains("is not plausible"));

    let mut bytes = write(&[], 1);
    header_only(&mut bytes);
    let big = zstd::bulk::compress(&vec![0u8; MAX_FRAME_BYTES as usize + 1], 1).unwrap();
    bytes.extend_from_slice(&(big.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&big).to_le_bytes());
    bytes.extend_from_slice(&big);
    assert!(torn(&bytes).contains("a frame expands past"));
}

/// A recording of format 7 (no `sampling` in its header) reads as one of
/// every call.
#[test]
fn a_version_7_header_reads_as_every_call() {
    let today = header();
    let v7 = fields_of_version_7(&today);
    let bytes = file_with_header(7, &v7);
    let reader = RecordingReader::new(&bytes[..], Path::new("v7.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 7);
    assert_eq!(
        reader.header(),
        &Header {
            sampling: crate::sampling::Sampling::Every,
            segment: None,
            stack_walk: crate::StackWalk::FramePointers,
            ..today
        }
    );
}

/// A recording of format 10 (no `stack_walk` in its header) reads as walked
/// by frame pointer.
#[test]
fn a_version_10_header_reads_as_walked_by_frame_pointer() {
    let today = header();
    let v10 = (fields_of_version_7(&today), today.sampling, today.segment);
    let bytes = file_with_header(10, &v10);
    let reader = RecordingReader::new(&bytes[..], Path::new("v10.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 10);
    assert_eq!(
        reader.header(),
        &Header {
            stack_walk: crate::StackWalk::FramePointers,
            ..today
        }
    );
}

/// A recording of format 8 (no `segment` in its header) reads as one file.
#[test]
fn a_version_8_header_reads_as_one_file() {
    let today = header();
    // Version 8 added `sampling` after them (postcard writes a tuple of
    // tuples as the flat sequence of their fields).
    let v8 = (fields_of_version_7(&today), today.sampling);
    let bytes = file_with_header(8, &v8);
    let reader = RecordingReader::new(&bytes[..], Path::new("v8.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 8);
    assert_eq!(
        reader.header(),
        &Header {
            segment: None,
            stack_walk: crate::StackWalk::FramePointers,
            ..today
        }
    );
}

/// Today's header fields that versions 5 to 7 wrote, up to
/// `frame_pointers`, in order (postcard writes a struct as the tuple of its
/// fields).
#[allow(clippy::type_complexity)]
fn fields_of_version_7(
    today: &Header,
) -> (
    Producer,
    String,
    u32,
    String,
    Option<String>,
    ClockOrigin,
    Option<String>,
    Settings,
    FramePointers,
) {
    (
        today.producer,
        today.producer_version.clone(),
        today.pid,
        today.exe.clone(),
        today.build_id.clone(),
        today.clock,
        today.rmcp_version.clone(),
        today.settings.clone(),
        today.frame_pointers,
    )
}

/// The start of a file of format `version` whose header frame holds
/// `header`, serialized as that version wrote it.
fn file_with_header(version: u32, header: &impl serde::Serialize) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&version.to_le_bytes());
    push_frame(&postcard::to_stdvec(header).unwrap(), &mut bytes);
    bytes
}

/// Appends a frame holding `payload`: its length, its CRC, itself.
fn push_frame(payload: &[u8], bytes: &mut Vec<u8>) {
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
}

/// A frame of format 9 holds its times whole; from format 10 on, as
/// differences (`timestamps.rs`): each reads back as written.
#[test]
fn a_version_9_frame_reads_its_times_whole() {
    let records = sample(5);
    let mut bytes = file_with_header(9, &header());
    let body = zstd::encode_all(&postcard::to_stdvec(&records).unwrap()[..], 1).unwrap();
    push_frame(&body, &mut bytes);
    let reader = RecordingReader::new(&bytes[..], Path::new("v9.lsrec")).unwrap();
    assert_eq!(reader.format_version(), 9);
    assert_eq!(reader.collect::<Vec<_>>(), records);
    let mut today = Vec::new();
    let mut writer = RecordingWriter::new(&mut today, &header()).unwrap();
    for record in &records {
        writer.push(record.clone()).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);
    let reader = RecordingReader::new(&today[..], Path::new("v10.lsrec")).unwrap();
    assert_eq!(reader.collect::<Vec<_>>(), records);
}

/// Since format 13 a sampled recording's times are microseconds, floored; a
/// recording of every call keeps nanoseconds, and a sampled one of format 12
/// reads its nanoseconds whole.
#[test]
fn a_sampled_recording_keeps_microseconds_and_one_of_every_call_nanoseconds() {
    let record = |ts| Record::Free {
        ts,
        tid: 7,
        addr: 0x1000,
    };
    let written = [record(5_000_123_456), record(5_000_124_999)];
    let read_back = |header: &Header| {
        let mut bytes = Vec::new();
        let mut writer = RecordingWriter::new(&mut bytes, header).unwrap();
        for r in &written {
            writer.push(r.clone()).unwrap();
        }
        writer.flush().unwrap();
        drop(writer);
        let reader = RecordingReader::new(&bytes[..], Path::new("t.lsrec")).unwrap();
        reader.filter_map(|r| r.ts()).collect::<Vec<_>>()
    };
    assert_eq!(read_back(&header()), [5_000_123_000, 5_000_124_000]);
    let every = Header {
        sampling: crate::sampling::Sampling::Every,
        ..header()
    };
    assert_eq!(read_back(&every), [5_000_123_456, 5_000_124_999]);

    let mut records = written.to_vec();
    crate::timestamps::encode(&mut records, 1);
    let mut bytes = file_with_header(12, &header());
    let body = zstd::encode_all(&postcard::to_stdvec(&records).unwrap()[..], 1).unwrap();
    push_frame(&body, &mut bytes);
    let reader = RecordingReader::new(&bytes[..], Path::new("v12.lsrec")).unwrap();
    assert_eq!(reader.collect::<Vec<_>>(), written);
}

/// Every record kind, hot or not, at values of every varint length: what
/// the hand encoder and decoder are held to postcard on.
pub(crate) fn every_record() -> Vec<Record> {
    let values = [
        0u64,
        1,
        127,
        128,
        300,
        1 << 31,
        u32::MAX as u64,
        1 << 56,
        u64::MAX,
    ];
    let mut all = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        let tid = v as u32;
        let stack = if i % 2 == 0 { Some(v as u32) } else { None };
        all.push(Record::Alloc {
            ts: v,
            tid,
            addr: v,
            size: v,
            stack,
        });
        all.push(Record::WholeAlloc {
            ts: v,
            tid,
            addr: !v,
            size: v,
            stack: stack.map(|s| s ^ 1),
        });
        all.push(Record::WholeAllocInPoll {
            ts: v,
            tid,
            addr: v,
            size: !v,
            stack,
            span: v ^ 5,
        });
        all.push(Record::Free {
            ts: v,
            tid,
            addr: v,
        });
        all.push(Record::Realloc {
            ts: v,
            tid,
            old: v,
            new: !v,
            size: v,
            stack,
            entry_ts: v,
        });
        for kind in ScopeKind::ALL {
            for phase in [Phase::Enter, Phase::Exit] {
                all.push(Record::Scope {
                    ts: v,
                    tid,
                    kind,
                    phase,
                    arg: v,
                });
            }
        }
        for event in [TaskEvent::Spawned, TaskEvent::Ended] {
            all.push(Record::Task {
                ts: v,
                tid,
                id: v,
                event,
                stack,
            });
        }
        all.push(Record::Stack {
            id: tid,
            frames: vec![v, 1, 2],
        });
        all.push(Record::Lost {
            ts: v,
            reason: LostReason::BufferFull,
            count: v,
        });
        all.push(Record::Session {
            ts: v,
            tid,
            fact: SessionFact::Id("a-session".into()),
        });
        // Each fact, and strings of every length's varint (and not ASCII).
        let text = "é".repeat(i * 20);
        for fact in [
            SessionFact::Created(text.clone()),
            SessionFact::WorkerQuit(text),
            SessionFact::Id(String::new()),
        ] {
            all.push(Record::Session { ts: v, tid, fact });
        }
        all.push(Record::End {
            ts: v,
            reason: EndReason::Finished,
        });
        all.push(Record::TraceOrigin { ts: v });
    }
    all
}
