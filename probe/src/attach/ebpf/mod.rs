//! The eBPF backend: uprobes on the target's allocator and lifecycle
//! functions, as root.
//!
//! Order of events: check privileges and the target, plan the probes
//! ([`setup`]), load and attach (then report [`AttachEvent::Attached`]; the
//! binary prints `attached: pid=PID probes=N`, which scripts wait for), then
//! drain the ring buffer on a timer into the recording ([`drain`]), flushing a
//! frame every 100 ms so a kill loses at most that much. On Ctrl-C, SIGTERM,
//! `--duration` or the target's exit: detach first (no new events), drain what
//! is left, write the `End` record.

mod drain;
mod lost;
mod privileges;
mod setup;

use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result, bail};
use leakscope_recording::target::{Target, exe_identity, is_alive};
use leakscope_recording::{EndReason, Header, Record, monotonic_ns};

use super::rotation::Output;
use super::{AttachEvent, AttachOptions, AttachOutcome, ProgramStats, Stats, StopSignals};
use super::{LiveBytes, SiteNamer};
use crate::capture::Capture;
use crate::loader::{self, Attached, Loaded};
use crate::plan::Plan;
use drain::{Trampoline, record_until_stopped, while_draining};
pub use lost::LostCounters;
use lost::write_lost;
use setup::{Prepared, prepare};

/// The recording being written.
pub(super) type FileCapture = Capture<BufWriter<std::fs::File>>;

/// Removes a recording that never started: an error before every probe was
/// in place leaves no file behind (the probe created it first).
struct Unstarted<'a>(Option<&'a Path>);

impl Drop for Unstarted<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Records `options.pid` with uprobes until stopped.
pub(super) async fn record(
    options: &AttachOptions,
    signals: &mut StopSignals,
    on_event: &mut impl FnMut(AttachEvent<'_>),
) -> Result<AttachOutcome> {
    let Prepared {
        target,
        plan,
        header,
        unwind,
    } = prepare(options, on_event)?;
    // Which program the target runs, read before anything is attached: an
    // exec right after `attached:` (a test's target waits for exactly that)
    // must read as one, not as the program it became.
    let program = exe_identity(options.pid);
    let mut output = Output::new(options);
    let mut capture = begin(&mut output, &target, &header)?;
    let first = output.path();
    let mut unstarted = Unstarted(Some(&first));
    // Kept open while recording: the kernel times program runs only while a
    // stats fd (or the sysctl) is held.
    let _stats_enabled = if options.bpf_stats {
        Some(
            aya::sys::enable_stats(aya::sys::Stats::RunTime)
                .context("cannot enable BPF run-time statistics (kernel 5.8 or later)")?,
        )
    } else {
        None
    };
    let mut loaded = loader::load(
        &plan,
        options.ring_buffer_bytes,
        options.sampling,
        options.sampled_blocks,
        unwind.as_ref(),
    )?;
    let mut trampoline = Trampoline::new(options.pid);
    let attached = attach_probes(&mut loaded, &plan, &target, &mut capture, &mut trampoline)?;
    unstarted.0 = None;
    on_event(AttachEvent::Attached {
        pid: target.pid,
        probes: attached.links.len(),
    });

    // One tally of the kernel's drop counters for the whole run: the final read
    // after detach writes only what grew since the last periodic one.
    let mut lost_seen = LostCounters::default();
    // A write error (the disk is full) ends the recording: the probes are
    // detached when `loaded` drops, and every frame written before stays readable.
    let written = |e: anyhow::Error| {
        e.context(format!(
            "writing {} failed; the probes are detached and what was written before reads (leakscope dump)",
            options.out.display()
        ))
    };
    let end = record_until_stopped(
        &mut loaded,
        &mut capture,
        &mut output,
        program,
        &mut trampoline,
        signals,
        options,
        &plan.allocator_functions,
        &mut lost_seen,
        on_event,
    )
    .await
    .map_err(written)?;
    let programs = if options.bpf_stats {
        program_stats(&loaded, &plan)
    } else {
        Vec::new()
    };
    let stats = detach_and_finish(
        loaded,
        attached,
        capture,
        &mut trampoline,
        &mut lost_seen,
        end,
    )
    .map_err(written)?;
    Ok(AttachOutcome {
        stats,
        end,
        written: output.path(),
        programs,
    })
}

/// Creates the recording (race-free, just before loading) and writes its
/// header and the target's mappings.
fn begin(output: &mut Output, target: &Target, header: &Header) -> Result<FileCapture> {
    let writer = output.create(header)?;
    let mut capture = Capture::new(writer);
    // Walked by table, a build without frame pointers has whole stacks: a
    // stack cut at a trampoline counts as for any other build.
    capture.set_frame_pointers(match header.stack_walk {
        leakscope_recording::StackWalk::EhFrame { .. } => leakscope_recording::FramePointers::Kept,
        _ => header.frame_pointers,
    });
    capture.set_live(
        LiveBytes::new(header.sampling, SiteNamer::of_target(target)),
        header.sampling,
    );
    for mapping in &target.mappings {
        let record = Record::Mapping(mapping.clone());
        output.wrote(&record);
        capture.writer.push(record)?;
    }
    capture.writer.flush()?;
    Ok(capture)
}

/// Attaches every probe of the plan. The first probes fire while the others
/// are still being attached (seconds, for many): the ring buffer is drained
/// meanwhile, or a busy target fills it and its events are lost.
fn attach_probes(
    loaded: &mut Loaded,
    plan: &Plan,
    target: &Target,
    capture: &mut FileCapture,
    trampoline: &mut Trampoline,
) -> Result<Attached> {
    let Loaded {
        ebpf,
        events,
        trampoline: published,
        ..
    } = loaded;
    let pid = target.pid;
    let attached = while_draining(events, published, capture, trampoline, move || {
        loader::attach(ebpf, plan, pid)
    });
    match attached.and_then(|attached| attached) {
        Ok(attached) => Ok(attached),
        Err(_) if !is_alive(pid) => {
            bail!("pid {pid} exited while the probe was attaching; nothing was recorded")
        }
        Err(e) => Err(e),
    }
}

/// Each program's runs and run time, as the kernel counted them; programs
/// that never ran are left out.
fn program_stats(loaded: &Loaded, plan: &Plan) -> Vec<ProgramStats> {
    let mut names: Vec<&'static str> = plan.probes.iter().map(|p| p.program).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let info = loaded.ebpf.program(name).and_then(|p| p.info().ok())?;
            (info.run_count() > 0).then(|| ProgramStats {
                program: name,
                runs: info.run_count(),
                run_time: info.run_time(),
                verified_insns: info.verified_instruction_count(),
            })
        })
        .collect()
}

/// Detaches first so nothing new arrives, then takes what is still buffered
/// and writes the end.
///
/// The recording ends when detaching begins: what the probes still send
/// while the last ones go is kept, but the time they take to go is not
/// the target's (an idle session is not idle longer for it). The kernel
/// waits for a grace period at every uprobe it removes, ~100 ms each here
/// whether one thread or many drop them, so detaching 21 probes takes ~2 s:
/// the ring buffer is drained all that time.
fn detach_and_finish(
    loaded: Loaded,
    attached: Attached,
    mut capture: FileCapture,
    trampoline: &mut Trampoline,
    lost_seen: &mut LostCounters,
    end: EndReason,
) -> Result<Stats> {
    let detached_at = monotonic_ns();
    let Loaded {
        ebpf,
        mut events,
        lost,
        trampoline: mut published,
    } = loaded;
    while_draining(
        &mut events,
        &mut published,
        &mut capture,
        trampoline,
        move || loader::detach(attached),
    )?;
    let unwind_cuts = loader::unwind_cuts(&ebpf);
    drop(ebpf);
    while let Some(item) = events.next() {
        capture.handle(&item)?;
    }
    write_lost(&lost, lost_seen, &mut capture)?;
    capture.finish(monotonic_ns())?;
    let mut stats = capture.stats;
    stats.unwind_cuts = unwind_cuts;
    capture.writer.finish(Record::End {
        ts: detached_at,
        reason: end,
    })?;
    Ok(stats)
}
