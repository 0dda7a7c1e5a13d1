//! The process a producer records: its executable, its executable mappings (with
//! build-ids, so stacks can be symbolized later or elsewhere), its libc.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::Mapping;

pub struct Target {
    pub pid: u32,
    /// The executable as the target sees it (from `/proc/PID/exe`).
    pub exe: String,
    /// Executable file-backed regions, with build-ids.
    pub mappings: Vec<Mapping>,
}

impl Target {
    pub fn inspect(pid: u32) -> Result<Self> {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| {
                format!("cannot read /proc/{pid}/exe (is the process a kernel thread, or gone?)")
            })?
            .to_string_lossy()
            .into_owned();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .with_context(|| format!("cannot read /proc/{pid}/maps"))?;
        let mut build_ids: HashMap<String, Option<String>> = HashMap::new();
        let mut mappings = Vec::new();
        for line in maps.lines() {
            let Some(region) = parse_maps_line(line) else {
                continue;
            };
            let build_id = build_ids
                .entry(region.path.clone())
                .or_insert_with(|| {
                    let file = open_mapped(pid, &exe, std::slice::from_ref(&region), &region.path);
                    file.ok().and_then(|file| build_id_of_file(file.file()))
                })
                .clone();
            mappings.push(Mapping { build_id, ..region });
        }
        Ok(Self { pid, exe, mappings })
    }

    /// The file the target maps whose name starts with `prefix` (e.g. "libc.so").
    pub fn mapped_library(&self, prefix: &str) -> Option<&str> {
        self.mappings.iter().map(|m| m.path.as_str()).find(|path| {
            path.rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with(prefix))
        })
    }

    /// The file the target maps at `path` (its executable, or one of its
    /// mappings), opened so that nothing the target controls can point this
    /// process, root, at another file (see [`TargetFile`]).
    pub fn open(&self, path: &str) -> Result<TargetFile> {
        open_mapped(self.pid, &self.exe, &self.mappings, path)
    }

    /// The version of crate `name` the executable was built from (see [`crate_version`]).
    pub fn crate_version(&self, name: &str) -> Option<String> {
        let file = self.open(&self.exe).ok()?;
        crate_version(&file.map().ok()?, name)
    }

    /// What a recording's header says of this process. `rmcp_version`: the
    /// rmcp release its executable was built with, when the caller has read it
    /// (from symbols already in memory, or [`Target::crate_version`]).
    pub fn identity(&self, rmcp_version: Option<String>) -> crate::Identity {
        crate::Identity {
            pid: self.pid,
            exe: self.exe.clone(),
            build_id: self.exe_build_id(),
            rmcp_version,
        }
    }

    pub fn exe_build_id(&self) -> Option<String> {
        self.mappings
            .iter()
            .find(|m| m.path == self.exe)
            .and_then(|m| m.build_id.clone())
    }
}

/// The identity of the program `pid` runs (device and inode of its executable):
/// it changes when the process `exec`s. `None` when it cannot be read.
pub fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// True while `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// CPU time `pid` has used so far (user and system, all its threads), in
/// clock ticks; `None` when it cannot be read.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses):
    // state is the 3rd field of stat, utime the 14th and stime the 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// What `/proc/PID/maps` appends to the path of a file removed since it was mapped.
const DELETED: &str = " (deleted)";

/// A file the target maps, opened by the probe as root without trusting any
/// name the target controls: through `/proc/PID/exe` or
/// `/proc/PID/map_files/START-END` (the very file mapped, even deleted or
/// replaced since, even in a container), or, where those cannot be opened
/// (they need CAP_SYS_ADMIN), by its path resolved inside the target's root
/// with `openat2(RESOLVE_IN_ROOT)`, so an absolute symbolic link in a
/// container's tree cannot name a file of the host. Only a regular file is
/// kept: a device the target maps (`/dev/zero`) is never read.
#[derive(Debug)]
pub struct TargetFile {
    file: std::fs::File,
    path: PathBuf,
}

impl TargetFile {
    /// A path that names exactly this file while it is open, for the kernel
    /// (uprobes attach by path) and for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// The file's bytes, mapped rather than read: a Rust server's binary with
    /// debug info is tens of MB, and only its symbols and a few functions'
    /// code are looked at.
    pub fn map(&self) -> Result<memmap2::Mmap> {
        // SAFETY: the mapping is read-only and private. A file truncated
        // under it would fault on access; the target maps these files and
        // executes them itself, so they are not rewritten in place.
        unsafe { memmap2::Mmap::map(&self.file) }
            .with_context(|| format!("cannot map {}", self.path.display()))
    }
}

fn open_mapped(pid: u32, exe: &str, mappings: &[Mapping], path: &str) -> Result<TargetFile> {
    let magic = if path == exe {
        Some(format!("/proc/{pid}/exe"))
    } else {
        mappings
            .iter()
            .find(|m| m.path == path)
            .map(|m| format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
    };
    let Some(magic) = magic else {
        bail!("pid {pid} does not map {path}");
    };
    match open_regular(Path::new(&magic), None) {
        Ok(file) => {
            return Ok(TargetFile {
                file,
                path: magic.into(),
            });
        }
        // map_files needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot open {path} of pid {pid}")));
        }
    }
    if path.ends_with(DELETED) {
        bail!(
            "{path}: pid {pid}'s file was deleted since it was mapped, and {magic} cannot be opened without CAP_SYS_ADMIN"
        );
    }
    let root = std::fs::File::open(format!("/proc/{pid}/root"))
        .with_context(|| format!("cannot open /proc/{pid}/root"))?;
    let file = open_regular(Path::new(path), Some(&root))
        .with_context(|| format!("cannot open {path} inside pid {pid}'s root"))?;
    use std::os::fd::AsRawFd;
    // The kernel reaches the file by this name while it stays open.
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Ok(TargetFile { file, path })
}

/// Opens `path` read-only, never blocking (a FIFO fails instead of waiting
/// for a writer) and never as a controlling terminal, and keeps it only if it
/// is a regular file. With `root`, `path` is resolved inside that directory
/// as if it were `/` (`openat2(RESOLVE_IN_ROOT)`): `..` and absolute
/// symbolic links stay inside it, and no `/proc` magic link is followed.
pub fn open_regular(path: &Path, root: Option<&std::fs::File>) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let file = match root {
        None => std::fs::File::options()
            .read(true)
            .custom_flags(flags)
            .open(path)?,
        Some(root) => {
            let name = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
            // SAFETY: open_how is plain integers; all zero is a valid value.
            let mut how: libc::open_how = unsafe { std::mem::zeroed() };
            how.flags = (libc::O_RDONLY | flags) as u64;
            how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
            // SAFETY: openat2 with a valid directory fd, a NUL-terminated
            // name and an open_how of the size passed.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    root.as_raw_fd(),
                    name.as_ptr(),
                    &how as *const libc::open_how,
                    std::mem::size_of::<libc::open_how>(),
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: the kernel just returned this fd, owned by nobody else.
            unsafe { std::fs::File::from_raw_fd(fd as i32) }
        }
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is {what}, not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// `start-end perms offset dev inode path`, executable and file-backed only.
fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.collect::<Vec<_>>().join(" ");
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        file_offset: u64::from_str_radix(offset, 16).ok()?,
        path,
        build_id: None,
    })
}

/// The version of crate `name` a binary was built from, read from the source
/// paths cargo leaves in it (`.../registry/src/.../rmcp-3.11.0/src/...`).
pub fn crate_version(data: &[u8], name: &str) -> Option<String> {
    let needle = format!("/{name}-");
    let bytes = needle.as_bytes();
    let mut at = 0;
    while let Some(pos) = data[at..].windows(bytes.len()).position(|w| w == bytes) {
        let start = at + pos + bytes.len();
        let version: String = data[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'.' || **b == b'-')
            .map(|b| *b as char)
            .collect();
        let follows_slash = data.get(start + version.len()) == Some(&b'/');
        if follows_slash
            && version.starts_with(|c: char| c.is_ascii_digit())
            && version.contains('.')
        {
            return Some(version);
        }
        at = start;
    }
    None
}

/// Lowercase hex of `bytes` (build-ids).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The GNU build-id of the ELF file at `path`, hex; `None` when it has none,
/// cannot be read, or is not a regular file.
pub fn build_id_of(path: &Path) -> Option<String> {
    build_id_of_file(&open_regular(path, None).ok()?)
}

pub fn build_id_of_file(file: &std::fs::File) -> Option<String> {
    use object::Object;
    // Reads only the headers and the note that holds the id, not the file: a
    // Rust server's binary with debug info is tens of MB, and reading all of it
    // was most of what `leakscope report` spent on a recording of a million events.
    let data = object::ReadCache::new(file);
    let file = object::File::parse(&data).ok()?;
    file.build_id().ok().flatten().map(hex)
}

/// `file` as it is now, for a reader that maps it by name (`/proc/self/fd/N`,
/// as blazesym does): `file` itself when only this user or root could change
/// it, else a copy in a sealed memory file. A mapped file that another user
/// truncates makes the next access past its new end a SIGBUS.
pub fn unchangeable(file: std::fs::File) -> std::io::Result<std::fs::File> {
    if may_change_under_us(&file) {
        sealed_copy(file)
    } else {
        Ok(file)
    }
}

/// Whether someone other than this user or root could change `file` while it
/// is read: its owner is another user, or others may write it.
fn may_change_under_us(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = file.metadata() else {
        return true;
    };
    // SAFETY: geteuid(2) has no preconditions.
    let me = unsafe { libc::geteuid() };
    (metadata.uid() != me && metadata.uid() != 0) || metadata.mode() & 0o022 != 0
}

/// `file`'s bytes in a memory file sealed against any change: what blazesym
/// maps then cannot shrink under it.
fn sealed_copy(mut file: std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: memfd_create with a NUL-terminated name; the new descriptor
    // is owned below.
    let fd = unsafe {
        libc::memfd_create(
            c"leakscope-elf".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    let mut copy = unsafe { std::fs::File::from_raw_fd(fd) };
    // From its start: reading its build-id moved the offset.
    std::io::Seek::rewind(&mut file)?;
    std::io::copy(&mut file, &mut copy)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on the memory file this function owns.
    if unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(copy)
}

#[cfg(test)]
mod tests;
