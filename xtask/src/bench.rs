//! `cargo xtask bench`: what leakscope costs, beside the tools users would pick
//! instead, measured side by side in one run on this machine.
//!
//! * **Pairs.** `bench/tools/pairs.c` times N `malloc(64)`+`free` pairs. Each
//!   round runs it once per tool, interleaved (A B C D ... A B C D): nothing
//!   attached, no-op uprobes at leakscope's attach points (the floor any uprobe
//!   tool pays), the leakscope probe, bcc `memleak -p`, heaptrack and valgrind's
//!   DHAT (both started with the program). Medians over rounds, with the spread.
//! * **In-process.** `alloc-bench`'s `Box` pairs: system allocator, the wrapper
//!   idle, and recording (dhat's profiler plus the leakscope recorder).
//! * **Recording.** Bytes per event of a probe recording of `fixture-server`
//!   under churn.
//! * **Analyzer.** `leakscope report` on recordings of 1 M (and 10 M) events,
//!   built by replaying that recording: events/s and peak RSS.
//!
//! It writes `docs/BENCHMARKS.md`, `docs/images/bench-pairs.svg` and
//! `bench/results.json`; every figure there comes from this run. Nothing is
//! asserted: the machine is shared and noisy, so claims are ratios from one run.
//! A tool that cannot run is skipped with the reason, in the files too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::shell::{target_dir, workspace_root};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// malloc/free pairs per timed run [default: 1000000; --quick: 200000].
    #[arg(long)]
    pairs: Option<u64>,
    /// Rounds; each runs every tool once, interleaved; medians are reported [default: 3].
    #[arg(long)]
    rounds: Option<usize>,
    /// Events of the recordings the analyzer is timed on
    /// [default: 1000000,10000000; --quick: 1000000].
    #[arg(long, value_delimiter = ',')]
    analyzer_events: Vec<u64>,
    /// A developer's check in under two minutes: fewer pairs, the analyzer on 1 M
    /// events only. Writes the same files.
    #[arg(long)]
    quick: bool,
}

/// What runs the pairs program.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    Unprobed,
    Floor,
    Leakscope,
    BccMemleak,
    Heaptrack,
    ValgrindDhat,
}

impl Tool {
    const ALL: [Tool; 6] = [
        Tool::Unprobed,
        Tool::Floor,
        Tool::Leakscope,
        Tool::BccMemleak,
        Tool::Heaptrack,
        Tool::ValgrindDhat,
    ];

    /// The key in `results.json` (`pairs.<key>_ns`).
    fn key(self) -> &'static str {
        match self {
            Tool::Unprobed => "unprobed",
            Tool::Floor => "floor",
            Tool::Leakscope => "leakscope",
            Tool::BccMemleak => "bcc_memleak",
            Tool::Heaptrack => "heaptrack",
            Tool::ValgrindDhat => "valgrind_dhat",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tool::Unprobed => "nothing attached",
            Tool::Floor => "no-op uprobes at the same points (the floor)",
            Tool::Leakscope => "leakscope probe (attached by pid)",
            Tool::BccMemleak => "bcc memleak (attached by pid)",
            Tool::Heaptrack => "heaptrack (started with the program)",
            Tool::ValgrindDhat => "valgrind --tool=dhat (started with the program)",
        }
    }

    /// How to run it by hand (PAIRS is the built `bench/tools/pairs.c`).
    fn command(self) -> &'static str {
        match self {
            Tool::Unprobed => "`PAIRS N`",
            Tool::Floor => "`PAIRS --wait N` + `leakscope-probe attach --pid PID --bare`",
            Tool::Leakscope => "`PAIRS --wait N` + `leakscope-probe attach --pid PID`",
            Tool::BccMemleak => "`PAIRS --wait N` + `memleak-bpfcc -p PID 3600`",
            Tool::Heaptrack => "`heaptrack PAIRS N`",
            Tool::ValgrindDhat => "`valgrind --tool=dhat PAIRS N`",
        }
    }
}

/// What the run needs.
struct Env {
    pairs_bin: PathBuf,
    probe: PathBuf,
    scratch: PathBuf,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let started = Instant::now();
    let pairs = args
        .pairs
        .unwrap_or(if args.quick { 200_000 } else { 1_000_000 });
    let rounds = args.rounds.unwrap_or(3).max(1);
    let analyzer_events = if !args.analyzer_events.is_empty() {
        args.analyzer_events.clone()
    } else if args.quick {
        vec![1_000_000]
    } else {
        vec![1_000_000, 10_000_000]
    };
    let probe = crate::build_probe()?;
    let bin = crate::build_release_bins(&["leakscope-fixtures", "leakscope-analyzer"])?;
    let scratch = target_dir().join("bench");
    std::fs::create_dir_all(&scratch)?;
    let env = Env {
        pairs_bin: build_pairs(&scratch)?,
        probe: probe.clone(),
        scratch: scratch.clone(),
    };
    prepare_bcc_headers();

    // Pairs, interleaved by round.
    let mut samples: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut skipped: BTreeMap<&'static str, String> = BTreeMap::new();
    time_pairs(&env, Tool::Unprobed, pairs / 10).ok(); // warm the page cache
    for round in 1..=rounds {
        for tool in Tool::ALL {
            if skipped.contains_key(tool.key()) {
                continue;
            }
            match time_pairs(&env, tool, pairs) {
                Ok(ns) => {
                    eprintln!("round {round}: {}: {ns:.1} ns/pair", tool.key());
                    samples.entry(tool.key()).or_default().push(ns);
                }
                Err(why) => {
                    eprintln!("skipping {}: {why}", tool.key());
                    skipped.insert(tool.key(), why);
                }
            }
        }
    }

    // Where leakscope's time goes: the kernel's own timing of each program.
    let programs = program_stats(&env, pairs).unwrap_or_else(|e| {
        eprintln!("no per-program figures: {e:#}");
        Vec::new()
    });

    // A realistic recording: the probe on fixture-server under churn.
    let recording = scratch.join("churn.lsrec");
    let sessions = if args.quick { 50 } else { 200 };
    crate::demo::record_churn(&bin, &probe, "leaky", sessions, 1, &recording)?;
    let recorded = count_events(&recording)?;
    let recording_bytes = std::fs::metadata(&recording)?.len();

    let mut analyzer = Vec::new();
    for &events in &analyzer_events {
        let big = scratch.join(format!("replayed-{events}.lsrec"));
        let made = replay(&recording, &big, events)?;
        let (seconds, peak_rss) = time_report(&bin.join("leakscope"), &big, &scratch)?;
        let row = json!({
            "events": made,
            "file_bytes": std::fs::metadata(&big)?.len(),
            "seconds": seconds,
            "events_per_s": made as f64 / seconds,
            "peak_rss_bytes": peak_rss,
        });
        eprintln!("analyzer: {row}");
        analyzer.push(row);
        let _ = std::fs::remove_file(&big);
    }

    let in_process = in_process(pairs, rounds, &bin.join("alloc-bench"))?;

    let median_of = |key: &str| samples.get(key).map(|s| median(s.clone()));
    let mut pairs_json = json!({
        "n": pairs,
        "rounds": rounds,
        "program": "bench/tools/pairs.c, cc -O1",
    });
    for tool in Tool::ALL {
        pairs_json[format!("{}_ns", tool.key())] = json!(median_of(tool.key()));
        pairs_json[format!("{}_skipped", tool.key())] = json!(skipped.get(tool.key()));
        pairs_json[format!("{}_spread_ns", tool.key())] =
            json!(samples.get(tool.key()).map(|s| [min(s), max(s)]));
    }
    let (base, floor, ours) = (
        median_of("unprobed"),
        median_of("floor"),
        median_of("leakscope"),
    );
    if let (Some(base), Some(floor), Some(ours)) = (base, floor, ours) {
        pairs_json["leakscope_vs_floor"] = json!((ours - base) / (floor - base));
        pairs_json["leakscope_own_ns"] = json!(ours - floor);
    }
    if let (Some(ours), Some(bcc)) = (ours, median_of("bcc_memleak")) {
        pairs_json["bcc_memleak_vs_leakscope"] = json!(bcc / ours);
    }
    pairs_json["leakscope_programs"] = json!(
        programs
            .iter()
            .map(|(program, runs, ns)| json!({"program": program, "runs": runs, "ns_per_run": ns}))
            .collect::<Vec<_>>()
    );
    let results = json!({
        "format_version": 1,
        "quick": args.quick,
        "machine": machine(),
        "pairs": pairs_json,
        "in_process": in_process,
        "recording": {
            "bytes_per_event": recording_bytes as f64 / recorded as f64,
            "events": recorded,
            "file_bytes": recording_bytes,
            "source": format!("leakscope-probe attached to fixture-server --composition leaky, churn of {sessions} abandoned sessions"),
        },
        "analyzer": {
            "events_per_s": analyzer.last().map(|r| r["events_per_s"].clone()),
            "runs": analyzer,
        },
        "seconds": started.elapsed().as_secs_f64(),
    });
    let root = workspace_root();
    std::fs::create_dir_all(root.join("bench"))?;
    std::fs::write(
        root.join("bench/results.json"),
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    std::fs::write(
        root.join("docs/images/bench-pairs.svg"),
        bar_chart(&results["pairs"]),
    )?;
    std::fs::write(root.join("docs/BENCHMARKS.md"), render(&results, args))?;
    println!(
        "wrote docs/BENCHMARKS.md, docs/images/bench-pairs.svg and bench/results.json in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn min(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(0.0, f64::max)
}

/// Builds `bench/tools/pairs.c` with the system C compiler.
fn build_pairs(scratch: &Path) -> Result<PathBuf> {
    let out = scratch.join("pairs");
    let status = Command::new("cc")
        .args(["-O1", "-o"])
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
fn prepare_bcc_headers() {
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
struct Waiting {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Waiting {
    fn start(pairs_bin: &Path, n: u64) -> Result<Self, String> {
        let mut child = Command::new(pairs_bin)
            .args(["--wait", &n.to_string()])
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

fn parse_ns(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("ns_per_pair="))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// ns per pair of `n` pairs under `tool`; `Err` says why the tool cannot run.
fn time_pairs(env: &Env, tool: Tool, n: u64) -> Result<f64, String> {
    match tool {
        Tool::Unprobed => Waiting::start(&env.pairs_bin, n)?.go(),
        Tool::Floor | Tool::Leakscope => {
            let program = Waiting::start(&env.pairs_bin, n)?;
            let out = env.scratch.join("pairs.lsrec");
            let probe = attach(&env.probe, program.pid(), &out, tool == Tool::Floor)
                .map_err(|e| format!("{e:#}"))?;
            let ns = program.go();
            stop(probe).map_err(|e| format!("{e:#}"))?;
            ns
        }
        Tool::BccMemleak => {
            let program = Waiting::start(&env.pairs_bin, n)?;
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
                    .arg(n.to_string()),
                "heaptrack (apt-get install heaptrack)",
            )?;
            parse_ns(&out).ok_or_else(|| format!("heaptrack run printed no figure: {out:?}"))
        }
        Tool::ValgrindDhat => {
            let out = run_to_end(
                Command::new("valgrind")
                    .args(["--tool=dhat", "--dhat-out-file=/dev/null"])
                    .arg(&env.pairs_bin)
                    .arg(n.to_string()),
                "valgrind (apt-get install valgrind)",
            )?;
            parse_ns(&out).ok_or_else(|| format!("valgrind run printed no figure: {out:?}"))
        }
    }
}

/// Runs `command` to its end; its stdout, or why it could not run.
fn run_to_end(command: &mut Command, what: &str) -> Result<String, String> {
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
struct BccMemleak {
    child: Child,
}

impl BccMemleak {
    /// The uprobes bcc's memleak places on glibc: nine allocation functions with
    /// entry and return probes each, plus `free` and `munmap`.
    const GLIBC_PROBES: usize = 20;

    fn attach(pid: u32, scratch: &Path) -> Result<Self, String> {
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

    fn stop(mut self) {
        // SIGTERM: a background job's SIGINT may be ignored; bcc detaches on TERM.
        // SAFETY: plain kill(2) on our own child.
        unsafe { crate::demo::libc_kill(self.child.id() as i32, 15) };
        let _ = self.child.wait();
    }
}

/// Perf-event file descriptors a process holds (one per bcc uprobe).
fn perf_event_fds(pid: u32) -> usize {
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

fn attach(probe: &Path, pid: u32, out: &Path, bare: bool) -> Result<Child> {
    attach_with(probe, pid, out, if bare { &["--bare"] } else { &[] }, false)
}

/// `leakscope-probe attach` with `extra` arguments; its stderr piped when asked.
fn attach_with(probe: &Path, pid: u32, out: &Path, extra: &[&str], stderr: bool) -> Result<Child> {
    let mut command = crate::shell::privileged(probe);
    command
        .args(["attach", "--pid", &pid.to_string(), "--out"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(if stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = command.spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    if !line.starts_with("attached:") {
        let _ = child.kill();
        bail!("the probe did not attach (is this root?): {line:?}");
    }
    Ok(child)
}

fn stop(mut probe: Child) -> Result<()> {
    // SAFETY: plain kill(2) on our own child; SIGINT makes the probe detach and finish.
    unsafe { crate::demo::libc_kill(probe.id() as i32, 2) };
    probe.wait()?;
    Ok(())
}

/// One more leakscope run on the pairs program with `--bpf-stats`: each eBPF
/// program's runs and mean ns per run, as the kernel timed them.
fn program_stats(env: &Env, n: u64) -> Result<Vec<(String, u64, f64)>> {
    let program = Waiting::start(&env.pairs_bin, n).map_err(anyhow::Error::msg)?;
    let out = env.scratch.join("pairs-stats.lsrec");
    let mut probe = attach_with(&env.probe, program.pid(), &out, &["--bpf-stats"], true)?;
    let stderr = probe.stderr.take().expect("piped");
    program.go().map_err(anyhow::Error::msg)?;
    // The pairs program has exited: the probe detaches by itself.
    probe.wait()?;
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
            stats.push((name, runs.parse()?, ns.parse()?));
        }
    }
    Ok(stats)
}

/// Allocation, free and realloc records in a recording.
fn count_events(path: &Path) -> Result<u64> {
    use leakscope_recording::{Record, RecordingReader};
    let reader = RecordingReader::open(path)?;
    Ok(reader
        .filter(|r| {
            matches!(
                r,
                Record::Alloc { .. } | Record::Free { .. } | Record::Realloc { .. }
            )
        })
        .count() as u64)
}

/// Writes `out` with `source`'s memory records replayed until it holds at least
/// `events` of them: each copy's addresses and times are shifted past the
/// previous one's, so what one copy keeps adds to the live set, as in a server
/// that has leaked for longer. Returns the events written.
fn replay(source: &Path, out: &Path, events: u64) -> Result<u64> {
    use leakscope_recording::{EndReason, Record, RecordingReader, RecordingWriter};
    let reader = RecordingReader::open(source)?;
    let header = reader.header().clone();
    let records: Vec<Record> = reader.collect();
    let (first, last) = records
        .iter()
        .filter_map(record_ts)
        .fold((u64::MAX, 0), |(lo, hi), ts| (lo.min(ts), hi.max(ts)));
    let span = last.saturating_sub(first) + 1_000_000;
    let mut writer = RecordingWriter::create(out, &header)?;
    let mut written = 0u64;
    let mut copy = 0u64;
    while written < events {
        for record in &records {
            let shifted = match record {
                Record::Alloc {
                    ts,
                    tid,
                    addr,
                    size,
                    stack,
                } => Record::Alloc {
                    ts: ts + copy * span,
                    tid: *tid,
                    addr: addr + (copy << 40),
                    size: *size,
                    stack: *stack,
                },
                Record::Free { ts, tid, addr } => Record::Free {
                    ts: ts + copy * span,
                    tid: *tid,
                    addr: addr + (copy << 40),
                },
                Record::Realloc {
                    ts,
                    tid,
                    old,
                    new,
                    size,
                    stack,
                    entry_ts,
                } => Record::Realloc {
                    ts: ts + copy * span,
                    tid: *tid,
                    old: if *old == 0 { 0 } else { old + (copy << 40) },
                    new: if *new == 0 { 0 } else { new + (copy << 40) },
                    size: *size,
                    stack: *stack,
                    entry_ts: entry_ts + copy * span,
                },
                // Stacks and mappings once; lifecycle records only in the first copy.
                Record::Stack { .. } | Record::Mapping(_) if copy == 0 => record.clone(),
                Record::Scope { .. } | Record::Session { .. } if copy == 0 => record.clone(),
                _ => continue,
            };
            if matches!(
                shifted,
                Record::Alloc { .. } | Record::Free { .. } | Record::Realloc { .. }
            ) {
                written += 1;
            }
            writer.push(shifted)?;
            if written >= events {
                break;
            }
        }
        copy += 1;
    }
    writer.finish(Record::End {
        ts: first + copy * span,
        reason: EndReason::Finished,
    })?;
    Ok(written)
}

fn record_ts(record: &leakscope_recording::Record) -> Option<u64> {
    use leakscope_recording::Record;
    match record {
        Record::Alloc { ts, .. } | Record::Free { ts, .. } | Record::Realloc { ts, .. } => {
            Some(*ts)
        }
        _ => None,
    }
}

/// `leakscope report FILE`: (seconds, peak RSS in bytes).
fn time_report(leakscope: &Path, recording: &Path, scratch: &Path) -> Result<(f64, u64)> {
    let start = Instant::now();
    let child = Command::new(leakscope)
        .arg("report")
        .arg(recording)
        .arg("--out")
        .arg(scratch.join("report"))
        .stdout(Stdio::null())
        .spawn()?;
    let (status, max_rss_kib) = wait4(child.id())?;
    let seconds = start.elapsed().as_secs_f64();
    if status != 0 {
        bail!("leakscope report {} failed", recording.display());
    }
    Ok((seconds, max_rss_kib * 1024))
}

/// wait4(2) for `pid`: (wait status, peak RSS in KiB). Declared here rather than
/// pulling the libc crate into xtask for one call.
fn wait4(pid: u32) -> Result<(i32, u64)> {
    unsafe extern "C" {
        fn wait4(pid: i32, status: *mut i32, options: i32, rusage: *mut i64) -> i32;
    }
    let mut status = 0i32;
    // struct rusage on x86_64 Linux: two timevals (4 x i64), then 14 longs;
    // ru_maxrss (KiB) is the first of those.
    let mut rusage = [0i64; 18];
    // SAFETY: `status` and `rusage` are valid for writes of their sizes.
    let got = unsafe { wait4(pid as i32, &mut status, 0, rusage.as_mut_ptr()) };
    if got != pid as i32 {
        bail!("wait4({pid}) failed");
    }
    Ok((status, rusage[4] as u64))
}

/// The in-process mode's cost on `Box` pairs: the system allocator, dhat's
/// wrapper alone, and dhat's profiler plus the leakscope recorder.
fn in_process(pairs: u64, rounds: usize, alloc_bench: &Path) -> Result<Value> {
    let pairs = (pairs / 10).max(1000);
    let command = format!("box {pairs}");
    let mut plain = Bench::start(alloc_bench)?;
    plain.time(&command)?;
    let system = median(
        (0..rounds)
            .map(|_| plain.time(&command))
            .collect::<Result<_>>()?,
    );
    plain.finish();
    // A target directory of its own, so neither build undoes the other.
    let inproc_target = target_dir().join("bench-inproc");
    crate::shell::cargo(&[
        "build",
        "--release",
        "-p",
        "leakscope-fixtures",
        "--features",
        "dhat-heap",
        "--bin",
        "alloc-bench",
        "--target-dir",
        &inproc_target.to_string_lossy(),
    ])?;
    let mut inproc = Bench::start(&inproc_target.join("release/alloc-bench"))?;
    inproc.time(&command)?;
    let wrapper = median(
        (0..rounds)
            .map(|_| inproc.time(&command))
            .collect::<Result<_>>()?,
    );
    let out = std::env::temp_dir().join("leakscope-bench-inproc.lsrec");
    let mut recording = Vec::new();
    for _ in 0..rounds {
        inproc.ask(&format!("record {}", out.display()))?;
        recording.push(inproc.time(&command)?);
        inproc.ask("stop")?;
    }
    inproc.finish();
    let recording = median(recording);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(out.with_file_name("dhat-heap.json"));
    Ok(json!({
        "n": pairs,
        "system_ns": system,
        "wrapper_idle_ns": wrapper,
        "recording_ns": recording,
    }))
}

/// `alloc-bench`, driven over its stdin protocol.
struct Bench {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Bench {
    fn start(binary: &Path) -> Result<Self> {
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let input = child.stdin.take().expect("piped");
        let mut output = BufReader::new(child.stdout.take().expect("piped"));
        let mut ready = String::new();
        output.read_line(&mut ready)?;
        Ok(Self {
            child,
            input,
            output,
        })
    }

    fn ask(&mut self, command: &str) -> Result<String> {
        writeln!(self.input, "{command}")?;
        let mut line = String::new();
        self.output.read_line(&mut line)?;
        if line.is_empty() {
            bail!("alloc-bench stopped at {command:?}");
        }
        Ok(line.trim().to_owned())
    }

    fn time(&mut self, command: &str) -> Result<f64> {
        let answer = self.ask(command)?;
        answer
            .parse()
            .with_context(|| format!("alloc-bench said {answer:?}"))
    }

    fn finish(self) {
        let Bench {
            mut child, input, ..
        } = self;
        drop(input);
        let _ = child.wait();
    }
}

/// The machine the figures are from.
fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .ok();
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    json!({
        "kernel": kernel,
        "cpu": model,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "date": date,
    })
}

fn fmt_ns(v: &Value) -> String {
    v.as_f64()
        .map(|ns| format!("{ns:.1}"))
        .unwrap_or_else(|| "-".into())
}

/// `docs/BENCHMARKS.md`, from `results` alone.
fn render(results: &Value, args: &BenchArgs) -> String {
    use std::fmt::Write as _;
    let p = &results["pairs"];
    let m = &results["machine"];
    let mut md = String::new();
    let command = if args.quick {
        "cargo xtask bench --quick"
    } else {
        "cargo xtask bench"
    };
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `{command}` ({:.0} s) on {} ({} CPUs, {}), kernel {}, {}. Every figure below is \
         from that one run; rerun the command to get yours (`--quick` takes under two minutes and \
         writes the same files). Side by side means interleaved: each round runs every tool once, \
         in the order of the table; figures are medians over rounds, with the spread.\n",
        results["seconds"].as_f64().unwrap_or(0.0),
        m["cpu"].as_str().unwrap_or("?"),
        m["cpus"],
        if results["quick"] == true {
            "quick mode"
        } else {
            "full mode"
        },
        m["kernel"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(
        md,
        "## malloc(64) + free pairs\n\n`bench/tools/pairs.c` (built with `cc -O1`) times {} pairs \
         per run, {} rounds. PAIRS below is that program; tools attached by pid attach while it \
         waits (`--wait`), then it runs.\n",
        p["n"], p["rounds"]
    );
    let _ = writeln!(
        md,
        "| tool | ns per pair | spread | vs nothing attached | command |\n| --- | ---: | ---: | ---: | --- |"
    );
    let base = p["unprobed_ns"].as_f64();
    for tool in Tool::ALL {
        let ns = &p[format!("{}_ns", tool.key())];
        let spread = p[format!("{}_spread_ns", tool.key())]
            .as_array()
            .map(|s| format!("{}-{}", fmt_ns(&s[0]), fmt_ns(&s[1])))
            .unwrap_or_else(|| "-".into());
        let ratio = match (ns.as_f64(), base) {
            (Some(ns), Some(base)) => format!("{:.1}x", ns / base),
            _ => "-".into(),
        };
        let shown = match p[format!("{}_skipped", tool.key())].as_str() {
            Some(why) => format!("skipped: {why}"),
            None => fmt_ns(ns),
        };
        let _ = writeln!(
            md,
            "| {} | {shown} | {spread} | {ratio} | {} |",
            tool.label(),
            tool.command()
        );
    }
    let _ = writeln!(md, "\n![ns per pair by tool](images/bench-pairs.svg)\n");
    if let (Some(vs_floor), Some(own)) = (
        p["leakscope_vs_floor"].as_f64(),
        p["leakscope_own_ns"].as_f64(),
    ) {
        let _ = writeln!(
            md,
            "leakscope costs **{vs_floor:.2}x the uprobe floor** per pair (what it adds over \
             nothing attached, divided by what no-op uprobes at the same points add): {own:.0} ns \
             of its own work per pair. The goal is 1.3x."
        );
    }
    let programs = p["leakscope_programs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !programs.is_empty() {
        let _ = writeln!(
            md,
            "\nWhere leakscope's time goes, from one more run with `leakscope-probe attach \
             --bpf-stats` (the kernel's own timing of each eBPF program, BPF_ENABLE_STATS; the \
             rest of a pair's cost is the uprobe traps themselves):\n\n| program | runs | ns per run |\n| --- | ---: | ---: |"
        );
        for row in &programs {
            let _ = writeln!(
                md,
                "| `{}` | {} | {:.0} |",
                row["program"].as_str().unwrap_or("?"),
                row["runs"],
                row["ns_per_run"].as_f64().unwrap_or(0.0)
            );
        }
        let _ = writeln!(
            md,
            "\n`malloc_exit` reads the caller's stack (`bpf_get_stack`, user frames by frame \
             pointer) and reserves the record in the ring buffer; `malloc_enter` keeps the call's \
             size in the pending map; `free_enter` sends one small record."
        );
    }
    match p["bcc_memleak_vs_leakscope"].as_f64() {
        Some(r) => {
            let _ = writeln!(
                md,
                "\nbcc memleak costs **{r:.1}x** what leakscope costs per pair, on the same program \
                 in the same run. The goal is at least 4x."
            );
        }
        None => {
            let _ = writeln!(
                md,
                "\nbcc memleak was skipped: {}.",
                p["bcc_memleak_skipped"].as_str().unwrap_or("?")
            );
        }
    }
    let _ = writeln!(
        md,
        "\nheaptrack and DHAT run inside the program (`LD_PRELOAD` and valgrind's JIT), so they \
         pay no trap per call; they must be started with the program, which a long-running \
         server rarely allows. leakscope and bcc memleak attach to a running process.\n"
    );
    let _ = writeln!(
        md,
        "bcc memleak and leakscope cannot be attached to the same library at the same time: the \
         kernel keeps one uprobe per file offset and refuses a second whose reference counter \
         differs (dmesg: `ref_ctr_offset mismatch`). They are measured one after the other.\n"
    );
    let _ = writeln!(md, "### Setting up the other tools\n");
    let _ = writeln!(
        md,
        "```sh\napt-get update\napt-get install -y bpfcc-tools heaptrack valgrind linux-headers-6.1.0-47-amd64\n\
         mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing\n\
         # bcc needs kernel headers; this kernel ships none: merge the nearest Debian ones\n\
         mkdir -p /opt/bcc-kernel-src\n\
         cp -a /usr/src/linux-headers-6.1.0-47-common/. /opt/bcc-kernel-src/\n\
         cp -a /usr/src/linux-headers-6.1.0-47-amd64/. /opt/bcc-kernel-src/\n\
         export BCC_KERNEL_SOURCE=/opt/bcc-kernel-src   # the bench sets it when /opt/bcc-kernel-src exists\n```\n"
    );

    let ip = &results["in_process"];
    let _ = writeln!(
        md,
        "## In-process mode\n\n`alloc-bench`'s `box N`: {} `Box<[u8; 64]>` allocations and drops \
         per run, through the global allocator.\n",
        ip["n"]
    );
    let _ = writeln!(
        md,
        "| mode | ns per pair | vs system allocator |\n| --- | ---: | ---: |"
    );
    let system = ip["system_ns"].as_f64().unwrap_or(f64::NAN);
    for (label, key) in [
        ("system allocator", "system_ns"),
        (
            "leakscope_inproc::Alloc, not recording (dhat's wrapper idle)",
            "wrapper_idle_ns",
        ),
        (
            "recording: dhat's profiler + the leakscope recorder",
            "recording_ns",
        ),
    ] {
        let ns = ip[key].as_f64().unwrap_or(f64::NAN);
        let _ = writeln!(md, "| {label} | {ns:.1} | {:.1}x |", ns / system);
    }
    let _ = writeln!(
        md,
        "\nThe dhat-backed mode is what it is: dhat's profiler keeps its own table of every live \
         block and its stack, and that dominates; it is for heap-profile tests, not production.\n"
    );

    let r = &results["recording"];
    let _ = writeln!(
        md,
        "## Recording size\n\n{:.1} bytes per event: {} events in {} bytes ({}). The goal is at most 16.\n",
        r["bytes_per_event"].as_f64().unwrap_or(0.0),
        r["events"],
        r["file_bytes"],
        r["source"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        md,
        "## Analyzer\n\n`leakscope report` (release build) on recordings made by replaying the \
         recording above until they hold N events, each copy's addresses and times shifted past \
         the last, so what each copy keeps adds to the live set. Peak RSS is the process's \
         maximum resident set (wait4).\n"
    );
    let _ = writeln!(
        md,
        "| events | file | seconds | events/s | peak RSS |\n| ---: | ---: | ---: | ---: | ---: |"
    );
    for row in results["analyzer"]["runs"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {:.1} MiB | {:.2} | {:.2} M | {:.1} MiB |",
            row["events"],
            row["file_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            row["seconds"].as_f64().unwrap_or(0.0),
            row["events_per_s"].as_f64().unwrap_or(0.0) / 1e6,
            row["peak_rss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0
        );
    }
    let _ = writeln!(md, "\nThe goal is at least 5 M events/s.\n");
    let _ = writeln!(
        md,
        "## Not measured yet\n\nThe server under load (sessions/s, request latency and CPU per \
         session with each tool), the 30-minute soak, and the in-process recorder without dhat \
         beside heaptrack on the same program: issue 11 is open.\n\n`bench/results.json` holds \
         every figure above."
    );
    md
}

/// A bar chart of ns per pair, as SVG. Hand-written: six labelled bars do not
/// need plotters in xtask, and the file stays small and diffable.
fn bar_chart(p: &Value) -> String {
    use std::fmt::Write as _;
    let bars: Vec<(&str, f64)> = Tool::ALL
        .iter()
        .filter_map(|t| {
            p[format!("{}_ns", t.key())]
                .as_f64()
                .map(|ns| (t.key(), ns))
        })
        .collect();
    let top = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let (width, row, left, right) = (760.0, 34.0, 130.0, 110.0);
    let height = 50.0 + row * bars.len() as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="22" font-size="15">ns per malloc(64)+free pair (median), {} pairs per run</text>"#,
        p["n"]
    );
    for (i, (name, ns)) in bars.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let w = (width - left - right) * ns / top;
        let color = match *name {
            "leakscope" => "#d62728",
            "floor" => "#7f7f7f",
            _ => "#1f77b4",
        };
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{name}</text><rect x="{left}" y="{}" width="{w:.1}" height="{}" fill="{color}"/><text x="{}" y="{}">{ns:.0} ns</text>"#,
            left - 8.0,
            y + 17.0,
            y + 4.0,
            row - 10.0,
            left + w + 6.0,
            y + 17.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}
