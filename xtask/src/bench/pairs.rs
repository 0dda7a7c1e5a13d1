//! The pairs program under each tool.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use leakscope_fixtures::process::ProbeProcess;

use super::results::ProgramStat;
use crate::shell::workspace_root;

/// What runs the pairs program.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Tool {
    Unprobed,
    Floor,
    Leakscope,
    /// The probe sampling at the default mean (`--sample`): only sampled
    /// allocations walk their stack.
    LeakscopeSampled,
    BccMemleak,
    Heaptrack,
    ValgrindDhat,
}

/// Frames the deep-stack runs add below `main`: with the loop's own and
/// libc's, more than the 32 frames leakscope records.
pub(super) const DEEP_STACK_DEPTH: u32 = 30;

impl Tool {
    /// The tools timed on the deep-stack program: those that record stacks
    /// (valgrind's DHAT is left out to keep the run short).
    pub(super) const STACK_WALKERS: [Tool; 5] = [
        Tool::Unprobed,
        Tool::Floor,
        Tool::Leakscope,
        Tool::BccMemleak,
        Tool::Heaptrack,
    ];

    pub(super) const ALL: [Tool; 6] = [
        Tool::Unprobed,
        Tool::Floor,
        Tool::Leakscope,
        Tool::BccMemleak,
        Tool::Heaptrack,
        Tool::ValgrindDhat,
    ];

    /// The key in `results.json` (`pairs.<key>_ns`).
    pub(super) fn key(self) -> &'static str {
        match self {
            Tool::Unprobed => "unprobed",
            Tool::Floor => "floor",
            Tool::Leakscope => "leakscope",
            Tool::LeakscopeSampled => "leakscope_sampled",
            Tool::BccMemleak => "bcc_memleak",
            Tool::Heaptrack => "heaptrack",
            Tool::ValgrindDhat => "valgrind_dhat",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Tool::Unprobed => "nothing attached",
            Tool::Floor => "no-op uprobes at the same points (the floor)",
            Tool::Leakscope => "leakscope probe (attached by pid)",
            Tool::LeakscopeSampled => "leakscope probe sampling (`--sample`, 512 KiB)",
            Tool::BccMemleak => "bcc memleak (attached by pid)",
            Tool::Heaptrack => "heaptrack (started with the program)",
            Tool::ValgrindDhat => "valgrind --tool=dhat (started with the program)",
        }
    }

    /// How to run it by hand (PAIRS is the built `bench/tools/pairs.c`).
    pub(super) fn command(self) -> &'static str {
        match self {
            Tool::Unprobed => "`PAIRS N`",
            Tool::Floor => "`PAIRS --wait N` + `leakscope-probe attach --pid PID --bare`",
            Tool::Leakscope => "`PAIRS --wait N` + `leakscope-probe attach --pid PID`",
            Tool::LeakscopeSampled => {
                "`PAIRS --wait N` + `leakscope-probe attach --pid PID --sample`"
            }
            Tool::BccMemleak => "`PAIRS --wait N` + `memleak-bpfcc -p PID 3600`",
            Tool::Heaptrack => "`heaptrack PAIRS N`",
            Tool::ValgrindDhat => "`valgrind --tool=dhat PAIRS N`",
        }
    }
}

/// What the run needs.
pub(super) struct Env {
    pub(super) pairs_bin: PathBuf,
    /// The flags it was built with, beside `cc -O1`.
    pub(super) flags: &'static [&'static str],
    /// `leakscope-probe attach --unwind`: how leakscope walks its stacks
    /// (the program is too small for the probe to tell from its code
    /// whether it keeps frame pointers, so the deep runs say it).
    pub(super) unwind: &'static str,
    /// `--depth`: how many frames down the loop runs (`None`: in `main`).
    pub(super) depth: Option<u32>,
    pub(super) probe: PathBuf,
    pub(super) scratch: PathBuf,
}

impl Env {
    /// The pairs program's arguments for `n` pairs.
    fn args(&self, n: u64) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(depth) = self.depth {
            args.extend(["--depth".to_owned(), depth.to_string()]);
        }
        args.push(n.to_string());
        args
    }

    /// A scratch file of this program's runs (`stem-pairs.lsrec`,
    /// `stem-pairs-fp.lsrec`, ...: one per program built).
    pub(super) fn recording(&self, stem: &str) -> PathBuf {
        let program = self
            .pairs_bin
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.scratch.join(format!("{stem}-{program}.lsrec"))
    }
}

/// How the program without frame pointers is built: as `cc -O1` builds by
/// default on x86-64, said out loud, with its tail calls kept as calls (so
/// that its stack has the depth asked for, as the frame-pointer build's).
/// leakscope walks it by the tables it compiles from its `.eh_frame`.
pub(super) const NO_FRAME_POINTER_FLAGS: [&str; 2] =
    ["-fomit-frame-pointer", "-fno-optimize-sibling-calls"];

/// How the deep-stack program is built: with frame pointers, as leakscope asks
/// of the servers it probes, so that every tool can walk its stacks.
pub(super) const FRAME_POINTER_FLAGS: [&str; 2] =
    ["-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"];

/// Builds `bench/tools/pairs.c` with the system C compiler (`-O1` and `flags`).
pub(super) fn build_pairs(scratch: &Path, name: &str, flags: &[&str]) -> Result<PathBuf> {
    let out = scratch.join(name);
    let status = Command::new("cc")
        .arg("-O1")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(workspace_root().join("bench/tools/pairs.c"))
        .status()
        .context("cannot run cc (the benchmark's target program is C)")?;
    if !status.success() {
        bail!("cc bench/tools/pairs.c failed ({status})");
    }
    Ok(out)
}

/// bcc compiles its programs against kernel headers; this kernel ships none.
/// Where `/lib/modules/$(uname -r)/build` is missing and the merged Debian
/// headers are in `/opt/bcc-kernel-src` (see docs/BENCHMARKS.md), point bcc there.
pub(super) fn prepare_bcc_headers() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let build = PathBuf::from(format!("/lib/modules/{}/build", release.trim()));
    if std::env::var_os("BCC_KERNEL_SOURCE").is_none()
        && !build.exists()
        && Path::new("/opt/bcc-kernel-src").is_dir()
    {
        // SAFETY: single-threaded here; nothing else reads the environment concurrently.
        unsafe { std::env::set_var("BCC_KERNEL_SOURCE", "/opt/bcc-kernel-src") };
    }
}

/// `pairs --wait N` waiting for its go.
pub(super) struct Waiting {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Waiting {
    fn start(env: &Env, n: u64) -> Result<Self, String> {
        let mut child = Command::new(&env.pairs_bin)
            .arg("--wait")
            .args(env.args(n))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start pairs: {e}"))?;
        let input = child.stdin.take().expect("piped");
        let output = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Self {
            child,
            input,
            output,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts the timed loop and reads its result.
    fn go(mut self) -> Result<f64, String> {
        writeln!(self.input, "go").map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let _ = self.child.wait();
        parse_ns(&line).ok_or_else(|| format!("pairs said {line:?}"))
    }
}

pub(super) fn parse_ns(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("ns_per_pair="))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// ns per pair of `n` pairs under `tool`; `Err` says why the tool cannot run.
pub(super) fn time_pairs(env: &Env, tool: Tool, n: u64) -> Result<f64, String> {
    match tool {
        Tool::Unprobed => Waiting::start(env, n)?.go(),
        Tool::Floor | Tool::Leakscope | Tool::LeakscopeSampled => {
            let program = Waiting::start(env, n)?;
            let out = env.recording("pairs");
            let mut extra = vec!["--unwind", env.unwind];
            match tool {
                Tool::Floor => extra.push("--bare"),
                Tool::LeakscopeSampled => extra.push("--sample"),
                _ => {}
            }
            let probe = attach_with(&env.probe, program.pid(), &out, &extra, false)
                .map_err(|e| format!("{e:#}"))?;
            let ns = program.go();
            stop(probe).map_err(|e| format!("{e:#}"))?;
            ns
        }
        Tool::BccMemleak => {
            let program = Waiting::start(env, n)?;
            let memleak = BccMemleak::attach(program.pid(), &env.scratch)?;
            let ns = program.go();
            memleak.stop();
            ns
        }
        Tool::Heaptrack => {
            let out = run_to_end(
                Command::new("heaptrack")
                    .arg("-o")
                    .arg(env.scratch.join("heaptrack.pairs"))
                    .arg(&env.pairs_bin)
                    .args(env.args(n)),
                "heaptrack (apt-get install heaptrack)",
            )?;
            parse_ns(&out).ok_or_else(|| format!("heaptrack run printed no figure: {out:?}"))
        }
        Tool::ValgrindDhat => {
            let out = run_to_end(
                Command::new("valgrind")
                    .args(["--tool=dhat", "--dhat-out-file=/dev/null"])
                    .arg(&env.pairs_bin)
                    .args(env.args(n)),
                "valgrind (apt-get install valgrind)",
            )?;
            parse_ns(&out).ok_or_else(|| format!("valgrind run printed no figure: {out:?}"))
        }
    }
}

/// Runs `command` to its end; its stdout, or why it could not run.
pub(super) fn run_to_end(command: &mut Command, what: &str) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what} is not installed ({e})"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "{what} failed ({}): {}",
            output.status,
            stderr.lines().last().unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// bcc's `memleak -p PID`, attached.
pub(super) struct BccMemleak {
    child: Child,
}

impl BccMemleak {
    /// The uprobes bcc's memleak places on glibc: nine allocation functions with
    /// entry and return probes each, plus `free` and `munmap`.
    const GLIBC_PROBES: usize = 20;

    pub(super) fn attach(pid: u32, scratch: &Path) -> Result<Self, String> {
        let log = std::fs::File::create(scratch.join("memleak.log")).map_err(|e| e.to_string())?;
        let child = Command::new("memleak-bpfcc")
            .args(["-p", &pid.to_string(), "3600"])
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!("memleak-bpfcc is not installed ({e}; apt-get install bpfcc-tools)")
            })?;
        let mut memleak = Self { child };
        // It compiles its program first (~2 s), then places its uprobes: wait for
        // them all, or for their count to settle.
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut last, mut since) = (0, Instant::now());
        loop {
            if let Ok(Some(status)) = memleak.child.try_wait() {
                let log = std::fs::read_to_string(scratch.join("memleak.log")).unwrap_or_default();
                let why = log
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                return Err(format!("memleak-bpfcc exited ({status}): {why}"));
            }
            let probes = perf_event_fds(memleak.child.id());
            if probes != last {
                (last, since) = (probes, Instant::now());
            }
            if probes >= Self::GLIBC_PROBES
                || (probes > 0 && since.elapsed() > Duration::from_secs(1))
            {
                std::thread::sleep(Duration::from_millis(500));
                return Ok(memleak);
            }
            if Instant::now() > deadline {
                memleak.stop();
                return Err("memleak-bpfcc did not attach within 120 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn stop(mut self) {
        // SIGTERM: a background job's SIGINT may be ignored; bcc detaches on TERM.
        // SAFETY: plain kill(2) on our own child.
        unsafe { crate::demo::libc_kill(self.child.id() as i32, 15) };
        let _ = self.child.wait();
    }
}

/// Perf-event file descriptors a process holds (one per bcc uprobe).
pub(super) fn perf_event_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy() == "anon_inode:[perf_event]")
                })
                .count()
        })
        .unwrap_or(0)
}

pub(super) fn attach(probe: &Path, pid: u32, out: &Path, bare: bool) -> Result<ProbeProcess> {
    attach_with(probe, pid, out, if bare { &["--bare"] } else { &[] }, false)
}

/// `leakscope-probe attach` with `extra` arguments; its stderr piped when asked.
pub(super) fn attach_with(
    probe: &Path,
    pid: u32,
    out: &Path,
    extra: &[&str],
    stderr: bool,
) -> Result<ProbeProcess> {
    let stderr = if stderr {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    // The bench's recordings from an earlier run are replaced.
    let extra: Vec<&str> = ["--force"].iter().chain(extra).copied().collect();
    ProbeProcess::start(crate::shell::privileged(probe), pid, out, &extra, stderr)
}

pub(super) fn stop(probe: ProbeProcess) -> Result<()> {
    // SIGINT makes the probe detach and finish.
    probe.signal_and_wait(2)?;
    Ok(())
}

/// One more leakscope run on the pairs program with `--bpf-stats`: each eBPF
/// program's runs, mean ns per run and verifier instructions.
pub(super) fn program_stats(env: &Env, n: u64) -> Result<Vec<ProgramStat>> {
    let program = Waiting::start(env, n).map_err(anyhow::Error::msg)?;
    let out = env.recording("pairs-stats");
    let mut probe = attach_with(
        &env.probe,
        program.pid(),
        &out,
        &["--bpf-stats", "--unwind", env.unwind],
        true,
    )?;
    let stderr = probe.take_stderr().expect("piped");
    program.go().map_err(anyhow::Error::msg)?;
    // The pairs program has exited: the probe detaches by itself.
    probe.wait()?;
    parse_bpf_stats(stderr)
}

/// The `bpf-stats program=NAME runs=N ns_per_run=X verified_insns=I` lines of
/// a probe's stderr.
pub(super) fn parse_bpf_stats(stderr: impl std::io::Read) -> Result<Vec<ProgramStat>> {
    let mut stats = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        let Some(rest) = line.split("bpf-stats ").nth(1) else {
            continue;
        };
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .map(str::to_owned)
        };
        if let (Some(name), Some(runs), Some(ns)) =
            (field("program="), field("runs="), field("ns_per_run="))
        {
            stats.push(ProgramStat {
                program: name,
                runs: runs.parse()?,
                ns_per_run: ns.parse()?,
                verified_insns: field("verified_insns=").and_then(|n| n.parse().ok()),
            });
        }
    }
    Ok(stats)
}
