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

fn build_id_of_file(file: &std::fs::File) -> Option<String> {
    use object::Object;
    // Reads only the headers and the note that holds the id, not the file: a
    // Rust server's binary with debug info is tens of MB, and reading all of it
    // was most of what `leakscope report` spent on a recording of a million events.
    let data = object::ReadCache::new(file);
    let file = object::File::parse(&data).ok()?;
    file.build_id().ok().flatten().map(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executable_file_mappings_only() {
        let line = "7f00a0000000-7f00a0100000 r-xp 00028000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6";
        let m = parse_maps_line(line).unwrap();
        assert_eq!(
            (m.start, m.end, m.file_offset),
            (0x7f00a0000000, 0x7f00a0100000, 0x28000)
        );
        assert!(
            parse_maps_line("7f00a0000000-7f00a0100000 rw-p 00000000 00:00 0 [heap]").is_none()
        );
        assert!(
            parse_maps_line("7f00a0000000-7f00a0100000 r--p 00000000 08:01 1 /lib/x").is_none()
        );
    }

    #[test]
    fn reads_the_build_id_a_whole_file_parse_finds() {
        use object::Object;
        let exe = std::env::current_exe().unwrap();
        let whole = std::fs::read(&exe).unwrap();
        let expected = object::File::parse(&*whole)
            .unwrap()
            .build_id()
            .unwrap()
            .map(hex);
        assert!(expected.is_some(), "the test binary has a build id");
        assert_eq!(build_id_of(&exe), expected);
        assert_eq!(build_id_of(Path::new("/proc/self/status")), None);
        assert_eq!(build_id_of(Path::new("/nonexistent")), None);
    }

    #[test]
    fn cpu_time_of_this_process_grows() {
        let before = cpu_ticks(std::process::id()).unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_ticks(std::process::id()).unwrap() > before);
        assert_eq!(cpu_ticks(u32::MAX), None);
    }

    #[test]
    fn inspects_this_process() {
        let me = Target::inspect(std::process::id()).unwrap();
        assert!(me.mappings.iter().any(|m| m.path == me.exe));
        assert!(me.mapped_library("libc.so").is_some());
        assert!(is_alive(std::process::id()));
        assert!(Target::inspect(0).is_err());
    }

    /// Inside a target's root, an absolute symbolic link and `..` stay in
    /// it: through `/proc/PID/root/...` they resolved on the host, so a
    /// container could make the probe (root) read any host file.
    #[test]
    fn a_path_inside_a_root_never_leaves_it() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("lib")).unwrap();
        std::fs::write(root.path().join("etc/hostname"), "inside").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.path().join("lib/libx.so")).unwrap();
        std::os::unix::fs::symlink(
            "/proc/self/root/etc/hostname",
            root.path().join("lib/magic.so"),
        )
        .unwrap();
        let dir = std::fs::File::open(root.path()).unwrap();
        let read = |path: &str| {
            open_regular(Path::new(path), Some(&dir))
                .map(|mut f| {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut f, &mut text).unwrap();
                    text
                })
                .map_err(|e| e.kind())
        };
        assert_eq!(read("/lib/libx.so").as_deref(), Ok("inside"));
        assert_eq!(read("/../../../../etc/hostname").as_deref(), Ok("inside"));
        assert!(read("/lib/magic.so").is_err(), "no way out through /proc");
        // And nothing missing inside is taken from the host instead.
        assert!(read("/etc/passwd").is_err(), "not the host's /etc/passwd");
        assert!(read("/lib").is_err(), "a directory is not read");
    }

    /// Only a regular file is opened: a FIFO fails at once instead of
    /// waiting for a writer, and a device (`/dev/zero`, endless) is refused.
    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in a fresh directory of this test.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let err = open_regular(&fifo, None).unwrap_err();
        assert!(err.to_string().contains("is a FIFO"), "{err}");
        let err = open_regular(Path::new("/dev/zero"), None).unwrap_err();
        assert!(err.to_string().contains("is a device"), "{err}");
        assert_eq!(build_id_of(Path::new("/dev/zero")), None);
    }

    /// Maps one page of `file` readable and executable into this process, as
    /// a library (or a JIT) is: `/proc/self/maps` lists it. Unmapped by the caller.
    fn map_executable(file: &std::fs::File) -> *mut libc::c_void {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh private read+exec mapping of one page of an open file.
        unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        }
    }

    /// A process that maps `/dev/zero` executable (as some JITs do): the
    /// probe inspects it at once, reads nothing of the device, and refuses
    /// to open it as a file to probe.
    #[test]
    fn a_mapped_device_is_never_read() {
        let zero = std::fs::File::open("/dev/zero").unwrap();
        let at = map_executable(&zero);
        assert_ne!(at, libc::MAP_FAILED, "/dev/zero maps executable here");
        let me = Target::inspect(std::process::id()).unwrap();
        let mapped = me.mappings.iter().find(|m| m.path == "/dev/zero");
        assert!(mapped.is_some_and(|m| m.build_id.is_none()));
        let err = me.open("/dev/zero").unwrap_err();
        assert!(format!("{err:#}").contains("is a device"), "{err:#}");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(at, 4096) };
        // The executable itself opens, through /proc/PID/exe.
        let exe = me.open(&me.exe).unwrap();
        assert!(exe.map().unwrap().starts_with(b"\x7fELF"));
    }

    /// A file replaced at its path after the target mapped it (an upgrade, or
    /// a target swapping in another file for the probe to read): what is
    /// opened is the file the target maps, through `/proc/PID/map_files`.
    /// That needs CAP_SYS_ADMIN; without it the path is all there is.
    #[test]
    fn the_mapped_file_is_opened_not_whatever_its_path_names_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libmapped.so");
        std::fs::write(&path, b"the mapped file").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let at = map_executable(&file);
        assert_ne!(at, libc::MAP_FAILED);
        let me = Target::inspect(std::process::id()).unwrap();
        let name = path.to_str().unwrap();
        assert!(me.mappings.iter().any(|m| m.path == name));
        let other = dir.path().join("other");
        std::fs::write(&other, b"another file").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let opened = me.open(name).unwrap();
        let bytes = opened.map().unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(at, 4096) };
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(
                opened
                    .path()
                    .starts_with(format!("/proc/{}/map_files", me.pid))
            );
            assert_eq!(&bytes[..], b"the mapped file");
        } else {
            assert_eq!(&bytes[..], b"another file");
        }
    }
}
