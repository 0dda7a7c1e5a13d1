//! Draining the ring buffer into the recording: on a timer while recording,
//! and on this thread while another attaches or detaches the probes.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use leakscope_recording::target::{cpu_ticks, exe_identity, is_alive};
use leakscope_recording::{EndReason, monotonic_ns};

use super::super::rotation::Output;
use super::super::{AttachEvent, AttachOptions, StopSignals, deadline};
use super::FileCapture;
use super::lost::{LostCounters, write_lost};
use crate::capture::Capture;
use crate::loader::Loaded;
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

/// Whether the target's uretprobe trampoline has been found and told to the
/// programs (see [`crate::trampoline`]).
pub(super) struct Trampoline {
    pid: u32,
    known: bool,
}

impl Trampoline {
    pub(super) fn new(pid: u32) -> Self {
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
pub(super) fn while_draining<W: Write, T: Send>(
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

// The run's state, each piece owned by `attach` and lent here for the loop.
#[allow(clippy::too_many_arguments)]
pub(super) async fn record_until_stopped(
    loaded: &mut Loaded,
    capture: &mut FileCapture,
    output: &mut Output,
    program: Option<(u64, u64)>,
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
    let deadline = deadline(options.duration);
    let mut last = (Instant::now(), 0u64);
    let attached_at = (Instant::now(), cpu_ticks(options.pid));
    // A sampled recording sees no allocation until one crosses its countdown:
    // silence then says nothing of where the process allocates.
    let mut silence_checked = options.bare || options.sampling.is_sampled();
    let mut full_said = false;
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => return Ok(EndReason::Interrupted),
            _ = signals.terminate.recv() => return Ok(EndReason::Interrupted),
            _ = tokio::time::sleep_until(deadline) => return Ok(EndReason::Duration),
            _ = drain.tick() => {
                drain_once(&mut loaded.events, &mut loaded.trampoline, capture, trampoline)?;
            }
            _ = flush.tick() => capture.writer.tick()?,
            _ = slow.tick() => {
                write_lost(&loaded.lost, lost_seen, capture)?;
                let stats = capture.stats;
                let rate = (stats.events - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), stats.events);
                on_event(AttachEvent::Progress {
                    stats: &stats,
                    events_per_s: rate,
                    top: capture.candidate(),
                });
                if stats.sampled_map_full && !full_said {
                    full_said = true;
                    on_event(AttachEvent::Warning(format!(
                        "the kernel's table of sampled blocks alive is full ({} blocks): nothing is lost, but from now on every free in pid {} reaches the probe, which costs the process more",
                        options.sampled_blocks, options.pid
                    )));
                }
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
                if output.due() {
                    capture.writer.flush()?;
                    output.rotate(&mut capture.writer, monotonic_ns())?;
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
