//! The server under load: `fixture-server --composition leaky` driven by
//! `churn` at 10, 100 and 200 sessions/s and at saturation, with nothing attached
//! and under each tool a user would reach for. One server per tool; the loads run on
//! it in that order, so every tool sees the same history (the leaky map grows
//! the same way under each).
//!
//! Per load: sessions/s achieved, request latency (p50/p99, as `churn` times
//! each request to the end of its reply), the target's CPU per session (eBPF
//! programs run in the target's context, so the probe's in-kernel time is in
//! it), the tool's own processes' CPU, and per tool the events it lost. Then
//! where the probe's time goes on this server: its CPU against the uprobe
//! floor's, and the kernel's timing of each program.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use leakscope_fixtures::churn::ChurnReport;

use super::pairs::{BccMemleak, attach, attach_with, parse_bpf_stats, stop};
use super::results::{
    CpuPerSession, LoadRow, Outcome, ServerLoad, ServerProgram, ServerPrograms, ToolLoads,
};
use crate::procs::{cpu_seconds, descendant_named, tree_cpu_seconds};

/// Who watches the server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ServerTool {
    Unprobed,
    Leakscope,
    BccMemleak,
    Heaptrack,
    InProcess,
    Cooperative,
    /// The cooperative allocator switched on sampled (`attach --sample`).
    CooperativeSampled,
    /// The cooperative build with nothing attached (the saturation rounds
    /// only): what carrying it costs, apart from switching it on.
    CooperativeOff,
    /// The eBPF probe, sampling (`attach --sample`).
    LeakscopeSampled,
}

impl ServerTool {
    pub(super) const ALL: [ServerTool; 8] = [
        ServerTool::Unprobed,
        ServerTool::Leakscope,
        ServerTool::LeakscopeSampled,
        ServerTool::BccMemleak,
        ServerTool::Heaptrack,
        ServerTool::InProcess,
        ServerTool::Cooperative,
        ServerTool::CooperativeSampled,
    ];

    pub(super) fn key(self) -> &'static str {
        match self {
            ServerTool::Unprobed => "unprobed",
            ServerTool::Leakscope => "leakscope",
            ServerTool::BccMemleak => "bcc_memleak",
            ServerTool::Heaptrack => "heaptrack",
            ServerTool::InProcess => "in_process",
            ServerTool::Cooperative => "cooperative",
            ServerTool::CooperativeSampled => "cooperative_sampled",
            ServerTool::CooperativeOff => "cooperative_off",
            ServerTool::LeakscopeSampled => "leakscope_sampled",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            ServerTool::Unprobed => "nothing attached",
            ServerTool::Leakscope => "leakscope probe (attached by pid)",
            ServerTool::BccMemleak => "bcc memleak (attached by pid)",
            ServerTool::Heaptrack => "heaptrack (started with the server)",
            ServerTool::InProcess => "in-process mode (`--record`, dhat-backed)",
            ServerTool::Cooperative => {
                "cooperative allocator (`fixture-server-cooperative`), switched on by attach"
            }
            ServerTool::CooperativeSampled => {
                "cooperative allocator, switched on sampled (`attach --sample`, 512 KiB)"
            }
            ServerTool::CooperativeOff => {
                "cooperative allocator (`fixture-server-cooperative`), nothing attached"
            }
            ServerTool::LeakscopeSampled => {
                "leakscope probe, sampling (`attach --pid PID --sample`, 512 KiB)"
            }
        }
    }
}

/// The load points of a full run, in the order they run: sessions/s, or
/// `None` for as fast as `churn` can go.
pub(super) const LOADS: [Option<f64>; 4] = [Some(10.0), Some(100.0), Some(200.0), None];

/// `--quick`'s: the goal's load, one between, saturation.
pub(super) const QUICK_LOADS: [Option<f64>; 3] = [Some(10.0), Some(100.0), None];

/// The load points a section was measured at (its `rates`, then saturation).
pub(super) fn loads_of(server: &ServerLoad) -> Vec<Option<f64>> {
    server
        .rates
        .iter()
        .copied()
        .map(Some)
        .chain([None])
        .collect()
}

/// Sessions in flight at most, at every load.
const IN_FLIGHT: usize = 16;

pub(super) fn load_key(load: Option<f64>) -> String {
    load.map_or("saturation".into(), |rate| format!("{rate:.0}_per_s"))
}

/// What the section needs.
pub(super) struct ServerEnv<'a> {
    /// `fixture-server` and `churn` (release).
    pub bin: &'a Path,
    /// `fixture-server` built with `--features dhat-heap`.
    pub inproc_server: &'a Path,
    pub probe: &'a Path,
    pub scratch: &'a Path,
    /// Seconds per load point.
    pub seconds: u64,
    /// [`LOADS`] or [`QUICK_LOADS`].
    pub loads: &'a [Option<f64>],
    /// `tools/call`s a churned session sends (`churn --calls`).
    pub calls: u32,
}

/// Every tool at every load, or why the tool was skipped.
pub(super) fn server_load(env: &ServerEnv) -> Result<ServerLoad> {
    let mut tools = BTreeMap::new();
    for tool in ServerTool::ALL {
        let row = run_tool(env, tool);
        if let Err(why) = &row {
            eprintln!("server: skipping {}: {why:#}", tool.key());
        }
        tools.insert(tool.key().into(), Outcome::of(row));
    }
    Ok(ServerLoad {
        seconds_per_load: env.seconds,
        rates: env.loads.iter().flatten().copied().collect(),
        saturation_concurrency: IN_FLIGHT,
        server: "fixture-server --composition leaky --keep-alive 5s".into(),
        tools,
    })
}

/// Where the probe's time goes on the server, at 100 sessions/s: the server's
/// CPU per session with nothing attached, with no-op programs at the probe's
/// attach points (`--bare`: the uprobe traps alone) and with the probe, and
/// the kernel's timing of each of the probe's programs (`--bpf-stats`, which
/// adds its own clock reads: the probe row here is a little above the table's).
pub(super) fn server_programs(env: &ServerEnv) -> Result<ServerPrograms> {
    const RATE: f64 = 100.0;
    let mut cpu = CpuPerSession::default();
    let mut programs = Vec::new();
    for (key, extra) in [
        ("unprobed", None),
        ("floor", Some("--bare")),
        ("leakscope", Some("--bpf-stats")),
    ] {
        let mut command = Command::new(env.bin.join("fixture-server"));
        command.args(["--composition", "leaky", "--keep-alive", "5s"]);
        let server = Server::start(command)?;
        let recording = env.scratch.join(format!("server-programs-{key}.lsrec"));
        let mut probe = match extra {
            Some(arg) => Some(attach_with(
                env.probe,
                server.pid,
                &recording,
                &[arg],
                true,
            )?),
            None => None,
        };
        let before = cpu_seconds(server.pid);
        let report = churn(env, &server.url, Some(RATE))?;
        let used = cpu_seconds(server.pid) - before;
        let sessions = (report.created as f64).max(1.0);
        if let Some(mut child) = probe.take() {
            let stderr = child.take_stderr().expect("piped");
            stop(child)?;
            if key == "leakscope" {
                for stat in parse_bpf_stats(stderr)? {
                    programs.push(ServerProgram {
                        runs_per_session: stat.runs as f64 / sessions,
                        ns_per_run: stat.ns_per_run,
                        us_per_session: stat.runs as f64 * stat.ns_per_run / sessions / 1e3,
                        program: stat.program,
                    });
                }
            }
        }
        server.finish()?;
        let _ = std::fs::remove_file(&recording);
        eprintln!(
            "server programs: {key}: {:.2} ms CPU per session",
            used * 1e3 / sessions
        );
        let ms = match key {
            "unprobed" => &mut cpu.unprobed,
            "floor" => &mut cpu.floor,
            _ => &mut cpu.leakscope,
        };
        *ms = used * 1e3 / sessions;
    }
    let vs_floor = (cpu.leakscope - cpu.unprobed) / (cpu.floor - cpu.unprobed);
    Ok(ServerPrograms {
        rate: RATE,
        seconds: env.seconds,
        server_cpu_ms_per_session: cpu,
        leakscope_vs_floor: vs_floor.is_finite().then_some(vs_floor),
        programs,
    })
}

pub(super) fn run_tool(env: &ServerEnv, tool: ServerTool) -> Result<ToolLoads> {
    let recording = env.scratch.join(format!("server-{}.lsrec", tool.key()));
    let _ = std::fs::remove_file(&recording);
    let args = ["--composition", "leaky", "--keep-alive", "5s"];
    let server = match tool {
        ServerTool::Heaptrack => {
            let mut wrapper = Command::new("heaptrack");
            wrapper
                .arg("-o")
                .arg(env.scratch.join("heaptrack.server"))
                .arg(env.bin.join("fixture-server"))
                .args(args);
            Server::start(wrapper).context("heaptrack (apt-get install heaptrack)")?
        }
        ServerTool::InProcess => {
            let mut command = Command::new(env.inproc_server);
            command.args(args).arg("--record").arg(&recording);
            Server::start(command)?
        }
        ServerTool::Cooperative | ServerTool::CooperativeSampled | ServerTool::CooperativeOff => {
            let mut command = Command::new(env.bin.join("fixture-server-cooperative"));
            command.args(args);
            Server::start_as(command, "fixture-server-cooperative")?
        }
        _ => {
            let mut command = Command::new(env.bin.join("fixture-server"));
            command.args(args);
            Server::start(command)?
        }
    };
    let watcher = match tool {
        // The same attach: the probe finds the cooperative allocator's
        // control socket and records through it, no eBPF.
        ServerTool::Leakscope | ServerTool::Cooperative => {
            Watcher::Probe(attach(env.probe, server.pid, &recording, false)?)
        }
        ServerTool::CooperativeSampled | ServerTool::LeakscopeSampled => Watcher::Probe(
            attach_with(env.probe, server.pid, &recording, &["--sample"], false)?,
        ),
        ServerTool::BccMemleak => {
            Watcher::Bcc(BccMemleak::attach(server.pid, env.scratch).map_err(anyhow::Error::msg)?)
        }
        _ => Watcher::None,
    };
    // The tool's own processes, whose CPU is the tool's: the probe, bcc's
    // python, heaptrack's interpreter and compressor (the script's other children).
    let tool_root = match (&watcher, tool) {
        (Watcher::Probe(child), _) => Some(child.pid()),
        (Watcher::Bcc(bcc), _) => Some(bcc.pid()),
        (_, ServerTool::Heaptrack) => Some(server.child.id()),
        _ => None,
    };
    let mut loads = BTreeMap::new();
    for &load in env.loads {
        let server_cpu = cpu_seconds(server.pid);
        let tool_cpu = tool_root.map(|root| tree_cpu_seconds(root, server.pid));
        let report = churn(env, &server.url, load)?;
        let created = report.created as f64;
        let server_cpu = cpu_seconds(server.pid) - server_cpu;
        let tool_cpu =
            tool_root.map(|root| tree_cpu_seconds(root, server.pid) - tool_cpu.unwrap_or(0.0));
        let sessions_per_s = created / report.elapsed_s;
        let row = LoadRow {
            sessions: created,
            failed: report.failed,
            sessions_per_s: sessions_per_s.is_finite().then_some(sessions_per_s),
            latency_p50_ms: report.latency_p50_ms,
            latency_p99_ms: report.latency_p99_ms,
            server_cpu_ms_per_session: server_cpu * 1e3 / created.max(1.0),
            tool_cpu_s: tool_cpu,
        };
        eprintln!(
            "server: {} at {}: {}",
            tool.key(),
            load_key(load),
            serde_json::to_string(&row)?
        );
        loads.insert(load_key(load), row);
    }
    match watcher {
        Watcher::Probe(child) => stop(child)?,
        Watcher::Bcc(bcc) => bcc.stop(),
        Watcher::None => {}
    }
    server.finish()?;
    let lost = match tool {
        ServerTool::Leakscope
        | ServerTool::LeakscopeSampled
        | ServerTool::InProcess
        | ServerTool::Cooperative
        | ServerTool::CooperativeSampled => Some(lost_events(&recording)?),
        _ => None,
    };
    let _ = std::fs::remove_file(&recording);
    let _ = std::fs::remove_file(recording.with_file_name("dhat-heap.json"));
    Ok(ToolLoads {
        loads,
        lost_events: lost,
    })
}

enum Watcher {
    None,
    Probe(leakscope_fixtures::process::ProbeProcess),
    Bcc(BccMemleak),
}

/// One load point: `churn`'s JSON report.
fn churn(env: &ServerEnv, url: &str, load: Option<f64>) -> Result<ChurnReport> {
    let mut command = Command::new(env.bin.join("churn"));
    command.args(["--url", url]);
    command.args(["--max-time", &format!("{}s", env.seconds)]);
    match load {
        Some(rate) => {
            let count = (rate * env.seconds as f64).round() as u64;
            command.args(["--rate", &rate.to_string(), "--count", &count.to_string()]);
        }
        None => {
            command.args(["--rate", "1000000", "--count", "100000000"]);
        }
    }
    // The same bound at every load, so that a rated load is held back by the
    // server alone (with churn's default of 8, 200/s stalled at ~175/s).
    command.args(["--concurrency", &IN_FLIGHT.to_string()]);
    command.args(["--calls", &env.calls.to_string()]);
    // churn exits non-zero when it stops short of --count, which saturation
    // always does: its JSON line is the result either way.
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line)
        .with_context(|| format!("churn printed {line:?} ({})", output.status))
}

/// A `fixture-server`, maybe under a wrapper that starts it (heaptrack).
pub(super) struct Server {
    /// What was started (the server itself, or its wrapper).
    child: Child,
    /// The server process.
    pub(super) pid: u32,
    pub(super) url: String,
}

impl Server {
    fn start(command: Command) -> Result<Self> {
        Self::start_as(command, "fixture-server")
    }

    /// Starts `command`, a wrapper that runs the server in its own process
    /// (valgrind): the process started is the server.
    pub(super) fn start_wrapped(command: Command) -> Result<Self> {
        let (child, url) = Self::spawn(command)?;
        let pid = child.id();
        Ok(Self { child, pid, url })
    }

    /// Starts `command`, whose process (or a descendant's: a wrapper such as
    /// heaptrack) named `program` is the server.
    fn start_as(command: Command, program: &str) -> Result<Self> {
        let (child, url) = Self::spawn(command)?;
        let pid = descendant_named(child.id(), program)
            .with_context(|| format!("cannot find the {program} process"))?;
        Ok(Self { child, pid, url })
    }

    /// Starts `command` and reads the server's URL from its first line.
    fn spawn(mut command: Command) -> Result<(Child, String)> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut output = BufReader::new(child.stdout.take().expect("piped"));
        let url = super::wait_for_line(
            &mut child,
            &mut output,
            "fixture-server's `listening on` line",
            |line| line.strip_prefix("listening on ").map(str::to_owned),
        )?;
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || output.lines().for_each(drop));
        Ok((child, url))
    }

    /// SIGTERM to the server (it finishes its outputs), then waits for what was started.
    pub(super) fn finish(mut self) -> Result<()> {
        // SAFETY: plain kill(2) on our own (grand)child.
        unsafe { crate::demo::libc_kill(self.pid as i32, 15) };
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the server (or its wrapper) exited with {status}");
        }
        Ok(())
    }
}

/// Events a recording says it dropped.
fn lost_events(path: &Path) -> Result<u64> {
    use leakscope_recording::{Record, RecordingReader};
    let reader =
        RecordingReader::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(reader
        .filter_map(|r| match r {
            Record::Lost { count, .. } => Some(count),
            _ => None,
        })
        .sum())
}

/// Builds `fixture-server` with the in-process mode, in its own target directory
/// (the in-process `alloc-bench` shares it).
pub(super) fn build_inproc_server(target: &Path) -> Result<PathBuf> {
    crate::shell::cargo(&[
        "build",
        "--release",
        "-p",
        "leakscope-fixtures",
        "--features",
        "dhat-heap",
        "--bin",
        "fixture-server",
        "--target-dir",
        &target.to_string_lossy(),
    ])?;
    Ok(target.join("release/fixture-server"))
}
