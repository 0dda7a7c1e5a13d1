//! What the layer does with the spans and events its filter lets through:
//! tells the recorder which session (or task) a thread works for.

use leakscope_recording::coalesce::PollsKept;
use std::sync::Arc;

use leakscope_recording::preset::{EventRule, Preset, SpanNaming, SpanRule};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber, field::Field, field::Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::followed::{Closed, Followed, SessionSpan, Table, TaskSpan};
use super::serving::Serving;
use crate::recorder::cost::{Part, skipped};
use crate::recorder::mode::recording;
use crate::recorder::own::quietly;
use crate::recorder::sampler::epoch;
use crate::recorder::{
    RawKind, record_poll, record_poll_end, record_scope, record_session_created, record_session_id,
    record_task_spawned, tid,
};

/// Whether a span is tokio's span of a task.
pub(super) fn is_task_span(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.name() == "runtime.spawn" && metadata.target() == "tokio::task"
}

/// Records entering and leaving session spans, and tokio's task spans.
///
/// Which spans mark session work, which field holds the session id, and which
/// span's close is the worker's end come from a preset's `[[span]]` entries.
/// It sees only what [`super::Callsites`] lets through.
#[derive(Debug, Clone)]
pub(super) struct Sessions {
    spans: Vec<SpanRule>,
    events: Vec<EventRule>,
    /// The sessions created and not served yet, when the preset has a
    /// serving span (`None`: nothing to queue).
    serving: Option<Arc<Serving>>,
    /// The spans it follows, and what it keeps of each.
    pub(super) followed: Arc<Table>,
}

impl Sessions {
    pub(super) fn from_preset(preset: &Preset) -> Self {
        Self {
            spans: preset.spans.clone(),
            events: preset.events.clone(),
            serving: preset
                .spans
                .iter()
                .any(|s| s.naming() == SpanNaming::Unserved)
                .then(Arc::default),
            followed: Arc::default(),
        }
    }

    fn rule(&self, span_name: &str) -> Option<&SpanRule> {
        self.spans.iter().find(|s| s.name == span_name)
    }

    fn id_field(&self, span_name: &str) -> Option<&str> {
        match self.rule(span_name)?.naming() {
            SpanNaming::Field(field) => Some(field),
            SpanNaming::Unserved => None,
        }
    }

    /// The id a new span of `rule` starts with: its field's, or for a
    /// serving span the session it serves ([`Serving`]).
    fn first_id(&self, rule: &SpanRule, attrs: &Attributes<'_>) -> Option<String> {
        match rule.naming() {
            SpanNaming::Field(field) => {
                let mut visitor = IdVisitor { field, id: None };
                attrs.record(&mut visitor);
                visitor.id
            }
            SpanNaming::Unserved => self.serving.as_ref()?.serve(tid()),
        }
    }
}

/// Whether an event's message is the rule's, compared as it is written out,
/// without making a string of it, and given up at the first piece that
/// differs: the visitor runs on every event of the rule's target while
/// recording, and only the one that matches has its session id read (by
/// [`IdVisitor`], a second pass).
struct MessageVisitor<'a> {
    message: &'a str,
    matches: bool,
}

impl Visit for MessageVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.matches = value == self.message;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let mut same = Same {
                rest: self.message,
                same: true,
            };
            self.matches = std::fmt::write(&mut same, format_args!("{value:?}")).is_ok()
                && same.same
                && same.rest.is_empty();
        }
    }
}

/// Whether what is written is `rest`, piece by piece.
struct Same<'a> {
    rest: &'a str,
    same: bool,
}

impl std::fmt::Write for Same<'_> {
    fn write_str(&mut self, piece: &str) -> std::fmt::Result {
        match self.rest.strip_prefix(piece) {
            Some(rest) if self.same => {
                self.rest = rest;
                Ok(())
            }
            _ => {
                // Not the message: stop writing it out.
                self.same = false;
                Err(std::fmt::Error)
            }
        }
    }
}

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

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Sessions {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if is_task_span(attrs.metadata()) {
            self.followed.insert(
                id.into_u64(),
                Followed::Task(TaskSpan {
                    polls: PollsKept::default(),
                    born: if recording() { epoch() } else { 0 },
                }),
            );
            // Made inside `tokio::spawn`: the stack names the spawner.
            record_task_spawned(id.into_u64());
            return;
        }
        let Some(rule) = self.rule(attrs.metadata().name()) else {
            return;
        };
        // The layer's bookkeeping is leakscope's memory, not the application's.
        quietly(|| {
            let first = self.first_id(rule, attrs);
            if rule.naming() == SpanNaming::Unserved && first.is_none() {
                // Serving no session we know of (made before recording began).
                return;
            }
            self.followed.insert(
                id.into_u64(),
                Followed::Session(SessionSpan {
                    id: first,
                    announced: false,
                    named: false,
                    polls: PollsKept::default(),
                    worker: rule.worker,
                }),
            );
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let Some(field) = self.id_field(span.name()) else {
            return;
        };
        let Some(session_id) = quietly(|| {
            let mut visitor = IdVisitor { field, id: None };
            values.record(&mut visitor);
            visitor.id
        }) else {
            return;
        };
        let current = ctx.current_span().id() == Some(id);
        self.followed.with(id.into_u64(), |followed| {
            if let Followed::Session(state) = followed {
                // Learned while entered (after creating the session): name it now.
                if state.announced && !state.named && current {
                    record_session_id(&session_id);
                    state.named = true;
                }
                state.id = Some(session_id);
            }
        });
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        // Nothing to record while off: no lookup either (a cooperative
        // server pays this on every span it enters, switched on or not). A
        // session span first entered once recording is on is announced then.
        if !recording() || skipped(Part::Polls) {
            return;
        }
        self.followed
            .with(id.into_u64(), |followed| match followed {
                Followed::Task(_) => record_poll(RawKind::TaskPoll, id.into_u64()),
                Followed::Session(state) => {
                    record_poll(RawKind::SpanEnter, id.into_u64());
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
            });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        if !recording() || skipped(Part::Polls) {
            return;
        }
        self.followed
            .with(id.into_u64(), |followed| match followed {
                Followed::Task(task) => {
                    let mut unborn = PollsKept::UNBORN;
                    let kept = if task.born == epoch() {
                        &mut task.polls
                    } else {
                        &mut unborn
                    };
                    record_poll_end(RawKind::TaskPollEnd, id.into_u64(), kept);
                }
                Followed::Session(session) => {
                    record_poll_end(RawKind::SpanExit, id.into_u64(), &mut session.polls);
                }
            });
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !recording() {
            return;
        }
        let target = event.metadata().target();
        let Some(rule) = self.events.iter().find(|r| target.starts_with(&r.target)) else {
            return;
        };
        let id = quietly(|| {
            let mut message = MessageVisitor {
                message: &rule.message,
                matches: false,
            };
            event.record(&mut message);
            if !message.matches {
                return None;
            }
            let mut visitor = IdVisitor {
                field: &rule.id_field,
                id: None,
            };
            event.record(&mut visitor);
            visitor.id
        });
        if let Some(id) = id {
            record_session_created(&id);
            if let Some(serving) = &self.serving {
                quietly(|| serving.created(tid(), &id));
            }
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        // Out of the table whether recording or not: it holds open spans only.
        let closed = self.followed.remove(id.into_u64());
        if !recording() {
            return;
        }
        match closed {
            Some(Closed::Task) => record_scope(RawKind::TaskEnded, id.into_u64()),
            Some(Closed::Session { worker: true }) => {
                record_scope(RawKind::WorkerEnd, id.into_u64());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Same;
    use std::fmt::Write;

    fn same(expected: &str, pieces: &[&str]) -> bool {
        let mut same = Same {
            rest: expected,
            same: true,
        };
        for piece in pieces {
            if same.write_str(piece).is_err() {
                break;
            }
        }
        same.same && same.rest.is_empty()
    }

    #[test]
    fn a_message_is_compared_as_it_is_written() {
        assert!(same("create new session", &["create new session"]));
        assert!(same("create new session", &["create ", "new", " session"]));
        assert!(!same("create new session", &["create new"]));
        assert!(!same("create new session", &["create new session", "s"]));
        assert!(!same(
            "create new session",
            &["create", "x", " new session"]
        ));
        assert!(!same(
            "create new session",
            &["create new sessio", "n", "!"]
        ));
    }
}
