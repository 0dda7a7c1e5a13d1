//! `leakscope-probe attach`: attach to a running process, record until told to stop.
//!
//! Order of events: check privileges and the target, plan the probes, load and
//! attach (then report [`AttachEvent::Attached`]; the binary prints
//! `attached: pid=PID probes=N`, which scripts wait for), then
//! drain the ring buffer on a timer into the recording, flushing a frame every
//! 100 ms so a kill loses at most that much. On Ctrl-C, SIGTERM, `--duration` or
//! the target's exit: detach first (no new events), drain what is left, write the
//! `End` record.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use leakscope_probe_ebpf::{LOST_REASONS, LostReason, MAX_STACK_DEPTH, program};
use leakscope_recording::frame_pointers::{self, FramePointers};
use leakscope_recording::output::{self, Existing, Owner};
use leakscope_recording::preset::Preset;
use leakscope_recording::target::{Target, cpu_ticks, exe_identity, is_alive};
use leakscope_recording::{
    EndReason, Header, Producer, Record, RecordingWriter, Settings, monotonic_ns,
};

use crate::capture::{Capture, Stats};
use crate::loader::{self, Loaded};
use crate::plan::{bare, make_plan};
use crate::symbols::ElfSymbols;
use crate::trampoline;

/// How often the ring buffer is drained into the recording.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// How often a frame is flushed to disk: a kill loses at most this much.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// How often drop counters, progress and the target's liveness are checked.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// After this long attached with no allocation or free recorded while the
/// target used CPU, the probe says what it probed: the process allocates
/// through something it did not find.
const SILENCE_AFTER: Duration = Duration::from_secs(5);
/// Records handled per drain tick at most: a target producing events as fast as
/// they are read must not starve the signal, deadline and liveness checks.
const DRAIN_BATCH: usize = 1 << 16;

pub struct AttachOptions {
    pub pid: u32,
    pub out: PathBuf,
    /// Whether an existing `out` may be replaced (never through a symbolic link).
    pub existing: Existing,
    /// Who the recording is handed to (the user who ran sudo), if not the runner.
    pub owner: Option<Owner>,
    pub duration: Option<Duration>,
    pub preset: Preset,
    pub ring_buffer_bytes: u32,
    /// Attach no-op programs at the same points (benchmarks: the uprobe floor).
    pub bare: bool,
    /// Have the kernel time every program run (BPF_ENABLE_STATS), and report
    /// each program's runs and mean time in the outcome: what the probe's own
    /// code costs the target per call.
    pub bpf_stats: bool,
    /// Use the eBPF probes even when the process could record itself.
    pub ebpf: bool,
}

/// Removes a recording that never started: an error before every probe was
/// in place leaves no file behind (the probe created it first).
struct Unstarted<'a>(Option<&'a std::path::Path>);

impl Drop for Unstarted<'_> {
    fn drop(&mut self) {
        if let Some(path) = self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One eBPF program's runs while attached (with [`AttachOptions::bpf_stats`]).
#[derive(Debug, Clone)]
pub struct ProgramStats {
    pub program: &'static str,
    pub runs: u64,
    pub run_time: Duration,
    /// Instructions the kernel's verifier processed to load the program: how
    /// close it is to the 1 M limit past which a kernel refuses it.
    pub verified_insns: Option<u32>,
}

/// What [`attach`] reports while it runs; the caller decides what to show.
#[derive(Debug)]
pub enum AttachEvent<'a> {
    /// Something the user should know (e.g. no lifecycle function was found).
    Warning(String),
    /// Every probe is in place: events are being recorded from now on.
    Attached { pid: u32, probes: usize },
    /// The process records itself (its global allocator is
    /// `leakscope_inproc::Alloc`) and has started to: no probe was needed.
    InProcess { pid: u32 },
    /// Twice a second while recording: the running figures and the event rate.
    Progress { stats: &'a Stats, events_per_s: f64 },
}

/// What the run produced.
#[derive(Debug)]
pub struct AttachOutcome {
    pub stats: Stats,
    pub end: EndReason,
    /// Per program, when [`AttachOptions::bpf_stats`] asked for it; programs
    /// that never ran are left out.
    pub programs: Vec<ProgramStats>,
}

/// Attaches to `options.pid`, records into `options.out` until stopped, and
/// finishes the recording. `on_event` hears about warnings, the moment every
/// probe is in place, and progress.
pub async fn attach(
    options: AttachOptions,
    mut on_event: impl FnMut(AttachEvent<'_>),
) -> Result<AttachOutcome> {
    // Ctrl-C and SIGTERM end the recording cleanly from the start: one that
    // comes while the probes are being attached (seconds, for many) no longer
    // kills the probe with a header-only file; the recording stops as soon as
    // attaching is done, finished like any other.
    use tokio::signal::unix::{SignalKind, signal};
    let mut stop_signals = StopSignals {
        interrupt: signal(SignalKind::interrupt())?,
        terminate: signal(SignalKind::terminate())?,
    };
    // A process that records itself (leakscope_inproc::Alloc, listening)
    // needs no eBPF and no root: it is asked to.
    if !options.bare
        && !options.ebpf
        && let Some(stream) = crate::cooperative::connect(options.pid)
    {
        return crate::cooperative::record(stream, &options, &mut stop_signals, &mut on_event)
            .await;
    }
    check_privileges()?;
    // First: a bad --out (a symbolic link, an existing file) costs no attach.
    // (It is created, checked again and race-free, just before loading.)
    output::check_path(&options.out, options.existing)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let target = Target::inspect(options.pid)?;
    let exe = ElfSymbols::of_target(&target, &target.exe)
        .with_context(|| format!("cannot read the executable of pid {}", target.pid))?;
    let mut plan = make_plan(&target, &exe, &options.preset)?;
    if options.bare {
        plan = bare(plan);
    }
    let session_scopes = plan
        .scope_functions
        .iter()
        .filter(|f| !f.kind.is_task())
        .count();
    if session_scopes == 0 && !options.bare {
        on_event(AttachEvent::Warning(format!(
            "no {} lifecycle functions in {}; recording allocations only (the report's findings by call site still work)",
            options.preset.name, target.exe
        )));
    } else if !options.bare {
        for kind in &plan.missing_scopes {
            let optional = options
                .preset
                .scopes
                .iter()
                .any(|rule| rule.kind == *kind && rule.optional);
            on_event(AttachEvent::Warning(format!(
                "preset {}: no function of {} matches scope {}{}",
                options.preset.name,
                target.exe,
                kind.name(),
                if optional {
                    " (optional: the session model does without it)"
                } else {
                    "; the report will say what the verdict cannot claim without it"
                }
            )));
        }
    }
    let mut notes = vec![];
    if let Some(p) = plan
        .probes
        .iter()
        .find(|p| p.program == program::FREE_ENTER)
    {
        notes.push(format!(
            "free probed at file offset {:#x} ({})",
            p.file_offset, p.function
        ));
    }
    let mut header = Header::new(
        Producer::Ebpf,
        format!("leakscope-probe {}", env!("CARGO_PKG_VERSION")),
        // The symbols are in memory already: the rmcp version comes from them,
        // not from reading the executable again.
        target.identity(exe.crate_version("rmcp")),
        Settings {
            alloc_layer: plan.layer,
            alloc_layer_reason: plan.layer_reason.clone(),
            stack_depth: MAX_STACK_DEPTH as u32,
            preset: Some(options.preset.name.clone()),
            scope_probes: plan.scopes.clone(),
            missing_scopes: plan.missing_scopes.clone(),
            scope_functions: plan.scope_functions.clone(),
            notes,
        },
    );
    header.frame_pointers = exe.frame_pointers();
    if header.frame_pointers == FramePointers::Omitted {
        on_event(AttachEvent::Warning(format!(
            "{} was built without frame pointers: its allocation stacks will stop after a frame or two (sessions and totals are unaffected); rebuild it with {} for full stacks",
            target.exe,
            frame_pointers::FIX
        )));
    }
    let file = output::create_file(&options.out, options.existing, options.owner)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let mut unstarted = Unstarted(Some(&options.out));
    let writer = RecordingWriter::new(std::io::BufWriter::with_capacity(1 << 20, file), &header)
        .with_context(|| format!("cannot write {}", options.out.display()))?;
    let mut capture = Capture::new(writer);
    capture.set_frame_pointers(header.frame_pointers);
    for mapping in &target.mappings {
        capture.writer.push(Record::Mapping(mapping.clone()))?;
    }
    capture.writer.flush()?;

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
    let mut loaded = match loader::load(&plan, options.ring_buffer_bytes) {
        Ok(loaded) => loaded,
        Err(e) => {
            drop(capture);
            let _ = std::fs::remove_file(&options.out);
            return Err(e);
        }
    };
    // The first probes fire while the others are still being attached
    // (seconds, for many): the ring buffer is drained meanwhile, or a busy
    // target fills it and its events are lost.
    let mut trampoline = Trampoline::new(options.pid);
    let attached = {
        let Loaded {
            ebpf,
            events,
            trampoline: published,
            ..
        } = &mut loaded;
        let plan = &plan;
        while_draining(
            events,
            published,
            &mut capture,
            &mut trampoline,
            move || loader::attach(ebpf, plan, target.pid),
        )
    };
    let attached = match attached.and_then(|attached| attached) {
        Ok(attached) => {
            unstarted.0 = None;
            attached
        }
        Err(e) => {
            // Nothing was recorded: leave no half recording behind.
            drop(capture);
            let _ = std::fs::remove_file(&options.out);
            if !is_alive(target.pid) {
                bail!(
                    "pid {} exited while the probe was attaching; nothing was recorded",
                    target.pid
                );
            }
            return Err(e);
        }
    };
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
        &mut trampoline,
        &mut stop_signals,
        &options,
        &plan.allocator_functions,
        &mut lost_seen,
        &mut on_event,
    )
    .await
    .map_err(written)?;

    let mut programs = Vec::new();
    if options.bpf_stats {
        let mut names: Vec<&'static str> = plan.probes.iter().map(|p| p.program).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            if let Some(info) = loaded.ebpf.program(name).and_then(|p| p.info().ok())
                && info.run_count() > 0
            {
                programs.push(ProgramStats {
                    program: name,
                    runs: info.run_count(),
                    run_time: info.run_time(),
                    verified_insns: info.verified_instruction_count(),
                });
            }
        }
    }
    // Detach first so nothing new arrives, then take what is still buffered.
    // The recording ends when detaching begins: what the probes still send
    // while the last ones go is kept, but the time they take to go is not
    // the target's (an idle session is not idle longer for it). The kernel
    // waits for a grace period at every uprobe it removes, ~100 ms each here
    // whether one thread or many drop them, so detaching 21 probes takes ~2 s:
    // the ring buffer is drained all that time.
    let detached_at = monotonic_ns();
    let Loaded {
        ebpf,
        mut events,
        lost,
        trampoline: mut published,
    } = loaded;
    let finish = || -> Result<Stats> {
        while_draining(
            &mut events,
            &mut published,
            &mut capture,
            &mut trampoline,
            move || loader::detach(attached),
        )?;
        drop(ebpf);
        while let Some(item) = events.next() {
            capture.handle(&item)?;
        }
        write_lost(&lost, &mut lost_seen, &mut capture)?;
        capture.finish(monotonic_ns())?;
        let stats = capture.stats;
        capture.writer.finish(Record::End {
            ts: detached_at,
            reason: end,
        })?;
        Ok(stats)
    };
    let stats = finish().map_err(written)?;
    Ok(AttachOutcome {
        stats,
        end,
        programs,
    })
}

/// Whether the target's uretprobe trampoline has been found and told to the
/// programs (see [`crate::trampoline`]).
struct Trampoline {
    pid: u32,
    known: bool,
}

impl Trampoline {
    fn new(pid: u32) -> Self {
        Self { pid, known: false }
    }
}

/// Takes up to [`DRAIN_BATCH`] records from the ring buffer into the recording.
fn drain_once<W: Write>(
    events: &mut aya::maps::RingBuf<aya::maps::MapData>,
    published: &mut aya::maps::Array<aya::maps::MapData, u64>,
    capture: &mut Capture<W>,
    trampoline: &mut Trampoline,
) -> Result<()> {
    for _ in 0..DRAIN_BATCH {
        let Some(item) = events.next() else { break };
        capture.handle(&item)?;
    }
    // A probe has fired once events arrive, so the kernel has mapped the
    // trampoline by then.
    if !trampoline.known
        && capture.stats.events > 0
        && let Some(region) = trampoline::find(trampoline.pid)
    {
        // Capture learns it first: the records the programs send once they
        // know it come after this point in the ring.
        capture.set_trampoline(region.clone());
        trampoline::publish(published, &region)?;
        trampoline.known = true;
    }
    Ok(())
}

/// Runs `work` (attaching or detaching probes) on a thread of its own while
/// this one drains the ring buffer; returns what `work` returned. A write
/// error while draining is returned once `work` is done (it is never left
/// half done).
fn while_draining<W: Write, T: Send>(
    events: &mut aya::maps::RingBuf<aya::maps::MapData>,
    published: &mut aya::maps::Array<aya::maps::MapData, u64>,
    capture: &mut Capture<W>,
    trampoline: &mut Trampoline,
    work: impl FnOnce() -> T + Send,
) -> Result<T> {
    std::thread::scope(|scope| {
        let worker = scope.spawn(work);
        let mut drained = Ok(());
        while !worker.is_finished() {
            if drained.is_ok() {
                drained = drain_once(events, published, capture, trampoline);
            }
            std::thread::sleep(DRAIN_EVERY / 4);
        }
        let value = worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        drained?;
        drain_once(events, published, capture, trampoline)?;
        Ok(value)
    })
}

/// The signals that end a recording.
pub(crate) struct StopSignals {
    pub(crate) interrupt: tokio::signal::unix::Signal,
    pub(crate) terminate: tokio::signal::unix::Signal,
}

// The run's state, each piece owned by `attach` and lent here for the loop.
#[allow(clippy::too_many_arguments)]
async fn record_until_stopped<W: Write>(
    loaded: &mut Loaded,
    capture: &mut Capture<W>,
    trampoline: &mut Trampoline,
    signals: &mut StopSignals,
    options: &AttachOptions,
    allocator: &[String],
    lost_seen: &mut LostCounters,
    on_event: &mut impl FnMut(AttachEvent<'_>),
) -> Result<EndReason> {
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    let mut slow = tokio::time::interval(CHECK_EVERY);
    let deadline = options
        .duration
        .map(|d| tokio::time::Instant::now() + d)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86400));
    let mut last = (Instant::now(), 0u64);
    let program = exe_identity(options.pid);
    let attached_at = (Instant::now(), cpu_ticks(options.pid));
    let mut silence_checked = options.bare;
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => return Ok(EndReason::Interrupted),
            _ = signals.terminate.recv() => return Ok(EndReason::Interrupted),
            _ = tokio::time::sleep_until(deadline) => return Ok(EndReason::Duration),
            _ = drain.tick() => {
                drain_once(&mut loaded.events, &mut loaded.trampoline, capture, trampoline)?;
            }
            _ = flush.tick() => capture.writer.flush()?,
            _ = slow.tick() => {
                write_lost(&loaded.lost, lost_seen, capture)?;
                let stats = capture.stats;
                let rate = (stats.events - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), stats.events);
                on_event(AttachEvent::Progress { stats: &stats, events_per_s: rate });
                if !silence_checked && attached_at.0.elapsed() >= SILENCE_AFTER {
                    silence_checked = true;
                    let ran = match (attached_at.1, cpu_ticks(options.pid)) {
                        (Some(before), Some(now)) => now > before,
                        _ => false,
                    };
                    if ran && stats.allocs == 0 && stats.frees == 0 {
                        on_event(AttachEvent::Warning(format!(
                            "no allocation went through the probed allocator in {} s while pid {} ran: probed {}; the process allocates through something else, so this recording will show nothing",
                            SILENCE_AFTER.as_secs(),
                            options.pid,
                            allocator.join(", ")
                        )));
                    }
                }
                if !is_alive(options.pid) {
                    return Ok(EndReason::TargetExited);
                }
                if program.is_some() && exe_identity(options.pid) != program {
                    return Ok(EndReason::TargetExeced);
                }
            }
        }
    }
}

/// What the kernel's cumulative drop counters said last time.
#[derive(Debug, Default)]
pub struct LostCounters {
    seen: [u64; LOST_REASONS as usize],
}

impl LostCounters {
    /// What grew since the last call, given the counters' cumulative `totals`.
    pub fn deltas(&mut self, totals: [u64; LOST_REASONS as usize]) -> Vec<(LostReason, u64)> {
        let mut grown = Vec::new();
        for reason in LostReason::ALL {
            let index = reason as usize;
            let delta = totals[index].saturating_sub(self.seen[index]);
            if delta > 0 {
                self.seen[index] = totals[index];
                grown.push((reason, delta));
            }
        }
        grown
    }
}

/// Appends a `Lost` record for every drop counter that grew since the last call.
fn write_lost<W: Write>(
    lost: &aya::maps::PerCpuArray<aya::maps::MapData, u64>,
    seen: &mut LostCounters,
    capture: &mut Capture<W>,
) -> Result<()> {
    let mut totals = [0u64; LOST_REASONS as usize];
    for reason in LostReason::ALL {
        totals[reason as usize] = lost.get(&(reason as u32), 0)?.iter().sum();
    }
    for (reason, delta) in seen.deltas(totals) {
        if reason != LostReason::Stack {
            capture.stats.lost += delta;
        }
        capture.writer.push(Record::Lost {
            ts: monotonic_ns(),
            reason: reason.into(),
            count: delta,
        })?;
    }
    Ok(())
}

/// CAP_BPF (39) and CAP_PERFMON (38), or CAP_SYS_ADMIN (21, which kernels
/// before 5.8 require and later ones still accept), in the effective set. Root
/// is checked the same way: root in a container, or under a capability bounding
/// set, may hold neither, and the kernel's bare "Operation not permitted" from
/// the loader would not say why.
fn check_privileges() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    if has_bpf_capabilities(effective) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        bail!(
            "attaching needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN: this process is root but holds neither (effective capabilities {effective:#x}; a container or a capability bounding set dropped them)"
        );
    }
    bail!("attaching needs root, or CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN (try sudo)");
}

fn has_bpf_capabilities(effective: u64) -> bool {
    let bpf_and_perfmon = (1u64 << 39) | (1u64 << 38);
    let sys_admin = 1u64 << 21;
    effective & bpf_and_perfmon == bpf_and_perfmon || effective & sys_admin != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CAP_BPF with CAP_PERFMON, or CAP_SYS_ADMIN alone (what kernels before
    /// 5.8 need, and later ones accept): either is enough, nothing less.
    #[test]
    fn either_capability_set_is_enough_to_attach() {
        let (sys_admin, perfmon, bpf) = (1u64 << 21, 1u64 << 38, 1u64 << 39);
        assert!(has_bpf_capabilities(sys_admin));
        assert!(has_bpf_capabilities(bpf | perfmon));
        assert!(!has_bpf_capabilities(bpf));
        assert!(!has_bpf_capabilities(perfmon));
        assert!(!has_bpf_capabilities(0));
    }

    /// The final read after detach must not count again what the periodic
    /// reads already wrote (it used to start from zero and double the total).
    #[test]
    fn lost_counters_report_only_growth() {
        let mut seen = LostCounters::default();
        assert_eq!(
            seen.deltas([5, 0, 2]),
            vec![(LostReason::RingFull, 5), (LostReason::Stack, 2)]
        );
        assert_eq!(
            seen.deltas([5, 0, 2]),
            vec![],
            "nothing new, nothing written"
        );
        assert_eq!(
            seen.deltas([7, 1, 2]),
            vec![(LostReason::RingFull, 2), (LostReason::PendingFull, 1)]
        );
    }
}
