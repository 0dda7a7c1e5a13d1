//! Benchmarks only (`--bare`): programs that do nothing, at the same points,
//! for the cost of the uprobe trap alone.

use aya_ebpf::macros::{uprobe, uretprobe};
use aya_ebpf::programs::{ProbeContext, RetProbeContext};

/// Benchmarks only (`--bare`): a uprobe that does nothing, for the cost floor.
#[uprobe]
pub fn noop_enter(_ctx: ProbeContext) -> u32 {
    0
}

/// Benchmarks only (`--bare`): a uretprobe that does nothing.
#[uretprobe]
pub fn noop_exit(_ctx: RetProbeContext) -> u32 {
    0
}
