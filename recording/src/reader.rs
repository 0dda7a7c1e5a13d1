//! Reading a recording back, record by record, tolerating a torn tail.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::coding::Coding;
use super::legacy::{HeaderV1, HeaderV4, HeaderV7, HeaderV8, HeaderV10, RecordV1};
use super::{FORMAT_VERSION, Header, MAGIC, MAX_FRAME_BYTES, OLDEST_FORMAT_VERSION, Record};

/// Why a file cannot be read as a recording at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The cause is in the message and not a `source`: a binary printing the
    /// error's chain (`{:#}`) said it twice ("cannot read x.lsrec: No such file
    /// or directory (os error 2): No such file or directory (os error 2)").
    #[error("cannot read {path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("{path} is not a leakscope recording (it does not start with the .lsrec magic bytes)")]
    NotARecording { path: PathBuf },
    #[error(
        "{path} is a recording of format version {found}, newer than this leakscope reads ({FORMAT_VERSION}); upgrade leakscope"
    )]
    NewerVersion { path: PathBuf, found: u32 },
    #[error(
        "{path} is a recording of format version {found}, older than any this leakscope reads ({OLDEST_FORMAT_VERSION}..={FORMAT_VERSION})"
    )]
    OlderVersion { path: PathBuf, found: u32 },
    #[error("{path} is truncated before the end of its header: nothing to read")]
    TruncatedHeader { path: PathBuf },
    #[error("{path} has a corrupt header: {reason}")]
    BadHeader { path: PathBuf, reason: String },
}

/// How the recording ended, known once all records have been read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belonged to a complete, valid frame.
    Clean,
    /// The bytes from `offset` on are not a complete valid frame (the producer was
    /// killed mid-write, or the file was cut); everything before was read.
    Torn { offset: u64, reason: String },
}

/// Iterates over the records of a recording; check [`tail`](Self::tail) at the end.
pub struct RecordingReader<R: Read = BufReader<File>> {
    input: R,
    header: Header,
    /// The format version the file was written in.
    version: u32,
    /// How that version codes this recording's records.
    coding: Coding,
    batch: std::vec::IntoIter<Record>,
    offset: u64,
    tail: Option<Tail>,
    /// Reused across frames: one decompression context and one output buffer,
    /// instead of a new context and a growing buffer per frame.
    unzip: Unzip,
}

#[derive(Default)]
struct Unzip {
    context: Option<zstd::bulk::Decompressor<'static>>,
    plain: Vec<u8>,
    /// Bytes decompressed so far, across every frame (see [`decode_budget`]).
    decoded: u64,
    /// Records decoded so far, across every frame (see [`record_budget`]).
    records: u64,
    /// A sampled recording's frames since format 13: flushes of one zstd
    /// stream, decoded in order by one context (the writer's `Compression`).
    stream: Option<zstd::stream::raw::Decoder<'static>>,
    /// Whether the frames are so ([`Coding::streamed`]).
    streamed: bool,
}

/// What a whole file may decompress to, given the `read` bytes of it so far:
/// each frame is capped at [`MAX_FRAME_BYTES`], but a crafted file of ~100 KB
/// could hold many frames that each expand 64 MiB, and cost many GB. Real
/// recordings expand far less: 1.2x to 5.3x for every recording the test
/// suite leaves behind (the demo's 2.9x, the overload test's 5.3x, 10 k
/// pairs/s of one size pattern 5.1x; `cargo run -p leakscope-recording
/// --example expansion -- FILES` prints it), so 64x leaves a wide margin. The
/// floor lets any small file through whole.
pub fn decode_budget(read: u64) -> u64 {
    const FLOOR: u64 = 256 << 20;
    const RATIO: u64 = 64;
    FLOOR.saturating_add(read.saturating_mul(RATIO))
}

/// The most records a frame may hold: eight times what the writer puts in
/// one (its frames end at 8192 records). A frame of tiny records expands
/// ~10x from its plaintext into [`Record`]s in memory; without a cap on the
/// count, 64 MiB of plaintext would be gigabytes.
pub const MAX_FRAME_RECORDS: u64 = 65_536;

/// How many records a whole file may decode to, given the `read` bytes of it
/// so far: the plaintext budget ([`decode_budget`]) bounds bytes, but a
/// crafted file of ~100 KB of tiny records would still decode to tens of
/// millions of them. A real recording takes more than a byte per record
/// (its times alone differ); 4 per byte read, past a floor of 4 M, is a wide
/// margin.
pub fn record_budget(read: u64) -> u64 {
    const FLOOR: u64 = 4 << 20;
    const PER_BYTE: u64 = 4;
    FLOOR.saturating_add(read.saturating_mul(PER_BYTE))
}

impl RecordingReader<BufReader<File>> {
    /// Opens a recording file: a regular file only, opened without blocking
    /// (a FIFO named, or swapped in, fails at once instead of hanging).
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let file = crate::target::open_regular(path, None).map_err(|error| ReadError::Io {
            path: path.to_owned(),
            error,
        })?;
        // Regular files do not block; reads are plain blocking reads again.
        crate::output::set_blocking(&file).map_err(|error| ReadError::Io {
            path: path.to_owned(),
            error,
        })?;
        Self::new(BufReader::with_capacity(1 << 20, file), path)
    }
}

enum Frame {
    Payload(Vec<u8>),
    End,
    Torn(String),
}

impl<R: Read> RecordingReader<R> {
    /// `path` only names the input in errors.
    pub fn new(mut input: R, path: &Path) -> Result<Self, ReadError> {
        let io_error = |error| ReadError::Io {
            path: path.to_owned(),
            error,
        };
        let mut start = [0u8; 12];
        let got = read_up_to(&mut input, &mut start).map_err(io_error)?;
        if got < MAGIC.len() || start[..8] != MAGIC {
            return Err(ReadError::NotARecording {
                path: path.to_owned(),
            });
        }
        if got < start.len() {
            return Err(ReadError::TruncatedHeader {
                path: path.to_owned(),
            });
        }
        let found = u32::from_le_bytes(start[8..12].try_into().expect("4 bytes"));
        if found > FORMAT_VERSION {
            return Err(ReadError::NewerVersion {
                path: path.to_owned(),
                found,
            });
        }
        if found < OLDEST_FORMAT_VERSION {
            return Err(ReadError::OlderVersion {
                path: path.to_owned(),
                found,
            });
        }
        let mut offset = start.len() as u64;
        let header = match read_frame(&mut input, &mut offset).map_err(io_error)? {
            Frame::Payload(bytes) => {
                decode_header(&bytes, found).map_err(|e| ReadError::BadHeader {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?
            }
            Frame::End | Frame::Torn(_) => {
                return Err(ReadError::TruncatedHeader {
                    path: path.to_owned(),
                });
            }
        };
        let coding = Coding::of(found, &header);
        Ok(Self {
            input,
            header,
            version: found,
            coding,
            batch: Vec::new().into_iter(),
            offset,
            tail: None,
            unzip: Unzip {
                streamed: coding.streamed,
                ..Unzip::default()
            },
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The format version the file was written in (older ones are read as today's).
    pub fn format_version(&self) -> u32 {
        self.version
    }

    /// `None` until the last record has been returned.
    pub fn tail(&self) -> Option<&Tail> {
        self.tail.as_ref()
    }

    /// Bytes the frames read so far decompressed to.
    pub fn decoded_bytes(&self) -> u64 {
        self.unzip.decoded
    }

    /// Records decoded so far (see [`record_budget`]).
    pub fn decoded_records(&self) -> u64 {
        self.unzip.records
    }

    /// Bytes consumed so far (for progress bars).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The rest of the current frame's records, or the next frame's, at once:
    /// for a reader on a thread of its own, handing whole batches to a consumer.
    /// `None` at the end, as [`next`](Iterator::next).
    pub fn next_frame(&mut self) -> Option<Vec<Record>> {
        if self.batch.len() == 0 && (self.tail.is_some() || !self.next_batch()) {
            return None;
        }
        Some(std::mem::replace(&mut self.batch, Vec::new().into_iter()).collect())
    }

    fn next_batch(&mut self) -> bool {
        let frame_start = self.offset;
        let frame = match read_frame(&mut self.input, &mut self.offset) {
            Ok(frame) => frame,
            Err(e) => Frame::Torn(e.to_string()),
        };
        match frame {
            Frame::Payload(bytes) => match decode_records(
                &bytes,
                self.version,
                &mut self.unzip,
                Budget {
                    bytes: decode_budget(self.offset),
                    records: record_budget(self.offset),
                },
            ) {
                Ok(mut records) => {
                    self.coding.read(&mut records);
                    self.batch = records.into_iter();
                    true
                }
                Err(e) => {
                    self.tail = Some(Tail::Torn {
                        offset: frame_start,
                        reason: format!("undecodable frame: {e}"),
                    });
                    false
                }
            },
            Frame::End => {
                self.tail = Some(Tail::Clean);
                false
            }
            Frame::Torn(reason) => {
                self.tail = Some(Tail::Torn {
                    offset: frame_start,
                    reason,
                });
                false
            }
        }
    }
}

impl<R: Read> Iterator for RecordingReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        loop {
            if let Some(record) = self.batch.next() {
                return Some(record);
            }
            if self.tail.is_some() || !self.next_batch() {
                return None;
            }
        }
    }
}

/// What a whole file may decode to so far.
struct Budget {
    bytes: u64,
    records: u64,
}

/// A records frame of a recording of format `version`, as today's [`Record`]s.
fn decode_records(
    bytes: &[u8],
    version: u32,
    unzip: &mut Unzip,
    budget: Budget,
) -> Result<Vec<Record>, String> {
    let records_left = budget.records.saturating_sub(unzip.records);
    let records = decode_plain(bytes, version, unzip, budget.bytes, records_left)?;
    unzip.records += records.len() as u64;
    Ok(records)
}

/// The records of a frame whose plaintext may be `records_left` records at
/// most (and [`MAX_FRAME_RECORDS`]): counted from the list's length prefix,
/// before any is decoded.
fn records_of(plain: &[u8], records_left: u64) -> Result<Vec<Record>, String> {
    let (count, prefix) =
        crate::decode::list_length(plain).ok_or("a frame's record count is unreadable")?;
    if count > MAX_FRAME_RECORDS {
        return Err(format!(
            "a frame holds {count} records, more than a writer ever puts in one ({MAX_FRAME_RECORDS})"
        ));
    }
    if count > records_left {
        return Err(
            "the frames hold more records than a real recording of this size ever does (a crafted file?)"
                .into(),
        );
    }
    // Bounded above: `count` is at most MAX_FRAME_RECORDS here.
    crate::decode::records(plain, prefix, count as usize)
}

fn decode_plain(
    bytes: &[u8],
    version: u32,
    unzip: &mut Unzip,
    budget: u64,
    records_left: u64,
) -> Result<Vec<Record>, String> {
    if version == 1 {
        let records: Vec<RecordV1> = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
        return Ok(records.into_iter().map(Record::from).collect());
    }
    if version < 4 {
        return postcard::from_bytes(bytes).map_err(|e| e.to_string());
    }
    // Bounded: a crafted frame cannot expand past what a writer ever makes,
    // nor the whole file past its budget.
    let left = budget.saturating_sub(unzip.decoded);
    let over_budget = || {
        format!(
            "the frames expand past {} MiB, more than a real recording of this size ever does (a crafted file?)",
            budget >> 20
        )
    };
    if unzip.streamed {
        let cap = u64::from(MAX_FRAME_BYTES).min(left);
        let plain = std::mem::take(&mut unzip.plain);
        let plain = streamed(bytes, unzip, plain, cap);
        let records = plain.as_deref().map_err(Clone::clone).and_then(|plain| {
            if plain.len() as u64 > cap {
                return Err(if cap < u64::from(MAX_FRAME_BYTES) {
                    over_budget()
                } else {
                    format!("a frame expands past {MAX_FRAME_BYTES} bytes")
                });
            }
            records_of(plain, records_left)
        });
        if let Ok(plain) = plain {
            unzip.decoded += (plain.len() as u64).min(cap);
            unzip.plain = plain;
        }
        return records;
    }
    // The writer's frames say how big they expand: decompress in one call.
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(bytes) {
        if size > u64::from(MAX_FRAME_BYTES) {
            return Err(format!("a frame expands past {MAX_FRAME_BYTES} bytes"));
        }
        if size > left {
            return Err(over_budget());
        }
        unzip.decoded += size;
        let context = match &mut unzip.context {
            Some(context) => context,
            empty => {
                empty.insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?)
            }
        };
        unzip.plain.clear();
        unzip.plain.reserve(size as usize);
        context
            .decompress_to_buffer(bytes, &mut unzip.plain)
            .map_err(|e| format!("zstd: {e}"))?;
        return records_of(&unzip.plain, records_left);
    }
    let mut plain = Vec::new();
    let cap = u64::from(MAX_FRAME_BYTES).min(left);
    zstd::stream::read::Decoder::with_buffer(bytes)
        .and_then(|decoder| decoder.take(cap + 1).read_to_end(&mut plain))
        .map_err(|e| format!("zstd: {e}"))?;
    if plain.len() as u64 > cap {
        return Err(if cap < u64::from(MAX_FRAME_BYTES) {
            over_budget()
        } else {
            format!("a frame expands past {MAX_FRAME_BYTES} bytes")
        });
    }
    unzip.decoded += plain.len() as u64;
    records_of(&plain, records_left)
}

/// The header frame of a recording of format `version`, as today's [`Header`].
fn decode_header(bytes: &[u8], version: u32) -> Result<Header, postcard::Error> {
    match version {
        1 => postcard::from_bytes::<HeaderV1>(bytes).map(Header::from),
        2..=4 => postcard::from_bytes::<HeaderV4>(bytes).map(Header::from),
        5..=7 => postcard::from_bytes::<HeaderV7>(bytes).map(Header::from),
        8 => postcard::from_bytes::<HeaderV8>(bytes).map(Header::from),
        9 | 10 => postcard::from_bytes::<HeaderV10>(bytes).map(Header::from),
        _ => postcard::from_bytes(bytes),
    }
}

/// Reads one frame; `offset` advances past it only when it is complete and valid.
fn read_frame(input: &mut impl Read, offset: &mut u64) -> io::Result<Frame> {
    let mut prefix = [0u8; 8];
    let got = read_up_to(input, &mut prefix)?;
    if got == 0 {
        return Ok(Frame::End);
    }
    if got < prefix.len() {
        return Ok(Frame::Torn(format!(
            "frame prefix cut after {got} of 8 bytes"
        )));
    }
    let len = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(prefix[4..].try_into().expect("4 bytes"));
    if len > MAX_FRAME_BYTES {
        return Ok(Frame::Torn(format!("frame length {len} is not plausible")));
    }
    let mut payload = vec![0u8; len as usize];
    let got = read_up_to(input, &mut payload)?;
    if got < payload.len() {
        return Ok(Frame::Torn(format!("frame cut after {got} of {len} bytes")));
    }
    if crc32fast::hash(&payload) != crc {
        return Ok(Frame::Torn("frame checksum mismatch".into()));
    }
    *offset += 8 + len as u64;
    Ok(Frame::Payload(payload))
}

/// Like `read_exact`, but reports how much it got instead of failing at EOF.
fn read_up_to(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The plaintext of a sampled recording's frame since format 13: the next
/// part of the file's one zstd stream (or a whole zstd frame: a cooperative
/// target's stored ones), decoded into `plain` up to just past `cap` bytes.
fn streamed(
    bytes: &[u8],
    unzip: &mut Unzip,
    mut plain: Vec<u8>,
    cap: u64,
) -> Result<Vec<u8>, String> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let zstd = |e: io::Error| format!("zstd: {e}");
    let decoder = match &mut unzip.stream {
        Some(decoder) => decoder,
        empty => empty.insert(Decoder::new().map_err(zstd)?),
    };
    plain.clear();
    let mut input = InBuffer::around(bytes);
    loop {
        if plain.capacity() - plain.len() < 64 << 10 {
            plain.reserve(256 << 10);
        }
        let at = plain.len();
        let mut output = OutBuffer::around_pos(&mut plain, at);
        decoder.run(&mut input, &mut output).map_err(zstd)?;
        let full = output.pos() == output.capacity();
        if plain.len() as u64 > cap {
            return Ok(plain);
        }
        // All of the frame read, and all it holds written out.
        if input.pos() == bytes.len() && !full {
            return Ok(plain);
        }
    }
}
