//! Attaching to a process that records itself: its global allocator is
//! `leakscope_inproc::Alloc` and it called `leakscope_inproc::listen()`. No
//! eBPF and no root: the probe finds the process's control socket from its
//! pid ([`find`]), asks it to record, and writes what it streams into the
//! recording, ending it (`--duration`, Ctrl-C, the target's exit) the same
//! way as an eBPF recording. The protocol is `leakscope_recording::control`'s.
//!
//! The stream is the target's to write, and root may be reading it: it is
//! parsed on a thread that has dropped root first ([`stream`]), in bounded
//! frames and batches, and what of it is printed is made printable.

mod find;
mod stream;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use leakscope_recording::control::Request;
use leakscope_recording::printable::printable;
use leakscope_recording::target::{Target, is_alive};
use leakscope_recording::{
    EndReason, FORMAT_VERSION, Record, ScopeKind, SessionFact, Tail, monotonic_ns,
};

use super::rotation::Output;
use super::{
    AttachEvent, AttachOptions, AttachOutcome, LiveBytes, NEVER, SiteNamer, Stats, StopSignals,
    deadline,
};
pub(crate) use find::{Found, find};
use stream::{Streamed, read_stream};

/// The first stream format whose targets coalesce their polls on their own
/// threads (format 13; 14 only added a record).
const COALESCED_SINCE: u32 = 13;

/// How long a process asked to stop may take to finish its recording.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// How long the process may take to answer a request (a stopped one
/// never does).
const HEADER_WAIT: Duration = Duration::from_secs(10);

/// Batches of records in flight from the reading thread (each a frame of at
/// most `MAX_FRAME_RECORDS`).
const BATCHES_IN_FLIGHT: usize = 16;

/// Records `options.pid` through its control socket `stream` until stopped.
pub(crate) async fn record(
    stream: UnixStream,
    options: &AttachOptions,
    signals: &mut StopSignals,
    on_event: &mut impl FnMut(AttachEvent<'_>),
) -> Result<AttachOutcome> {
    let mut output = Output::new(options);
    output.check()?;
    let pid = options.pid;
    let mut request = stream.try_clone()?;
    let (sender, mut received) = tokio::sync::mpsc::channel::<Streamed>(BATCHES_IN_FLIGHT);
    let (dropped, user_dropped) = tokio::sync::oneshot::channel();
    let name = format!("pid {pid}'s control socket");
    let reader_user = stream::reader_user(pid, options.owner);
    std::thread::Builder::new()
        .name("leakscope-inproc-reader".into())
        .spawn(move || read_stream(stream, &name, reader_user, dropped, &sender))?;
    // Asked only once the reading thread is no longer root: the target
    // answers the request, and may look at who reads the answer.
    match user_dropped.await {
        Ok(Ok(())) => {}
        Ok(Err(why)) => bail!("{why}"),
        Err(_) => bail!("the thread reading pid {pid}'s stream ended before it started"),
    }
    // A refusal may come (and the socket close) before the request is even
    // written: the answer, read below, says why better than a broken pipe.
    let asked = writeln!(
        request,
        "{}",
        Request::Record {
            sampling: options.sampling
        }
        .to_line()
    );

    let answer = tokio::select! {
        answer = received.recv() => answer,
        _ = tokio::time::sleep(HEADER_WAIT) => bail!(
            "pid {pid} did not answer within {} s (is it stopped?)",
            HEADER_WAIT.as_secs()
        ),
        _ = signals.interrupt.recv() => bail!("interrupted before pid {pid} answered"),
        _ = signals.terminate.recv() => bail!("terminated before pid {pid} answered"),
    };
    let header = match answer {
        Some(Streamed::Header(header, version)) => {
            if (COALESCED_SINCE..=FORMAT_VERSION).contains(&version) {
                // Its threads coalesced the polls already (an older
                // target's may not have): see `RecordingWriter::coalesced_upstream`.
                output.coalesced_upstream();
            }
            header
        }
        Some(Streamed::End(Err(why))) => {
            bail!("pid {pid} would not record: {}", printable(&why, 300))
        }
        _ => match asked {
            Err(e) => bail!("cannot ask pid {pid} to record: {e}"),
            Ok(()) => bail!("pid {pid} closed its control socket without a recording"),
        },
    };
    let mut header = *header;
    header.settings.notes.push(
        "switched on by leakscope-probe attach: the process records itself (leakscope_inproc::Alloc), no eBPF".into(),
    );
    let mut writer = output.create(&header)?;
    on_event(AttachEvent::InProcess { pid });

    let mut stats = Stats {
        sampled: header.sampling.is_sampled(),
        ..Stats::default()
    };
    // Sites are named from the executable the process runs, as the probe
    // reads it (the same user may; an unreadable one names them by address).
    let namer = Target::inspect(pid)
        .ok()
        .and_then(|target| SiteNamer::of_target(&target));
    let mut live = LiveBytes::new(header.sampling, namer);
    let deadline = deadline(options.duration);
    let mut flush = tokio::time::interval(Duration::from_millis(100));
    let mut slow = tokio::time::interval(Duration::from_millis(500));
    let mut last = (Instant::now(), 0u64);
    let mut stopping: Option<EndReason> = None;
    let stop = |reason: EndReason, stopping: &mut Option<EndReason>| {
        if stopping.is_none() {
            *stopping = Some(reason);
            // The process finishes its recording when our side closes.
            let _ = request.shutdown(std::net::Shutdown::Write);
        }
    };
    let written = |e: std::io::Error| {
        anyhow::Error::new(e).context(format!("writing {} failed", options.out.display()))
    };
    // Once asked to stop, the process has this long to finish its recording
    // (a stopped or hung process must not hold the probe); a second Ctrl-C
    // does not wait at all.
    let mut give_up = tokio::time::Instant::now() + NEVER;
    let tail = loop {
        tokio::select! {
            _ = signals.interrupt.recv() => {
                if stopping.is_some() {
                    break Err("interrupted again before the process finished its recording".into());
                }
                stop(EndReason::Interrupted, &mut stopping);
                give_up = tokio::time::Instant::now() + STOP_WAIT;
            }
            _ = signals.terminate.recv() => {
                if stopping.is_some() {
                    break Err("terminated again before the process finished its recording".into());
                }
                stop(EndReason::Interrupted, &mut stopping);
                give_up = tokio::time::Instant::now() + STOP_WAIT;
            }
            _ = tokio::time::sleep_until(deadline), if stopping.is_none() => {
                stop(EndReason::Duration, &mut stopping);
                give_up = tokio::time::Instant::now() + STOP_WAIT;
            }
            _ = tokio::time::sleep_until(give_up), if stopping.is_some() => {
                break Err(format!(
                    "pid {pid} did not finish its recording within {} s of being asked",
                    STOP_WAIT.as_secs()
                ));
            }
            streamed = received.recv() => match streamed {
                Some(Streamed::Records(records)) => {
                    for record in records {
                        if matches!(record, Record::End { .. }) {
                            continue;
                        }
                        count(&record, &mut stats, &mut live);
                        output.forward(&mut writer, record).map_err(written)?;
                    }
                }
                Some(Streamed::Header(..)) => {}
                Some(Streamed::End(tail)) => break tail,
                None => break Ok(Tail::Clean),
            },
            _ = flush.tick() => writer.tick().map_err(written)?,
            _ = slow.tick() => {
                if output.due() {
                    writer.flush().map_err(written)?;
                    output.rotate(&mut writer, monotonic_ns())?;
                }
                let rate = (stats.events - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), stats.events);
                on_event(AttachEvent::Progress {
                    stats: &stats,
                    events_per_s: rate,
                    top: live.candidate(),
                });
            }
        }
    };
    if let Err(reason) = &tail
        && stopping.is_some()
    {
        on_event(AttachEvent::Warning(format!(
            "{reason}: the recording keeps what it sent"
        )));
    }
    if let Ok(Tail::Torn { reason, .. }) | Err(reason) = &tail
        && stopping.is_none()
        && is_alive(pid)
    {
        on_event(AttachEvent::Warning(format!(
            "pid {pid}'s recording stream broke off: {}",
            printable(reason, 300)
        )));
    }
    let end = stopping.unwrap_or(if is_alive(pid) {
        EndReason::Finished
    } else {
        EndReason::TargetExited
    });
    writer
        .finish(Record::End {
            ts: monotonic_ns(),
            reason: end,
        })
        .map_err(written)?;
    Ok(AttachOutcome {
        stats,
        end,
        written: output.path(),
        programs: Vec::new(),
    })
}

/// The running figures of the live status line, from the records streamed.
fn count(record: &Record, stats: &mut Stats, live: &mut LiveBytes) {
    stats.events += 1;
    match record {
        Record::Stack { id, frames } => live.stack(*id, frames),
        Record::Alloc {
            addr, size, stack, ..
        } => {
            stats.allocs += 1;
            live.alloc(stats, *addr, *size, *stack);
        }
        Record::WholeAlloc {
            addr, size, stack, ..
        }
        | Record::WholeAllocInPoll {
            addr, size, stack, ..
        } => {
            stats.allocs += 1;
            live.alloc_whole(stats, *addr, *size, *stack);
        }
        Record::Realloc {
            old,
            new,
            size,
            stack,
            ..
        } => {
            stats.allocs += 1;
            live.free(stats, *old);
            live.alloc(stats, *new, *size, *stack);
        }
        Record::Free { addr, .. } => {
            stats.frees += 1;
            live.free(stats, *addr);
        }
        Record::Session {
            fact: SessionFact::Created(_),
            ..
        } => stats.sessions_born += 1,
        Record::Scope {
            kind: ScopeKind::WorkerDrop,
            ..
        } => stats.workers_ended += 1,
        Record::Lost { count, .. } => stats.lost += count,
        _ => {}
    }
}
