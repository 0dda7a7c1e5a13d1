//! Who may record this process: the peers the kernel would let ptrace it.
//!
//! A recording shows what ptrace would (the address layout, heap addresses,
//! session ids) and costs the process while it runs, so the control socket
//! serves only a peer that could read all that anyway:
//!
//! * the process's own user, while the process is dumpable (a process that
//!   changed its credentials, or said `PR_SET_DUMPABLE 0`, is not ptraceable
//!   by its user either) and Yama does not restrict ptrace to admins
//!   (`ptrace_scope` 2 or 3);
//! * root with `CAP_SYS_PTRACE` in its effective set (root in a container
//!   that dropped it may not);
//! * never the overflow uid inside a user namespace: a peer whose user the
//!   namespace cannot name reads as that uid, and a process running as it
//!   would otherwise serve every such stranger. (In the initial namespace
//!   every user has a name, and the overflow uid is `nobody` itself.)
//!
//! Yama's `ptrace_scope` 1 (only a debugger the process descends from) is
//! not applied: a process that calls `listen()` asks for its user's probe,
//! as `PR_SET_PTRACER` would.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use leakscope_recording::control::peer;

/// `CAP_SYS_PTRACE`'s bit in `/proc/PID/status`'s `CapEff`.
const CAP_SYS_PTRACE: u32 = 19;

/// Ok when the peer of `stream` may record this process; the reason it may
/// not otherwise (said to the peer).
pub(super) fn may_record(stream: &UnixStream) -> Result<(), String> {
    let (uid, pid) = peer(stream).map_err(|e| format!("who is asking: {e}"))?;
    // The peer's process, held so that its pid cannot be reused while its
    // capabilities are read (None on kernels before SO_PEERPIDFD, 6.5).
    let pidfd = peer_pidfd(stream);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if uid == overflow_uid() && !in_initial_user_namespace() {
        return Err(format!(
            "uid {uid} is the overflow uid (a user this namespace cannot name); it may not record this process"
        ));
    }
    let may_ptrace = uid == 0 && has_cap_sys_ptrace(pid) && still_alive(pidfd.as_ref());
    if may_ptrace {
        return Ok(());
    }
    if uid != me {
        return Err(format!(
            "uid {uid} may not record this process (only uid {me} and root with CAP_SYS_PTRACE)"
        ));
    }
    if !dumpable() {
        return Err(format!(
            "uid {uid} may not record this process: it is not dumpable (only root with CAP_SYS_PTRACE may)"
        ));
    }
    if yama_scope() >= 2 {
        return Err(format!(
            "uid {uid} may not record this process: kernel.yama.ptrace_scope restricts ptrace to CAP_SYS_PTRACE"
        ));
    }
    Ok(())
}

/// The uid a user unmapped in this namespace reads as (65534 by default).
fn overflow_uid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(65534)
}

/// Whether this process is in the initial user namespace (its uid map is
/// the identity over every uid).
fn in_initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| {
        let fields: Vec<&str> = map.split_ascii_whitespace().collect();
        fields == ["0", "0", "4294967295"]
    })
}

fn dumpable() -> bool {
    // SAFETY: prctl(PR_GET_DUMPABLE) reads a flag of this process.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE) == 1 }
}

fn yama_scope() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether process `pid` has `CAP_SYS_PTRACE` in its effective set.
fn has_cap_sys_ptrace(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|bits| u64::from_str_radix(bits.trim(), 16).ok())
        .is_some_and(|bits| bits & (1 << CAP_SYS_PTRACE) != 0)
}

/// The peer's pidfd (`SO_PEERPIDFD`), when the kernel has it.
fn peer_pidfd(stream: &UnixStream) -> Option<OwnedFd> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the size passed, on an open socket.
    let done = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    // SAFETY: on success the kernel gave us this new descriptor.
    (done == 0 && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process `pidfd` refers to still runs (so the pid read before
/// is still its); true when there is no pidfd to ask.
fn still_alive(pidfd: Option<&OwnedFd>) -> bool {
    let Some(pidfd) = pidfd else { return true };
    // SAFETY: pidfd_send_signal with signal 0 only checks the process exists.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    // EPERM: it exists, and this process may not signal it (a root peer).
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
