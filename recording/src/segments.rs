//! A recording that stays on, written in segments, read as one.
//!
//! `attach --rotate 1h --keep 24 --out day.lsrec` writes `day.000001.lsrec`,
//! `day.000002.lsrec`, ..., starting a new segment every hour and deleting
//! the oldest past 24: the disk a recording takes is bounded whatever how
//! long it stays on. *Rotated*, not windowed in one file: each segment is a
//! whole recording (its header, the target's mappings, its own stacks),
//! written by appending only, so a probe killed at any moment leaves every
//! segment readable, the segment being written included, and dropping the
//! oldest hour is deleting a file, never rewriting one.
//!
//! The segments that remain read as one recording ([`Chain`]): as if the
//! probe had attached when the oldest of them began. What an older segment
//! held is gone the way a recording attached later never saw it: blocks
//! allocated before and freed after read as frees of unknown blocks
//! (ignored), sessions born before are not counted. A leak is growth, and
//! growth shows in any window long enough (docs/report.md says how long at a
//! given rate).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::{EndReason, Header, Mapping, ReadError, Record, RecordingReader, StackId, Tail};

/// The path of segment `index` of the recording named `base`
/// (`day.lsrec` -> `day.000007.lsrec`).
pub fn path(base: &Path, index: u32) -> PathBuf {
    let stem = base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    base.with_file_name(format!("{stem}.{index:06}.lsrec"))
}

/// The segment index `file` has as a segment of `base`, if it is one.
fn index_of(base: &Path, file: &Path) -> Option<u32> {
    let stem = base.file_stem()?.to_str()?;
    let name = file.file_name()?.to_str()?;
    let digits = name.strip_prefix(stem)?.strip_prefix('.')?;
    let digits = digits.strip_suffix(".lsrec")?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The segments of `base` on disk, oldest first.
pub fn list(base: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let dir = match base.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file = base.with_file_name(entry.file_name());
        if let Some(index) = index_of(base, &file) {
            found.push((index, file));
        }
    }
    found.sort();
    Ok(found)
}

/// Consecutive segments of one run, read as one recording: each segment's
/// stack ids follow the previous segment's, a mapping every segment repeats
/// is given once, and a segment's `rotated` end is no end.
pub struct Chain {
    paths: Vec<PathBuf>,
    header: Header,
    reader: RecordingReader<BufReader<File>>,
    next: usize,
    /// Stack ids of the segments before the one being read.
    stack_base: StackId,
    stacks_here: StackId,
    mappings: Vec<Mapping>,
    /// Bytes of the segments read before this one.
    read_before: u64,
    total: u64,
    tail: Option<Tail>,
    /// What [`Iterator::next`] has yet to hand out of a frame, last first.
    pending: Vec<Record>,
}

impl Chain {
    /// `path` itself when it is a file; else, when it names a recording
    /// written in segments (`day.lsrec` for `day.000001.lsrec`, ...), the
    /// newest run of consecutive segments of it on disk.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let paths = if path.exists() {
            vec![path.to_owned()]
        } else {
            let found = list(path).unwrap_or_default();
            if found.is_empty() {
                // The error names the path asked for.
                return Self::from_paths(vec![path.to_owned()]);
            }
            consecutive(found)?
        };
        Self::from_paths(paths)
    }

    fn from_paths(paths: Vec<PathBuf>) -> Result<Self, ReadError> {
        let reader = RecordingReader::open(&paths[0])?;
        let header = reader.header().clone();
        let total = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        Ok(Self {
            paths,
            header,
            reader,
            next: 1,
            stack_base: 0,
            stacks_here: 0,
            mappings: Vec::new(),
            read_before: 0,
            total,
            tail: None,
            pending: Vec::new(),
        })
    }

    /// The first segment's header (the chain's).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The files read, oldest first.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Bytes of all the files.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes read so far, across the files.
    pub fn offset(&self) -> u64 {
        self.read_before + self.reader.offset()
    }

    /// `None` until the last record has been returned: the first torn
    /// segment's tail, else the last segment's.
    pub fn tail(&self) -> Option<&Tail> {
        self.tail.as_ref()
    }

    /// The next batch of records, as [`RecordingReader::next_frame`].
    pub fn next_frame(&mut self) -> Option<Vec<Record>> {
        loop {
            if let Some(batch) = self.reader.next_frame() {
                let batch = self.rebase(batch);
                if batch.is_empty() {
                    continue;
                }
                return Some(batch);
            }
            let tail = self.reader.tail().cloned().unwrap_or(Tail::Clean);
            if self.next >= self.paths.len() {
                self.tail = Some(match self.tail.take() {
                    Some(torn @ Tail::Torn { .. }) => torn,
                    _ => tail,
                });
                return None;
            }
            if matches!(tail, Tail::Torn { .. }) && self.tail.is_none() {
                self.tail = Some(tail);
            }
            // A segment that cannot be opened ends the chain there.
            let reader = match RecordingReader::open(&self.paths[self.next]) {
                Ok(reader) => reader,
                Err(e) => {
                    self.tail.get_or_insert(Tail::Torn {
                        offset: self.offset(),
                        reason: e.to_string(),
                    });
                    self.next = self.paths.len();
                    continue;
                }
            };
            self.read_before += std::fs::metadata(&self.paths[self.next - 1])
                .map_or(self.reader.offset(), |m| m.len());
            self.reader = reader;
            self.next += 1;
            self.stack_base += self.stacks_here;
            self.stacks_here = 0;
        }
    }

    fn rebase(&mut self, batch: Vec<Record>) -> Vec<Record> {
        let base = self.stack_base;
        let last = self.next >= self.paths.len();
        let mut out = Vec::with_capacity(batch.len());
        for mut record in batch {
            match &mut record {
                Record::Stack { id, .. } => {
                    self.stacks_here = self.stacks_here.max(*id + 1);
                    *id += base;
                }
                Record::Mapping(mapping) => {
                    if self.mappings.contains(mapping) {
                        continue;
                    }
                    self.mappings.push(mapping.clone());
                }
                Record::End {
                    reason: EndReason::Rotated,
                    ..
                } if !last => continue,
                _ => {}
            }
            if let Some(Some(stack)) = record.stack_mut() {
                *stack += base;
            }
            out.push(record);
        }
        out
    }
}

impl Iterator for Chain {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.pending.is_empty() {
            self.pending = self.next_frame()?;
            self.pending.reverse();
        }
        self.pending.pop()
    }
}

/// The newest run of segments whose indices follow each other and whose
/// headers say one run.
fn consecutive(found: Vec<(u32, PathBuf)>) -> Result<Vec<PathBuf>, ReadError> {
    let mut run: Vec<PathBuf> = Vec::new();
    let mut newest: Option<(u32, u64)> = None;
    for (index, path) in found.into_iter().rev() {
        let header = RecordingReader::open(&path)?.header().clone();
        let key = header.segment.map(|s| s.run_start_ns);
        match newest {
            None => newest = Some((index, key.unwrap_or(0))),
            Some((next, run_start)) => {
                if index + 1 != next || key != Some(run_start) {
                    break;
                }
                newest = Some((index, run_start));
            }
        }
        run.push(path);
    }
    run.reverse();
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocLayer, ClockOrigin, Identity, Producer, RecordingWriter, Segment, Settings};

    fn header(index: u32, run_start_ns: u64) -> Header {
        let mut header = Header::new(
            Producer::Ebpf,
            "test".into(),
            Identity {
                pid: 1,
                exe: "/bin/true".into(),
                build_id: None,
                rmcp_version: None,
            },
            Settings {
                alloc_layer: AllocLayer::Libc,
                alloc_layer_reason: "test".into(),
                stack_depth: 32,
                preset: None,
                scope_probes: vec![],
                missing_scopes: vec![],
                scope_functions: vec![],
                notes: vec![],
            },
        );
        header.clock = ClockOrigin {
            monotonic_ns: 0,
            unix_ns: 0,
        };
        header.segment = Some(Segment {
            index,
            run_start_ns,
        });
        header
    }

    fn mapping() -> Mapping {
        Mapping {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: "/bin/true".into(),
            build_id: None,
        }
    }

    /// Writes segment `index` of `base`: a mapping, a stack, an allocation
    /// on it at `ts`, then its end.
    fn segment(base: &Path, index: u32, run: u64, ts: u64, frames: &[u64], end: EndReason) {
        let mut writer = RecordingWriter::create(&path(base, index), &header(index, run)).unwrap();
        writer.push(Record::Mapping(mapping())).unwrap();
        let stack = writer.stack(frames).unwrap();
        writer
            .push(Record::Alloc {
                ts,
                tid: 1,
                addr: ts,
                size: 8,
                stack,
            })
            .unwrap();
        writer.finish(Record::End { ts, reason: end }).unwrap();
    }

    #[test]
    fn segments_read_as_one_recording_from_the_newest_run() {
        let dir = std::env::temp_dir().join(format!("leakscope-segments-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = dir.join("day.lsrec");
        assert_eq!(path(&base, 7), dir.join("day.000007.lsrec"));
        // An older run's segment, then a gap: neither is read.
        segment(&base, 1, 100, 1, &[9], EndReason::Interrupted);
        segment(&base, 3, 200, 3, &[1, 2], EndReason::Rotated);
        segment(&base, 4, 200, 4, &[3, 4], EndReason::Rotated);
        segment(&base, 5, 200, 5, &[1, 2], EndReason::Interrupted);
        std::fs::write(dir.join("day.notes.lsrec"), b"not a segment").unwrap();

        let mut chain = Chain::open(&base).unwrap();
        assert_eq!(chain.paths().len(), 3);
        assert_eq!(chain.header().segment.unwrap().index, 3);
        let records: Vec<Record> = chain.by_ref().collect();
        assert_eq!(chain.tail(), Some(&Tail::Clean));
        assert_eq!(chain.offset(), chain.total_bytes());
        let mappings = records
            .iter()
            .filter(|r| matches!(r, Record::Mapping(_)))
            .count();
        assert_eq!(mappings, 1, "the mapping every segment repeats, once");
        let ends: Vec<_> = records
            .iter()
            .filter_map(|r| match r {
                Record::End { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [EndReason::Interrupted], "a rotation is no end");
        // Each allocation's stack id names its own segment's frames.
        let mut stacks = std::collections::HashMap::new();
        for record in &records {
            match record {
                Record::Stack { id, frames } => {
                    assert!(
                        stacks.insert(*id, frames.clone()).is_none(),
                        "ids stay unique"
                    );
                }
                Record::Alloc { ts, stack, .. } => {
                    let frames = &stacks[&stack.unwrap()];
                    let want: &[u64] = match ts {
                        3 | 5 => &[1, 2],
                        _ => &[3, 4],
                    };
                    assert_eq!(frames, want);
                }
                _ => {}
            }
        }
        // A segment named alone reads alone.
        let one = Chain::open(&path(&base, 4)).unwrap();
        assert_eq!(one.paths().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
