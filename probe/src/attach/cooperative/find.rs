//! Finding the target's control socket, and making sure the target holds it
//! now. An abstract socket name can be bound by anyone, so the name decides
//! nothing: the socket must be a listening one that `/proc/PID/fd` holds
//! (a process that bound the name, handed the socket on and exited is not
//! believed once its pid is reused), named for the pid (its own name, or the
//! one with a random suffix a process takes when its own was squatted). The
//! connection is made within a deadline (a full backlog would block it).

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{Result, bail};
use leakscope_recording::control::{names_of, peer};

use super::super::StopSignals;

/// How long connecting may take (a backlog the target does not accept from).
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// What is at the target's control socket name.
pub(crate) enum Found {
    /// Nothing named for the pid: the process does not record itself.
    Nothing,
    /// A socket named for the pid that the target does not hold: another
    /// process's (said, and ignored).
    NotHeld(String),
    /// The target's own listening socket, connected.
    Connected(UnixStream),
}

/// A listening abstract socket named for the target.
struct Listening {
    name: String,
    inode: u64,
}

/// The target's control socket, connected, if it has one it holds now.
pub(crate) async fn find(pid: u32, signals: &mut StopSignals) -> Result<Found> {
    let named = listening_named_for(pid);
    if named.is_empty() {
        return Ok(Found::Nothing);
    }
    let held = match sockets_held(pid) {
        Ok(held) => held,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => bail!(
            "this user may not record pid {pid}: cannot see which sockets it holds (/proc/{pid}/fd: {e}); only its own user and root may"
        ),
        Err(e) => bail!("cannot read /proc/{pid}/fd: {e}"),
    };
    // Its own name first: the suffixed one is there only when it was taken.
    let Some(socket) = named
        .iter()
        .filter(|s| held.contains(&s.inode))
        .min_by_key(|s| s.name.len())
    else {
        return Ok(Found::NotHeld(format!(
            "{:?} is held by another process, not by pid {pid}: ignored",
            named[0].name
        )));
    };
    let stream = connect(&socket.name, signals).await?;
    match peer(&stream) {
        Ok((_, listener)) if listener == pid => {}
        Ok((_, listener)) => bail!(
            "{:?} was opened by pid {listener}, not by pid {pid}: refused",
            socket.name
        ),
        Err(e) => bail!("who listens on {:?}: {e}", socket.name),
    }
    // Still the target's after connecting (it cannot have changed hands
    // unseen between the look and the connection).
    if !sockets_held(pid).is_ok_and(|held| held.contains(&socket.inode)) {
        bail!("{:?} changed hands while connecting: refused", socket.name);
    }
    Ok(Found::Connected(stream))
}

/// The listening abstract sockets in the target's network namespace named
/// for `pid` (`/proc/PID/net/unix`).
fn listening_named_for(pid: u32) -> Vec<Listening> {
    /// `__SO_ACCEPTCON`: a listening socket.
    const LISTENING: u32 = 0x0001_0000;
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/unix"))
        .or_else(|_| std::fs::read_to_string("/proc/net/unix"))
        .unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path
            let mut fields = line.split_ascii_whitespace();
            let flags = u32::from_str_radix(fields.nth(3)?, 16).ok()?;
            let inode = fields.nth(2)?.parse().ok()?;
            let name = fields.next()?.strip_prefix('@')?;
            (flags & LISTENING != 0 && names_of(name, pid)).then(|| Listening {
                name: name.to_owned(),
                inode,
            })
        })
        .collect()
}

/// The inodes of the sockets `pid` holds (`/proc/PID/fd`).
fn sockets_held(pid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|inode| inode.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

/// Connects to the abstract socket `name` without blocking past
/// [`CONNECT_WAIT`] (a Unix socket's connect waits while the listener's
/// backlog is full: non-blocking, it says so and is tried again), ending
/// early on Ctrl-C or SIGTERM.
async fn connect(name: &str, signals: &mut StopSignals) -> Result<UnixStream> {
    let give_up = tokio::time::Instant::now() + CONNECT_WAIT;
    loop {
        match try_connect(name) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => bail!("cannot connect to {name:?}: {e}"),
        }
        if tokio::time::Instant::now() >= give_up {
            bail!(
                "{name:?} accepted no connection within {} s (is the process stopped?)",
                CONNECT_WAIT.as_secs()
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = signals.interrupt.recv() => bail!("interrupted while connecting to {name:?}"),
            _ = signals.terminate.recv() => bail!("terminated while connecting to {name:?}"),
        }
    }
}

/// One non-blocking connection attempt; the stream is blocking once made.
fn try_connect(name: &str) -> io::Result<UnixStream> {
    // SAFETY: a new socket; its descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a socket just made and owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_un is valid; the name is copied in below.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract: a NUL, then the name (no terminator).
    let bytes = name.as_bytes();
    if bytes.len() + 1 > address.sun_path.len() {
        return Err(io::Error::other("socket name too long"));
    }
    for (slot, &byte) in address.sun_path[1..].iter_mut().zip(bytes) {
        *slot = byte as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    // SAFETY: connect with an address of the length given.
    let done = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&address as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    let stream = UnixStream::from(socket);
    stream.set_nonblocking(false)?;
    Ok(stream)
}
