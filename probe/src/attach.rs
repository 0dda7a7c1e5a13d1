//! `leakscope-probe attach`: attach to a running process, record until told to stop.
//!
//! Order of events: check privileges and the target, plan the probes, load and
//! attach (then print `attached: pid=PID probes=N`, which scripts wait for), then
//! drain the ring buffer on a timer into the recording, flushing a frame every
//! 100 ms so a kill loses at most that much. On Ctrl-C, SIGTERM, `--duration` or
//! the target's exit: detach first (no new events), drain what is left, write the
//! `End` record.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use leakscope_probe_ebpf::{LOST_REASONS, MAX_STACK_DEPTH};

use crate::capture::{Capture, Stats};
use crate::loader::{Loaded, load_and_attach};
use crate::plan::{bare, make_plan};
use crate::preset::Preset;
use crate::recording::{
    ClockOrigin, EndReason, Header, LostReason, Producer, Record, RecordingWriter, Settings,
    monotonic_ns,
};
use crate::symbols::ElfSymbols;
use crate::target::{Target, is_alive};

pub struct AttachOptions {
    pub pid: u32,
    pub out: PathBuf,
    pub duration: Option<Duration>,
    pub preset: Preset,
    pub ring_buffer_bytes: u32,
    /// Draw the live status line (on a terminal).
    pub status_line: bool,
    /// Attach no-op programs at the same points (benchmarks: the uprobe floor).
    pub bare: bool,
}

/// What the run produced.
#[derive(Debug)]
pub struct AttachOutcome {
    pub stats: Stats,
    pub end: EndReason,
}

pub async fn attach(options: AttachOptions) -> Result<AttachOutcome> {
    check_privileges()?;
    let target = Target::inspect(options.pid)?;
    let exe = ElfSymbols::load(&target.host_path(&target.exe))
        .with_context(|| format!("cannot read the executable of pid {}", target.pid))?;
    let mut plan = make_plan(&target, &exe, &options.preset)?;
    if options.bare {
        plan = bare(plan);
    }
    if plan.scopes.is_empty() && !options.bare {
        eprintln!(
            "leakscope-probe: no {} lifecycle functions in {}; recording allocations only",
            options.preset.name, target.exe
        );
    }
    let mut notes = vec![];
    if let Some(version) = exe.crate_version("rmcp") {
        notes.push(format!("rmcp version: {version}"));
    }
    if let Some(p) = plan.probes.iter().find(|p| p.program == "free_enter") {
        notes.push(format!(
            "free probed at file offset {:#x} ({})",
            p.file_offset, p.function
        ));
    }
    let header = Header {
        producer: Producer::Ebpf,
        producer_version: format!("leakscope-probe {}", env!("CARGO_PKG_VERSION")),
        pid: target.pid,
        exe: target.exe.clone(),
        build_id: target.exe_build_id(),
        clock: ClockOrigin::now(),
        settings: Settings {
            alloc_layer: plan.layer,
            alloc_layer_reason: plan.layer_reason.clone(),
            stack_depth: MAX_STACK_DEPTH as u32,
            preset: Some(options.preset.name.clone()),
            scope_probes: plan.scopes.clone(),
            notes,
        },
    };
    let writer = RecordingWriter::create(&options.out, &header)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let mut capture = Capture::new(writer);
    for mapping in &target.mappings {
        capture.writer.push(Record::Mapping(mapping.clone()))?;
    }
    capture.writer.flush()?;

    let mut loaded = load_and_attach(&plan, target.pid, options.ring_buffer_bytes)?;
    println!("attached: pid={} probes={}", target.pid, loaded.attached);
    std::io::stdout().flush()?;

    let status = status_bar(options.status_line);
    let end = record_until_stopped(&mut loaded, &mut capture, &options, &status).await?;
    status.finish_and_clear();

    // Detach first so nothing new arrives, then take what is still buffered.
    let Loaded {
        ebpf,
        mut events,
        lost,
        ..
    } = loaded;
    drop(ebpf);
    while let Some(item) = events.next() {
        capture.handle(&item)?;
    }
    let mut lost_seen = [0u64; LOST_REASONS as usize];
    write_lost(&lost, &mut lost_seen, &mut capture)?;
    let stats = capture.stats;
    capture.writer.finish(Record::End {
        ts: monotonic_ns(),
        reason: end,
    })?;
    eprintln!(
        "leakscope-probe: {} events ({} allocations, {} frees, {} lost) written to {} ({})",
        stats.events,
        stats.allocs,
        stats.frees,
        stats.lost,
        options.out.display(),
        end_text(end)
    );
    Ok(AttachOutcome { stats, end })
}

async fn record_until_stopped<W: Write>(
    loaded: &mut Loaded,
    capture: &mut Capture<W>,
    options: &AttachOptions,
    status: &ProgressBar,
) -> Result<EndReason> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut drain = tokio::time::interval(Duration::from_millis(20));
    let mut flush = tokio::time::interval(Duration::from_millis(100));
    let mut slow = tokio::time::interval(Duration::from_millis(500));
    let deadline = options
        .duration
        .map(|d| tokio::time::Instant::now() + d)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86400));
    let mut lost_seen = [0u64; LOST_REASONS as usize];
    let mut last = (Instant::now(), 0u64);
    loop {
        tokio::select! {
            _ = interrupt.recv() => return Ok(EndReason::Interrupted),
            _ = term.recv() => return Ok(EndReason::Interrupted),
            _ = tokio::time::sleep_until(deadline) => return Ok(EndReason::Duration),
            _ = drain.tick() => {
                while let Some(item) = loaded.events.next() {
                    capture.handle(&item)?;
                }
            }
            _ = flush.tick() => capture.writer.flush()?,
            _ = slow.tick() => {
                write_lost(&loaded.lost, &mut lost_seen, capture)?;
                let stats = capture.stats;
                let rate = (stats.events - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), stats.events);
                status.set_message(status_text(&stats, rate));
                if !is_alive(options.pid) {
                    return Ok(EndReason::TargetExited);
                }
            }
        }
    }
}

/// Appends a `Lost` record for every drop counter that grew since the last call.
fn write_lost<W: Write>(
    lost: &aya::maps::PerCpuArray<aya::maps::MapData, u64>,
    seen: &mut [u64; LOST_REASONS as usize],
    capture: &mut Capture<W>,
) -> Result<()> {
    let reasons = [
        LostReason::RingFull,
        LostReason::PendingFull,
        LostReason::Stack,
    ];
    for (index, reason) in reasons.into_iter().enumerate() {
        let total: u64 = lost.get(&(index as u32), 0)?.iter().sum();
        let delta = total.saturating_sub(seen[index]);
        if delta > 0 {
            seen[index] = total;
            if reason != LostReason::Stack {
                capture.stats.lost += delta;
            }
            capture.writer.push(Record::Lost {
                ts: monotonic_ns(),
                reason,
                count: delta,
            })?;
        }
    }
    Ok(())
}

fn status_bar(enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn status_text(stats: &Stats, rate: f64) -> String {
    format!(
        "{:.0} events/s | live {:.1} KiB tracked | sessions born {} ended {} | lost {}",
        rate,
        stats.live_bytes as f64 / 1024.0,
        stats.sessions_born,
        stats.workers_ended,
        stats.lost
    )
}

fn end_text(end: EndReason) -> &'static str {
    match end {
        EndReason::Interrupted => "stopped by signal",
        EndReason::Duration => "duration elapsed",
        EndReason::TargetExited => "target exited",
        EndReason::Finished => "finished",
    }
}

/// Root, or both CAP_BPF (39) and CAP_PERFMON (38) in the effective set.
fn check_privileges() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let needed = (1u64 << 39) | (1u64 << 38);
    if effective & needed != needed {
        bail!("attaching needs root, or CAP_BPF and CAP_PERFMON (try sudo)");
    }
    Ok(())
}
