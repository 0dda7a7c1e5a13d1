//! The in-process recorder: a preallocated event buffer filled by the allocator and
//! the session layer ([`events`]), drained by a background writer ([`writer`])
//! into a recording. [`mode`] is what the allocator reads on every call, and
//! [`own`] the flag that keeps leakscope's own memory out of the recording;
//! [`polls`] keeps a sampled recording's empty polls out of the buffer.

mod buffer;
pub(crate) mod cost;
mod events;
pub(crate) mod mode;
pub(crate) mod own;
mod polls;
pub(crate) mod sampler;
mod writer;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};

use leakscope_recording::frame_pointers::StackWalk;
use leakscope_recording::sampling::Sampling;
use leakscope_recording::target::Target;
use leakscope_recording::{AllocLayer, FramePointers, Header, Producer, Settings};

pub use buffer::unwritten_events;
pub(crate) use buffer::{RawKind, tid};
#[cfg(feature = "chrome")]
pub(crate) use events::set_trace_origin;
pub(crate) use events::{
    now_ns, record_memory, record_poll, record_poll_end, record_realloc, record_sampled_full,
    record_scope, record_session_created, record_session_id, record_task_spawned,
};
use mode::{Mode, claim, forked_child, idle, mode, recording, set_mode};
use writer::{begin, write_loop};

use crate::stack::{DEPTH, Unwinding};

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
        Self::start_with(path, Sampling::Every)
    }

    /// [`start`](Self::start), recording a sample of the allocations
    /// (`Sampling::Bytes { mean }`, see `leakscope_recording::sampling`): what
    /// a process can leave switched on for hours. Sessions and tasks are
    /// still recorded whole; the report shows bytes as estimates.
    pub fn start_with(path: impl AsRef<Path>, sampling: Sampling) -> Result<Self> {
        Self::start_into(Sink::File(path.as_ref().to_owned()), sampling)
    }

    /// Starts recording this process into `out` (a control connection:
    /// [`listen`](super::listen)); `name` names it in errors.
    pub(crate) fn start_streaming(
        out: Box<dyn Write + Send>,
        name: &str,
        sampling: Sampling,
    ) -> Result<Self> {
        Self::start_into(Sink::Stream(out, PathBuf::from(name)), sampling)
    }

    fn start_into(sink: Sink, sampling: Sampling) -> Result<Self> {
        let Some(before) = claim() else {
            bail!("an in-process recording is already running");
        };
        // From here, leakscope's own memory is set apart (Busy); an error
        // turns the allocator back to what it was.
        let started = Self::start_busy(sink, sampling);
        if started.is_err() {
            set_mode(before);
        }
        started
    }

    fn start_busy(sink: Sink, sampling: Sampling) -> Result<Self> {
        let target = Target::inspect(std::process::id())?;
        let preset = leakscope_recording::preset::Preset::builtin();
        let spans = preset
            .spans
            .iter()
            .map(|s| match s.naming() {
                leakscope_recording::preset::SpanNaming::Field(field) => {
                    format!("`{}` ({field})", s.name)
                }
                leakscope_recording::preset::SpanNaming::Unserved => {
                    format!("`{}` (serving)", s.name)
                }
            })
            .collect::<Vec<_>>()
            .join(" and ");
        // What the program's code keeps of frame pointers decides how stacks
        // are walked. Read with the recorder's own allocator (System): the
        // executable's bytes are not the application's memory.
        let frame_pointers = own::quietly(|| {
            std::fs::read("/proc/self/exe")
                .map(|elf| leakscope_recording::frame_pointers::frame_pointers(&elf))
                .unwrap_or_default()
        });
        let mut notes = vec![];
        let mut stack_walk = StackWalk::FramePointers;
        if frame_pointers == FramePointers::Omitted {
            match own::quietly(super::stack::unwind_instead) {
                Unwinding::Tables(walk) => {
                    if let StackWalk::EhFrame { mappings, rows, .. } = &walk {
                        notes.push(format!(
                            "stacks: unwound by the .eh_frame tables of {mappings} mappings ({rows} rows; the executable was built without frame pointers)"
                        ));
                    }
                    stack_walk = walk;
                }
                Unwinding::UnwindBacktrace => notes.push(
                    "stacks: unwound with _Unwind_Backtrace (the executable was built without frame pointers, and no loaded object has a table the walk reads)"
                        .to_owned(),
                ),
            }
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
        header.stack_walk = stack_walk;
        header.sampling = sampling;
        sampler::configure(sampling);
        let stream = matches!(sink, Sink::Stream(..));
        let (out, path): (Box<dyn Write + Send>, PathBuf) = match sink {
            Sink::File(path) => {
                // A fresh 0600 file, never written through a link planted
                // at the path; one there already is replaced, not truncated.
                let file = leakscope_recording::output::create_file(
                    &path,
                    leakscope_recording::output::Existing::Replace,
                    None,
                )
                .with_context(|| format!("cannot create {}", path.display()))?;
                (
                    Box::new(std::io::BufWriter::with_capacity(1 << 20, file)),
                    path,
                )
            }
            Sink::Stream(out, name) => (out, name),
        };
        // A new recording starts with its own count of dropped events and
        // no session ids of an earlier one.
        cost::configure()?;
        let shared = buffer::reset();
        mode::stop_recording_in_forked_children();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        // Taken here, so the recorder's memory is all there before start returns.
        let spare = buffer::lock(&shared.spare)
            .take()
            .unwrap_or_else(buffer::Events::new);
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
                own::mark_thread();
                while mode() == Mode::Busy {
                    std::thread::park();
                }
                let begun = begin(out, stream, &header, mappings)
                    .with_context(|| format!("cannot write {}", name.display()));
                let _ = ready.send(begun.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")));
                match begun {
                    Ok(writer) => write_loop(shared, writer, spare, &thread_stop),
                    Err(_) => Ok(()),
                }
            })?;
        set_mode(Mode::On);
        // Spans made only while recording (the layer's serving spans) are
        // made from now on.
        own::quietly(tracing::callsite::rebuild_interest_cache);
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
        // Blocks a sampled recording made may still be alive, and must go
        // back with the layout they were made with.
        set_mode(idle());
        own::quietly(tracing::callsite::rebuild_interest_cache);
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Recorders are process-wide: tests that start one take turns.
    pub(crate) fn one_recorder_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        ONE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A recorder starts its own count of dropped events: the previous
    /// recording's losses are not reported again in the next one.
    #[test]
    fn a_new_recorder_starts_its_own_lost_count() {
        let _one = one_recorder_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        // (Recorders are process-wide, so this test also checks the file:)
        // a link planted at the path is not written through; a recording
        // is its user's alone.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let planted = dir.path().join("planted.lsrec");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let error = Recorder::start(&planted).err().expect("refused");
        assert!(format!("{error:#}").contains("symbolic link"), "{error:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let first = Recorder::start(dir.path().join("first.lsrec")).unwrap();
        buffer::shared().unwrap().lost.store(7, Ordering::SeqCst);
        first.finish().unwrap();
        let second_path = dir.path().join("second.lsrec");
        let second = Recorder::start(&second_path).unwrap();
        assert_eq!(buffer::shared().unwrap().lost.load(Ordering::SeqCst), 0);
        second.finish().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&second_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut reader = leakscope_recording::RecordingReader::open(&second_path).unwrap();
        assert!(
            !reader
                .by_ref()
                .any(|r| matches!(r, leakscope_recording::Record::Lost { .. })),
            "no losses carried over"
        );
    }
}
