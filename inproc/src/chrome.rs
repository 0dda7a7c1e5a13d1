//! The application's own trace beside the recording (feature `chrome`): a
//! [`tracing-chrome`](tracing_chrome) layer whose clock is the recording's, so
//! Perfetto shows a session's spans and the memory it holds on one timeline.
//!
//! ```no_run
//! # use tracing_subscriber::layer::SubscriberExt;
//! # fn main() -> anyhow::Result<()> {
//! let (chrome, _flush) = leakscope_inproc::chrome_layer("target/app-trace.json")?;
//! tracing::subscriber::set_global_default(
//!     tracing_subscriber::registry()
//!         .with(leakscope_inproc::SessionLayer::default())
//!         .with(chrome),
//! )?;
//! let _guard = leakscope_inproc::start("target/leak.lsrec")?;
//! // ... drive the server; drop `_flush` to finish app-trace.json ...
//! # Ok(())
//! # }
//! ```
//! Then `leakscope report target/leak.lsrec --app-trace target/app-trace.json`
//! writes one `trace.json` with both.
//!
//! **One clock.** `tracing-chrome` counts microseconds from the moment its layer
//! is built; [`chrome_layer`] notes that moment on the recording's clock
//! (`Record::TraceOrigin`, to within the few microseconds `build` takes), and the
//! analyzer counts `trace.json` from it.
//!
//! **Not the application's memory.** What the layer allocates on the
//! application's threads (event data, its channel) and on its writer thread comes
//! from `System`: neither recorded nor counted by dhat. The one exception is the
//! writer thread's 8 KiB output buffer, allocated before its first write: one
//! block outside every session.

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use tracing::{Event, Subscriber, span};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

pub use tracing_chrome::FlushGuard;

use crate::recorder::own::{mark_thread, quietly};
use crate::recorder::{now_ns, set_trace_origin};

/// A `tracing-chrome` layer writing `path`, with its time zero noted in the
/// running recording (and in every recording started later). Drop the
/// [`FlushGuard`] to finish the file.
pub fn chrome_layer<S>(path: impl AsRef<Path>) -> Result<(ChromeLayer<S>, FlushGuard)>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let path = path.as_ref();
    let file = quietly(|| std::fs::File::create(path))
        .with_context(|| format!("cannot create {}", path.display()))?;
    let (layer, guard) = quietly(|| {
        tracing_chrome::ChromeLayerBuilder::new()
            .writer(QuietWriter(file))
            .include_args(true)
            .build()
    });
    // `build` read its clock (`Instant::now`, CLOCK_MONOTONIC) as its last step.
    set_trace_origin(now_ns());
    Ok((ChromeLayer(layer), guard))
}

/// `tracing_chrome::ChromeLayer`, run as leakscope's own code (see the module docs).
pub struct ChromeLayer<S>(tracing_chrome::ChromeLayer<S>)
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync;

impl<S> Layer<S> for ChromeLayer<S>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        quietly(|| self.0.on_new_span(attrs, id, ctx));
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        quietly(|| self.0.on_record(id, values, ctx));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        quietly(|| self.0.on_event(event, ctx));
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        quietly(|| self.0.on_enter(id, ctx));
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        quietly(|| self.0.on_exit(id, ctx));
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        quietly(|| self.0.on_close(id, ctx));
    }
}

/// The trace file, marking the thread that writes it as leakscope's own.
struct QuietWriter(std::fs::File);

impl Write for QuietWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        mark_thread();
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        mark_thread();
        self.0.flush()
    }
}
