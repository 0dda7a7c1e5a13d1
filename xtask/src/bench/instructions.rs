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
    let mut sampled_over_off = BTreeMap::new();
    let mut recorded_per_session = BTreeMap::new();
    for composition in COMPOSITIONS {
        let mut off = None;
        for tool in TOOLS {
            let (ir, functions, recorded) = one_run(env, composition, tool)
                .with_context(|| format!("{composition}: {}", tool.key()))?;
            if let Some(recorded) = recorded {
                recorded_per_session.insert(composition.to_owned(), recorded);
            }
            match tool {
                ServerTool::CooperativeOff => off = Some((ir, functions)),
                ServerTool::CooperativeSampled => {
                    if let Some((off_ir, off_functions)) = &off {
                        sampled_over_off.insert(
                            composition.to_owned(),
                            parts_over(ir - off_ir, &functions, off_functions),
                        );
                    }
                }
                _ => {}
            }
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
        sampled_over_off,
        recorded_per_session,
    })
}

/// What a sampled recording of `sessions` sessions held per session: blocks
/// recorded whole, sampled allocations, frees.
fn recorded(recording: &Path, sessions: u64) -> Result<BTreeMap<String, f64>> {
    use leakscope_recording::Record;
    let mut counts = BTreeMap::from([
        ("whole".to_owned(), 0.0),
        ("sampled".to_owned(), 0.0),
        ("frees".to_owned(), 0.0),
    ]);
    let reader = leakscope_recording::segments::Chain::open(recording)?;
    for record in reader {
        let key = match record {
            Record::WholeAlloc { .. } | Record::WholeAllocInPoll { .. } => "whole",
            Record::Alloc { .. } | Record::Realloc { .. } => "sampled",
            Record::Free { .. } => "frees",
            _ => continue,
        };
        *counts.get_mut(key).expect("listed above") += 1.0 / sessions.max(1) as f64;
    }
    Ok(counts)
}

/// The parts a recording's instructions are sorted into, by function name
/// (file and function, as callgrind_annotate prints them); the first that
/// matches takes the function. What none takes is "the rest".
const PARTS: &[(&str, &[&str])] = &[
    (
        "the allocator's calls (mode, countdown, pointer test)",
        &[
            "__rust_alloc",
            "__rust_dealloc",
            "__rust_realloc",
            "leakscope_inproc::alloc::",
            "leakscope_inproc::sampled::",
        ],
    ),
    (
        "tracing (the spans and events the preset follows)",
        &[
            "tracing_subscriber",
            "tracing_core",
            "sharded_slab",
            "tracing::",
        ],
    ),
    ("the session layer and the recorder", &["leakscope_inproc"]),
    (
        "the writer (encoding, compressing)",
        &["leakscope_recording", "postcard", "zstd"],
    ),
    (
        "libc's malloc and copies (the recorder's own memory)",
        &["malloc.c", "arena.c", "memmove", "memcpy", "memset"],
    ),
];

/// `extra` instructions per session (sampled over off) by part: each
/// function's self cost in `sampled` less its cost in `off`, per session.
fn parts_over(
    extra: f64,
    sampled: &BTreeMap<String, f64>,
    off: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let mut parts: BTreeMap<String, f64> = BTreeMap::new();
    for (function, cost) in sampled {
        let Some((part, _)) = PARTS
            .iter()
            .find(|(_, names)| names.iter().any(|n| function.contains(n)))
        else {
            continue;
        };
        let over = cost - off.get(function).copied().unwrap_or(0.0);
        *parts.entry((*part).to_owned()).or_default() += over;
    }
    for (function, cost) in off {
        if !sampled.contains_key(function)
            && let Some((part, _)) = PARTS
                .iter()
                .find(|(_, names)| names.iter().any(|n| function.contains(n)))
        {
            *parts.entry((*part).to_owned()).or_default() -= cost;
        }
    }
    let sorted: f64 = parts.values().sum();
    parts.insert("the rest".to_owned(), extra - sorted);
    parts
}

/// Each function's self cost per session in a dump (callgrind_annotate's
/// exclusive listing; functions the tool lists as a recursion's cycle, whose
/// "self" is most of the program, are left out).
fn functions_of(dump: &Path, sessions: u64) -> Result<BTreeMap<String, f64>> {
    let output = Command::new("callgrind_annotate")
        .args(["--inclusive=no", "--auto=no", "--threshold=100"])
        .arg(dump)
        .output()
        .context("callgrind_annotate")?;
    Ok(parse_functions(
        &String::from_utf8_lossy(&output.stdout),
        sessions,
    ))
}

fn parse_functions(text: &str, sessions: u64) -> BTreeMap<String, f64> {
    let mut functions = BTreeMap::new();
    for line in text.lines() {
        // `  1,234 ( 0.12%)  file:function [object]`
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(" (") else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let Some((percent, name)) = rest.split_once("%)") else {
            continue;
        };
        let percent: f64 = percent.trim().parse().unwrap_or(100.0);
        let name = name.trim();
        let name = name.rsplit_once(" [").map_or(name, |(n, _)| n);
        if percent >= 50.0 || name == "PROGRAM TOTALS" {
            continue;
        }
        *functions.entry(name.to_owned()).or_insert(0.0) += count as f64 / sessions as f64;
    }
    functions
}

/// Instructions per session of `tool` serving `composition`, and each
/// function's share: counters zeroed after a warm-up, dumped after
/// [`SESSIONS`] sessions.
#[allow(clippy::type_complexity)]
fn one_run(
    env: &ServerEnv,
    composition: &str,
    tool: ServerTool,
) -> Result<(f64, BTreeMap<String, f64>, Option<BTreeMap<String, f64>>)> {
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
    let recorded_counts = match probe {
        Some(probe) => {
            stop(probe)?;
            Some(recorded(
                &env.scratch.join("callgrind.lsrec"),
                WARM_UP + created,
            )?)
        }
        None => None,
    };
    server.finish()?;
    let total = dumped_total(&dir)?;
    let dump = dir.join("callgrind.out.1");
    let functions = functions_of(&dump, created.max(1))?;
    // Kept for `callgrind_annotate`, one per run: where a change went.
    let kept = env
        .scratch
        .join(format!("callgrind-{composition}-{}.out", tool.key()));
    std::fs::copy(&dump, &kept).with_context(|| format!("cannot keep {}", kept.display()))?;
    Ok((
        total as f64 / created.max(1) as f64,
        functions,
        recorded_counts,
    ))
}

/// `count` sessions, 4 at a time (the server runs ~50x slower under
/// callgrind); returns how many were made.
fn churn(env: &ServerEnv, url: &str, count: u64) -> Result<u64> {
    let output = Command::new(env.bin.join("churn"))
        .args(["--url", url, "--rate", "1000000", "--concurrency", "4"])
        .args(["--count", &count.to_string(), "--max-time", "600s"])
        .args(["--calls", &env.calls.to_string()])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampled_runs_extra_instructions_are_sorted_into_parts() {
        let off = parse_functions(
            "135,590,605 (100.0%)  PROGRAM TOTALS\n\
             135,502,754 (99.94%)  clone.S:clone [/usr/lib/libc.so.6]\n\
             1,000 ( 0.01%)  /work/inproc/src/alloc.rs:__rustc::__rust_alloc [/srv]\n\
             3,000 ( 0.02%)  ./malloc/./malloc/malloc.c:_int_malloc [/usr/lib/libc.so.6]\n",
            10,
        );
        let sampled = parse_functions(
            "1,500 ( 0.01%)  /work/inproc/src/alloc.rs:__rustc::__rust_alloc [/srv]\n\
             3,500 ( 0.02%)  ./malloc/./malloc/malloc.c:_int_malloc [/usr/lib/libc.so.6]\n\
             2,000 ( 0.02%)  tracing-core/src/dispatcher.rs:tracing_core::dispatcher::get_default [/srv]\n",
            10,
        );
        assert_eq!(
            off.len(),
            2,
            "totals and a cycle's line are left out: {off:?}"
        );
        let parts = parts_over(400.0, &sampled, &off);
        let part = |prefix: &str| {
            parts
                .iter()
                .find(|(k, _)| k.starts_with(prefix))
                .map(|(_, v)| *v)
        };
        assert_eq!(part("the allocator"), Some(50.0));
        assert_eq!(part("libc"), Some(50.0));
        assert_eq!(part("tracing"), Some(200.0));
        assert_eq!(part("the rest"), Some(100.0));
    }
}
