//! The control protocol between `leakscope-probe attach` and a process whose
//! global allocator is `leakscope_inproc::Alloc` (its `listen`): how the probe
//! finds the process's control socket from its pid, and asks it to record.
//!
//! The socket is a Linux abstract Unix socket, [`socket_name`]: no file to
//! leave behind or to be replaced, gone with the process. Anyone may bind an
//! abstract name, so neither end trusts the name: a process whose name is
//! taken listens under [`unguessable_socket_name`], and the probe talks only
//! to a listening socket that the target holds now (one of `/proc/PID/fd`'s);
//! the process serves only peers that could ptrace it (`SO_PEERCRED`,
//! [`peer`]).
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

/// The name a process listens under when another process holds
/// [`socket_name`]: the same with a random suffix nobody can bind ahead of
/// it. The probe finds it among the sockets the process holds
/// ([`names_of`]).
pub fn unguessable_socket_name(pid: u32) -> String {
    let mut random = [0u8; 8];
    // SAFETY: getrandom into a buffer of its length.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got != random.len() as isize {
        // No entropy to be had: the time, which a squatter would still have
        // to guess to the nanosecond.
        random = crate::monotonic_ns().to_le_bytes();
    }
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}.{suffix}", socket_name(pid))
}

/// Whether `name` is one process `pid` may listen under: [`socket_name`],
/// or it with a suffix ([`unguessable_socket_name`]).
pub fn names_of(name: &str, pid: u32) -> bool {
    let own = socket_name(pid);
    name == own
        || name
            .strip_prefix(own.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|suffix| {
                !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_hexdigit())
            })
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

    #[test]
    fn a_process_may_listen_under_its_name_or_it_with_a_random_suffix() {
        let name = unguessable_socket_name(42);
        assert!(names_of(&name, 42), "{name}");
        assert_ne!(name, unguessable_socket_name(42));
        assert!(names_of("leakscope-inproc/42", 42));
        assert!(!names_of("leakscope-inproc/421", 42));
        assert!(!names_of("leakscope-inproc/42.", 42));
        assert!(!names_of("leakscope-inproc/42.zz", 42));
        assert!(!names_of("leakscope-inproc/4", 42));
    }
}
