//! Tasks: tokio's tasks as lifecycle objects, with no preset.
//!
//! A task is known from its polls (`task-poll` / `task-poll-end` scopes, the
//! built-in tokio signals): the poll's argument is the task's header, the first
//! bytes of the block its cell was allocated in. From that one address:
//! * **birth**: the cell block's allocation (when, where: its stack names the
//!   function that spawned it, and who: the object whose window was open then);
//! * **polls**: allocations on the thread between a poll's begin and end are the
//!   task's (charged to it, and through it to its session, if it has one);
//! * **end**: the cell block's free (tokio frees the cell when the last
//!   reference to the task goes).
//!
//! A task first seen polling whose cell was allocated before the recording
//! began has no birth; it is still tracked. Like the session stage, this one
//! knows nothing of bytes: the accounting stage keeps each task's live bytes.

use rustc_hash::FxHashMap as HashMap;

use leakscope_recording::StackId;

use crate::stages::objects::sessions::SessionKey;

/// A task as this stage knows it (an index into its list).
pub type TaskKey = u32;

use crate::model::TaskState;

/// A task idle for less than this is not parked, whatever its age.
pub const PARKED_MIN_IDLE_NS: u64 = 1_000_000_000;

impl TaskState {
    /// The state of `life` at `end_ns` of a recording that began at `start_ns`.
    pub fn of(life: &TaskLife, start_ns: u64, end_ns: u64) -> Self {
        if life.end_ns.is_some() {
            return TaskState::Ended;
        }
        let since = life.born_ns.unwrap_or(start_ns).max(start_ns);
        let existed = end_ns.saturating_sub(since);
        let idle = end_ns.saturating_sub(life.last_poll_ns);
        if idle >= PARKED_MIN_IDLE_NS && idle * 2 >= existed {
            TaskState::Parked
        } else {
            TaskState::Alive
        }
    }
}

/// What the recording shows of one task's life.
#[derive(Debug, Clone, Default)]
pub struct TaskLife {
    /// When its cell was allocated; `None`: before the recording began.
    pub born_ns: Option<u64>,
    /// The activity clock then (the recording's allocations so far).
    pub born_seq: u64,
    /// Its cell's size and allocation stack (the spawn), when seen.
    pub cell_size: u64,
    pub cell_stack: Option<StackId>,
    /// The task whose poll spawned it.
    pub parent: Option<TaskKey>,
    /// The session it belongs to: spawned in a session's birth window or
    /// request, or by a task of that session.
    pub session: Option<SessionKey>,
    pub last_poll_ns: u64,
    pub polls: u32,
    /// When its cell was freed.
    pub end_ns: Option<u64>,
}

/// The cell block a task's first poll found at its header, as accounting had it.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub ts: u64,
    pub seq: u64,
    pub size: u64,
    pub stack: Option<StackId>,
    pub session: Option<SessionKey>,
    pub task: Option<TaskKey>,
}

#[derive(Default)]
pub struct TaskTracker {
    lives: Vec<TaskLife>,
    /// Live tasks by header address (a freed cell's address may be reused).
    by_header: HashMap<u64, TaskKey>,
    /// Per thread, the task being polled there.
    polling: HashMap<u32, TaskKey>,
}

impl TaskTracker {
    /// The task at `header` if it is known and alive.
    pub fn known(&self, header: u64) -> Option<TaskKey> {
        self.by_header.get(&header).copied()
    }

    /// A poll of the task at `header` begins on `tid`. `cell`: the live block
    /// that starts at `header`, asked for only on a task's first poll (see
    /// [`TaskTracker::known`]); `session`: whose it is when the block has no
    /// owner but was spawned in a session's birth request.
    pub fn poll(
        &mut self,
        ts: u64,
        tid: u32,
        header: u64,
        cell: Option<Cell>,
        session: Option<SessionKey>,
    ) -> TaskKey {
        let key = match self.by_header.get(&header) {
            Some(&key) => key,
            None => {
                let parent = cell.and_then(|c| c.task);
                let session = cell
                    .and_then(|c| c.session)
                    .or(session)
                    .or_else(|| parent.and_then(|p| self.lives[p as usize].session));
                self.lives.push(TaskLife {
                    born_ns: cell.map(|c| c.ts),
                    born_seq: cell.map_or(0, |c| c.seq),
                    cell_size: cell.map_or(0, |c| c.size),
                    cell_stack: cell.and_then(|c| c.stack),
                    parent,
                    session,
                    ..Default::default()
                });
                let key = self.lives.len() as TaskKey - 1;
                self.by_header.insert(header, key);
                key
            }
        };
        let life = &mut self.lives[key as usize];
        life.polls = life.polls.saturating_add(1);
        life.last_poll_ns = life.last_poll_ns.max(ts);
        self.polling.insert(tid, key);
        key
    }

    /// In-process mode: task `id` (its span's key) was spawned on `tid` at
    /// `ts` (the activity clock at `seq`), from `stack`, with the session
    /// whose window is open on `tid` (else its parent's).
    pub fn spawned(
        &mut self,
        (ts, seq): (u64, u64),
        tid: u32,
        id: u64,
        stack: Option<StackId>,
        session: Option<SessionKey>,
    ) {
        let parent = self.polling(tid);
        let session = session.or_else(|| parent.and_then(|p| self.lives[p as usize].session));
        self.lives.push(TaskLife {
            born_ns: Some(ts),
            born_seq: seq,
            cell_stack: stack,
            parent,
            session,
            last_poll_ns: ts,
            ..Default::default()
        });
        self.by_header.insert(id, self.lives.len() as TaskKey - 1);
    }

    /// The poll on `tid` ended (the future returned, or the task completed).
    pub fn poll_end(&mut self, tid: u32) {
        self.polling.remove(&tid);
    }

    /// The task being polled on `tid`, if any: the owner of what it allocates.
    pub fn polling(&self, tid: u32) -> Option<TaskKey> {
        self.polling.get(&tid).copied()
    }

    pub fn session(&self, key: TaskKey) -> Option<SessionKey> {
        self.lives[key as usize].session
    }

    /// The block at `addr` was freed at `ts`: if it was a task's cell, that
    /// task ended. Returns the task.
    pub fn free(&mut self, ts: u64, addr: u64) -> Option<TaskKey> {
        let key = self.by_header.remove(&addr)?;
        self.lives[key as usize].end_ns = Some(ts);
        // A poll still open for it (its end record lost) is over too.
        self.polling.retain(|_, k| *k != key);
        Some(key)
    }

    /// Records were lost: a lost poll end would charge the thread's later
    /// allocations to the task. The next poll sets it right.
    pub fn forget_threads(&mut self) {
        self.polling.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.lives.is_empty()
    }

    /// Every task seen, in order of first poll (keys are indexes).
    pub fn finish(self) -> Vec<TaskLife> {
        self.lives
    }
}

/// Crates whose frames are on a spawn's path, not its cause: tokio's spawn,
/// and `tracing`'s, whose span the in-process mode sees a spawn from.
const SPAWN_PATH: &[&str] = &["tokio", "tracing", "tracing_core", "tracing_subscriber"];

/// The function that spawned a task, from its cell's stack (innermost first):
/// the program's own frame past tokio's spawn path, the allocator and the
/// standard library; `None` when the stack has no such frame (a build without
/// frame pointers stops inside tokio).
pub fn spawn_site(frames: Vec<crate::model::Frame>) -> Option<String> {
    let outside_tokio: Vec<&str> = frames
        .iter()
        .map(|f| f.function.as_str())
        .filter(|name| {
            !SPAWN_PATH.iter().any(|p| {
                name.strip_prefix('<')
                    .unwrap_or(name)
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with("::"))
            }) && !name.starts_with("0x")
                && !crate::stages::stacks::is_allocator_frame(name)
                && !leakscope_recording::frames::is_library_frame(name)
        })
        .collect();
    if outside_tokio.is_empty() {
        return None;
    }
    leakscope_recording::frames::own_frame(outside_tokio.iter().copied())
        .map(leakscope_recording::frames::short_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_not_polled_for_most_of_its_life_is_parked() {
        let s = 1_000_000_000;
        let life = |born, last| TaskLife {
            born_ns: Some(born),
            last_poll_ns: last,
            ..Default::default()
        };
        assert_eq!(TaskState::of(&life(0, s), 0, 10 * s), TaskState::Parked);
        assert_eq!(TaskState::of(&life(0, 9 * s), 0, 10 * s), TaskState::Alive);
        assert_eq!(
            TaskState::of(&life(9 * s, 9 * s), 0, 9 * s + s / 2),
            TaskState::Alive,
            "idle for less than a second"
        );
        let ended = TaskLife {
            end_ns: Some(3),
            ..life(0, 0)
        };
        assert_eq!(TaskState::of(&ended, 0, 10 * s), TaskState::Ended);
    }

    fn cell(task: Option<TaskKey>, session: Option<SessionKey>) -> Option<Cell> {
        Some(Cell {
            ts: 5,
            seq: 1,
            size: 256,
            stack: None,
            session,
            task,
        })
    }

    #[test]
    fn a_task_is_born_with_its_cell_polled_by_its_header_and_ends_with_its_free() {
        let mut t = TaskTracker::default();
        let parent = t.poll(10, 1, 0x1000, None, None);
        assert_eq!(t.polling(1), Some(parent));
        // The parent's poll spawns a child: its cell was allocated in that poll.
        let child = t.poll(20, 2, 0x2000, cell(Some(parent), Some(7)), None);
        assert_eq!(t.session(child), Some(7));
        t.poll_end(2);
        assert_eq!(t.polling(2), None);
        assert_eq!(t.known(0x2000), Some(child));
        assert_eq!(t.free(30, 0x2000), Some(child));
        assert_eq!(t.known(0x2000), None, "the address may be reused");
        assert_eq!(t.free(31, 0x2000), None);
        let lives = t.finish();
        assert_eq!(lives[child as usize].born_ns, Some(5));
        assert_eq!(lives[child as usize].parent, Some(parent));
        assert_eq!(lives[child as usize].end_ns, Some(30));
        assert_eq!(
            lives[parent as usize].born_ns, None,
            "born before the recording"
        );
    }

    #[test]
    fn a_child_inherits_its_parents_session() {
        let mut t = TaskTracker::default();
        let worker = t.poll(10, 1, 0x1000, cell(None, Some(3)), None);
        let helper = t.poll(20, 1, 0x2000, cell(Some(worker), None), None);
        assert_eq!(t.session(helper), Some(3));
        let served = t.poll(30, 1, 0x3000, cell(None, None), Some(4));
        assert_eq!(
            t.session(served),
            Some(4),
            "spawned in a session's birth request"
        );
    }
}
