//! The `tracing` layer that tells the recorder which session a thread works for.
//!
//! Two parts: [`Callsites`], a per-layer filter that lets through only the
//! spans and events the preset names, and `sessions`, what the layer does with
//! them. [`SessionLayer`] is the two together.
//!
//! Why a filter: a layer that says nothing about callsites is handed every
//! span and event of the program, at every level: hyper's and h2's `trace!`
//! events, rmcp's `transport_worker` and `serve_inner` spans entered on every
//! poll. The registry then builds, enters, exits and closes spans nobody reads.
//! Measured on `fixture-server-cooperative` at saturation, that was most of the
//! cost of the cooperative build switched off. A *per-layer* filter (not a
//! layer's own `register_callsite`) is what keeps the others' spans: a plain
//! layer that answers `Interest::never` disables a callsite for every layer of
//! the subscriber, the application's `fmt` layer included.

mod callsites;
mod followed;
mod serving;
mod sessions;

use std::any::TypeId;
use std::fmt;

use leakscope_recording::preset::Preset;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, LevelFilter};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::{LookupSpan, Registry};

use callsites::Callsites;
use sessions::Sessions;

/// Records entering and leaving session spans, and tokio's task spans; see
/// the crate docs.
///
/// Which spans mark session work, which field holds the session id, and which
/// span's close is the worker's end come from a preset's `[[span]]` entries
/// (`SessionLayer::default()`: the built-in rmcp preset). It sees no other
/// span or event: the application's other layers still see all of theirs,
/// and when it is the only layer the registry does not even make the others.
pub struct SessionLayer<S = Registry> {
    inner: Filtered<Sessions, Callsites, S>,
}

impl<S> Default for SessionLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + 'static,
{
    fn default() -> Self {
        Self::from_preset(&Preset::builtin())
    }
}

impl<S> SessionLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + 'static,
{
    /// A layer following `preset`'s spans and events.
    pub fn from_preset(preset: &Preset) -> Self {
        Self {
            inner: Sessions::from_preset(preset).with_filter(Callsites::from_preset(preset)),
        }
    }
}

impl<S> fmt::Debug for SessionLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// Every method but entering, leaving and closing goes to the filtered
/// layer, so that the registry sees a per-layer filter (it finds it through
/// `downcast_raw`, and registers it in `on_layer`).
impl<S> Layer<S> for SessionLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a> + 'static,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber)
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber)
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(span, values, ctx)
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx)
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.inner.on_event(event, ctx)
    }

    // Entering, leaving and closing go to the layer itself, past the
    // filter's check: the filter would look the span up to read whether it
    // made it, on every poll of every span the subscriber makes, recording
    // or not, and the layer looks it up again. The layer does nothing on
    // entering and leaving while off, and finds its own state (its table,
    // `followed`) only for spans it was given at their making (`on_new_span`
    // goes through the filter), so it needs no check: one lookup a poll
    // while recording, none while off, and one at a span's close.

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.inner().on_enter(id, ctx)
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.inner().on_exit(id, ctx)
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.inner().on_close(id, ctx)
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx)
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: the same contract, passed on to the layer that holds the rest.
        unsafe { self.inner.downcast_raw(id) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// The application's own layer: counts what it is handed.
    #[derive(Clone, Default)]
    struct Counts {
        spans: Arc<AtomicUsize>,
        events: Arc<AtomicUsize>,
    }

    impl<S: Subscriber> Layer<S> for Counts {
        fn on_new_span(&self, _: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
            self.spans.fetch_add(1, Ordering::SeqCst);
        }

        fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
            self.events.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn others() {
        let span = tracing::trace_span!(target: "rmcp::transport::worker", "transport_worker");
        let _entered = span.enter();
        tracing::trace!(target: "hyper::proto::h1", "parsed 3 headers");
    }

    #[test]
    fn the_applications_layers_still_see_what_it_ignores() {
        let counts = Counts::default();
        let subscriber = tracing_subscriber::registry()
            .with(SessionLayer::default())
            .with(counts.clone());
        tracing::subscriber::with_default(subscriber, others);
        assert_eq!(counts.spans.load(Ordering::SeqCst), 1);
        assert_eq!(counts.events.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn alone_it_has_the_registry_make_nothing_it_ignores() {
        // Whether a serving span is made depends on the process's recording.
        let _one = crate::recorder::tests::one_recorder_at_a_time();
        let subscriber = tracing_subscriber::registry().with(SessionLayer::default());
        tracing::subscriber::with_default(subscriber, || {
            let ignored = tracing::info_span!(target: "rmcp::service", "handle_request");
            assert!(ignored.is_disabled());
            let session = tracing::info_span!("mcp_session", session_id = "s");
            assert!(!session.is_disabled());
            // Not recording: a session's service loop gets no span to enter.
            let serving = tracing::info_span!(target: "rmcp::service", "serve_inner");
            assert!(serving.is_disabled());
        });
    }

    /// The layer's table of the spans it follows holds those open, and
    /// lets each go when it closes, recording or not: a server that runs
    /// for days makes spans without end.
    #[test]
    fn the_layer_keeps_what_it_follows_while_it_is_open() {
        let layer: SessionLayer = SessionLayer::default();
        let table = layer.inner.inner().followed.clone();
        let subscriber = tracing_subscriber::registry()
            .with(layer)
            .with(Counts::default());
        tracing::subscriber::with_default(subscriber, || {
            let task = tracing::trace_span!(target: "tokio::task", "runtime.spawn");
            let session = tracing::info_span!("mcp_session", session_id = "s");
            let other = tracing::info_span!("not_followed");
            assert!(!other.is_disabled(), "made for the other layer");
            assert_eq!(table.len(), 2);
            task.in_scope(|| session.in_scope(|| other.in_scope(|| {})));
            assert_eq!(table.len(), 2);
            drop(task);
            assert_eq!(table.len(), 1);
            drop(session);
            drop(other);
            assert_eq!(table.len(), 0);
        });
    }

    /// A sampled recording keeps a task's first empty poll only for a task
    /// it saw spawned: one spawned before it began is of unknown birth, and
    /// its empty polls say nothing (the probe relaying the stream no longer
    /// drops them itself).
    #[test]
    fn a_task_spawned_before_a_sampled_recording_keeps_no_empty_poll() {
        use leakscope_recording::sampling::Sampling;
        use leakscope_recording::{Record, RecordingReader, ScopeKind};

        fn task() -> tracing::Span {
            tracing::trace_span!(target: "tokio::task", "runtime.spawn")
        }
        let _one = crate::recorder::tests::one_recorder_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.lsrec");
        let subscriber = tracing_subscriber::registry().with(SessionLayer::default());
        let (before, during) = tracing::subscriber::with_default(subscriber, || {
            let before = task();
            // Streamed as to the probe: not coalesced by the writer.
            let recorder = crate::Recorder::start_streaming(
                Box::new(std::fs::File::create(&path).unwrap()),
                "the test's stream",
                Sampling::Bytes { mean: 512 << 10 },
            )
            .unwrap();
            let during = task();
            for _ in 0..3 {
                before.in_scope(|| {});
                during.in_scope(|| {});
            }
            recorder.finish().unwrap();
            (before.id().unwrap(), during.id().unwrap())
        });
        let polls: Vec<u64> = RecordingReader::open(&path)
            .unwrap()
            .filter_map(|record| match record {
                Record::Scope {
                    kind: ScopeKind::TaskPoll,
                    arg,
                    ..
                } => Some(arg),
                _ => None,
            })
            .collect();
        assert_eq!(polls, [during.into_u64()], "not {}", before.into_u64());
    }

    /// A session's service loop gets its span while a recording of every
    /// call runs, and not while a sampled one does (see `callsites`).
    #[test]
    fn serving_spans_are_made_only_while_every_call_is_recorded() {
        use leakscope_recording::sampling::Sampling;

        fn serving() -> tracing::Span {
            tracing::info_span!(target: "rmcp::service", "serve_inner")
        }
        let _one = crate::recorder::tests::one_recorder_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let subscriber = tracing_subscriber::registry().with(SessionLayer::default());
        tracing::subscriber::with_default(subscriber, || {
            let every = crate::Recorder::start(dir.path().join("every.lsrec")).unwrap();
            assert!(!serving().is_disabled(), "recording every call");
            every.finish().unwrap();
            assert!(serving().is_disabled(), "stopped");
            let sampled = crate::Recorder::start_with(
                dir.path().join("sampled.lsrec"),
                Sampling::Bytes { mean: 512 << 10 },
            )
            .unwrap();
            assert!(serving().is_disabled(), "sampled");
            sampled.finish().unwrap();
        });
    }
}
