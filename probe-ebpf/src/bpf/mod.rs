//! The programs, by what they probe, and what they share: the ring buffer
//! ([`records`]), the stack walks (by frame pointer, [`walk`]; by table, [`unwind`]) and, in a sampled recording,
//! which calls are recorded ([`sample`]).

mod alloc;
mod bench;
mod free;
mod records;
mod sample;
mod scope;
mod unwind;
mod walk;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL-compatible: bpf_probe_read_user and bpf_get_stack are GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
