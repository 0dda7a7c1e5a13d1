//! leakscope's uprobe programs: allocations, frees and rmcp lifecycle scopes.
//!
//! Allocation functions are probed twice: at entry (`*_enter` sends an
//! [`AllocEnterRecord`] with the call's arguments) and at return (`*_exit`
//! walks the user stack by frame pointer and sends an [`AllocExitRecord`] with
//! the block and the stack). Userspace pairs the two by thread and stack pointer, and keeps only
//! a thread's outermost allocator call (see `leakscope-probe`'s `capture`).
//! `free` needs only its entry. Lifecycle functions send a [`ScopeRecord`] at
//! entry and return; the uprobe cookie says which function it is.
//!
//! The programs live in `bpf/`, one file per kind of function probed
//! (`alloc`, `free`, `scope`, `bench`), beside what they share: the ring
//! buffer and drop counters (`records`) and the frame-pointer walk (`walk`).
//!
//! Rules for these files: the per-event path stays short (it runs inside every
//! malloc of the target), nothing blocks, and every drop is counted in `LOST`.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(not(target_arch = "bpf"))]
fn main() {
    // Host build: the programs below only exist for the BPF target.
}

#[cfg(target_arch = "bpf")]
mod bpf;
