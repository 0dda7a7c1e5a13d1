//! The in-process recorder: a preallocated event buffer filled by the allocator and
//! the session layer, drained by a background writer into a recording.

use std::cell::Cell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use leakscope_recording::target::Target;
use leakscope_recording::{
    AllocLayer, EndReason, FramePointers, Header, LostReason, Phase, Producer, Record,
    RecordingWriter, ScopeKind, SessionFact, Settings, TaskEvent, monotonic_ns,
};

use super::stack::{DEPTH, walk};

/// Events the buffer holds between two drains (~10 ms apart, or sooner once
/// it is half full). Each is ~240 B.
const BUFFER_EVENTS: usize = 1 << 16;

/// How long a thread that finds the buffer full waits for the writer to take
/// it. Past that the writer is stalled (its reader stopped, a full disk): the
/// threads stop waiting and count what they drop, until it takes the buffer again.
const STALL: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawKind {
    Alloc,
    Free,
    Realloc,
    /// A session span was entered / exited; `addr` is its key.
    SpanEnter,
    SpanExit,
    /// The session worker's span closed; `addr` is its key.
    WorkerEnd,
    /// `addr` indexes the facts table: the session id of the innermost open span.
    SessionId,
    /// `addr` indexes the facts table: a session with this id was just created here.
    SessionCreated,
    /// `addr` is the monotonic time an application trace counts from.
    TraceOrigin,
    /// A tokio task's span (`runtime.spawn`) was made (with the spawner's
    /// stack), entered, exited or closed; `addr` is its key.
    TaskSpawned,
    TaskPoll,
    TaskPollEnd,
    TaskEnded,
}

#[derive(Clone, Copy)]
pub(crate) struct RawEvent {
    kind: RawKind,
    tid: u32,
    ts: u64,
    addr: u64,
    old: u64,
    size: u64,
    /// Realloc: when it was entered (see `Record::Realloc::entry_ts`).
    entry_ts: u64,
    depth: u8,
    frames: [u64; DEPTH],
}

struct Shared {
    buffer: Mutex<Vec<RawEvent>>,
    /// The writer waits on it between drains; a thread that fills the buffer
    /// half (or whole) wakes it early.
    drain: Condvar,
    /// Notified by the writer after each swap: threads waiting for room.
    swapped: Condvar,
    /// The writer did not take a full buffer within [`STALL`].
    stalled: AtomicBool,
    /// The writer's spare buffer between two recordings: made (and its pages
    /// touched) once per process, so a recording started again does not page
    /// 15 MiB in while the application runs: a recording of 100,000 `Box`
    /// pairs started afresh took 135-150 ns a pair instead of 122-128.
    spare: Mutex<Option<Vec<RawEvent>>>,
    facts: Mutex<Vec<String>>,
    lost: AtomicU64,
}

static SHARED: OnceLock<Shared> = OnceLock::new();
/// What the allocator does with a call: the one thing it reads (relaxed) on
/// every call, so that with no recorder running it costs one load over the
/// inner allocator and a production build can carry it.
static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    /// No recorder: every call goes straight to the inner allocator.
    Off = 0,
    /// Recording: every call is recorded, except leakscope's own.
    On = 1,
    /// A recorder is starting or finishing (or its writer failed): nothing is
    /// recorded, but leakscope's own memory is still set apart.
    Busy = 2,
    /// A child forked (without exec) from a recording process: recording is
    /// the parent's, and dhat's lock may be held by a thread the child lacks.
    Forked = 3,
}

#[inline]
pub(crate) fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        0 => Mode::Off,
        1 => Mode::On,
        2 => Mode::Busy,
        _ => Mode::Forked,
    }
}

fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::SeqCst);
}

fn recording() -> bool {
    MODE.load(Ordering::SeqCst) == Mode::On as u8
}

/// True in a child forked from a recording process: its allocations bypass
/// dhat too, whose spin lock another thread of the parent may have held at the
/// fork (it would never be released in the child).
#[inline]
pub(crate) fn forked_child() -> bool {
    mode() == Mode::Forked
}

thread_local! {
    /// Set while this thread is inside the recorder (or is the writer thread).
    static IN_RECORDER: Cell<bool> = const { Cell::new(false) };
    static TID: Cell<u32> = const { Cell::new(0) };
}

fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::gettid() } as u32);
        }
        t.get()
    })
    .unwrap_or(0)
}

/// True while this thread is inside the recorder (or is its writer thread, or is
/// inside dhat): what it allocates is leakscope's (or dhat's) own memory. Also
/// true while thread-locals are torn down, when nothing can be recorded anyway.
#[inline]
pub(crate) fn inside_recorder() -> bool {
    IN_RECORDER.try_with(Cell::get).unwrap_or(true)
}

/// Runs an allocator call with this thread marked "inside": allocations it makes
/// itself (dhat's bookkeeping) are forwarded without being recorded. Returns its
/// result and whether this is the outermost call, the one to record.
#[inline]
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let outermost = IN_RECORDER
        .try_with(|flag| !flag.replace(true))
        .unwrap_or(false);
    let result = f();
    if outermost {
        let _ = IN_RECORDER.try_with(|flag| flag.set(false));
    }
    (result, outermost)
}

/// Runs `f` unless this thread is already inside the recorder or recording is off.
#[inline]
fn guarded(f: impl FnOnce(&Shared)) {
    if mode() != Mode::On {
        return;
    }
    let Some(shared) = SHARED.get() else {
        return;
    };
    let entered = IN_RECORDER
        .try_with(|flag| !flag.replace(true))
        .unwrap_or(false);
    if !entered {
        return;
    }
    f(shared);
    let _ = IN_RECORDER.try_with(|flag| flag.set(false));
}

/// Events pushed and never written: 0 once a recording has finished (a
/// check for tests: the last swap must leave nothing behind).
#[doc(hidden)]
pub fn unwritten_events() -> usize {
    SHARED.get().map_or(0, |shared| lock(&shared.buffer).len())
}

/// Adds an event, waiting for room when the buffer is full (as heaptrack's
/// pipe makes its target wait) rather than dropping it: a dropped free makes a
/// freed block look alive. Only a writer stalled past [`STALL`] drops events,
/// counted, so a stopped reader slows the process once, not on every call.
///
/// Whether recording is still on is read under the buffer's lock: the
/// writer's last swap is taken under it after recording is off, so no event
/// lands in the buffer after it, unread and uncounted.
fn push(shared: &Shared, event: RawEvent) {
    let mut buffer = lock(&shared.buffer);
    loop {
        if !recording() {
            return;
        }
        let len = buffer.len();
        if len < buffer.capacity() {
            buffer.push(event);
            if len + 1 == buffer.capacity() / 2 {
                shared.drain.notify_one();
            }
            return;
        }
        if shared.stalled.load(Ordering::Relaxed) {
            shared.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        shared.drain.notify_one();
        let (again, waited) = shared
            .swapped
            .wait_timeout(buffer, STALL)
            .unwrap_or_else(|e| e.into_inner());
        buffer = again;
        if waited.timed_out() && buffer.len() == buffer.capacity() {
            shared.stalled.store(true, Ordering::Relaxed);
        }
    }
}

/// An empty event buffer whose pages are all touched already.
fn event_buffer() -> Vec<RawEvent> {
    let mut buffer = Vec::<RawEvent>::with_capacity(BUFFER_EVENTS);
    // SAFETY: writes zeros within the buffer's capacity, which it owns; the
    // length stays 0, so nothing reads them as events.
    unsafe { std::ptr::write_bytes(buffer.as_mut_ptr(), 0, buffer.capacity()) };
    buffer
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn event(kind: RawKind, addr: u64, old: u64, size: u64, with_stack: bool) -> RawEvent {
    event_entered(kind, addr, old, size, with_stack, 0)
}

fn event_entered(
    kind: RawKind,
    addr: u64,
    old: u64,
    size: u64,
    with_stack: bool,
    entry_ts: u64,
) -> RawEvent {
    let mut frames = [0u64; DEPTH];
    let depth = if with_stack { walk(&mut frames) } else { 0 };
    RawEvent {
        kind,
        tid: tid(),
        ts: monotonic_ns(),
        addr,
        old,
        size,
        entry_ts,
        depth: depth as u8,
        frames,
    }
}

/// Called by the allocator: an allocation, a free (before the block goes back) or a realloc.
pub(crate) fn record_memory(kind: RawKind, addr: u64, old: u64, size: u64) {
    guarded(|shared| push(shared, event(kind, addr, old, size, kind != RawKind::Free)));
}

/// Called by the allocator after a realloc that was entered at `entry_ts`.
pub(crate) fn record_realloc(new: u64, old: u64, size: u64, entry_ts: u64) {
    guarded(|shared| {
        push(
            shared,
            event_entered(RawKind::Realloc, new, old, size, true, entry_ts),
        )
    });
}

/// The clock of every record, for a realloc's entry time.
pub(crate) fn now_ns() -> u64 {
    monotonic_ns()
}

/// Called by the session layer.
pub(crate) fn record_scope(kind: RawKind, key: u64) {
    guarded(|shared| push(shared, event(kind, key, 0, 0, false)));
}

/// Called by the session layer: a tokio task was spawned here (its span `key`
/// was just made); the stack says by whom.
pub(crate) fn record_task_spawned(key: u64) {
    guarded(|shared| push(shared, event(RawKind::TaskSpawned, key, 0, 0, true)));
}

/// Called by the session layer: the session id of the innermost open span on this thread.
/// The id string and the growth of the facts table are allocated inside the
/// recorder (the re-entry flag is set), so they are never recorded: the
/// recorder's memory is not the application's.
pub(crate) fn record_session_id(id: &str) {
    record_fact(RawKind::SessionId, id);
}

/// A session with this id was just created on this thread (see `SessionFact::Created`).
pub(crate) fn record_session_created(id: &str) {
    record_fact(RawKind::SessionCreated, id);
}

fn record_fact(kind: RawKind, id: &str) {
    guarded(|shared| {
        let index = {
            let mut facts = shared.facts.lock().unwrap_or_else(|e| e.into_inner());
            facts.push(id.to_owned());
            facts.len() as u64 - 1
        };
        push(shared, event(kind, index, 0, 0, false));
    });
}

/// Time zero of the application trace (`chrome_layer`), 0 when there is none:
/// a recorder started later writes it first.
static TRACE_ORIGIN: AtomicU64 = AtomicU64::new(0);

/// An application trace counts its time from `ts` (monotonic ns): written into
/// the running recording, and into every recording started later.
#[cfg_attr(not(feature = "chrome"), allow(dead_code))]
pub(crate) fn set_trace_origin(ts: u64) {
    TRACE_ORIGIN.store(ts, Ordering::SeqCst);
    guarded(|shared| push(shared, event(RawKind::TraceOrigin, ts, 0, 0, false)));
}

/// Marks this thread as leakscope's own for the rest of its life: what it
/// allocates is never recorded (the application trace's writer thread).
#[cfg_attr(not(feature = "chrome"), allow(dead_code))]
pub(crate) fn quiet_thread() {
    let _ = IN_RECORDER.try_with(|flag| flag.set(true));
}

/// Runs `f` with this thread marked "inside the recorder": what it allocates
/// (the session layer's own bookkeeping) is not recorded. Nothing is recorded
/// from inside `f` either, so record events before or after it.
pub(crate) fn quietly<R>(f: impl FnOnce() -> R) -> R {
    untracked(f).0
}

/// A child forked without `exec` has no writer thread, and the buffer's lock may
/// have been held by a thread that does not exist in the child: recording there
/// would deadlock or fill a buffer nobody drains. The child stops recording at
/// once (the recording stays the parent's); registered once per process.
fn stop_recording_in_forked_children() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        set_mode(Mode::Forked);
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// True while this process records (a [`Recorder`] runs, and this is not a
/// child forked from the recording process).
pub fn is_recording() -> bool {
    recording()
}

/// Where a recording goes.
enum Sink {
    File(PathBuf),
    /// A control connection, and what to call it in errors.
    Stream(Box<dyn Write + Send>, PathBuf),
}

/// The writer of a recording, wherever it goes.
type Writer = RecordingWriter<Box<dyn Write + Send>>;

/// A running recorder; [`finish`](Self::finish) (or drop) writes the end and joins the writer.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    writer: Option<JoinHandle<std::io::Result<()>>>,
    path: PathBuf,
    /// The process that started it: a child forked from it (without exec)
    /// that returns from `main` has no writer thread to join.
    pid: u32,
}

impl Recorder {
    /// Starts recording this process into `path` (recording only: the caller runs
    /// dhat's profiler, e.g. `dhat::Profiler::builder().testing().build()`).
    pub fn start(path: impl AsRef<Path>) -> Result<Self> {
        Self::start_into(Sink::File(path.as_ref().to_owned()))
    }

    /// Starts recording this process into `out` (a control connection:
    /// [`listen`](super::listen)); `name` names it in errors.
    pub(crate) fn start_streaming(out: Box<dyn Write + Send>, name: &str) -> Result<Self> {
        Self::start_into(Sink::Stream(out, PathBuf::from(name)))
    }

    fn start_into(sink: Sink) -> Result<Self> {
        if MODE
            .compare_exchange(
                Mode::Off as u8,
                Mode::Busy as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            bail!("an in-process recording is already running");
        }
        // From here, leakscope's own memory is set apart (Busy); an error
        // turns the allocator back off.
        let started = Self::start_busy(sink);
        if started.is_err() {
            set_mode(Mode::Off);
        }
        started
    }

    fn start_busy(sink: Sink) -> Result<Self> {
        let target = Target::inspect(std::process::id())?;
        let preset = leakscope_recording::preset::Preset::builtin();
        let spans = preset
            .spans
            .iter()
            .map(|s| format!("`{}` ({})", s.name, s.id_field))
            .collect::<Vec<_>>()
            .join(" and ");
        // What the program's code keeps of frame pointers decides how stacks
        // are walked. Read with the recorder's own allocator (System): the
        // executable's bytes are not the application's memory.
        let (frame_pointers, _) = untracked(|| {
            std::fs::read("/proc/self/exe")
                .map(|elf| leakscope_recording::frame_pointers::frame_pointers(&elf))
                .unwrap_or_default()
        });
        let mut notes = vec![];
        if frame_pointers == FramePointers::Omitted {
            super::stack::unwind_instead();
            notes.push(
                "stacks: unwound with _Unwind_Backtrace (the executable was built without frame pointers)"
                    .to_owned(),
            );
        }
        let mut header = Header::new(
            Producer::InProcess,
            format!("leakscope-inproc {}", env!("CARGO_PKG_VERSION")),
            target.identity(target.crate_version("rmcp")),
            Settings {
                alloc_layer: AllocLayer::GlobalAllocator,
                alloc_layer_reason: "the program's #[global_allocator] is leakscope_inproc::Alloc (over dhat, or the program's own allocator): every Rust allocation, no C ones".into(),
                stack_depth: DEPTH as u32,
                preset: Some(preset.name.clone()),
                scope_probes: vec![format!("session-span: tracing spans {spans}")],
                missing_scopes: vec![],
                scope_functions: vec![],
                notes,
            },
        );
        header.frame_pointers = frame_pointers;
        let (out, path): (Box<dyn Write + Send>, PathBuf) = match sink {
            Sink::File(path) => {
                let file = std::fs::File::create(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                (
                    Box::new(std::io::BufWriter::with_capacity(1 << 20, file)),
                    path,
                )
            }
            Sink::Stream(out, name) => (out, name),
        };
        let shared = SHARED.get_or_init(|| Shared {
            buffer: Mutex::new(event_buffer()),
            drain: Condvar::new(),
            swapped: Condvar::new(),
            stalled: AtomicBool::new(false),
            spare: Mutex::new(None),
            facts: Mutex::new(Vec::new()),
            lost: AtomicU64::new(0),
        });
        lock(&shared.buffer).clear();
        // A new recording starts its own count of dropped events.
        shared.lost.store(0, Ordering::SeqCst);
        shared.stalled.store(false, Ordering::SeqCst);
        stop_recording_in_forked_children();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        // Taken here, so the recorder's memory is all there before start returns.
        let spare = lock(&shared.spare).take().unwrap_or_else(event_buffer);
        // Recording goes on before the header goes out: whoever reads the
        // recording (attach, which then says it is attached) has every event
        // from there. The header used to go first, and the first sessions a
        // client made on "attached" were missed (16 of 20 in one CI run). The
        // writer thread is made before, so its own start is not recorded, and
        // waits for it; what is pushed meanwhile waits in the buffer.
        let (ready, header_written) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
        let mappings = target.mappings;
        let name = path.clone();
        let writer = std::thread::Builder::new()
            .name("leakscope-writer".into())
            .spawn(move || {
                let _ = IN_RECORDER.try_with(|flag| flag.set(true));
                while mode() == Mode::Busy {
                    std::thread::park();
                }
                let begun = begin(out, &header, mappings)
                    .with_context(|| format!("cannot write {}", name.display()));
                let _ = ready.send(begun.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")));
                match begun {
                    Ok(writer) => write_loop(shared, writer, spare, &thread_stop),
                    Err(_) => Ok(()),
                }
            })?;
        set_mode(Mode::On);
        writer.thread().unpark();
        match header_written.recv() {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                let _ = writer.join();
                bail!(why);
            }
            Err(_) => {
                let _ = writer.join();
                bail!("the recording writer stopped before writing the header");
            }
        }
        Ok(Self {
            stop,
            writer: Some(writer),
            path,
            pid: std::process::id(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops recording, drains what is buffered and writes the `End` record.
    pub fn finish(mut self) -> Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<()> {
        let Some(writer) = self.writer.take() else {
            return Ok(());
        };
        if std::process::id() != self.pid {
            // A forked child: the writer thread is the parent's, and so is
            // the recording. Joining a thread this process does not have
            // would hang (or worse); the handle is let go untouched.
            std::mem::forget(writer);
            return Ok(());
        }
        set_mode(Mode::Busy);
        self.stop.store(true, Ordering::SeqCst);
        let joined = writer.join();
        // The writer thread is gone: nothing of leakscope's is allocating now.
        set_mode(Mode::Off);
        joined
            .map_err(|_| anyhow::anyhow!("the recording writer panicked"))?
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            eprintln!("leakscope: {e:#}");
        }
    }
}

/// What `start` returns: the recorder plus dhat's profiler; dropping it finalizes
/// both the recording and `dhat-heap.json` (written beside the recording).
pub struct Guard {
    recorder: Option<Recorder>,
    profiler: Option<dhat::Profiler>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let forked = forked_child();
        drop(self.recorder.take());
        let profiler = self.profiler.take();
        if forked {
            // dhat's profiler would write the parent's `dhat-heap.json` over
            // with the child's view of the heap.
            std::mem::forget(profiler);
        } else {
            drop(profiler);
        }
    }
}

/// Starts dhat's heap profiler (writing `dhat-heap.json` next to `path` at the end)
/// and the recorder. Keep the guard alive for as long as you want to record.
pub fn start(path: impl AsRef<Path>) -> Result<Guard> {
    let path = path.as_ref();
    let dhat_file = path.with_file_name("dhat-heap.json");
    let profiler = dhat::Profiler::builder().file_name(dhat_file).build();
    let recorder = Recorder::start(path)?;
    Ok(Guard {
        recorder: Some(recorder),
        profiler: Some(profiler),
    })
}

/// Writes the header and what comes before the events: the mappings, and
/// the application trace's time zero when there is one.
fn begin(
    out: Box<dyn Write + Send>,
    header: &Header,
    mappings: Vec<leakscope_recording::Mapping>,
) -> Result<Writer> {
    let mut writer = RecordingWriter::new(out, header)?;
    for mapping in mappings {
        writer.push(Record::Mapping(mapping))?;
    }
    let origin = TRACE_ORIGIN.load(Ordering::SeqCst);
    if origin != 0 {
        writer.push(Record::TraceOrigin { ts: origin })?;
    }
    writer.flush()?;
    Ok(writer)
}

/// The writer thread: swaps the full buffer for its spare every 10 ms and turns
/// raw events into records. Its own allocations are never recorded.
fn write_loop(
    shared: &'static Shared,
    mut writer: Writer,
    mut spare: Vec<RawEvent>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let _ = IN_RECORDER.try_with(|flag| flag.set(true));
    let written = write_until_stopped(shared, &mut writer, &mut spare, stop);
    spare.clear();
    *lock(&shared.spare) = Some(spare);
    if written.is_err() {
        // Nobody will write what the threads record: they stop paying for it
        // at once. The error is the recorder's result (`finish`, or its drop).
        set_mode(Mode::Busy);
    }
    written?;
    writer.finish(Record::End {
        ts: monotonic_ns(),
        reason: EndReason::Finished,
    })?;
    Ok(())
}

/// The writer's loop, until `stop` and the last swap.
fn write_until_stopped(
    shared: &'static Shared,
    writer: &mut Writer,
    spare: &mut Vec<RawEvent>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut lost_seen = 0;
    loop {
        // Recording is off before `stop` is set: this swap, under the lock
        // the threads push under, is the last, and nothing is pushed after it.
        let stopping = stop.load(Ordering::SeqCst);
        {
            let mut buffer = lock(&shared.buffer);
            if !stopping && buffer.len() < buffer.capacity() / 2 {
                // Until it is half full, or 10 ms.
                buffer = shared
                    .drain
                    .wait_timeout(buffer, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            std::mem::swap(&mut *buffer, spare);
            shared.stalled.store(false, Ordering::Relaxed);
            shared.swapped.notify_all();
        }
        // By reference: an event is ~240 B, and copying each out showed in
        // the writer's profile.
        for raw in spare.iter() {
            convert(raw, shared, writer)?;
        }
        spare.clear();
        let lost = shared.lost.load(Ordering::Relaxed);
        if lost > lost_seen {
            writer.push(Record::Lost {
                ts: monotonic_ns(),
                reason: LostReason::BufferFull,
                count: lost - lost_seen,
            })?;
            lost_seen = lost;
        }
        writer.flush()?;
        if stopping {
            return Ok(());
        }
    }
}

fn convert(raw: &RawEvent, shared: &Shared, writer: &mut Writer) -> std::io::Result<()> {
    let (ts, tid) = (raw.ts, raw.tid);
    let frames = &raw.frames[..raw.depth as usize];
    let record = match raw.kind {
        RawKind::Alloc => Record::Alloc {
            ts,
            tid,
            addr: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
        },
        RawKind::Realloc => Record::Realloc {
            ts,
            tid,
            old: raw.old,
            new: raw.addr,
            size: raw.size,
            stack: writer.stack(frames)?,
            entry_ts: raw.entry_ts,
        },
        RawKind::Free => Record::Free {
            ts,
            tid,
            addr: raw.addr,
        },
        RawKind::SpanEnter | RawKind::SpanExit => Record::Scope {
            ts,
            tid,
            kind: ScopeKind::SessionSpan,
            phase: if raw.kind == RawKind::SpanEnter {
                Phase::Enter
            } else {
                Phase::Exit
            },
            arg: raw.addr,
        },
        RawKind::WorkerEnd => Record::Scope {
            ts,
            tid,
            kind: ScopeKind::WorkerDrop,
            phase: Phase::Enter,
            arg: raw.addr,
        },
        RawKind::TraceOrigin => Record::TraceOrigin { ts: raw.addr },
        RawKind::TaskSpawned | RawKind::TaskEnded => Record::Task {
            ts,
            tid,
            id: raw.addr,
            event: if raw.kind == RawKind::TaskSpawned {
                TaskEvent::Spawned
            } else {
                TaskEvent::Ended
            },
            stack: writer.stack(frames)?,
        },
        RawKind::TaskPoll | RawKind::TaskPollEnd => Record::Scope {
            ts,
            tid,
            kind: if raw.kind == RawKind::TaskPoll {
                ScopeKind::TaskPoll
            } else {
                ScopeKind::TaskPollEnd
            },
            phase: Phase::Enter,
            arg: raw.addr,
        },
        RawKind::SessionId | RawKind::SessionCreated => {
            let facts = shared.facts.lock().unwrap_or_else(|e| e.into_inner());
            let id = facts.get(raw.addr as usize).cloned().unwrap_or_default();
            Record::Session {
                ts,
                tid,
                fact: if raw.kind == RawKind::SessionId {
                    SessionFact::Id(id)
                } else {
                    SessionFact::Created(id)
                },
            }
        }
    };
    writer.push(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorder starts its own count of dropped events: the previous
    /// recording's losses are not reported again in the next one.
    #[test]
    fn a_new_recorder_starts_its_own_lost_count() {
        let dir = tempfile::tempdir().unwrap();
        let first = Recorder::start(dir.path().join("first.lsrec")).unwrap();
        SHARED.get().unwrap().lost.store(7, Ordering::SeqCst);
        first.finish().unwrap();
        let second_path = dir.path().join("second.lsrec");
        let second = Recorder::start(&second_path).unwrap();
        assert_eq!(SHARED.get().unwrap().lost.load(Ordering::SeqCst), 0);
        second.finish().unwrap();
        let mut reader = leakscope_recording::RecordingReader::open(&second_path).unwrap();
        assert!(
            !reader.by_ref().any(|r| matches!(r, Record::Lost { .. })),
            "no losses carried over"
        );
    }
}
