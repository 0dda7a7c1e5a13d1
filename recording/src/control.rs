//! The control protocol between `leakscope-probe attach` and a process whose
//! global allocator is `leakscope_inproc::Alloc` (its `listen`): how the probe
//! finds the process's control socket from its pid, and asks it to record.
//!
//! The socket is a Linux abstract Unix socket, [`socket_name`]: no file to
//! leave behind or to be replaced, gone with the process. Each end checks the
//! other with `SO_PEERCRED` ([`peer`]): the process serves only its own user
//! and root, and the probe only talks to a socket held by the target's pid.
//!
//! The client sends a [`Request`] as one line (`record`, or `record sample=T`
//! for a recording sampled every `T` bytes on average); the process answers
//! with a recording, streamed as it is written (header, then a frame of
//! records every 10 ms), or with one line starting [`ERROR_PREFIX`]. The
//! client ends the recording by shutting down its writing side: the process
//! finishes it (its `end` record) and closes. A client that goes away stops
//! the recording too.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use crate::sampling::Sampling;

/// What a client sends (then `\n`) to start a recording.
pub const RECORD_REQUEST: &str = "record";

/// The longest request line a process reads.
pub const MAX_REQUEST_BYTES: usize = 64;

/// What a client asks of the process, as one line on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Record, every call or sampled, until the client shuts its side down.
    Record { sampling: Sampling },
}

impl Request {
    /// The line that says it (without the newline).
    pub fn to_line(self) -> String {
        match self {
            Request::Record {
                sampling: Sampling::Every,
            } => RECORD_REQUEST.to_owned(),
            Request::Record {
                sampling: Sampling::Bytes { mean },
            } => format!("{RECORD_REQUEST} sample={mean}"),
        }
    }

    /// The request a line says, `None` when it says none.
    pub fn parse(line: &str) -> Option<Self> {
        let mut words = line.split_ascii_whitespace();
        if words.next()? != RECORD_REQUEST {
            return None;
        }
        let sampling = match words.next() {
            None => Sampling::Every,
            Some(word) => Sampling::every_bytes(word.strip_prefix("sample=")?.parse().ok()?),
        };
        if words.next().is_some() {
            return None;
        }
        Some(Request::Record { sampling })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_back_as_written() {
        for request in [
            Request::Record {
                sampling: Sampling::Every,
            },
            Request::Record {
                sampling: Sampling::Bytes { mean: 524_288 },
            },
        ] {
            let line = request.to_line();
            assert!(line.len() <= MAX_REQUEST_BYTES);
            assert_eq!(Request::parse(&line), Some(request));
        }
        assert_eq!(Request::parse("record sample=x"), None);
        assert_eq!(Request::parse("record sample=1 more"), None);
        assert_eq!(Request::parse("stop"), None);
        assert_eq!(
            Request::parse("record sample=1"),
            Some(Request::Record {
                sampling: Sampling::Every
            })
        );
    }
}
