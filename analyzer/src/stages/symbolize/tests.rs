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
