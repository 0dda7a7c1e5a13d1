use leakscope_probe_ebpf::unwind::{Step, step};

use super::*;

/// This thread's stack: `(low, high)`.
fn stack_bounds() -> (u64, u64) {
    // SAFETY: pthread_getattr_np fills an attr we own and destroy.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        (addr as u64, addr as u64 + size as u64)
    }
}

/// The return addresses above this function, by the tables and the same
/// step the kernel's walk will take, and how the walk ended; beside them,
/// libgcc's unwinder's (through `backtrace`), from the same function.
#[inline(never)]
fn both_walks(tables: &ProcessTables) -> (Vec<u64>, Step, Vec<u64>) {
    let here = leakscope_unwind::here();
    let (low, high) = stack_bounds();
    let mut source = OwnStack { tables, low, high };
    let mut ours = Vec::new();
    let mut frame = here;
    let mut interrupted = true;
    let end = loop {
        match step(&mut source, frame, interrupted) {
            Step::Caller(caller) if ours.len() < 128 => {
                ours.push(caller.pc);
                frame = caller;
                interrupted = false;
            }
            other => break other,
        }
    };
    let mut theirs = Vec::new();
    backtrace::trace(|frame| {
        // The outermost frame (its return address undefined) comes as 0.
        let ip = frame.ip() as u64;
        if ip != 0 {
            theirs.push(ip);
        }
        true
    });
    (ours, end, theirs)
}

#[inline(never)]
fn nested(depth: u32, tables: &ProcessTables) -> (Vec<u64>, Step, Vec<u64>) {
    let walked = if depth == 0 {
        both_walks(tables)
    } else {
        nested(depth - 1, tables)
    };
    // Not a tail call: each level keeps its frame.
    std::hint::black_box(walked)
}

/// A walk of this thread by its process's tables finds every caller libgcc's
/// unwinder finds, in order, down to the thread's first frame (clone's,
/// whose return address is undefined), through this crate's code, std's and
/// libc's.
#[test]
fn a_walk_by_the_tables_finds_what_libgccs_unwinder_finds() {
    let target = Target::inspect(std::process::id()).unwrap();
    let tables = super::of(&target);
    assert!(!tables.rows.is_empty());
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let exe = exe.to_string_lossy();
    assert!(
        !tables.missing.iter().any(|(path, _)| *path == exe),
        "{:?}",
        tables.missing
    );
    let (ours, end, theirs) = nested(6, &tables);
    assert_eq!(end, Step::Outermost, "ours: {ours:x?}\ntheirs: {theirs:x?}");
    // libgcc's first frames are inside `backtrace` and `both_walks`; ours
    // start at the caller of `both_walks`.
    let at = theirs
        .iter()
        .position(|&ip| ip == ours[0])
        .unwrap_or_else(|| panic!("ours: {ours:x?}\ntheirs: {theirs:x?}"));
    assert_eq!(&theirs[at..], &ours[..], "from libgcc's frame {at}");
    assert!(ours.len() > 8, "{} frames", ours.len());
}

/// A file mapped twice (or a library and its copy) keeps one table; a
/// mapping's rows are found from any of its addresses.
#[test]
fn each_file_has_one_table_and_its_mappings_find_their_rows() {
    let target = Target::inspect(std::process::id()).unwrap();
    let tables = super::of(&target);
    let libc = target.mapped_library("libc.so").expect("libc is mapped");
    let libc_mappings: Vec<&ExecMapping> = tables
        .mappings
        .iter()
        .filter(|m| {
            target
                .mappings
                .iter()
                .any(|t| t.start == m.start && t.path == libc)
        })
        .collect();
    assert!(!libc_mappings.is_empty());
    let first = libc_mappings[0].first_row;
    assert!(libc_mappings.iter().all(|m| m.first_row == first));
    let middle = libc_mappings[0].start + (libc_mappings[0].end - libc_mappings[0].start) / 2;
    assert_eq!(tables.mapping(middle), Some(*libc_mappings[0]));
    assert_eq!(tables.mapping(0x1000), None);
}

/// The eBPF object is ELF, but not code a process runs: no `.eh_frame`.
#[cfg(feature = "ebpf")]
#[test]
fn the_ebpf_object_has_no_table() {
    assert!(matches!(
        super::Table::from_elf(crate::EBPF_OBJECT),
        Err(crate::unwind::TableError::NoEhFrame)
    ));
}
