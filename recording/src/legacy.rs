//! Older format versions, read into today's types: version 1's header (the rmcp
//! version was a note, no missing scopes) and its `realloc` record (no entry time).

use serde::Deserialize;

use crate::event::{
    EndReason, LostReason, Mapping, Phase, Record, ScopeKind, SessionFact, StackId,
};
use crate::frame_pointers::{FramePointers, StackWalk};
use crate::header::{AllocLayer, ClockOrigin, Header, Producer, Segment, Settings};
use crate::sampling::Sampling;

/// A record of format version 1: as today's, but `Realloc` has no `entry_ts`.
/// The variants keep their order (postcard encodes the index).
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RecordV1 {
    Alloc {
        ts: u64,
        tid: u32,
        addr: u64,
        size: u64,
        stack: Option<StackId>,
    },
    Free {
        ts: u64,
        tid: u32,
        addr: u64,
    },
    Realloc {
        ts: u64,
        tid: u32,
        old: u64,
        new: u64,
        size: u64,
        stack: Option<StackId>,
    },
    Scope {
        ts: u64,
        tid: u32,
        kind: ScopeKind,
        phase: Phase,
        arg: u64,
    },
    Session {
        ts: u64,
        tid: u32,
        fact: SessionFact,
    },
    Stack {
        id: StackId,
        frames: Vec<u64>,
    },
    Mapping(Mapping),
    Lost {
        ts: u64,
        reason: LostReason,
        count: u64,
    },
    End {
        ts: u64,
        reason: EndReason,
    },
}

impl From<RecordV1> for Record {
    fn from(v1: RecordV1) -> Self {
        match v1 {
            RecordV1::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            } => Record::Alloc {
                ts,
                tid,
                addr,
                size,
                stack,
            },
            RecordV1::Free { ts, tid, addr } => Record::Free { ts, tid, addr },
            RecordV1::Realloc {
                ts,
                tid,
                old,
                new,
                size,
                stack,
            } => Record::Realloc {
                ts,
                tid,
                old,
                new,
                size,
                stack,
                entry_ts: 0,
            },
            RecordV1::Scope {
                ts,
                tid,
                kind,
                phase,
                arg,
            } => Record::Scope {
                ts,
                tid,
                kind,
                phase,
                arg,
            },
            RecordV1::Session { ts, tid, fact } => Record::Session { ts, tid, fact },
            RecordV1::Stack { id, frames } => Record::Stack { id, frames },
            RecordV1::Mapping(m) => Record::Mapping(m),
            RecordV1::Lost { ts, reason, count } => Record::Lost { ts, reason, count },
            RecordV1::End { ts, reason } => Record::End { ts, reason },
        }
    }
}

/// Prefix of the version-1 note that carried the rmcp version.
const V1_RMCP_NOTE: &str = "rmcp version: ";

/// The header of format version 1.
#[derive(Deserialize)]
pub(crate) struct HeaderV1 {
    producer: Producer,
    producer_version: String,
    pid: u32,
    exe: String,
    build_id: Option<String>,
    clock: ClockOrigin,
    settings: SettingsV1,
}

#[derive(Deserialize)]
struct SettingsV1 {
    alloc_layer: AllocLayer,
    alloc_layer_reason: String,
    stack_depth: u32,
    preset: Option<String>,
    scope_probes: Vec<String>,
    notes: Vec<String>,
}

impl From<HeaderV1> for Header {
    fn from(v1: HeaderV1) -> Self {
        let SettingsV1 {
            alloc_layer,
            alloc_layer_reason,
            stack_depth,
            preset,
            scope_probes,
            mut notes,
        } = v1.settings;
        let rmcp_version = notes
            .iter()
            .find_map(|n| n.strip_prefix(V1_RMCP_NOTE))
            .map(str::to_owned);
        notes.retain(|n| !n.starts_with(V1_RMCP_NOTE));
        Header {
            producer: v1.producer,
            producer_version: v1.producer_version,
            pid: v1.pid,
            exe: v1.exe,
            build_id: v1.build_id,
            clock: v1.clock,
            rmcp_version,
            frame_pointers: FramePointers::Unknown,
            sampling: Sampling::Every,
            segment: None,
            stack_walk: StackWalk::FramePointers,
            settings: Settings {
                alloc_layer,
                alloc_layer_reason,
                stack_depth,
                preset,
                scope_probes,
                // Version 1 did not say which scopes were missing.
                missing_scopes: Vec::new(),
                scope_functions: Vec::new(),
                notes,
            },
        }
    }
}

/// The header of format versions 2 to 4: today's without `frame_pointers`.
#[derive(Deserialize)]
pub(crate) struct HeaderV4 {
    producer: Producer,
    producer_version: String,
    pid: u32,
    exe: String,
    build_id: Option<String>,
    clock: ClockOrigin,
    rmcp_version: Option<String>,
    settings: Settings,
}

impl From<HeaderV4> for Header {
    fn from(v4: HeaderV4) -> Self {
        Header {
            producer: v4.producer,
            producer_version: v4.producer_version,
            pid: v4.pid,
            exe: v4.exe,
            build_id: v4.build_id,
            clock: v4.clock,
            rmcp_version: v4.rmcp_version,
            settings: v4.settings,
            frame_pointers: FramePointers::Unknown,
            sampling: Sampling::Every,
            segment: None,
            stack_walk: StackWalk::FramePointers,
        }
    }
}

/// The header of format versions 5 to 7: today's without `sampling` (every
/// call was recorded).
#[derive(Deserialize)]
pub(crate) struct HeaderV7 {
    producer: Producer,
    producer_version: String,
    pid: u32,
    exe: String,
    build_id: Option<String>,
    clock: ClockOrigin,
    rmcp_version: Option<String>,
    settings: Settings,
    frame_pointers: FramePointers,
}

impl From<HeaderV7> for Header {
    fn from(v7: HeaderV7) -> Self {
        Header {
            producer: v7.producer,
            producer_version: v7.producer_version,
            pid: v7.pid,
            exe: v7.exe,
            build_id: v7.build_id,
            clock: v7.clock,
            rmcp_version: v7.rmcp_version,
            settings: v7.settings,
            frame_pointers: v7.frame_pointers,
            sampling: Sampling::Every,
            segment: None,
            stack_walk: StackWalk::FramePointers,
        }
    }
}

/// The header of format version 8: today's without `segment` (one file).
#[derive(Deserialize)]
pub(crate) struct HeaderV8 {
    producer: Producer,
    producer_version: String,
    pid: u32,
    exe: String,
    build_id: Option<String>,
    clock: ClockOrigin,
    rmcp_version: Option<String>,
    settings: Settings,
    frame_pointers: FramePointers,
    sampling: Sampling,
}

impl From<HeaderV8> for Header {
    fn from(v8: HeaderV8) -> Self {
        Header {
            producer: v8.producer,
            producer_version: v8.producer_version,
            pid: v8.pid,
            exe: v8.exe,
            build_id: v8.build_id,
            clock: v8.clock,
            rmcp_version: v8.rmcp_version,
            settings: v8.settings,
            frame_pointers: v8.frame_pointers,
            sampling: v8.sampling,
            segment: None,
            stack_walk: StackWalk::FramePointers,
        }
    }
}

/// A format 9 or 10 header: [`Header`] before [`Header::stack_walk`].
#[derive(Deserialize)]
pub(crate) struct HeaderV10 {
    producer: Producer,
    producer_version: String,
    pid: u32,
    exe: String,
    build_id: Option<String>,
    clock: ClockOrigin,
    rmcp_version: Option<String>,
    settings: Settings,
    frame_pointers: FramePointers,
    sampling: Sampling,
    segment: Option<Segment>,
}

impl From<HeaderV10> for Header {
    fn from(v10: HeaderV10) -> Self {
        Header {
            producer: v10.producer,
            producer_version: v10.producer_version,
            pid: v10.pid,
            exe: v10.exe,
            build_id: v10.build_id,
            clock: v10.clock,
            rmcp_version: v10.rmcp_version,
            settings: v10.settings,
            frame_pointers: v10.frame_pointers,
            sampling: v10.sampling,
            segment: v10.segment,
            stack_walk: StackWalk::FramePointers,
        }
    }
}
