//! Reading what the target streams: a refusal line, or a recording frame by
//! frame. The target writes it, and may be hostile, so:
//!
//! * the thread that parses it runs as the user who ran the probe through
//!   sudo, or as the target's own user, never as root ([`reader_user`]):
//!   credentials are per thread in the kernel, and the raw syscalls change
//!   this thread's alone (glibc's wrappers would change every thread's);
//! * a refusal line is read up to [`MAX_REFUSAL_BYTES`];
//! * frames are bounded by the recording reader (bytes and records, per
//!   frame and per stream), and batches in flight by the caller's channel.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;

use leakscope_recording::control::ERROR_PREFIX;
use leakscope_recording::output::Owner;
use leakscope_recording::{Header, Record, RecordingReader, Tail};

/// The longest refusal line read.
const MAX_REFUSAL_BYTES: u64 = 512;

/// What the reading thread hands over.
pub(super) enum Streamed {
    /// The recording's header, and the format the target wrote it in.
    Header(Box<Header>, u32),
    Records(Vec<Record>),
    /// The stream ended: how, and whether the process said why it refused.
    End(Result<Tail, String>),
}

/// Who the reading thread runs as when the probe is root: the user who ran
/// it through sudo (`owner`), else the target's own user. `None` when the
/// probe is not root (it has nothing to drop).
pub(super) fn reader_user(pid: u32, owner: Option<Owner>) -> Option<Owner> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    owner.or_else(|| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let real = |key: &str| -> Option<u32> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))?
                .split_ascii_whitespace()
                .next()?
                .parse()
                .ok()
        };
        Some(Owner {
            uid: real("Uid:")?,
            gid: real("Gid:")?,
        })
    })
}

/// This thread (only) becomes `user`, for good: no groups, then the gid,
/// then the uid.
fn become_user(user: Owner) -> std::io::Result<()> {
    let check = |done: libc::c_long| {
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: raw credential syscalls on this thread; no memory is passed
    // but an empty group list.
    unsafe {
        check(libc::syscall(
            libc::SYS_setgroups,
            0,
            std::ptr::null::<libc::gid_t>(),
        ))?;
        check(libc::syscall(
            libc::SYS_setresgid,
            user.gid,
            user.gid,
            user.gid,
        ))?;
        check(libc::syscall(
            libc::SYS_setresuid,
            user.uid,
            user.uid,
            user.uid,
        ))
    }
}

/// Reads the process's answer: a refusal line, or a recording, frame by
/// frame, as `user` when given. `dropped` says, before anything is read,
/// whether this thread became `user` (the request is written only then).
pub(super) fn read_stream(
    stream: UnixStream,
    name: &str,
    user: Option<Owner>,
    dropped: tokio::sync::oneshot::Sender<Result<(), String>>,
    sender: &tokio::sync::mpsc::Sender<Streamed>,
) {
    if let Some(user) = user
        && let Err(e) = become_user(user)
    {
        let _ = dropped.send(Err(format!(
            "cannot drop root to uid {} to read the stream: {e}",
            user.uid
        )));
        return;
    }
    if dropped.send(Ok(())).is_err() {
        return;
    }
    let end = |why: String| {
        let _ = sender.blocking_send(Streamed::End(Err(why)));
    };
    let mut input = BufReader::with_capacity(1 << 20, stream);
    let refused = match input.fill_buf() {
        Ok(start) => start.starts_with(ERROR_PREFIX.as_bytes()),
        Err(e) => return end(e.to_string()),
    };
    if refused {
        let mut line = Vec::new();
        let _ = input
            .by_ref()
            .take(MAX_REFUSAL_BYTES)
            .read_until(b'\n', &mut line);
        let line = String::from_utf8_lossy(&line);
        return end(line.trim().trim_start_matches(ERROR_PREFIX).to_owned());
    }
    let mut reader = match RecordingReader::new(input, std::path::Path::new(name)) {
        Ok(reader) => reader,
        Err(e) => return end(e.to_string()),
    };
    if sender
        .blocking_send(Streamed::Header(
            Box::new(reader.header().clone()),
            reader.format_version(),
        ))
        .is_err()
    {
        return;
    }
    while let Some(batch) = reader.next_frame() {
        if sender.blocking_send(Streamed::Records(batch)).is_err() {
            return;
        }
    }
    let tail = reader.tail().cloned().unwrap_or(Tail::Clean);
    let _ = sender.blocking_send(Streamed::End(Ok(tail)));
}
