//! Attaching to a process that records itself: its global allocator is
//! `leakscope_inproc::Alloc` and it called `leakscope_inproc::listen()`. No
//! eBPF and no root: the probe finds the process's control socket from its
//! pid, asks it to record, and writes what it streams into the recording,
//! ending it (`--duration`, Ctrl-C, the target's exit) the same way as an
//! eBPF recording. The protocol is `leakscope_recording::control`'s.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use leakscope_recording::control::{ERROR_PREFIX, Request, peer, socket_name};
use leakscope_recording::target::{Target, is_alive};
use leakscope_recording::{
    EndReason, Header, Record, RecordingReader, ScopeKind, SessionFact, Tail, monotonic_ns,
};

use super::rotation::Output;
use super::{
    AttachEvent, AttachOptions, AttachOutcome, LiveBytes, NEVER, SiteNamer, Stats, StopSignals,
    deadline,
};

/// The control socket of `pid`, if it has one and it is really `pid`'s (the
/// kernel says which process listens on it: another one could have taken
/// the name).
pub fn connect(pid: u32) -> Option<UnixStream> {
    let address = SocketAddr::from_abstract_name(socket_name(pid)).ok()?;
    let stream = UnixStream::connect_addr(&address).ok()?;
    match peer(&stream) {
        Ok((_, listener)) if listener == pid => Some(stream),
        _ => None,
    }
}

/// How long a process asked to stop may take to finish its recording.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// What the reading thread hands over.
enum Streamed {
    Header(Box<Header>),
    Records(Vec<Record>),
    /// The stream ended: how, and whether the process said why it refused.
    End(Result<Tail, String>),
}

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
    let (sender, mut received) = tokio::sync::mpsc::channel::<Streamed>(64);
    let name = format!("pid {pid}'s control socket");
    std::thread::Builder::new()
        .name("leakscope-inproc-reader".into())
        .spawn(move || read_stream(stream, &name, &sender))?;

    let header = match received.recv().await {
        Some(Streamed::Header(header)) => header,
        Some(Streamed::End(Err(why))) => bail!("pid {pid} would not record: {why}"),
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
                Some(Streamed::Header(_)) => {}
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
            "pid {pid}'s recording stream broke off: {reason}"
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

/// Reads the process's answer: a refusal line, or a recording, frame by frame.
fn read_stream(stream: UnixStream, name: &str, sender: &tokio::sync::mpsc::Sender<Streamed>) {
    let mut input = BufReader::with_capacity(1 << 20, stream);
    let refused = match input.fill_buf() {
        Ok(start) => start.starts_with(ERROR_PREFIX.as_bytes()),
        Err(e) => {
            let _ = sender.blocking_send(Streamed::End(Err(e.to_string())));
            return;
        }
    };
    if refused {
        let mut line = String::new();
        let _ = input.read_line(&mut line);
        let why = line.trim().trim_start_matches(ERROR_PREFIX).to_owned();
        let _ = sender.blocking_send(Streamed::End(Err(why)));
        return;
    }
    let mut reader = match RecordingReader::new(input, std::path::Path::new(name)) {
        Ok(reader) => reader,
        Err(e) => {
            let _ = sender.blocking_send(Streamed::End(Err(e.to_string())));
            return;
        }
    };
    if sender
        .blocking_send(Streamed::Header(Box::new(reader.header().clone())))
        .is_err()
    {
        return;
    }
    while let Some(batch) = reader.next_frame() {
        if sender.blocking_send(Streamed::Records(batch)).is_err() {
            return;
        }
    }
    let tail = reader.tail().cloned().unwrap_or(Tail::Clean);
    let _ = sender.blocking_send(Streamed::End(Ok(tail)));
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
