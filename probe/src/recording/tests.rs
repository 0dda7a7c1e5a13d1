use std::path::Path;

use super::*;

fn header() -> Header {
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
        settings: Settings {
            alloc_layer: AllocLayer::Libc,
            alloc_layer_reason: "test".into(),
            stack_depth: 32,
            preset: None,
            scope_probes: vec![],
            notes: vec![],
        },
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
                Record::Alloc {
                    ts: i,
                    tid: 7,
                    addr: 0x1000 + i,
                    size: 16,
                    stack: Some(i as u32),
                },
                Record::Free {
                    ts: i + 1,
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
