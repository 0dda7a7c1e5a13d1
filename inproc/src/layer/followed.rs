//! The spans the session layer follows, and what it keeps of each, by span id.
//!
//! Why a table of its own rather than the registry's extensions, where a
//! layer usually keeps per-span state: the layer reads its state on every
//! entry and exit of the spans it follows (tokio's task spans and the
//! preset's session spans, ~60 a session on the fixture's `leaky` at
//! saturation), and through the registry each read was a look-up of the
//! span's slot (a reference count taken and dropped), the extensions' lock
//! taken and dropped, and a map keyed by type: ~200 instructions, 12.4k a
//! session (callgrind, `cargo xtask bench --only instructions`). Here it is
//! one lock of a shard and one probe of a map keyed by the id.
//!
//! Span ids are the registry's: unique among open spans, reused after one
//! closes. An entry goes in when its span is made ([`Table::insert`]) and
//! out when it closes ([`Table::remove`]), so the table holds the open spans
//! the layer follows and no more, recording or not.
//!
//! A child forked without `exec` leaves the table alone: another thread of
//! the parent may have held a shard's lock at the fork, and would never let
//! it go in the child. Nothing is recorded there (the recording is the
//! parent's), so the child's spans need no state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, PoisonError};

use foldhash::fast::FixedState;
use leakscope_recording::coalesce::PollsKept;

use crate::recorder::own::quietly;

/// Shards: the two sides of a span's poll, and other threads' spans, rarely
/// wait on one another's lock.
const SHARDS: usize = 64;

/// What the layer keeps of a span it follows.
pub(super) enum Followed {
    Task(TaskSpan),
    Session(SessionSpan),
}

/// A tokio task's span (`runtime.spawn`, target `tokio::task`): tokio makes
/// one per task only in builds with `--cfg tokio_unstable` and its `tracing`
/// feature, enters it around each poll and closes it when the task ends.
pub(super) struct TaskSpan {
    /// Which of the task's polls a sampled recording kept.
    pub(super) polls: PollsKept,
    /// The recording (`sampler::epoch`) that holds its spawn; 0 for none.
    /// A task spawned before the recording began is of unknown birth, and
    /// its empty polls are dropped here as the writer's coalescer would
    /// (`PollsKept::UNBORN`): the probe relaying this stream leaves polls
    /// as they come.
    pub(super) born: u32,
}

/// A session span.
///
/// Span ids are reused by `tracing` after a span closes, so each new span
/// announces itself at its first enter with a session-id fact: its id, or ""
/// when the id is recorded later (then the real id follows as soon as it is
/// known).
pub(super) struct SessionSpan {
    pub(super) id: Option<String>,
    /// A fact (maybe "") has been sent for this span.
    pub(super) announced: bool,
    /// Its real id has been sent.
    pub(super) named: bool,
    /// Which of its polls a sampled recording kept.
    pub(super) polls: PollsKept,
    /// Its close is the session worker's end (the preset's `worker`).
    pub(super) worker: bool,
}

/// What a span that closed was.
pub(super) enum Closed {
    Task,
    Session {
        /// Its close is the session worker's end.
        worker: bool,
    },
}

/// A shard: its lock on a cache-line pair of its own, so that two threads
/// taking two shards' locks do not take each other's lines; each state in a
/// block of its own, so that a poll's state written on one core does not
/// take a line the map's neighbouring entries are read from on the other.
#[repr(align(128))]
struct Shard(Mutex<Map>);

type Map = HashMap<u64, Box<Followed>, FixedState>;

/// The spans the layer follows, by id.
pub(super) struct Table {
    shards: Box<[Shard]>,
}

/// Set in a child forked without `exec` (see the module docs).
static FORKED: AtomicBool = AtomicBool::new(false);

fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Has every child forked from here on set [`FORKED`]; once a process.
fn leave_alone_in_forked_children() {
    static REGISTERED: Once = Once::new();
    extern "C" fn in_child() {
        FORKED.store(true, Ordering::Relaxed);
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

impl Default for Table {
    fn default() -> Self {
        leave_alone_in_forked_children();
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard(Mutex::new(HashMap::with_hasher(FixedState::default()))))
                .collect(),
        }
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

impl Table {
    /// Ids are the registry's slot indexes plus one: their low bits differ
    /// from one open span to the next.
    fn shard(&self, id: u64) -> &Shard {
        &self.shards[id as usize % SHARDS]
    }

    /// A span the layer follows was made.
    pub(super) fn insert(&self, id: u64, followed: Followed) {
        if forked() {
            return;
        }
        // The table's memory is leakscope's own, never the application's.
        quietly(|| {
            let old = lock(self.shard(id)).insert(id, Box::new(followed));
            drop(old);
        });
    }

    /// `f` on the span's state, if the layer follows it. `f` must not enter
    /// or close a span (the shard stays locked while it runs); recording is
    /// what it is for.
    pub(super) fn with<R>(&self, id: u64, f: impl FnOnce(&mut Followed) -> R) -> Option<R> {
        if forked() {
            return None;
        }
        lock(self.shard(id))
            .get_mut(&id)
            .map(|followed| f(followed))
    }

    /// The span closed: what it was, if the layer followed it.
    pub(super) fn remove(&self, id: u64) -> Option<Closed> {
        if forked() {
            return None;
        }
        // Its state (an id string) is let go as leakscope's own memory too.
        quietly(|| {
            lock(self.shard(id))
                .remove(&id)
                .map(|followed| match *followed {
                    Followed::Task(_) => Closed::Task,
                    Followed::Session(span) => Closed::Session {
                        worker: span.worker,
                    },
                })
        })
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

/// A shard's map: a panic in another thread's `f` left it as it was.
fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, Map> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};

    use super::*;

    /// A child forked while another thread holds a shard's lock closes a
    /// span of that shard, and ends: the holder does not exist in the child,
    /// so the lock would never be let go there.
    #[test]
    fn a_forked_child_leaves_the_table_alone() {
        let table = Arc::new(Table::default());
        let task = || {
            Followed::Task(TaskSpan {
                polls: PollsKept::default(),
                born: 0,
            })
        };
        table.insert(7, task());
        let (held, is_held) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let holder = {
            let table = table.clone();
            std::thread::spawn(move || {
                table.with(7, |_| {
                    held.send(()).unwrap();
                    released.recv().unwrap();
                });
            })
        };
        is_held.recv().unwrap();
        // SAFETY: the child only reads an atomic and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let left_alone = table.remove(7).is_none();
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if left_alone { 0 } else { 1 }) };
        }
        assert!(pid > 0, "fork failed");
        let started = Instant::now();
        let mut status = 0;
        let ended = loop {
            // SAFETY: waits for our own child.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break true;
            }
            if started.elapsed() > Duration::from_secs(10) {
                // SAFETY: our own child, hung.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        release.send(()).unwrap();
        holder.join().unwrap();
        assert!(ended, "the child hung on a lock held at the fork");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(table.remove(7).is_some(), "the parent's table is whole");
        table.insert(8, task());
        assert_eq!(table.len(), 1);
    }
}
