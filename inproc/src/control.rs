//! Switching recording on in a running process, without root and without a
//! restart: [`listen`] opens a control socket that `leakscope-probe attach
//! --pid PID` finds from the pid, and a connection there records the process
//! for as long as it stays open.
//!
//! The protocol and its checks are in `leakscope_recording::control`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

use anyhow::{Context, Result};

use leakscope_recording::control::{ERROR_PREFIX, MAX_REQUEST_BYTES, Request, peer, socket_name};

use super::recorder::Recorder;
use super::recorder::own::mark_thread;

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
pub fn listen() -> std::io::Result<()> {
    let address = SocketAddr::from_abstract_name(socket_name(std::process::id()))?;
    let listener = UnixListener::bind_addr(&address)?;
    std::thread::Builder::new()
        .name("leakscope-control".into())
        .spawn(move || {
            // Everything this thread allocates is leakscope's own.
            mark_thread();
            for connection in listener.incoming() {
                let Ok(connection) = connection else { continue };
                if let Err(e) = serve(connection) {
                    eprintln!("leakscope: {e:#}");
                }
            }
        })?;
    Ok(())
}

/// One client: checks who it is, records while it stays connected.
fn serve(stream: UnixStream) -> Result<()> {
    let (uid, _) = peer(&stream).context("control socket: who is asking")?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut reply = stream.try_clone()?;
    // The request is read first (a line at most 64 bytes long), so a client
    // refused below hears why instead of a broken pipe.
    let mut requests = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    // One client at a time: one that says nothing must not hold the socket.
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    std::io::Read::take(&mut requests, MAX_REQUEST_BYTES as u64).read_line(&mut request)?;
    stream.set_read_timeout(None)?;
    if uid != me && uid != 0 {
        // Not an error of this process: refused, said to the client only.
        let _ = writeln!(
            reply,
            "{ERROR_PREFIX}uid {uid} may not record this process (only uid {me} and root)"
        );
        return Ok(());
    }
    let Some(Request::Record { sampling }) = Request::parse(&request) else {
        let _ = writeln!(reply, "{ERROR_PREFIX}unknown request {:?}", request.trim());
        return Ok(());
    };
    let recorder = match Recorder::start_streaming(
        Box::new(NoSignal(stream.try_clone()?)),
        "the control connection",
        sampling,
    ) {
        Ok(recorder) => recorder,
        Err(e) => {
            let _ = writeln!(reply, "{ERROR_PREFIX}{e:#}");
            return Ok(());
        }
    };
    // Recording until the client shuts its side down (or goes away).
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut requests, &mut rest);
    // A client gone mid-recording is its own business: what was sent is its.
    let _ = recorder.finish();
    Ok(())
}

/// Writes with `MSG_NOSIGNAL`: a client that went away is a write error, not
/// a SIGPIPE that kills the process.
struct NoSignal(UnixStream);

impl Write for NoSignal {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // SAFETY: send from a valid buffer of `bytes.len()` on an open socket.
        let sent = unsafe {
            libc::send(
                self.0.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(sent as usize)
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
