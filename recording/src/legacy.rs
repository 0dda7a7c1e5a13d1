//! Older format versions, read into today's types. Only the header changed since
//! version 1 (records are identical), so only the header has a legacy form here.

use serde::Deserialize;

use crate::event::{AllocLayer, ClockOrigin, Header, Producer, Settings};

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
            settings: Settings {
                alloc_layer,
                alloc_layer_reason,
                stack_depth,
                preset,
                scope_probes,
                // Version 1 did not say which scopes were missing.
                missing_scopes: Vec::new(),
                notes,
            },
        }
    }
}
