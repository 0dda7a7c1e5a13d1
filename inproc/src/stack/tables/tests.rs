use super::*;

/// This thread's stack: `(low, high)`.
fn stack_bounds() -> (u64, u64) {
    let bounds = crate::stack::bounds();
    assert_ne!(bounds.1, 0, "no stack bounds");
    bounds
}

/// The walk from `depth` nested calls down, and libgcc's unwinder's
/// (through `backtrace`) from the same place.
#[inline(never)]
fn nested(depth: u32) -> (Vec<u64>, Vec<u64>) {
    if depth > 0 {
        let walks = nested(depth - 1);
        // Not a tail call: this frame stays on the stack.
        std::hint::black_box(depth);
        return walks;
    }
    let (low, high) = stack_bounds();
    let mut frames = [0u64; DEPTH];
    let n = walk(&mut frames, low, high).expect("tables compiled");
    let mut theirs = Vec::new();
    backtrace::trace(|frame| {
        let ip = frame.ip() as u64;
        if ip != 0 {
            theirs.push(ip);
        }
        true
    });
    (frames[..n].to_vec(), theirs)
}

#[test]
fn the_walk_by_tables_finds_the_frames_libgcc_finds() {
    let tables = compiled();
    assert!(!tables.mappings.is_empty() && tables.rows.len() > 1000);
    // Twice: the second walk reads rows from this thread's cache.
    for _ in 0..2 {
        let (ours, theirs) = nested(8);
        // Ours starts at the walk's caller's caller (as the frame-pointer
        // walk, called from `stack::walk`, starts at its caller's); from
        // there the two are the same addresses, down to the thread's first
        // frame, which this test's thread reaches within `DEPTH` frames.
        assert!(ours.len() >= 8 + 4 && ours.len() < DEPTH, "{ours:x?}");
        assert!(
            theirs.ends_with(&ours),
            "{ours:x?} is not the end of libgcc's {theirs:x?}"
        );
    }
}

#[test]
fn every_loaded_object_with_code_has_a_table() {
    let tables = compiled();
    assert!(tables.missing.is_empty(), "{:?}", tables.missing);
    // This function's own code, and libc's.
    let here = every_loaded_object_with_code_has_a_table as *const () as u64;
    assert!(tables.mapping(here).is_some());
    assert!(tables.mapping(libc::malloc as *const () as u64).is_some());
}
