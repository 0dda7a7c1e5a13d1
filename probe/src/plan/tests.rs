use std::path::PathBuf;

use leakscope_probe_ebpf::{program, scope_cookie};
use leakscope_recording::ScopeKind;

use super::*;

#[test]
fn a_scope_cookie_carries_its_kind_and_whether_it_returns() {
    for kind in ScopeKind::ALL {
        for returns in [false, true] {
            for arg in [0, 1, 5] {
                let cookie = scope_cookie(kind as u32, returns, arg) as u32;
                let (index, back) = leakscope_probe_ebpf::split_scope(cookie);
                assert_eq!(ScopeKind::from_cookie(index), Some(kind));
                assert_eq!(back, returns);
                assert_eq!(leakscope_probe_ebpf::scope_arg(cookie), arg);
            }
        }
    }
}

#[test]
fn frees_then_returns_then_lifecycle_then_allocator_entries_are_attached() {
    let at = |program| Probe {
        program,
        path: PathBuf::from("/lib/libc.so.6"),
        file_name: "/lib/libc.so.6".into(),
        file: None,
        file_offset: 0,
        cookie: None,
        function: String::new(),
        fallback_offsets: Vec::new(),
    };
    let mut probes = vec![
        at(program::MALLOC_ENTER),
        at(program::SCOPE_EXIT),
        at(program::MALLOC_EXIT),
        at(program::FREE_ENTER),
        at(program::REALLOC_ENTER),
        at(program::SCOPE_ENTER),
    ];
    order_for_attach(&mut probes);
    let order: Vec<&str> = probes.iter().map(|p| p.program).collect();
    assert_eq!(
        order,
        [
            program::FREE_ENTER,
            program::SCOPE_EXIT,
            program::MALLOC_EXIT,
            program::SCOPE_ENTER,
            program::MALLOC_ENTER,
            program::REALLOC_ENTER
        ],
        "each kind keeps its order"
    );
}
