//! Switching recording on in a running process, without root and without a
//! restart: [`listen`] opens a control socket that `leakscope-probe attach
//! --pid PID` finds from the pid, and a connection there records the process
//! for as long as it stays open.
//!
//! The protocol is `leakscope_recording::control`'s. What this side defends
//! against, since the socket is open to every local user (docs/robustness.md,
//! "The control socket"):
//!
//! * A name taken before the server starts does not stop it: [`listen`] says
//!   so once and listens under a name nobody can guess, which the probe finds
//!   among the sockets `/proc/PID/fd` holds.
//! * Only a peer the kernel would let ptrace this process is served
//!   ([`peers`]), checked before a byte is read; a request has one deadline.
//! * Each request is read on a thread of its own, so a slow client delays
//!   nobody else's attach.
//! * A client that stops reading cannot wedge the writer: sends time out,
//!   and a failed send shuts the connection down.
//! * A child forked without exec closes the inherited listener and
//!   connection: the name and the end of the stream stay the parent's.

mod peers;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

use leakscope_recording::control::{
    ERROR_PREFIX, MAX_REQUEST_BYTES, Request, socket_name, unguessable_socket_name,
};

use super::recorder::Recorder;
use super::recorder::own::mark_thread;

/// How long a client has to send its whole request line.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// How long one send of the recording may wait for a client that does not
/// read: past it, the recording ends (the client has stopped listening).
const SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// Requests read at once, each on a thread of its own; past it a client is
/// told to come back.
const MAX_PENDING_REQUESTS: usize = 4;

/// The listener's and the recording connection's descriptors, for a forked
/// child to close (-1: none).
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);
/// The recording's connection: the descriptor read for the client's end,
/// and its duplicate the writer sends on.
static CONNECTION_FDS: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// Opens this process's control socket and serves it on a thread of its own,
/// so that `leakscope-probe attach --pid PID` can switch recording on (no
/// root needed: the process's own user may). Call it once, early in `main`,
/// in a program whose global allocator is [`Alloc`](super::Alloc):
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: leakscope_inproc::Alloc<std::alloc::System> =
///     leakscope_inproc::Alloc::new(std::alloc::System);
///
/// fn main() -> std::io::Result<()> {
///     leakscope_inproc::listen()?;
///     // ... the server ...
///     Ok(())
/// }
/// ```
///
/// Another process holding the name `leakscope-inproc/PID` does not make it
/// fail: it says so on stderr once and listens under a name with an
/// unguessable suffix, which attach still finds. It fails only when no
/// thread can be started.
pub fn listen() -> std::io::Result<()> {
    let Some(listener) = bind() else {
        return Ok(());
    };
    LISTENER_FD.store(listener.as_raw_fd(), Ordering::SeqCst);
    close_in_forked_children();
    std::thread::Builder::new()
        .name("leakscope-control".into())
        .spawn(move || {
            // Everything this thread allocates is leakscope's own.
            mark_thread();
            let pending = std::sync::Arc::new(AtomicUsize::new(0));
            for connection in listener.incoming() {
                let Ok(connection) = connection else { continue };
                admit(connection, &pending);
            }
        })?;
    Ok(())
}

/// The listening socket, under the pid's name or, when another process has
/// taken that, under an unguessable one; `None` (said on stderr) when the
/// process cannot listen at all.
fn bind() -> Option<UnixListener> {
    let pid = std::process::id();
    let named = |name: &str| {
        SocketAddr::from_abstract_name(name).and_then(|address| UnixListener::bind_addr(&address))
    };
    let first = socket_name(pid);
    let taken = match named(&first) {
        Ok(listener) => return Some(listener),
        Err(e) => e,
    };
    for _ in 0..3 {
        let name = unguessable_socket_name(pid);
        if let Ok(listener) = named(&name) {
            eprintln!(
                "leakscope: the control socket name {first:?} is held by another process ({taken}); \
                 listening as {name:?} instead (attach --pid {pid} finds it)"
            );
            return Some(listener);
        }
    }
    eprintln!(
        "leakscope: cannot open a control socket ({taken}); attach cannot switch recording on"
    );
    None
}

/// Checks who connected (before reading anything) and, when it may record
/// this process, reads its request on a thread of its own.
fn admit(stream: UnixStream, pending: &std::sync::Arc<AtomicUsize>) {
    if let Err(why) = peers::may_record(&stream) {
        refuse(&stream, &why);
        return;
    }
    if pending.fetch_add(1, Ordering::SeqCst) >= MAX_PENDING_REQUESTS {
        pending.fetch_sub(1, Ordering::SeqCst);
        refuse(&stream, "too many requests at once; try again");
        return;
    }
    let done = pending.clone();
    let spawned = std::thread::Builder::new()
        .name("leakscope-request".into())
        .spawn(move || {
            mark_thread();
            if let Err(e) = serve(stream, &done) {
                eprintln!("leakscope: {e:#}");
            }
        });
    if spawned.is_err() {
        pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Tells a client why not, without waiting for it to read.
fn refuse(stream: &UnixStream, why: &str) {
    let line = format!("{ERROR_PREFIX}{why}\n");
    let _ = send(stream, line.as_bytes(), libc::MSG_DONTWAIT);
}

/// One admitted client: its request, then a recording for as long as it
/// stays connected.
fn serve(stream: UnixStream, pending: &AtomicUsize) -> Result<()> {
    let request = read_request(&stream);
    pending.fetch_sub(1, Ordering::SeqCst);
    let request = match request {
        Ok(line) => line,
        Err(why) => {
            refuse(&stream, &why);
            return Ok(());
        }
    };
    let Some(Request::Record { sampling }) = Request::parse(&request) else {
        refuse(&stream, &format!("unknown request {:?}", request.trim()));
        return Ok(());
    };
    stream.set_write_timeout(Some(SEND_TIMEOUT))?;
    let out = NoSignal(stream.try_clone()?);
    // Known before the first byte of the recording goes out: a fork from
    // then on closes both.
    CONNECTION_FDS[0].store(stream.as_raw_fd(), Ordering::SeqCst);
    CONNECTION_FDS[1].store(out.0.as_raw_fd(), Ordering::SeqCst);
    let recorder =
        match Recorder::start_streaming(Box::new(out), "the control connection", sampling) {
            Ok(recorder) => recorder,
            Err(e) => {
                forget_connection();
                refuse(&stream, &format!("{e:#}"));
                return Ok(());
            }
        };
    // Recording until the client shuts its side down (or goes away, or a
    // send times out and shuts the connection down).
    let mut rest = [0u8; 64];
    while matches!((&stream).read(&mut rest), Ok(n) if n > 0) {}
    // A client gone mid-recording is its own business: what was sent is its.
    let _ = recorder.finish();
    forget_connection();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

/// The recording's connection is closing: nothing for a fork to close.
fn forget_connection() {
    for fd in &CONNECTION_FDS {
        fd.store(-1, Ordering::SeqCst);
    }
}

/// The request line, read within [`REQUEST_DEADLINE`] for the whole of it.
fn read_request(stream: &UnixStream) -> Result<String, String> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut line = Vec::with_capacity(MAX_REQUEST_BYTES);
    let mut byte = [0u8; MAX_REQUEST_BYTES];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no request within {} s",
                REQUEST_DEADLINE.as_secs()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        // Byte by byte up to the newline: what follows it is not the request's.
        let n = match (&*stream).read(&mut byte[..1]) {
            Ok(0) => return Err("the request ended before its newline".into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        if byte[0] == b'\n' {
            let _ = stream.set_read_timeout(None);
            return String::from_utf8(line).map_err(|_| "the request is not UTF-8".into());
        }
        line.extend_from_slice(&byte[..n]);
        if line.len() >= MAX_REQUEST_BYTES {
            return Err(format!("a request is at most {MAX_REQUEST_BYTES} bytes"));
        }
    }
}

/// `send(2)` with `flags` and `MSG_NOSIGNAL`: a client that went away is an
/// error, not a SIGPIPE that kills the process.
fn send(stream: &UnixStream, bytes: &[u8], flags: i32) -> std::io::Result<usize> {
    // SAFETY: send from a valid buffer of `bytes.len()` on an open socket.
    let sent = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            flags | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

/// The recording's way out: a send that fails (the client went away, or
/// read nothing for [`SEND_TIMEOUT`]) shuts the connection down, which ends
/// the wait for the client's end and so the recording.
struct NoSignal(UnixStream);

impl Write for NoSignal {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        send(&self.0, bytes, 0).inspect_err(|_| {
            let _ = self.0.shutdown(std::net::Shutdown::Both);
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A child forked without exec inherits the listener and the recording's
/// connection: holding them, it would keep the name after the parent exits
/// and keep the probe from ever seeing the stream end. It closes both at
/// once (the recording stays the parent's; `recorder::mode` stops it there).
fn close_in_forked_children() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        for fd in [&LISTENER_FD, &CONNECTION_FDS[0], &CONNECTION_FDS[1]] {
            let fd = fd.swap(-1, Ordering::SeqCst);
            if fd >= 0 {
                // SAFETY: close(2) is async-signal-safe; no thread of the
                // child holds these (the threads that did are the parent's).
                unsafe { libc::close(fd) };
            }
        }
    }
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only swaps atomics and closes.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request has one deadline for the whole line: a byte now and
    /// then does not hold the reader past it.
    #[test]
    fn a_request_trickled_a_byte_at_a_time_runs_out_of_time() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..6 {
                if (&theirs).write_all(b"r").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let started = Instant::now();
        let read = read_request(&ours);
        assert!(read.unwrap_err().contains("no request within"));
        assert!(started.elapsed() < REQUEST_DEADLINE + Duration::from_millis(500));
        drop(ours);
        trickle.join().unwrap();
    }

    #[test]
    fn a_request_is_its_line() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (&theirs).write_all(b"record sample=4096\nmore").unwrap();
        assert_eq!(read_request(&ours).unwrap(), "record sample=4096");
        (&theirs).write_all(&[b'x'; 100]).unwrap();
        assert!(read_request(&ours).unwrap_err().contains("at most"));
    }
}
