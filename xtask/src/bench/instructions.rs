//! Instructions per session under callgrind: the cost of the cooperative
//! build, off and sampled, without this machine's noise.
//!
//! The saturation rounds measure what a user feels (sessions/s kept), but on
//! this 2-core machine an unprobed server's saturation runs spread from
//! ~2000 to ~4000 sessions/s within minutes, wider than the few percent the
//! always-on goal is about. Instructions retired per session, counted by
//! callgrind over the same churn, come out within ~0.5% run to run: they
//! tell whether a change to the recorder's path made it cheaper. They count
//! work, not time (no lock waits, no cache misses, the writer thread's work
//! included), so they complement the rounds and do not replace them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::pairs::{attach_with, stop};
use super::results::ServerInstructions;
use super::server::{Server, ServerEnv, ServerTool};

/// Sessions counted per run, after [`WARM_UP`] that are not.
const SESSIONS: u64 = 500;
const WARM_UP: u64 = 30;

/// The compositions measured: the hand-composed fixture the rounds run, and
/// rmcp's stock service (no application span of its own).
const COMPOSITIONS: [&str; 2] = ["leaky", "service"];

const TOOLS: [ServerTool; 3] = [
    ServerTool::Unprobed,
    ServerTool::CooperativeOff,
    ServerTool::CooperativeSampled,
];

/// Every tool of [`TOOLS`] on every composition, side by side.
pub(super) fn instructions(env: &ServerEnv) -> Result<ServerInstructions> {
    let valgrind = Command::new("callgrind_control").arg("--version").output();
    if !valgrind.is_ok_and(|o| o.status.success()) {
        bail!("callgrind_control not found (apt-get install valgrind)");
    }
    let mut per_session: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for composition in COMPOSITIONS {
        for tool in TOOLS {
            let ir = one_run(env, composition, tool)
                .with_context(|| format!("{composition}: {}", tool.key()))?;
            eprintln!(
                "instructions: {composition}: {}: {ir:.0} per session",
                tool.key()
            );
            per_session
                .entry(composition.into())
                .or_default()
                .insert(tool.key().into(), ir);
        }
    }
    let vs_unprobed = per_session
        .iter()
        .map(|(composition, tools)| {
            let unprobed = tools[ServerTool::Unprobed.key()];
            let ratios = tools
                .iter()
                .filter(|(tool, _)| *tool != ServerTool::Unprobed.key())
                .map(|(tool, ir)| (tool.clone(), ir / unprobed))
                .collect();
            (composition.clone(), ratios)
        })
        .collect();
    Ok(ServerInstructions {
        sessions: SESSIONS,
        per_session,
        vs_unprobed,
    })
}

/// Instructions per session of `tool` serving `composition`: counters zeroed
/// after a warm-up, dumped after [`SESSIONS`] sessions.
fn one_run(env: &ServerEnv, composition: &str, tool: ServerTool) -> Result<f64> {
    let dir = env.scratch.join("callgrind");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("callgrind.out");
    let binary = match tool {
        ServerTool::Unprobed => "fixture-server",
        _ => "fixture-server-cooperative",
    };
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--dump-instr=no")
        .arg(env.bin.join(binary))
        .args(["--composition", composition, "--keep-alive", "5s"]);
    // valgrind runs the server in its own process: the pid is the server's.
    let server = Server::start_wrapped(command)?;
    let probe = match tool {
        ServerTool::CooperativeSampled => Some(attach_with(
            env.probe,
            server.pid,
            &env.scratch.join("callgrind.lsrec"),
            &["--sample"],
            false,
        )?),
        _ => None,
    };
    churn(env, &server.url, WARM_UP)?;
    callgrind_control("-z", server.pid)?;
    let created = churn(env, &server.url, SESSIONS)?;
    callgrind_control("-d", server.pid)?;
    if let Some(probe) = probe {
        stop(probe)?;
    }
    server.finish()?;
    let total = dumped_total(&dir)?;
    Ok(total as f64 / created.max(1) as f64)
}

/// `count` sessions, 4 at a time (the server runs ~50x slower under
/// callgrind); returns how many were made.
fn churn(env: &ServerEnv, url: &str, count: u64) -> Result<u64> {
    let output = Command::new(env.bin.join("churn"))
        .args(["--url", url, "--rate", "1000000", "--concurrency", "4"])
        .args(["--count", &count.to_string(), "--max-time", "600s"])
        .output()
        .context("churn")?;
    let last = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    let report: leakscope_fixtures::churn::ChurnReport =
        serde_json::from_str(&last).with_context(|| format!("churn said {last:?}"))?;
    Ok(report.created)
}

fn callgrind_control(option: &str, pid: u32) -> Result<()> {
    let status = Command::new("callgrind_control")
        .arg(option)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        bail!("callgrind_control {option} {pid}: {status}");
    }
    Ok(())
}

/// The instructions of the dump `callgrind_control -d` wrote (the first
/// dump in `dir`, `callgrind.out.1`: the counters since they were zeroed).
fn dumped_total(dir: &Path) -> Result<u64> {
    let dump = dir.join("callgrind.out.1");
    let text = std::fs::read_to_string(&dump)
        .with_context(|| format!("cannot read {}", dump.display()))?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix("summary:")
                .or_else(|| line.strip_prefix("totals:"))
        })
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("no totals in {}", dump.display()))
}
