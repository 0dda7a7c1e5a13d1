use super::*;

#[test]
fn parses_executable_file_mappings_only() {
    let line =
        "7f00a0000000-7f00a0100000 r-xp 00028000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6";
    let m = parse_maps_line(line).unwrap();
    assert_eq!(
        (m.start, m.end, m.file_offset),
        (0x7f00a0000000, 0x7f00a0100000, 0x28000)
    );
    assert!(parse_maps_line("7f00a0000000-7f00a0100000 rw-p 00000000 00:00 0 [heap]").is_none());
    assert!(parse_maps_line("7f00a0000000-7f00a0100000 r--p 00000000 08:01 1 /lib/x").is_none());
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
