//! Objects: the lifecycle objects a recording shows, one model for every kind.
//!
//! An object has a kind, a birth, polls (windows in which its allocations are
//! charged to it), an end, and children. rmcp's **session** is one kind (from a
//! preset: [`sessions`]); tokio's **task** is another, built in ([`tasks`]): any
//! tokio server has them. A task spawned while a session's window is open (its
//! birth request, its worker's polls) is that session's child, and its bytes
//! are the session's too. `summary.json`'s `objects` is their view by kind
//! (`outputs::objects`); tasks are also grouped by where they were spawned
//! ([`spawn_sites`]), which is where a task leak is decided.

pub mod sessions;
pub mod spawn_sites;
pub mod tasks;
