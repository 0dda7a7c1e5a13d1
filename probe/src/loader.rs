//! Loading the eBPF object and attaching its programs according to a [`Plan`].

use std::collections::HashSet;
use std::num::NonZeroU32;

use anyhow::{Context, Result};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeScope};
use aya::programs::{ProgramError, UProbe};
use aya::{Ebpf, EbpfLoader};

use leakscope_probe_ebpf::SPACING_SLOTS;
use leakscope_probe_ebpf::unwind::{
    CUT_SLOTS, ExecMapping, MAX_EXEC_MAPPINGS, ROWS_PER_CHUNK, UnwindRow,
};
use leakscope_recording::sampling::Sampling;

use crate::EBPF_OBJECT;
use crate::plan::Plan;
use crate::unwind::ProcessTables;

/// Said with every attach failure: the kernel keeps one uprobe per file offset
/// and refuses a second one whose reference counter differs (EINVAL, dmesg
/// "ref_ctr_offset mismatch"). bcc's tools set one, so `memleak` attached to the
/// same library, for any process, makes this attach fail until it detaches.
const CONFLICT_HINT: &str = " (if the error is \"Invalid argument\": another tool's uprobe on the same function, e.g. bcc memleak, can cause it; see dmesg)";

/// The loaded programs and the maps userspace reads. The maps are taken out
/// before any probe is attached, so the ring buffer can be drained while the
/// probes are attached and detached (seconds, for many).
pub struct Loaded {
    pub ebpf: Ebpf,
    pub events: RingBuf<MapData>,
    pub lost: PerCpuArray<MapData, u64>,
    /// Where the target's uretprobe trampoline is (see [`crate::trampoline`]).
    pub trampoline: Array<MapData, u64>,
}

/// The probes in place, in the order they were attached: dropping one
/// detaches it, so [`detach`] drops them in the reverse order.
pub struct Attached {
    pub links: Vec<UProbeLink>,
}

/// The kernel's "Unknown error 524" (ENOTSUPP) from attaching: it cannot
/// probe the instruction there (uprobes refuse some, e.g. a lock-prefixed
/// RIP-relative one).
fn refused_instruction(error: &aya::programs::ProgramError) -> bool {
    const ENOTSUPP: i32 = 524;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            == Some(ENOTSUPP)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// Loads the object with a ring buffer of `ring_bytes` and loads (verifies)
/// every program `plan` uses; nothing is attached yet. `sampling` tells the
/// programs which calls to record (see `probe-ebpf`'s `bpf/sample.rs`), and
/// `sampled_blocks` how many sampled blocks alive their map holds;
/// `unwind`, when given, are the tables the programs walk stacks by instead
/// of frame pointers (see `probe-ebpf`'s `bpf/unwind.rs`).
pub fn load(
    plan: &Plan,
    ring_bytes: u32,
    sampling: Sampling,
    sampled_blocks: u32,
    unwind: Option<&ProcessTables>,
) -> Result<Loaded> {
    if EBPF_OBJECT.is_empty() {
        anyhow::bail!(
            "this leakscope-probe was built without its eBPF probe (the `ebpf` cargo feature was off): it attaches only to a process that runs leakscope_inproc::Alloc (a cooperative attach); rebuild with default features, nightly and bpf-linker (`cargo xtask setup`) to probe any process"
        );
    }
    let mut loader = EbpfLoader::new();
    loader.map_max_entries("EVENTS", ring_bytes);
    loader.map_max_entries("SAMPLED", sampled_blocks.max(1));
    if let Some(tables) = unwind {
        loader.map_max_entries("UNWIND_ROWS", chunks(tables).max(1));
    }
    let mut ebpf = loader
        .load(EBPF_OBJECT)
        .context(
            "the kernel refused to load the eBPF programs although this process holds the capabilities (kernel lockdown, a security module or a seccomp filter can forbid BPF)",
        )?;
    let mut loaded_programs = HashSet::new();
    for probe in &plan.probes {
        if loaded_programs.insert(probe.program) {
            let program: &mut UProbe = ebpf
                .program_mut(probe.program)
                .with_context(|| format!("the eBPF object has no program {}", probe.program))?
                .try_into()?;
            program
                .load()
                .map_err(refusal)
                .with_context(|| format!("the kernel refused to load {}", probe.program))?;
        }
    }
    if let Some(mean) = sampling.mean_bytes() {
        set_sampling(&mut ebpf, mean)?;
    }
    if let Some(tables) = unwind {
        set_unwind(&mut ebpf, tables)?;
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
    })
}

/// A program the kernel refused, said by the end of the verifier's log:
/// where it stopped and why ("BPF program is too large. Processed 1000001
/// insn", the stack depth, the states). Its beginning, which the error
/// printed before, is the program's first instructions, and the one-line
/// error was cut long before the reason.
fn refusal(error: ProgramError) -> anyhow::Error {
    match error {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            let mut last: Vec<&str> = log
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .rev()
                .take(VERIFIER_LINES)
                .collect();
            last.reverse();
            anyhow::anyhow!("{io_error}; the verifier's log ends: {}", last.join(" | "))
        }
        other => other.into(),
    }
}

/// Lines of the verifier's log a refusal quotes: its verdict and statistics.
const VERIFIER_LINES: usize = 4;

/// Map values of [`ROWS_PER_CHUNK`] rows that `tables` fill.
fn chunks(tables: &ProcessTables) -> u32 {
    tables.rows.len().div_ceil(ROWS_PER_CHUNK) as u32
}

/// A chunk of rows as the map holds it (8 bytes a row, as `UnwindRow` is
/// laid out: aya's `Pod` is not the probe's to implement for a type of
/// `leakscope-probe-ebpf`).
const CHUNK_BYTES: usize = ROWS_PER_CHUNK * size_of::<UnwindRow>();
const MAPPING_BYTES: usize = size_of::<ExecMapping>();

/// Fills the programs' tables: the rows, then the mappings, and last their
/// count, which turns the walk by table on.
fn set_unwind(ebpf: &mut Ebpf, tables: &ProcessTables) -> Result<()> {
    let mut rows: Array<_, [u8; CHUNK_BYTES]> =
        Array::try_from(ebpf.map_mut("UNWIND_ROWS").context("no UNWIND_ROWS map")?)?;
    for (index, chunk) in tables.rows.chunks(ROWS_PER_CHUNK).enumerate() {
        let mut bytes = [0u8; CHUNK_BYTES];
        for (row, out) in chunk.iter().zip(bytes.chunks_exact_mut(8)) {
            out[..4].copy_from_slice(&row.pc.to_ne_bytes());
            out[4..6].copy_from_slice(&row.cfa_off.to_ne_bytes());
            out[6] = row.kind;
            out[7] = row.rbp as u8;
        }
        rows.set(index as u32, bytes, 0)?;
    }
    let mut mappings: Array<_, [u8; MAPPING_BYTES]> = Array::try_from(
        ebpf.map_mut("EXEC_MAPPINGS")
            .context("no EXEC_MAPPINGS map")?,
    )?;
    let used = tables.mappings.len().min(MAX_EXEC_MAPPINGS as usize);
    for (index, mapping) in tables.mappings[..used].iter().enumerate() {
        let mut bytes = [0u8; MAPPING_BYTES];
        bytes[..8].copy_from_slice(&mapping.start.to_ne_bytes());
        bytes[8..16].copy_from_slice(&mapping.end.to_ne_bytes());
        bytes[16..24].copy_from_slice(&mapping.bias.to_ne_bytes());
        bytes[24..28].copy_from_slice(&mapping.first_row.to_ne_bytes());
        bytes[28..32].copy_from_slice(&mapping.rows.to_ne_bytes());
        mappings.set(index as u32, bytes, 0)?;
    }
    let mut on: Array<_, u32> = Array::try_from(ebpf.map_mut("UNWIND").context("no UNWIND map")?)?;
    on.set(0, used as u32, 0)?;
    Ok(())
}

/// How many walks by table stopped short, by why, summed over the CPUs;
/// `None` when the programs walked by frame pointer (or the count cannot be
/// read: it is a figure for the user, never a reason to fail).
pub fn unwind_cuts(ebpf: &Ebpf) -> Option<[u64; CUT_SLOTS]> {
    let on: Array<_, u32> = Array::try_from(ebpf.map("UNWIND")?).ok()?;
    if on.get(&0, 0).ok()? == 0 {
        return None;
    }
    let cuts: PerCpuArray<_, [u64; CUT_SLOTS]> =
        PerCpuArray::try_from(ebpf.map("UNWIND_CUTS")?).ok()?;
    let mut sum = [0u64; CUT_SLOTS];
    for cpu in cuts.get(&0, 0).ok()?.iter() {
        for (total, count) in sum.iter_mut().zip(cpu) {
            *total += count;
        }
    }
    Some(sum)
}

/// Tells the programs to sample every `mean` bytes on average: the spacings
/// they pick from (the quantiles of an exponential of that mean, so a pick
/// at random is one drawn from it), each CPU's first countdown, and last
/// the mean itself, which turns sampling on.
fn set_sampling(ebpf: &mut Ebpf, mean: u64) -> Result<()> {
    let slots = SPACING_SLOTS as usize;
    let spacing = |i: usize| -> u64 {
        let quantile = (i as f64 + 0.5) / slots as f64;
        (-quantile.ln() * mean as f64).max(1.0) as u64
    };
    let mut spacings: Array<_, u64> =
        Array::try_from(ebpf.map_mut("SPACINGS").context("no SPACINGS map")?)?;
    for i in 0..slots {
        spacings.set(i as u32, spacing(i), 0)?;
    }
    // Each CPU starts part-way to its first point, as if it had sampled
    // before: a first point drawn like any other.
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    let seed = leakscope_recording::monotonic_ns() as usize;
    let firsts: Vec<i64> = (0..cpus)
        .map(|cpu| {
            spacing(seed.wrapping_mul(2_654_435_761).wrapping_add(cpu * 40_503) % slots) as i64
        })
        .collect();
    let mut countdown: PerCpuArray<_, i64> =
        PerCpuArray::try_from(ebpf.map_mut("COUNTDOWN").context("no COUNTDOWN map")?)?;
    countdown.set(0, aya::maps::PerCpuValues::try_from(firsts)?, 0)?;
    let mut on: Array<_, u64> =
        Array::try_from(ebpf.map_mut("SAMPLING").context("no SAMPLING map")?)?;
    on.set(0, mean, 0)?;
    Ok(())
}

/// Attaches every probe of `plan` in its order (frees, returns, lifecycle
/// entries, allocator entries: see `plan::order_for_attach`), scoped to
/// `pid`: the kernel only plants
/// breakpoints in that process. On an error the probes attached so far are
/// detached.
pub fn attach(ebpf: &mut Ebpf, plan: &Plan, pid: u32) -> Result<Attached> {
    let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
    let mut attached = Attached { links: Vec::new() };
    for probe in &plan.probes {
        let program: &mut UProbe = ebpf
            .program_mut(probe.program)
            .with_context(|| format!("the eBPF object has no program {}", probe.program))?
            .try_into()?;
        // The planned place first; where the kernel cannot probe that
        // instruction (ENOTSUPP), the later places that still see the arguments.
        let mut offsets =
            std::iter::once(probe.file_offset).chain(probe.fallback_offsets.iter().copied());
        let mut offset = offsets.next().expect("one offset at least");
        let link = loop {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: probe.cookie,
            };
            match program.attach(point, &probe.path, scope) {
                Ok(link) => break link,
                Err(e)
                    if refused_instruction(&e)
                        && let Some(next) = offsets.next() =>
                {
                    offset = next;
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "cannot attach {} to {} ({}+{:#x}){}",
                        probe.program, probe.function, probe.file_name, offset, CONFLICT_HINT
                    )));
                }
            }
        };
        attached.links.push(program.take_link(link)?);
    }
    Ok(attached)
}

/// Detaches every probe, the last attached first. The
/// kernel waits for a grace period at each (~100 ms), so this takes seconds
/// for many probes: callers drain the ring buffer meanwhile.
pub fn detach(attached: Attached) {
    for link in attached.links.into_iter().rev() {
        drop(link);
    }
}
