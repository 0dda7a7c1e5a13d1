//! The control protocol between `leakscope-probe attach` and a process whose
//! global allocator is `leakscope_inproc::Alloc` (its `listen`): how the probe
//! finds the process's control socket from its pid, and asks it to record.
//!
//! The socket is a Linux abstract Unix socket, [`socket_name`]: no file to
//! leave behind or to be replaced, gone with the process. Each end checks the
//! other with `SO_PEERCRED` ([`peer`]): the process serves only its own user
//! and root, and the probe only talks to a socket held by the target's pid.
//!
//! The client sends [`RECORD_REQUEST`] and a newline; the process answers
//! with a recording, streamed as it is written (header, then a frame of
//! records every 10 ms), or with one line starting [`ERROR_PREFIX`]. The
//! client ends the recording by shutting down its writing side: the process
//! finishes it (its `end` record) and closes. A client that goes away stops
//! the recording too.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// What a client sends (then `\n`) to start a recording.
pub const RECORD_REQUEST: &str = "record";

/// How a refusal begins (then the reason and `\n`), instead of a recording.
pub const ERROR_PREFIX: &str = "error: ";

/// The abstract socket name of process `pid`'s control socket.
pub fn socket_name(pid: u32) -> String {
    format!("leakscope-inproc/{pid}")
}

/// Who is at the other end of `stream`: (uid, pid), as the kernel says.
pub fn peer(stream: &UnixStream) -> std::io::Result<(u32, u32)> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred of the size passed, on an open socket.
    let done = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((credentials.uid, credentials.pid as u32))
}
