//! Saturation side by side, in rounds: what the sampled modes keep of the
//! unprobed server's throughput.
//!
//! The server section runs each tool once through its loads, and on this
//! 2-core machine two back-to-back 10 s saturation runs of the same unprobed
//! server differed by up to 20% (2498 and 3115 sessions/s), more than the
//! 3% the always-on goal is about. So, as the pairs section does for its
//! tools, each round here starts a fresh server per tool, the tools
//! alternating (the order reversed every other round, so a drift across a
//! round falls on each tool alike), and a tool's ratio is taken within its
//! round; the median of the rounds is the figure, their range its spread.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use super::results::{RoundRatio, SaturationRounds};
use super::server::{ServerEnv, ServerTool, load_key, run_tool};
use super::{median, min};

/// The tools compared, the reference first.
const TOOLS: [ServerTool; 4] = [
    ServerTool::Unprobed,
    ServerTool::CooperativeOff,
    ServerTool::CooperativeSampled,
    ServerTool::LeakscopeSampled,
];

/// `rounds` rounds of every tool in [`TOOLS`] at saturation for
/// `env.seconds` each.
pub(super) fn saturation_rounds(env: &ServerEnv, rounds: usize) -> Result<SaturationRounds> {
    let saturation = [None];
    let env = ServerEnv {
        loads: &saturation,
        ..*env
    };
    let mut sessions_per_s: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut tool_cpu: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for round in 0..rounds {
        let mut order = TOOLS.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for tool in order {
            let run =
                run_tool(&env, tool).with_context(|| format!("round {round}: {}", tool.key()))?;
            let row = run
                .loads
                .get(&load_key(None))
                .context("no saturation row")?;
            let rate = row.sessions_per_s.context("churn reported no time")?;
            let tool_ms = row.tool_cpu_s.map(|s| s * 1e3 / row.sessions.max(1.0));
            eprintln!(
                "saturation round {round}: {}: {rate:.0} sessions/s, {:.3} ms CPU per session{}",
                tool.key(),
                row.server_cpu_ms_per_session,
                tool_ms
                    .map(|ms| format!(" (and {ms:.3} ms in the tool's own process)"))
                    .unwrap_or_default()
            );
            if let Some(ms) = tool_ms {
                tool_cpu.entry(tool.key().into()).or_default().push(ms);
            }
            sessions_per_s
                .entry(tool.key().into())
                .or_default()
                .push(rate);
            cpu.entry(tool.key().into())
                .or_default()
                .push(row.server_cpu_ms_per_session);
        }
    }
    let reference = sessions_per_s[ServerTool::Unprobed.key()].clone();
    let vs_unprobed = TOOLS[1..]
        .iter()
        .map(|tool| {
            let ratios: Vec<f64> = sessions_per_s[tool.key()]
                .iter()
                .zip(&reference)
                .map(|(rate, unprobed)| rate / unprobed)
                .collect();
            let ratio = RoundRatio {
                median: median(ratios.clone()),
                min: min(&ratios),
                max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            };
            (tool.key().to_string(), ratio)
        })
        .collect();
    Ok(SaturationRounds {
        seconds: env.seconds,
        rounds,
        sessions_per_s,
        server_cpu_ms_per_session: cpu,
        tool_cpu_ms_per_session: tool_cpu,
        vs_unprobed,
    })
}
