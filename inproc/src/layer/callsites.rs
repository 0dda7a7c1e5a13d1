//! Which callsites the session layer reads: the preset's spans and events, and
//! tokio's task spans. Decided once per callsite (`Interest::always` or
//! `never`), so a callsite it ignores costs the program nothing more per call
//! than it would without leakscope. A serving span (`serves = true`, rmcp's
//! `serve_inner`, entered on every poll of a session's service loop) is made
//! only while a recording of every call runs: its interest is decided again
//! when recording starts and stops (the recorder rebuilds tracing's interest
//! cache), so switched off a cooperative build makes none (a per-layer
//! filter's `sometimes` would not do: the registry still makes a span every
//! filter turned down). A sampled recording makes none either: rmcp enters
//! `serve_inner` around every poll of the service loop and of each request's
//! handler (they are instrumented with `Span::current()`), ~40k instructions
//! a session at saturation (callgrind, the stock service: 9% of the
//! server's work, most of what recording cost it), to attribute a session's
//! service-loop blocks, of which a sample at 512 KiB holds almost none (a
//! session is ~130 KB): its sessions' bytes are estimates either way.

use leakscope_recording::preset::{Preset, SpanNaming};
use tracing::Metadata;
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context, Filter};

use super::sessions::is_task_span;
use crate::recorder::mode::recording;
use crate::recorder::sampler::sampling;

/// Whether serving spans are made now: while a recording of every call runs.
fn serving_now() -> bool {
    recording() && !sampling()
}

/// The per-layer filter of [`super::SessionLayer`].
#[derive(Debug, Clone)]
pub(super) struct Callsites {
    /// Names of the spans that mark session work (`[[span]]`).
    spans: Vec<String>,
    /// The events that name a session (`[[event]]`): their target (a
    /// prefix) and the field that carries the id. An event of the target
    /// without that field (rmcp's trace and debug events of every request,
    /// several a session) cannot be one, and is decided here once rather
    /// than built and read at every call.
    events: Vec<(String, String)>,
    /// Names of the serving spans among `spans`: made only while recording.
    serving: Vec<String>,
}

impl Callsites {
    pub(super) fn from_preset(preset: &Preset) -> Self {
        Self {
            spans: preset.spans.iter().map(|s| s.name.clone()).collect(),
            events: preset
                .events
                .iter()
                .map(|e| (e.target.clone(), e.id_field.clone()))
                .collect(),
            serving: preset
                .spans
                .iter()
                .filter(|s| s.naming() == SpanNaming::Unserved)
                .map(|s| s.name.clone())
                .collect(),
        }
    }

    fn is_serving(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_span() && self.serving.iter().any(|name| name == metadata.name())
    }

    fn wants(&self, metadata: &Metadata<'_>) -> bool {
        if metadata.is_span() {
            is_task_span(metadata) || self.spans.iter().any(|name| name == metadata.name())
        } else {
            let target = metadata.target();
            self.events.iter().any(|(prefix, field)| {
                target.starts_with(prefix.as_str()) && metadata.fields().field(field).is_some()
            })
        }
    }
}

impl<S> Filter<S> for Callsites {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if self.is_serving(metadata) {
            return serving_now();
        }
        self.wants(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.is_serving(metadata) {
            // Decided again when recording starts or stops
            // (`rebuild_interest_cache`, from the recorder).
            if serving_now() {
                Interest::always()
            } else {
                Interest::never()
            }
        } else if self.wants(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;
    use tracing::callsite::DefaultCallsite;
    use tracing::metadata::Kind;

    fn callsites() -> Callsites {
        Callsites::from_preset(&Preset::builtin())
    }

    macro_rules! metadata {
        ($name:expr, $target:expr, $kind:expr) => {
            metadata!($name, $target, $kind, [])
        };
        ($name:expr, $target:expr, $kind:expr, $fields:expr) => {{
            static CALLSITE: DefaultCallsite = DefaultCallsite::new(&META);
            static META: Metadata<'static> = Metadata::new(
                $name,
                $target,
                Level::TRACE,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&$fields, tracing::callsite::Identifier(&CALLSITE)),
                $kind,
            );
            &META
        }};
    }

    #[test]
    fn reads_the_presets_spans_and_events_and_tokios_tasks() {
        let c = callsites();
        assert!(c.wants(metadata!("mcp_session", "fixture", Kind::SPAN)));
        assert!(c.wants(metadata!("streamable_http_session", "rmcp", Kind::SPAN)));
        assert!(c.wants(metadata!("serve_inner", "rmcp::service", Kind::SPAN)));
        assert!(c.wants(metadata!("runtime.spawn", "tokio::task", Kind::SPAN)));
        assert!(c.wants(metadata!(
            "event local.rs:1",
            "rmcp::transport::streamable_http_server::session::local",
            Kind::EVENT,
            ["message", "session_id"]
        )));
    }

    #[test]
    fn ignores_everything_else() {
        let c = callsites();
        assert!(!c.wants(metadata!(
            "transport_worker",
            "rmcp::transport::worker",
            Kind::SPAN
        )));
        assert!(!c.wants(metadata!("handle_request", "rmcp::service", Kind::SPAN)));
        // A span named like an event target, and an event named like a span.
        assert!(!c.wants(metadata!(
            "x",
            "rmcp::transport::streamable_http_server::session::local",
            Kind::SPAN
        )));
        assert!(!c.wants(metadata!("mcp_session", "fixture", Kind::EVENT)));
        assert!(!c.wants(metadata!("event", "hyper::proto::h1", Kind::EVENT)));
        // The target's other events: none carries the session's id.
        assert!(!c.wants(metadata!(
            "event local.rs:2",
            "rmcp::transport::streamable_http_server::session::local",
            Kind::EVENT,
            ["message", "resource", "http_request_id"]
        )));
        assert!(!c.wants(metadata!("runtime.spawn", "my_app", Kind::SPAN)));
    }
}
