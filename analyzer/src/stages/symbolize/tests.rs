use super::*;

#[test]
fn bare_names_and_paths() {
    assert!(!has_path("with_capacity_in<u8, alloc::alloc::Global>"));
    assert!(!has_path("{closure#0}"));
    assert!(has_path("leakscope_fixtures::cache::remember"));
    assert!(has_path("<alloc::vec::Vec<u8>>::push"));
    assert!(has_path(
        "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem"
    ));
}

#[test]
fn module_paths_from_where_sources_are() {
    let of = |p: &str| module_path(Path::new(p));
    assert_eq!(
        of("/rustc/59807616e1fa/library/alloc/src/raw_vec/mod.rs").as_deref(),
        Some("alloc::raw_vec")
    );
    assert_eq!(
        of("/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.48.0/src/sync/mpsc/bounded.rs").as_deref(),
        Some("tokio::sync::mpsc::bounded")
    );
    assert_eq!(
        of("/x/.cargo/registry/src/i/tikv-jemallocator-0.7.0/src/lib.rs").as_deref(),
        Some("tikv_jemallocator")
    );
    // This crate's own sources, named from its Cargo.toml.
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sites.rs");
    assert_eq!(of(here).as_deref(), Some("leakscope_analyzer::sites"));
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/leakscope.rs");
    assert_eq!(of(bin).as_deref(), Some("leakscope"));
    assert_eq!(of("/nowhere/src/x.rs"), None);
    assert_eq!(of("relative.rs"), None);
}

#[inline(never)]
fn a_function_to_find() -> u64 {
    std::hint::black_box(42)
}

#[test]
fn names_a_function_of_this_process_through_its_mappings() {
    let target = leakscope_recording::target::Target::inspect(std::process::id()).unwrap();
    let mut symbolizer = Symbolizer::new();
    for mapping in target.mappings {
        symbolizer.add_mapping(mapping);
    }
    a_function_to_find();
    // Pretend the address one byte into the function is a return address.
    let ip = a_function_to_find as *const () as u64 + 2;
    let frames = symbolizer.frames(ip).to_vec();
    assert!(
        frames
            .iter()
            .any(|f| f.function.ends_with("a_function_to_find")),
        "{frames:?}"
    );
    assert_eq!(
        symbolizer.frames(0x10).to_vec()[0].function,
        "0x10",
        "unknown addresses stay addresses"
    );
    assert!(symbolizer.unmatched().is_empty());
}

/// A recording names the files to read symbols from: a device, a FIFO or
/// a directory there is never opened (`/dev/zero` would be read forever,
/// a FIFO would block), and says why.
#[test]
fn a_mapping_that_names_no_regular_file_is_not_opened() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let fifo = dir.join("Cargo.toml");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path in this test's own scratch directory.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    assert_eq!(package_name(&fifo), None, "a FIFO does not block");
    for path in ["/dev/zero", fifo.to_str().unwrap(), dir.to_str().unwrap()] {
        let mut symbolizer = Symbolizer::new();
        symbolizer.add_mapping(Mapping {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: path.to_owned(),
            build_id: Some("00112233".into()),
        });
        assert!(symbolizer.frames(0x1010)[0].function.starts_with("0x"));
        let why = &symbolizer.unmatched()[path];
        assert!(why.contains("not a regular file"), "{path}: {why}");
    }
}

/// A file whose build-id is not the recorded one (the binary was rebuilt
/// after the recording) is not used: its frames stay addresses, and why is said.
#[test]
fn a_rebuilt_binary_is_not_used_for_names() {
    let target = leakscope_recording::target::Target::inspect(std::process::id()).unwrap();
    let mut symbolizer = Symbolizer::new();
    for mut mapping in target.mappings {
        if mapping.path == target.exe {
            mapping.build_id = Some("00112233".into());
        }
        symbolizer.add_mapping(mapping);
    }
    let ip = a_function_to_find as *const () as u64 + 2;
    let frames = symbolizer.frames(ip).to_vec();
    assert!(frames[0].function.starts_with("0x"), "{frames:?}");
    let why = &symbolizer.unmatched()[&target.exe];
    assert!(why.contains("differs from the recorded 00112233"), "{why}");
}

#[inline(never)]
fn another_function_to_find() -> u64 {
    std::hint::black_box(43)
}

/// A symbolizer over a copy of this test's executable (`exe` in `dir`,
/// made with `mode`), the other mappings as they are.
fn symbolizer_over_a_copy(dir: &Path, mode: u32) -> (Symbolizer, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let target = leakscope_recording::target::Target::inspect(std::process::id()).unwrap();
    let copy = dir.join("exe");
    std::fs::copy(&target.exe, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut symbolizer = Symbolizer::new();
    for mut mapping in target.mappings {
        if mapping.path == target.exe {
            mapping.path = copy.to_str().unwrap().to_owned();
        }
        symbolizer.add_mapping(mapping);
    }
    (symbolizer, copy)
}

/// On a thread (blazesym's symbolizer stays on the thread that made it): a
/// symbolizer over a copy of this executable made with `mode`, which first
/// names `first`; then `meanwhile` is done to the copy here, and the thread
/// names `function`. `None` if it has not answered within 60 s (it hangs).
fn frames_after(
    dir: &Path,
    mode: u32,
    first: Option<u64>,
    meanwhile: impl FnOnce(&Path),
    function: u64,
) -> Option<Vec<Frame>> {
    let (made, copy) = std::sync::mpsc::channel();
    let (go, going) = std::sync::mpsc::channel::<()>();
    let (sender, received) = std::sync::mpsc::channel();
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let (mut symbolizer, path) = symbolizer_over_a_copy(&dir, mode);
        if let Some(ip) = first {
            let frames = symbolizer.frames(ip + 2).to_vec();
            assert!(
                frames.iter().any(|f| !f.function.starts_with("0x")),
                "{frames:?} {:?}",
                symbolizer.unmatched()
            );
        }
        made.send(path).unwrap();
        going.recv().unwrap();
        let _ = sender.send(symbolizer.frames(function + 2).to_vec());
    });
    let path = copy.recv().unwrap();
    meanwhile(&path);
    go.send(()).unwrap();
    received
        .recv_timeout(std::time::Duration::from_secs(60))
        .ok()
}

/// The file is opened once, when its mapping is read, and read through that
/// descriptor: swapped afterwards for a FIFO (which blocks whoever opens it
/// for reading), it is still the file checked that is read. blazesym used to
/// open it again by name, and `leakscope report` hung there.
#[test]
fn a_file_swapped_for_a_fifo_after_its_check_is_never_opened() {
    let temp = tempfile::tempdir().unwrap();
    let swap = |copy: &Path| {
        std::fs::remove_file(copy).unwrap();
        let name = std::ffi::CString::new(copy.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in this test's own scratch directory.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    };
    let function = a_function_to_find as *const () as u64;
    let frames = frames_after(temp.path(), 0o755, None, swap, function)
        .expect("symbolizing hung on the FIFO swapped in");
    assert!(
        frames
            .iter()
            .any(|f| f.function.ends_with("a_function_to_find")),
        "{frames:?}"
    );
}

/// A file others may write (here 0666) is read from a sealed copy: truncated
/// while blazesym has it mapped, the next address read from it would have
/// been past its end, a SIGBUS that killed the analyzer.
#[test]
fn a_file_others_may_truncate_is_read_from_a_sealed_copy() {
    let temp = tempfile::tempdir().unwrap();
    let truncate = |copy: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(copy)
            .unwrap()
            .set_len(0)
            .unwrap();
    };
    let first = a_function_to_find as *const () as u64;
    let function = another_function_to_find as *const () as u64;
    let frames =
        frames_after(temp.path(), 0o666, Some(first), truncate, function).expect("answered");
    assert!(
        frames
            .iter()
            .any(|f| f.function.ends_with("another_function_to_find")),
        "{frames:?}"
    );
    a_function_to_find();
    another_function_to_find();
}
