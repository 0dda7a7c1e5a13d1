//! The `tracing` layer that tells the recorder which session a thread works for.

use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, field::Field, field::Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::recorder::{RawKind, record_scope, record_session_id};

/// Spans that mark session work, and the field holding the session id:
/// the application's `mcp_session` span, and rmcp's worker span.
const SESSION_SPANS: &[(&str, &str)] = &[
    ("mcp_session", "session_id"),
    ("streamable_http_session", "id"),
];
/// rmcp's worker span: its close is the session worker's end.
const WORKER_SPAN: &str = "streamable_http_session";

/// Per-span state kept in the registry's extensions.
///
/// Span ids are reused by `tracing` after a span closes, so each new span announces
/// itself at its first enter with a session-id fact: its id, or "" when the id is
/// recorded later (then the real id follows as soon as it is known).
struct SessionSpan {
    id: Option<String>,
    /// A fact (maybe "") has been sent for this span.
    announced: bool,
    /// Its real id has been sent.
    named: bool,
}

/// Records entering and leaving session spans; see the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct SessionLayer;

struct IdVisitor<'a> {
    field: &'a str,
    id: Option<String>,
}

impl Visit for IdVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.field {
            self.id = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.field {
            self.id = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

fn id_field(name: &str) -> Option<&'static str> {
    SESSION_SPANS
        .iter()
        .find(|(span, _)| *span == name)
        .map(|(_, field)| *field)
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SessionLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(field) = id_field(attrs.metadata().name()) else {
            return;
        };
        let mut visitor = IdVisitor { field, id: None };
        attrs.record(&mut visitor);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SessionSpan {
                id: visitor.id,
                announced: false,
                named: false,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let Some(field) = id_field(span.name()) else {
            return;
        };
        let mut visitor = IdVisitor { field, id: None };
        values.record(&mut visitor);
        let Some(session_id) = visitor.id else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(state) = extensions.get_mut::<SessionSpan>() {
            // Learned while entered (after creating the session): name it now.
            if state.announced && !state.named && ctx.current_span().id() == Some(id) {
                record_session_id(&session_id);
                state.named = true;
            }
            state.id = Some(session_id);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        let Some(state) = extensions.get_mut::<SessionSpan>() else {
            return;
        };
        record_scope(RawKind::SpanEnter, id.into_u64());
        if !state.named {
            match &state.id {
                Some(session_id) => {
                    record_session_id(session_id);
                    state.named = true;
                }
                None if !state.announced => record_session_id(""),
                None => {}
            }
            state.announced = true;
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && span.extensions().get::<SessionSpan>().is_some()
        {
            record_scope(RawKind::SpanExit, id.into_u64());
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && span.name() == WORKER_SPAN
        {
            record_scope(RawKind::WorkerEnd, id.into_u64());
        }
    }
}
