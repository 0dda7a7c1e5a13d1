//! Where a recording goes: one file, or segments (`--rotate`) so a recording
//! that stays on for days takes a bounded disk. Both backends write through
//! it; `leakscope_recording::segments` says why rotated, and how the
//! segments read as one.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use leakscope_recording::output::{self, Existing, Owner};
use leakscope_recording::{
    EndReason, Header, Mapping, Record, RecordingWriter, Segment, StackId, segments,
};

/// `--rotate EVERY --keep N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// A new segment this often.
    pub every: Duration,
    /// Segments kept on disk, the one being written included; older ones
    /// are deleted.
    pub keep: u32,
}

/// The file (or the segments) a recording is written to.
pub(crate) struct Output {
    base: PathBuf,
    existing: Existing,
    owner: Option<Owner>,
    rotation: Option<Rotation>,
    /// The segment being written (from 1), when in segments.
    index: u32,
    /// The recording's header, once [`create`](Self::create) wrote it.
    header: Option<Header>,
    /// Every mapping written so far: each segment starts with them all.
    mappings: Vec<Mapping>,
    /// Stacks the producer numbered ([`forward`](Self::forward)), and which
    /// of them the current segment has written.
    stacks: HashMap<StackId, Vec<u64>>,
    stacks_written: HashSet<StackId>,
    next_at: tokio::time::Instant,
    /// Whether the producer coalesced the polls itself
    /// ([`RecordingWriter::coalesced_upstream`]).
    coalesced_upstream: bool,
}

pub(crate) type FileWriter = RecordingWriter<BufWriter<File>>;

impl Output {
    pub(crate) fn new(options: &super::AttachOptions) -> Self {
        Self {
            base: options.out.clone(),
            existing: options.existing,
            owner: options.owner,
            rotation: options.rotation,
            index: 1,
            header: None,
            mappings: Vec::new(),
            stacks: HashMap::new(),
            stacks_written: HashSet::new(),
            next_at: tokio::time::Instant::now()
                + options.rotation.map_or(super::NEVER, |r| r.every),
            coalesced_upstream: false,
        }
    }

    /// The producer coalesced the polls itself: every segment's writer
    /// leaves them as they come.
    pub(crate) fn coalesced_upstream(&mut self) {
        self.coalesced_upstream = true;
    }

    /// The file being written: the recording, or its current segment.
    pub(crate) fn path(&self) -> PathBuf {
        match self.rotation {
            Some(_) => segments::path(&self.base, self.index),
            None => self.base.clone(),
        }
    }

    /// Refuses an output that cannot be created, before anything is attached.
    /// In segments, the recording's name and its segments from an earlier run
    /// are refused too, or with `--force` deleted: `leakscope report NAME`
    /// would read those.
    pub(crate) fn check(&self) -> Result<()> {
        let path = self.path();
        output::check_path(&path, self.existing)
            .with_context(|| format!("cannot create {}", path.display()))?;
        if self.rotation.is_none() {
            return Ok(());
        }
        let mut earlier: Vec<PathBuf> = segments::list(&self.base)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, path)| path)
            .collect();
        if std::fs::symlink_metadata(&self.base).is_ok() {
            earlier.push(self.base.clone());
        }
        for path in earlier {
            output::check_path(&path, self.existing)
                .with_context(|| format!("cannot write segments of {}", self.base.display()))?;
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot replace {}", path.display()))?;
        }
        Ok(())
    }

    /// Creates the first file and writes `header` (in segments, saying which
    /// one each file is).
    pub(crate) fn create(&mut self, header: &Header) -> Result<FileWriter> {
        let mut header = header.clone();
        if self.rotation.is_some() {
            header.segment = Some(Segment {
                index: self.index,
                run_start_ns: header.clock.monotonic_ns,
            });
        }
        self.header = Some(header);
        self.next_at =
            tokio::time::Instant::now() + self.rotation.map_or(super::NEVER, |r| r.every);
        self.open()
    }

    /// Creates the current file and writes its header and the mappings.
    fn open(&self) -> Result<FileWriter> {
        let path = self.path();
        let header = self.header.as_ref().expect("created first");
        let file = output::create_file(&path, self.existing, self.owner)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, file), header)
            .with_context(|| format!("cannot write {}", path.display()))?;
        if self.coalesced_upstream {
            writer.coalesced_upstream();
        }
        for mapping in &self.mappings {
            writer.push(Record::Mapping(mapping.clone()))?;
        }
        writer.flush()?;
        Ok(writer)
    }

    /// Notes a record written, so the next segment repeats what it must.
    pub(crate) fn wrote(&mut self, record: &Record) {
        if self.rotation.is_some()
            && let Record::Mapping(mapping) = record
        {
            self.mappings.push(mapping.clone());
        }
    }

    /// Writes a record whose stacks were numbered by its producer (the
    /// cooperative stream: the process sends each stack once, for the whole
    /// run): in segments, a stack a segment has not yet written is written
    /// before the first record that needs it, so each segment reads alone.
    pub(crate) fn forward(&mut self, writer: &mut FileWriter, record: Record) -> io::Result<()> {
        self.wrote(&record);
        if self.rotation.is_some() {
            match &record {
                Record::Stack { id, frames } => {
                    self.stacks.insert(*id, frames.clone());
                    self.stacks_written.insert(*id);
                }
                Record::Alloc {
                    stack: Some(id), ..
                }
                | Record::WholeAlloc {
                    stack: Some(id), ..
                }
                | Record::WholeAllocInPoll {
                    stack: Some(id), ..
                }
                | Record::Realloc {
                    stack: Some(id), ..
                }
                | Record::Task {
                    stack: Some(id), ..
                } => {
                    if !self.stacks_written.contains(id)
                        && let Some(frames) = self.stacks.get(id)
                    {
                        self.stacks_written.insert(*id);
                        writer.push(Record::Stack {
                            id: *id,
                            frames: frames.clone(),
                        })?;
                    }
                }
                _ => {}
            }
        }
        writer.push(record)
    }

    /// Whether the current segment is due to end.
    pub(crate) fn due(&self) -> bool {
        tokio::time::Instant::now() >= self.next_at
    }

    /// Ends the current segment at `ts` and goes on in the next one; deletes
    /// the segments past `keep`. The segment ended is whole and readable
    /// before the next is begun.
    pub(crate) fn rotate(&mut self, writer: &mut FileWriter, ts: u64) -> Result<()> {
        let Some(rotation) = self.rotation else {
            return Ok(());
        };
        self.index += 1;
        if let Some(segment) = self.header.as_mut().and_then(|h| h.segment.as_mut()) {
            segment.index = self.index;
        }
        self.next_at = tokio::time::Instant::now() + rotation.every;
        let next = self.open()?;
        self.stacks_written.clear();
        let ended = std::mem::replace(writer, next);
        ended.finish(Record::End {
            ts,
            reason: EndReason::Rotated,
        })?;
        if let Some(gone) = self.index.checked_sub(rotation.keep) {
            // Never through a link: unlinking removes the name, not what a
            // link would point to.
            let _ = std::fs::remove_file(segments::path(&self.base, gone));
        }
        Ok(())
    }
}
