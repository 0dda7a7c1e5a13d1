//! Which backend records: the process itself when it can, else eBPF.

use anyhow::Result;

use super::{AttachEvent, AttachOptions, AttachOutcome, StopSignals, cooperative, ebpf};

/// Attaches to `options.pid`, records into `options.out` until stopped, and
/// finishes the recording. `on_event` hears about warnings, the moment
/// recording begins, and progress.
pub async fn attach(
    options: AttachOptions,
    mut on_event: impl FnMut(AttachEvent<'_>),
) -> Result<AttachOutcome> {
    // Ctrl-C and SIGTERM end the recording cleanly from the start: one that
    // comes while the probes are being attached (seconds, for many) no longer
    // kills the probe with a header-only file; the recording stops as soon as
    // attaching is done, finished like any other.
    let mut signals = StopSignals::install()?;
    // A process that records itself (leakscope_inproc::Alloc, listening)
    // needs no eBPF and no root: it is asked to.
    if !options.bare && !options.ebpf {
        match cooperative::find(options.pid, &mut signals).await? {
            cooperative::Found::Connected(stream) => {
                return cooperative::record(stream, &options, &mut signals, &mut on_event).await;
            }
            cooperative::Found::NotHeld(why) => on_event(AttachEvent::Warning(why)),
            cooperative::Found::Nothing => {}
        }
    }
    ebpf::record(&options, &mut signals, &mut on_event).await
}
