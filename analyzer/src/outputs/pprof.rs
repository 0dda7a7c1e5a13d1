//! `profile.pb.gz`: the heap profile in pprof's format (`profile.proto`,
//! gzipped), which `go tool pprof`, Grafana Pyroscope and Parca read.
//!
//! Sample types are those of Go's heap profiles, in their order:
//! `alloc_objects`, `alloc_space` (everything allocated during the recording),
//! `inuse_objects`, `inuse_space` (live at its end); viewers open `inuse_space`
//! by default. A recording of every call has period 1; a sampled one has its
//! mean spacing as the period (bytes, as Go's `MemProfileRate`), and its
//! values are already the estimates (each sample weighted by itself), so a
//! viewer shows them as they are.
//! Samples carry the labels `category` and `session_state` (`closed`, `leaked`,
//! `live`, `unknown`; absent outside sessions), e.g. for
//! `go tool pprof -tagfocus session_state=leaked`.
//!
//! The messages are written with prost's derive from the field numbers of
//! `profile.proto` (github.com/google/pprof/proto/profile.proto): no `protoc` at
//! build time, and only the fields leakscope fills.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use crate::model::HeapProfile;

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// `profile.proto`'s string table: index 0 is always "".
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Self::default();
        strings.get("");
        strings
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// What the profile says about where it came from.
pub struct Origin {
    /// When the recording began, Unix nanoseconds.
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// One line for viewers that show comments (`go tool pprof -comments`).
    pub comment: String,
    /// Bytes between samples; 1 when every call was recorded.
    pub period: u64,
}

impl Origin {
    /// The origin of a timeline's recording.
    pub fn of(timeline: &crate::model::Timeline) -> Self {
        let clock = timeline.header.clock;
        Self {
            start_unix_ns: clock
                .unix_ns
                .saturating_add(timeline.start_ns.saturating_sub(clock.monotonic_ns)),
            duration_ns: timeline.end_ns.saturating_sub(timeline.start_ns),
            comment: format!(
                "leakscope heap profile of {} (pid {}), {}; allocations {}",
                timeline.header.exe,
                timeline.header.pid,
                timeline.header.producer_version,
                timeline.header.sampling.describe()
            ),
            period: timeline.header.sampling.mean_bytes().unwrap_or(1),
        }
    }
}

/// The `profile.proto` message for `profile`.
pub fn to_proto(profile: &HeapProfile, origin: &Origin) -> Profile {
    let mut strings = Strings::new();
    let value_type = |t: &str, unit: &str, strings: &mut Strings| ValueType {
        r#type: strings.get(t),
        unit: strings.get(unit),
    };
    let sample_type = vec![
        value_type("alloc_objects", "count", &mut strings),
        value_type("alloc_space", "bytes", &mut strings),
        value_type("inuse_objects", "count", &mut strings),
        value_type("inuse_space", "bytes", &mut strings),
    ];
    let period_type = value_type("space", "bytes", &mut strings);
    let default_sample_type = strings.get("inuse_space");

    let mapping = profile
        .mappings
        .iter()
        .enumerate()
        .map(|(i, m)| Mapping {
            id: i as u64 + 1,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.file_offset,
            filename: strings.get(&m.path),
            build_id: strings.get(m.build_id.as_deref().unwrap_or("")),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        })
        .collect();

    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let location = profile
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| Location {
            id: i as u64 + 1,
            mapping_id: l.mapping.map_or(0, |m| m as u64 + 1),
            address: l.address,
            line: l
                .frames
                .iter()
                .map(|frame| {
                    // "file:line", or no location at all.
                    let (file, line) = frame
                        .location
                        .as_deref()
                        .and_then(|loc| loc.rsplit_once(':'))
                        .map_or(("", 0), |(file, line)| (file, line.parse().unwrap_or(0)));
                    let key = (frame.function.clone(), file.to_owned());
                    let function_id = *function_ids.entry(key).or_insert_with(|| {
                        let id = functions.len() as u64 + 1;
                        functions.push(Function {
                            id,
                            name: strings.get(&frame.function),
                            system_name: strings.get(&frame.function),
                            filename: strings.get(file),
                        });
                        id
                    });
                    Line { function_id, line }
                })
                .collect(),
        })
        .collect();

    let category_key = strings.get("category");
    let state_key = strings.get("session_state");
    let sample = profile
        .samples
        .iter()
        .map(|s| {
            let mut label = vec![Label {
                key: category_key,
                str: strings.get(s.category.name()),
                ..Label::default()
            }];
            if let Some(state) = s.session {
                label.push(Label {
                    key: state_key,
                    str: strings.get(state.name()),
                    ..Label::default()
                });
            }
            Sample {
                location_id: s.locations.iter().map(|&i| i as u64 + 1).collect(),
                value: [
                    s.alloc.objects.round() as i64,
                    s.alloc.bytes as i64,
                    s.inuse.objects.round() as i64,
                    s.inuse.bytes as i64,
                ]
                .to_vec(),
                label,
            }
        })
        .collect();
    let comment = vec![strings.get(&origin.comment)];
    Profile {
        sample_type,
        sample,
        mapping,
        location,
        function: functions,
        string_table: strings.table,
        time_nanos: origin.start_unix_ns as i64,
        duration_nanos: origin.duration_ns as i64,
        period_type: Some(period_type),
        period: origin.period as i64,
        comment,
        default_sample_type,
    }
}

/// `profile` as pprof's gzipped protobuf, its file names and comment
/// redacted when a `redactor` is given (structurally: its string table).
pub fn gzipped(
    profile: &HeapProfile,
    origin: &Origin,
    redactor: Option<&crate::outputs::redact::Redactor>,
) -> Result<Vec<u8>> {
    let mut message = to_proto(profile, origin);
    if let Some(redactor) = redactor {
        for s in &mut message.string_table {
            *s = redactor.text(s);
        }
    }
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&message.encode_to_vec())?;
    Ok(gz.finish()?)
}

/// A timeline's heap profile (see [`gzipped`]).
pub fn of_timeline(
    timeline: &crate::model::Timeline,
    redactor: Option<&crate::outputs::redact::Redactor>,
) -> Result<Vec<u8>> {
    gzipped(&timeline.profile, &Origin::of(timeline), redactor)
}
