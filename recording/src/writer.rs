//! Appending frames to a recording.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::coalesce::Coalescer;
use super::coding::Coding;
use super::{FORMAT_VERSION, Header, MAGIC, Record, StackId};

/// Records per frame at most; a frame is also cut by every [`RecordingWriter::flush`].
const FRAME_RECORDS: usize = 8192;

/// zstd's fastest level: records frames compress several times over (timestamps,
/// thread ids and addresses repeat their high bytes), at a cost the producer
/// pays on its own thread (the probe's; in-process, a thread of the target's,
/// which is why a stream to the probe is not compressed at all: `relay`).
const ZSTD_LEVEL: i32 = 1;

/// A sampled recording's frames are cut at most this often by
/// [`RecordingWriter::tick`], and compressed at [`SAMPLED_ZSTD_LEVEL`]: its
/// records are few (a sample per 512 KiB allocated, and the lifecycle), and
/// frames of a second took a fifth off a day of session churn (with the time
/// coding of format 10, a third). What a kill loses is then at most this much
/// of the recording's end.
pub const SAMPLED_FRAME_EVERY: Duration = Duration::from_secs(1);
/// Level 3: the probe compresses a cooperative target's stream again at this
/// level, on the cores the server runs on. Measured with `cargo xtask bench
/// --only saturation` and `--only always-on` (2026-12-04): at level 6 zstd
/// was ~43% of the probe's CPU relaying `fixture-server` at saturation, and
/// the probe took 0.028 ms of CPU per session (14% of what the unprobed
/// server takes); at level 3, 0.015-0.021 ms, while a day of session churn
/// wrote 815 MB (824 MB in the whole bench after) against level 6's 812 MB.
/// Level 9 took 1.9x level 6's time for no fewer bytes.
const SAMPLED_ZSTD_LEVEL: i32 = 3;
/// Level 3's tables, made small ([`SAMPLED_HASH_LOG`], [`SAMPLED_CHAIN_LOG`]):
/// 96 KiB instead of 768 KiB, while the stream is busy ([`Tables`]). The
/// probe runs between the server's threads on the same cores, and each time
/// it ran level 3's tables were out of the cache: zstd compressed the stream
/// at ~90 MB/s where `zstd -b3` does ~250, and was again over half of the
/// probe's CPU; with these the probe's CPU a session went ~20 -> ~11 µs
/// (`perf`, with the two changes beside it in 9bbdeb6). At saturation the
/// records' repeats are near each other (a thread's, a session's): on 40 MB
/// of a saturation recording's records, 11.72 MB against level 3's 11.78
/// (`zstd --zstd=strategy=2,wlog=21,hlog=14,clog=13,slog=1,mml=5`), level 1
/// 12.80. At 30 sessions a second they are not: a day of session churn took
/// 901 MB against 824 with level 3's tables (its recording's one-second frames
/// re-coded, `scripts/zstd-tables.py`: 5.4% more), so a quiet stream keeps
/// level 3's.
const SAMPLED_HASH_LOG: u32 = 14;
const SAMPLED_CHAIN_LOG: u32 = 13;

/// Frames in a row cut by their record count ([`FRAME_RECORDS`], a busy
/// stream: ~26 a second at saturation) before the small tables are taken,
/// and frames in a row cut by the clock (a second each) before level 3's
/// are taken back.
const BUSY_FRAMES: u32 = 4;
const QUIET_FRAMES: u32 = 10;

/// Which tables a sampled recording's compressor has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tables {
    /// Level 3's own: a quiet stream, whose repeats are seconds apart.
    Level,
    /// [`SAMPLED_HASH_LOG`], [`SAMPLED_CHAIN_LOG`]: a busy one.
    Small,
}

/// A sampled recording's compressor: one zstd stream, whose tables follow
/// the rate. Tables change only between zstd frames, so a change ends the
/// zstd frame and the next flush begins one; a reader decodes the frames of
/// a stream one after the other.
struct Stream {
    encoder: zstd::stream::raw::Encoder<'static>,
    tables: Tables,
    /// Frames in a row that wanted the other tables.
    wanting: u32,
}

impl Stream {
    fn new() -> io::Result<Self> {
        Ok(Self {
            encoder: zstd::stream::raw::Encoder::new(SAMPLED_ZSTD_LEVEL)?,
            tables: Tables::Level,
            wanting: 0,
        })
    }

    /// Appends `plain`, compressed, to `frame`; `busy` when the frame was cut
    /// by its record count. Returns the bytes appended.
    fn compress(&mut self, plain: &[u8], frame: &mut Vec<u8>, busy: bool) -> io::Result<usize> {
        use zstd::stream::raw::{Operation, OutBuffer};
        use zstd::zstd_safe::CParameter;
        let start = frame.len();
        let (wanted, after) = if busy {
            (Tables::Small, BUSY_FRAMES)
        } else {
            (Tables::Level, QUIET_FRAMES)
        };
        self.wanting = if wanted == self.tables {
            0
        } else {
            self.wanting + 1
        };
        if self.wanting >= after {
            // The zstd frame ends here; the next begins with the other tables.
            loop {
                frame.reserve(4096);
                let at = frame.len();
                let mut output = OutBuffer::around_pos(frame, at);
                if self.encoder.finish(&mut output, true)? == 0 {
                    break;
                }
            }
            self.encoder.reinit()?;
            let (hash, chain) = match wanted {
                Tables::Small => (SAMPLED_HASH_LOG, SAMPLED_CHAIN_LOG),
                // 0: the level's own.
                Tables::Level => (0, 0),
            };
            self.encoder.set_parameter(CParameter::HashLog(hash))?;
            self.encoder.set_parameter(CParameter::ChainLog(chain))?;
            self.tables = wanted;
            self.wanting = 0;
        }
        flushed(&mut self.encoder, plain, frame)?;
        Ok(frame.len() - start)
    }
}

/// Records frames are postcard-encoded and zstd-compressed (since format 4).
/// Records are buffered in memory and written as one frame by [`tick`](Self::tick)
/// (call it regularly, every few ms: what is not written is lost if the process
/// dies; a sampled recording's ticks write once a second, [`SAMPLED_FRAME_EVERY`]),
/// by [`flush`](Self::flush) at once, or when [`FRAME_RECORDS`] are pending. Each frame is one `write_all` followed by a flush
/// of the underlying writer, so a kill leaves at most one torn frame at the end.
///
/// Stacks are deduplicated here, for every producer: [`stack`](Self::stack) gives
/// each distinct stack one id and writes its [`Record::Stack`] before its first use.
pub struct RecordingWriter<W: Write = BufWriter<File>> {
    out: W,
    pending: Vec<Record>,
    frames: u64,
    /// Kept from frame to frame, as the buffers below: a producer writes a
    /// frame every 10 ms or 8,192 records, and making a zstd context and
    /// growing fresh buffers each time showed in its profile.
    compression: Compression,
    /// The pending records, postcard-encoded.
    encoded: Vec<u8>,
    /// The frame being written: length, checksum, compressed payload.
    frame: Vec<u8>,
    /// foldhash, not std's SipHash: every allocation's stack (up to 24
    /// return addresses) is hashed here, on the producer's one writer thread.
    stacks: HashMap<Vec<u64>, StackId, foldhash::fast::RandomState>,
    /// A sampled recording's polls that hold nothing are thinned (see
    /// [`coalesce`](super::coalesce)); a recording of every call keeps them all.
    coalescer: Option<Coalescer>,
    /// How often [`tick`](Self::tick) cuts a frame: a sampled recording's
    /// [`SAMPLED_FRAME_EVERY`], or at every tick.
    frame_every: Option<Duration>,
    last_frame: Instant,
    /// How this format codes the records (see [`Coding`]).
    coding: Coding,
}

impl RecordingWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path, header: &Header) -> io::Result<Self> {
        let file = File::create(path)?;
        Self::new(BufWriter::with_capacity(1 << 20, file), header)
    }
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        let payload = postcard::to_stdvec(header).map_err(io::Error::other)?;
        write_frame(&mut out, &payload)?;
        out.flush()?;
        let coding = Coding::of(FORMAT_VERSION, header);
        let sampled = header.sampling.is_sampled();
        Ok(Self {
            out,
            pending: Vec::with_capacity(FRAME_RECORDS),
            frames: 0,
            compression: if coding.streamed {
                Compression::Stream(Stream::new()?)
            } else {
                Compression::Frames(zstd::bulk::Compressor::new(ZSTD_LEVEL)?)
            },
            encoded: Vec::new(),
            frame: Vec::new(),
            stacks: HashMap::default(),
            coalescer: sampled.then(Coalescer::default),
            frame_every: sampled.then_some(SAMPLED_FRAME_EVERY),
            last_frame: Instant::now(),
            coding,
        })
    }

    /// Writes from now on for a stream that another writer re-encodes (the
    /// cooperative target's, which the probe decodes and writes to its file
    /// at the recording's level), where the CPU spent is the target's:
    /// - frames are stored, uncompressed: even zstd's fastest level was 9.5k
    ///   instructions a session of the target's at saturation (callgrind,
    ///   rmcp's stock service, sampled), a seventh of what recording cost it,
    ///   for bytes that cross a local socket once;
    /// - polls are not coalesced: the writer that re-encodes them does it
    ///   (its header is the same, sampled or not), so here it was ~2k
    ///   instructions a session of the target's for nothing.
    pub fn relay(&mut self) {
        self.compression = Compression::Stored;
        self.coalescer = None;
    }

    /// Leaves the polls as the producer wrote them: a cooperative target of
    /// this format coalesces on the threads that make the polls
    /// (`leakscope_inproc`'s `polls`, [`PollsKept`](super::coalesce::PollsKept)),
    /// so the probe relaying its stream found next to nothing to drop, where
    /// the pass (its maps of objects and of tasks born) was ~13% of the
    /// probe's CPU at saturation, CPU the server's cores lose.
    pub fn coalesced_upstream(&mut self) {
        self.coalescer = None;
    }

    /// The id of the stack `frames` (return addresses, innermost first), writing a
    /// [`Record::Stack`] the first time it is seen; `None` for an empty stack.
    /// Looks up by slice, so a known stack (the common case) costs no allocation.
    pub fn stack(&mut self, frames: &[u64]) -> io::Result<Option<StackId>> {
        if frames.is_empty() {
            return Ok(None);
        }
        if let Some(&id) = self.stacks.get(frames) {
            return Ok(Some(id));
        }
        let id = self.stacks.len() as StackId;
        self.stacks.insert(frames.to_vec(), id);
        self.push(Record::Stack {
            id,
            frames: frames.to_vec(),
        })?;
        Ok(Some(id))
    }

    /// Distinct stacks written so far.
    pub fn stacks(&self) -> usize {
        self.stacks.len()
    }

    pub fn push(&mut self, record: Record) -> io::Result<()> {
        self.pending.push(record);
        if self.pending.len() >= FRAME_RECORDS {
            self.flush()?;
        }
        Ok(())
    }

    /// The producer's regular call: writes the pending records as a frame
    /// when one is due (at every tick, or once a [`SAMPLED_FRAME_EVERY`] in a
    /// sampled recording).
    pub fn tick(&mut self) -> io::Result<()> {
        match self.frame_every {
            Some(every) if self.last_frame.elapsed() < every => Ok(()),
            _ => self.flush(),
        }
    }

    /// Writes the pending records as one frame now and flushes it to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        let busy = self.pending.len() >= FRAME_RECORDS;
        if let Some(coalescer) = &mut self.coalescer {
            coalescer.coalesce(&mut self.pending);
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        self.coding.write(&mut self.pending);
        self.encoded.clear();
        super::encode::records(&self.pending, &mut self.encoded)?;
        // The payload is compressed straight into the frame, after room for
        // its length and checksum.
        self.frame.clear();
        self.frame.extend_from_slice(&[0; 8]);
        self.frame
            .reserve(zstd::zstd_safe::compress_bound(self.encoded.len()));
        let compressed = match &mut self.compression {
            Compression::Frames(compressor) => {
                let mut cursor = io::Cursor::new(&mut self.frame);
                cursor.set_position(8);
                compressor.compress_to_buffer(&self.encoded, &mut cursor)?
            }
            Compression::Stream(stream) => stream.compress(&self.encoded, &mut self.frame, busy)?,
            Compression::Stored => stored_frame(&self.encoded, &mut self.frame)?,
        };
        let length = u32::try_from(compressed).map_err(io::Error::other)?;
        let checksum = crc32fast::hash(&self.frame[8..]);
        self.frame[..4].copy_from_slice(&length.to_le_bytes());
        self.frame[4..8].copy_from_slice(&checksum.to_le_bytes());
        self.out.write_all(&self.frame)?;
        self.out.flush()?;
        self.pending.clear();
        self.frames += 1;
        self.last_frame = Instant::now();
        Ok(())
    }

    /// Empty polls left out so far (a sampled recording's; see
    /// [`coalesce`](super::coalesce)).
    pub fn polls_coalesced(&self) -> u64 {
        self.coalescer.as_ref().map_or(0, Coalescer::dropped)
    }

    /// Frames written so far (the header not counted).
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Writes `end` (normally a [`Record::End`]), flushes, and hands back the writer.
    pub fn finish(mut self, end: Record) -> io::Result<W> {
        self.pending.push(end);
        self.flush()?;
        Ok(self.out)
    }
}

/// How a writer compresses its records frames.
enum Compression {
    /// Each frame a zstd frame of its own: a recording of every call, whose
    /// frames are many and large (one every tick).
    Frames(zstd::bulk::Compressor<'static>),
    /// Each frame the next flush of the file's one zstd stream (a sampled
    /// recording, since format 13): its frames are a second's records, ~36
    /// KB of plaintext on a day of session churn, and each compressed alone
    /// shared nothing with the second before; one stream, flushed at each
    /// frame, took ~12% off that day (`scripts/day-bytes-model.py`). A
    /// flush ends on a block boundary, so every complete frame decodes
    /// with the ones before it: a kill still loses only what was not
    /// written, and the reader reads the file from its start anyway.
    Stream(Stream),
    /// Stored, not compressed ([`relay`](RecordingWriter::relay)).
    Stored,
}

/// Appends to `frame` the stream's compression of `plain`, flushed so that
/// a reader decodes all of it from this frame and the ones before, and
/// returns the bytes appended.
fn flushed(
    encoder: &mut zstd::stream::raw::Encoder<'static>,
    plain: &[u8],
    frame: &mut Vec<u8>,
) -> io::Result<usize> {
    use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
    let start = frame.len();
    let mut input = InBuffer::around(plain);
    loop {
        // Room for the whole of it at once, as a rule (the bound, plus a
        // block header per flush and the frame's header at the start).
        frame.reserve(zstd::zstd_safe::compress_bound(plain.len() - input.pos()) + 64);
        let at = frame.len();
        let mut output = OutBuffer::around_pos(frame, at);
        if input.pos() < plain.len() {
            encoder.run(&mut input, &mut output)?;
        } else if encoder.flush(&mut output)? == 0 {
            break;
        }
    }
    Ok(frame.len() - start)
}

/// zstd's frame magic number (RFC 8878, 3.1.1).
const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// The largest block a zstd frame may hold (RFC 8878, 3.1.1.2.3).
const ZSTD_BLOCK_MAX: usize = 128 << 10;

/// Appends `plain` to `frame` as a zstd frame of raw (stored) blocks, and
/// returns the bytes appended. zstd has no level that stores: every level,
/// even the negative ones, searches for matches; a frame of raw blocks is
/// what it writes itself for data that does not compress (RFC 8878,
/// 3.1.1.2: `Raw_Block`), so every reader of recordings, and any zstd
/// decoder, reads it unchanged. Its header gives the content size, single
/// segment, no checksum (the frame's own CRC32 covers it).
fn stored_frame(plain: &[u8], frame: &mut Vec<u8>) -> io::Result<usize> {
    let size = u32::try_from(plain.len()).map_err(io::Error::other)?;
    let start = frame.len();
    frame.reserve(4 + 1 + 4 + plain.len() + 3 * (plain.len() / ZSTD_BLOCK_MAX + 1));
    frame.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
    // Frame_Header_Descriptor: Frame_Content_Size_flag 2 (4 bytes),
    // Single_Segment_flag (no Window_Descriptor), no checksum, no dictionary.
    frame.push(0b1010_0000);
    frame.extend_from_slice(&size.to_le_bytes());
    let mut blocks = plain.chunks(ZSTD_BLOCK_MAX).peekable();
    if blocks.peek().is_none() {
        // One empty last block.
        frame.extend_from_slice(&[1, 0, 0]);
    }
    while let Some(block) = blocks.next() {
        let last = u32::from(blocks.peek().is_none());
        // Block_Header: Last_Block, Block_Type 0 (Raw_Block), Block_Size.
        let header = last | ((block.len() as u32) << 3);
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.extend_from_slice(block);
    }
    Ok(frame.len() - start)
}

fn write_frame(out: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(payload.len() + 8);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    frame.extend_from_slice(payload);
    out.write_all(&frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A busy stream takes the small tables, a quiet one level 3's back, and
    /// every record reads back the same across the zstd frames that makes.
    #[test]
    fn the_streams_tables_follow_the_rate_and_it_reads_back_whole() {
        fn tables(writer: &RecordingWriter<Vec<u8>>) -> Tables {
            match &writer.compression {
                Compression::Stream(stream) => stream.tables,
                _ => panic!("a sampled recording is one stream"),
            }
        }
        let header = crate::tests::header();
        assert!(header.sampling.is_sampled());
        let mut writer = RecordingWriter::new(Vec::new(), &header).unwrap();
        let mut written = Vec::new();
        let mut ts = 0;
        let mut record = |writer: &mut RecordingWriter<Vec<u8>>| {
            ts += 1_000;
            let alloc = Record::Alloc {
                ts,
                tid: 7,
                addr: 0x1000 + ts,
                size: 16 + ts % 64,
                stack: None,
            };
            written.push(alloc.clone());
            writer.push(alloc).unwrap();
        };
        let quiet = |writer: &mut RecordingWriter<Vec<u8>>, record: &mut dyn FnMut(&mut _)| {
            for _ in 0..100 {
                record(writer);
            }
            writer.flush().unwrap();
        };
        for _ in 0..3 {
            quiet(&mut writer, &mut record);
        }
        assert_eq!(tables(&writer), Tables::Level);
        // Frames cut by their record count (`push` flushes them).
        for _ in 0..FRAME_RECORDS * BUSY_FRAMES as usize {
            record(&mut writer);
        }
        assert_eq!(tables(&writer), Tables::Small);
        for _ in 0..QUIET_FRAMES - 1 {
            quiet(&mut writer, &mut record);
        }
        assert_eq!(tables(&writer), Tables::Small, "not before {QUIET_FRAMES}");
        quiet(&mut writer, &mut record);
        assert_eq!(tables(&writer), Tables::Level);
        quiet(&mut writer, &mut record);
        let end = Record::End {
            ts: ts + 1_000,
            reason: crate::EndReason::Duration,
        };
        let bytes = writer.finish(end).unwrap();
        let mut reader =
            crate::RecordingReader::new(&bytes[..], std::path::Path::new("tables.lsrec")).unwrap();
        let read: Vec<Record> = reader.by_ref().collect();
        assert_eq!(read[..written.len()], written[..]);
        assert_eq!(read.len(), written.len() + 1);
        assert_eq!(reader.tail(), Some(&crate::Tail::Clean));
    }

    /// zstd itself reads a stored frame: empty, one block, a block's worth
    /// exactly, and several blocks.
    #[test]
    fn zstd_reads_a_stored_frame() {
        for len in [
            0,
            1,
            1000,
            ZSTD_BLOCK_MAX,
            ZSTD_BLOCK_MAX + 1,
            3 * ZSTD_BLOCK_MAX + 77,
        ] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let mut frame = vec![9; 8];
            let n = stored_frame(&plain, &mut frame).unwrap();
            assert_eq!(n, frame.len() - 8);
            let size = zstd::zstd_safe::get_frame_content_size(&frame[8..]);
            assert!(matches!(size, Ok(Some(n)) if n == len as u64));
            let back = zstd::bulk::decompress(&frame[8..], len.max(1)).unwrap();
            assert_eq!(back, plain, "{len} bytes");
        }
    }
}
