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
                .or_insert_with(|| read_build_id(&region_file(pid, &region)))
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

    /// A path to `path` as the target sees it, openable from here: through
    /// `/proc/PID/root` (so a containerized target gets its own files, not the
    /// host's), and, for a file deleted or replaced since the target mapped it (an
    /// in-place upgrade: `/srv/app (deleted)`), the mapped file itself through
    /// `/proc/PID/exe` or `/proc/PID/map_files`.
    pub fn host_path(&self, path: &str) -> PathBuf {
        if path.ends_with(DELETED) {
            if path == self.exe {
                return PathBuf::from(format!("/proc/{}/exe", self.pid));
            }
            if let Some(region) = self.mappings.iter().find(|m| m.path == path) {
                return region_file(self.pid, region);
            }
        }
        host_path(self.pid, path)
    }

    /// The version of crate `name` the executable was built from (see [`crate_version`]).
    pub fn crate_version(&self, name: &str) -> Option<String> {
        let data = std::fs::read(self.host_path(&self.exe)).ok()?;
        crate_version(&data, name)
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

/// The file behind one mapped region, openable from here.
fn region_file(pid: u32, region: &Mapping) -> PathBuf {
    if region.path.ends_with(DELETED) {
        PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            region.start, region.end
        ))
    } else {
        host_path(pid, &region.path)
    }
}

fn host_path(pid: u32, path: &str) -> PathBuf {
    let through_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
    if through_root.exists() {
        through_root
    } else {
        PathBuf::from(path)
    }
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

/// The GNU build-id of the ELF file at `path`, hex; `None` when it has none or
/// cannot be read.
pub fn build_id_of(path: &Path) -> Option<String> {
    read_build_id(path)
}

fn read_build_id(path: &Path) -> Option<String> {
    use object::Object;
    if !path.is_file() {
        return None;
    }
    // Reads only the headers and the note that holds the id, not the file: a
    // Rust server's binary with debug info is tens of MB, and reading all of it
    // was most of what `leakscope report` spent on a recording of a million events.
    let data = object::ReadCache::new(std::fs::File::open(path).ok()?);
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
}
