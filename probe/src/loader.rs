//! Loading the eBPF object and attaching its programs according to a [`Plan`].

use std::collections::HashSet;
use std::num::NonZeroU32;

use anyhow::{Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::UProbe;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::{Ebpf, EbpfLoader};

use crate::EBPF_OBJECT;
use crate::plan::Plan;

/// Said with every attach failure: the kernel keeps one uprobe per file offset
/// and refuses a second one whose reference counter differs (EINVAL, dmesg
/// "ref_ctr_offset mismatch"). bcc's tools set one, so `memleak` attached to the
/// same library, for any process, makes this attach fail until it detaches.
const CONFLICT_HINT: &str = " (if the error is \"Invalid argument\": another tool's uprobe on the same function, e.g. bcc memleak, can cause it; see dmesg)";

/// The loaded programs (attached while this lives) and the maps userspace reads.
pub struct Loaded {
    /// Dropping it detaches every probe.
    pub ebpf: Ebpf,
    pub events: RingBuf<MapData>,
    pub lost: PerCpuArray<MapData, u64>,
    /// Where the target's uretprobe trampoline is (see [`crate::trampoline`]).
    pub trampoline: Array<MapData, u64>,
    pub attached: usize,
}

/// Loads the object with a ring buffer of `ring_bytes` and attaches every probe of
/// `plan`, scoped to `pid` (the kernel only plants breakpoints in that process).
pub fn load_and_attach(plan: &Plan, pid: u32, ring_bytes: u32) -> Result<Loaded> {
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("EVENTS", ring_bytes)
        .load(EBPF_OBJECT)
        .context(
            "the kernel refused to load the eBPF programs although this process holds the capabilities (kernel lockdown, a security module or a seccomp filter can forbid BPF)",
        )?;
    let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
    let mut loaded_programs = HashSet::new();
    let mut attached = 0;
    for probe in &plan.probes {
        let program: &mut UProbe = ebpf
            .program_mut(probe.program)
            .with_context(|| format!("the eBPF object has no program {}", probe.program))?
            .try_into()?;
        if loaded_programs.insert(probe.program) {
            program
                .load()
                .with_context(|| format!("the kernel refused to load {}", probe.program))?;
        }
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(probe.file_offset),
            cookie: probe.cookie,
        };
        program.attach(point, &probe.path, scope).with_context(|| {
            format!(
                "cannot attach {} to {} ({}+{:#x}){}",
                probe.program,
                probe.function,
                probe.path.display(),
                probe.file_offset,
                CONFLICT_HINT
            )
        })?;
        attached += 1;
    }
    let events = RingBuf::try_from(ebpf.take_map("EVENTS").context("no EVENTS map")?)?;
    let lost = PerCpuArray::try_from(ebpf.take_map("LOST").context("no LOST map")?)?;
    let trampoline = Array::try_from(
        ebpf.take_map("UPROBE_TRAMPOLINE")
            .context("no UPROBE_TRAMPOLINE map")?,
    )?;
    Ok(Loaded {
        ebpf,
        events,
        lost,
        trampoline,
        attached,
    })
}
