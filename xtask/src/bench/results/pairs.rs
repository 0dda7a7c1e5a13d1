//! The pairs program's section (`pairs`, and `pairs_deep` for the deep stacks).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Every tool timed on one program, and the ratios between them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pairs {
    /// Pairs per timed run.
    pub n: u64,
    pub rounds: usize,
    /// Frames the loop runs down (`None`: in `main`).
    pub depth: Option<u32>,
    /// How the program was built.
    pub program: String,
    /// The tools this program was timed under (`--quick` times fewer deep).
    #[serde(flatten)]
    pub tools: Timings,
    /// Per-round medians, with the rounds' `[min, max]`: present when the
    /// tools they need were timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakscope_vs_floor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakscope_vs_floor_spread: Option<[f64; 2]>,
    /// leakscope's median minus the floor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakscope_own_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_vs_leakscope: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_vs_leakscope_spread: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_vs_floor: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_vs_floor_spread: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_own_vs_leakscope_own: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bcc_memleak_own_vs_leakscope_own_spread: Option<[f64; 2]>,
    /// The kernel's timing of each of the probe's programs (empty when the
    /// `--bpf-stats` run failed).
    pub leakscope_programs: Vec<ProgramStat>,
}

/// One tool on the program.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Timing {
    /// ns per pair, the median over rounds.
    pub ns: Option<f64>,
    /// Why the tool could not run.
    pub skipped: Option<String>,
    /// The rounds' `[min, max]`.
    pub spread_ns: Option<[f64; 2]>,
}

/// The timed tools by their key (`Tool::key`). In the file they sit beside
/// the section's other fields, three per tool: `KEY_ns`, `KEY_skipped` and
/// `KEY_spread_ns` (each `null` when there is no such figure).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Timings(pub BTreeMap<String, Timing>);

impl Timings {
    pub fn get(&self, key: &str) -> Option<&Timing> {
        self.0.get(key)
    }

    /// The tool's median, if it was timed and ran.
    pub fn ns(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|t| t.ns)
    }
}

/// The suffixes of a tool's keys, longest first (`_spread_ns` ends in `_ns`).
const SPREAD: &str = "_spread_ns";
const SKIPPED: &str = "_skipped";
const NS: &str = "_ns";

impl Serialize for Timings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3 * self.0.len()))?;
        for (key, timing) in &self.0 {
            map.serialize_entry(&format!("{key}{NS}"), &timing.ns)?;
            map.serialize_entry(&format!("{key}{SKIPPED}"), &timing.skipped)?;
            map.serialize_entry(&format!("{key}{SPREAD}"), &timing.spread_ns)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Timings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimingsVisitor;
        impl<'de> Visitor<'de> for TimingsVisitor {
            type Value = Timings;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tool's KEY_ns, KEY_skipped and KEY_spread_ns")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Timings, A::Error> {
                let mut tools: BTreeMap<String, Timing> = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let Some((tool, suffix)) = [SPREAD, SKIPPED, NS]
                        .into_iter()
                        .find_map(|suffix| Some((key.strip_suffix(suffix)?, suffix)))
                    else {
                        return Err(serde::de::Error::custom(format!(
                            "unknown field `{key}` in a pairs section"
                        )));
                    };
                    let timing = tools.entry(tool.to_owned()).or_default();
                    match suffix {
                        SPREAD => timing.spread_ns = map.next_value()?,
                        SKIPPED => timing.skipped = map.next_value()?,
                        _ => timing.ns = map.next_value()?,
                    }
                }
                Ok(Timings(tools))
            }
        }
        deserializer.deserialize_map(TimingsVisitor)
    }
}

/// One eBPF program's figures from a `--bpf-stats` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProgramStat {
    pub program: String,
    pub runs: u64,
    /// Mean time per run, as the kernel timed it.
    pub ns_per_run: f64,
    /// Instructions the verifier processed to load it (the kernel refuses a
    /// program past 1 M); `None` where the kernel does not say.
    pub verified_insns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_three_keys_make_one_timing() {
        let pairs = serde_json::json!({
            "n": 10, "rounds": 1, "depth": null, "program": "p",
            "floor_ns": 2.5, "floor_skipped": null, "floor_spread_ns": [2.0, 3.0],
            "bcc_memleak_ns": null, "bcc_memleak_skipped": "no bcc", "bcc_memleak_spread_ns": null,
            "leakscope_own_ns": 1.0,
            "leakscope_programs": [],
        });
        let typed: Pairs = serde_json::from_value(pairs.clone()).unwrap();
        assert_eq!(typed.leakscope_own_ns, Some(1.0));
        assert_eq!(typed.tools.0.len(), 2);
        assert_eq!(typed.tools.ns("floor"), Some(2.5));
        assert_eq!(
            typed.tools.get("bcc_memleak").unwrap().skipped.as_deref(),
            Some("no bcc")
        );
        assert_eq!(
            typed.tools.get("floor").unwrap().spread_ns,
            Some([2.0, 3.0])
        );
        assert_eq!(serde_json::to_value(&typed).unwrap(), pairs);
    }
}
