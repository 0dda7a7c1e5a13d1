//! The in-process mode's three lines in a program that keeps 2,000 blocks of
//! 1,000 B from one function (`keep_one`), for the test that its stacks name
//! that function whether or not the build kept frame pointers
//! (`fixtures/tests/inproc_frame_pointers.rs`).
//!
//! `keeper OUT.lsrec`

#[global_allocator]
static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;

/// The site: one block per call, kept by the caller.
#[inline(never)]
fn keep_one(i: usize) -> Vec<u8> {
    std::hint::black_box(vec![(i % 251) as u8; 1000])
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "keeper.lsrec".into());
    let guard = leakscope_inproc::start(&out)?;
    let kept: Vec<Vec<u8>> = (0..2000).map(keep_one).collect();
    drop(guard);
    std::hint::black_box(&kept);
    Ok(())
}
