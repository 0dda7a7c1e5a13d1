//! Files written for a user, created the way a root tool must: the probe runs
//! as root (and `leakscope report` may), so a file is never written through a
//! symbolic link, never replaced unless asked, readable by its owner alone,
//! and owned by the user who ran the tool through `sudo`. A file the user
//! names for the tool to read (a preset) is read with that user's rights.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What to do when the path to create exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Fail ("exists; pass --force to replace it").
    Refuse,
    /// Replace it, if it is a regular file (a symbolic link, a FIFO or a
    /// device is still refused).
    Replace,
}

/// A user and group to hand files to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// The user who ran this process through `sudo` (`SUDO_UID`, `SUDO_GID`),
    /// when this process is root; `None` otherwise (files stay the runner's).
    pub fn invoking_user() -> Option<Self> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let id = |name: &str| std::env::var(name).ok()?.parse::<u32>().ok();
        Some(Self {
            uid: id("SUDO_UID")?,
            gid: id("SUDO_GID")?,
        })
    }
}

/// Creates `path` for writing, mode 0600, never through a symbolic link
/// (`O_NOFOLLOW`) and never blocking on a FIFO (`O_NONBLOCK`). An existing
/// path is refused or, with [`Existing::Replace`], replaced by a fresh file:
/// made beside it (`O_EXCL`) and renamed over it, so whoever holds a link to
/// the old file or a descriptor of it neither reads nor changes the new one.
/// Only a regular file with one link, owned by this user or `owner`, is
/// replaced. Handed to `owner` when given. The error names the path and what
/// is wrong in one line.
pub fn create_file(path: &Path, existing: Existing, owner: Option<Owner>) -> io::Result<File> {
    let fresh = |at: &Path| {
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
        options.open(at)
    };
    let file = match fresh(path) {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) && existing == Existing::Replace => {
            let metadata = std::fs::symlink_metadata(path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            replaceable(path, &metadata, owner)?;
            let beside = beside(path);
            let file = fresh(&beside).map_err(|e| explain(&beside, e, Existing::Refuse))?;
            if let Err(e) = std::fs::rename(&beside, path) {
                let _ = std::fs::remove_file(&beside);
                return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
            }
            file
        }
        Err(e) => return Err(explain(path, e, existing)),
    };
    set_blocking(&file)?;
    if let Some(owner) = owner {
        std::os::unix::fs::fchown(&file, Some(owner.uid), Some(owner.gid))?;
    }
    Ok(file)
}

/// Whether the existing `path` (its `metadata`, not followed) may be
/// replaced: a regular file of one link, this user's or `owner`'s.
fn replaceable(path: &Path, metadata: &std::fs::Metadata, owner: Option<Owner>) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |what: String| Err(io::Error::other(format!("{} {what}", path.display())));
    if metadata.file_type().is_symlink() {
        return refuse("is a symbolic link; leakscope never writes through one".into());
    }
    if metadata.file_type().is_fifo() {
        return refuse("is a FIFO; leakscope writes only regular files".into());
    }
    if !metadata.is_file() {
        return refuse("is not a regular file; leakscope writes only regular files".into());
    }
    if metadata.nlink() > 1 {
        return refuse(format!(
            "has {} links; leakscope replaces only a file no other name shares",
            metadata.nlink()
        ));
    }
    // SAFETY: geteuid(2) has no preconditions.
    let me = unsafe { libc::geteuid() };
    if metadata.uid() != me && owner.is_none_or(|owner| owner.uid != metadata.uid()) {
        return refuse(format!(
            "belongs to uid {}; leakscope replaces only its user's files",
            metadata.uid()
        ));
    }
    Ok(())
}

/// A name beside `path` nobody else can have made: `.NAME.RANDOM.tmp`.
fn beside(path: &Path) -> std::path::PathBuf {
    let mut random = [0u8; 8];
    // SAFETY: getrandom into a buffer of its length.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got != random.len() as isize {
        random = crate::monotonic_ns().to_le_bytes();
    }
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.{suffix}.tmp"))
}

/// What [`create_file`] would refuse about `path` now, without creating it:
/// for a tool to say so before any costly work (`create_file` checks again,
/// race-free).
pub fn check_path(path: &Path, existing: Existing) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        Ok(metadata) if metadata.file_type().is_symlink() => Err(io::Error::other(format!(
            "{} is a symbolic link; leakscope never writes through one",
            path.display()
        ))),
        Ok(_) if existing == Existing::Refuse => Err(io::Error::other(format!(
            "{} exists; pass --force to replace it",
            path.display()
        ))),
        Ok(metadata) => replaceable(path, &metadata, Owner::invoking_user()),
    }
}

/// Creates directory `path` (mode 0700, and its missing parents) unless it
/// exists; an existing one must be a directory itself, not a symbolic link to
/// one. A directory it creates is handed to `owner` when given.
pub fn create_dir(path: &Path, owner: Option<Owner>) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => return Ok(()),
        Ok(metadata) if metadata.file_type().is_symlink() => {
            return Err(io::Error::other(format!(
                "{} is a symbolic link; leakscope never writes through one",
                path.display()
            )));
        }
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} exists and is not a directory",
                path.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    if let Some(owner) = owner {
        std::os::unix::fs::lchown(path, Some(owner.uid), Some(owner.gid))?;
    }
    Ok(())
}

/// Reads the text file `path` (at most `max_bytes`) as the user who ran this
/// process through `sudo` would (see [`Owner::invoking_user`]): it is opened
/// with that user's filesystem identity (`setfsuid`/`setfsgid`, this thread
/// only), and a file that only root's groups could read is refused. It must
/// be a regular file; opening never blocks (a FIFO fails).
pub fn read_as_invoking_user(path: &Path, max_bytes: u64) -> io::Result<String> {
    let user = Owner::invoking_user();
    let file = {
        let _as_user = user.map(FsIdentity::become_user);
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)?
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if let Some(user) = user {
        use std::os::unix::fs::MetadataExt;
        let mode = metadata.mode();
        let readable = (metadata.uid() == user.uid && mode & 0o400 != 0)
            || (metadata.gid() == user.gid && mode & 0o040 != 0)
            || mode & 0o004 != 0;
        if !readable {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
    }
    if metadata.len() > max_bytes {
        return Err(io::Error::other(format!(
            "{} bytes, more than the {max_bytes} leakscope reads from such a file",
            metadata.len()
        )));
    }
    let mut text = String::new();
    io::Read::read_to_string(&mut io::Read::take(file, max_bytes), &mut text)
        .map_err(|_| io::Error::other("not a text file"))?;
    Ok(text)
}

/// This thread's filesystem identity switched to a user's until dropped.
struct FsIdentity;

impl FsIdentity {
    fn become_user(user: Owner) -> Self {
        // SAFETY: setfsgid/setfsuid change this thread's filesystem ids only;
        // the previous ones (root's) are restored on drop. The group first:
        // once the uid is not 0, the gid could no longer be changed.
        unsafe {
            libc::setfsgid(user.gid);
            libc::setfsuid(user.uid);
        }
        FsIdentity
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        // SAFETY: back to root's filesystem ids (this process's euid/egid).
        unsafe {
            libc::setfsuid(libc::geteuid());
            libc::setfsgid(libc::getegid());
        }
    }
}

fn explain(path: &Path, error: io::Error, existing: Existing) -> io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let what = match error.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EEXIST) if is_link => {
            "is a symbolic link; leakscope never writes through one".to_owned()
        }
        Some(libc::EEXIST) if existing == Existing::Refuse => {
            "exists; pass --force to replace it".to_owned()
        }
        Some(libc::ENXIO) => "is a FIFO with no reader; leakscope writes only regular files".into(),
        _ => return io::Error::new(error.kind(), format!("{}: {error}", path.display())),
    };
    io::Error::new(error.kind(), format!("{} {what}", path.display()))
}

/// Clears the `O_NONBLOCK` the file was opened with (it only guarded the open).
pub(crate) fn set_blocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function's caller owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(name).tempdir().unwrap()
    }

    #[test]
    fn a_symbolic_link_is_never_written_through() {
        let dir = scratch("leakscope-output-link");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let link = dir.path().join("x.lsrec");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for existing in [Existing::Refuse, Existing::Replace] {
            let error = create_file(&link, existing, None).unwrap_err();
            assert!(error.to_string().contains("symbolic link"), "{error}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let error = create_dir(&link, None).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }

    #[test]
    fn an_existing_file_is_replaced_only_when_asked() {
        let dir = scratch("leakscope-output-existing");
        let path = dir.path().join("x.lsrec");
        std::fs::write(&path, "old").unwrap();
        let error = create_file(&path, Existing::Refuse, None).unwrap_err();
        assert!(error.to_string().contains("pass --force"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        let mut file = create_file(&path, Existing::Replace, None).unwrap();
        io::Write::write_all(&mut file, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "nothing left beside it");
    }

    /// `--force` over a file others could read and write (0666), whose
    /// descriptor another process holds: the new file is a fresh 0600 one,
    /// and the old descriptor reads the old bytes, never the new ones. It
    /// used to be the same file, truncated in place: mode, links and
    /// descriptors kept. A file with a second link is refused, untouched.
    #[test]
    fn a_forced_file_is_a_fresh_one_and_a_linked_file_is_refused() {
        let dir = scratch("leakscope-output-force");
        let path = dir.path().join("x.lsrec");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let mut held = File::open(&path).unwrap();
        let mut file = create_file(&path, Existing::Replace, None).unwrap();
        io::Write::write_all(&mut file, b"new").unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut seen = String::new();
        io::Read::read_to_string(&mut held, &mut seen).unwrap();
        assert_eq!(seen, "old", "the old descriptor sees the old file");

        let linked = dir.path().join("linked.lsrec");
        std::fs::write(&linked, "kept").unwrap();
        std::fs::hard_link(&linked, dir.path().join("second-link")).unwrap();
        let error = create_file(&linked, Existing::Replace, None).unwrap_err();
        assert!(error.to_string().contains("2 links"), "{error}");
        assert!(check_path(&linked, Existing::Replace).is_err());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("second-link")).unwrap(),
            "kept"
        );
        assert_eq!(std::fs::read_to_string(&linked).unwrap(), "kept");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = scratch("leakscope-output-fifo");
        let fifo = dir.path().join("x.lsrec");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let error = create_file(&fifo, Existing::Replace, None).unwrap_err();
        assert!(error.to_string().contains("FIFO"), "{error}");
    }

    #[test]
    fn files_are_the_owners_alone_and_handed_to_the_invoking_user() {
        let dir = scratch("leakscope-output-owner");
        let path = dir.path().join("x.lsrec");
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let owner = root.then_some(Owner {
            uid: 65534,
            gid: 65534,
        });
        create_file(&path, Existing::Refuse, owner).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        if root {
            assert_eq!((metadata.uid(), metadata.gid()), (65534, 65534));
        }
        let sub = dir.path().join("report");
        create_dir(&sub, owner).unwrap();
        let metadata = std::fs::metadata(&sub).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o700);
        if root {
            assert_eq!(metadata.uid(), 65534);
        }
    }
}
