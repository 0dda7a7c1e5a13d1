//! Whole stacks from builds without frame pointers (issue 30): the tables of
//! a target's executables, compiled by `leakscope-unwind` from each file the
//! target maps ([`process`]), for the programs' walk (`loader.rs` loads
//! them into maps; `leakscope_probe_ebpf::unwind::step` is the walk's step,
//! tested here on this process's own stack).

pub mod process;

pub use leakscope_unwind::{Table, TableError};
pub use process::ProcessTables;
