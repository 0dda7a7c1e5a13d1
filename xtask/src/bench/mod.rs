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
//! * **Analyzer.** `leakscope report` on recordings of 1 M, 10 M and 50 M events,
//!   built by replaying that recording: events/s and peak RSS, and the report's
//!   fixed start (naming frames), timed on the recording itself.
//! * **Always on.** Sampled at the default mean: how soon and how well the
//!   cache server's leak is named in both modes, what a day writes, and a day
//!   read ([`always_on`]).
//!
//! It writes `docs/BENCHMARKS.md`, `docs/images/bench-pairs.svg`,
//! `docs/images/bench-server.svg` (the server's latency curve to saturation) and
//! `bench/results.json`; every figure there comes from this run. Nothing is
//! asserted: the machine is shared and noisy, so claims are ratios from one run.
//! A tool that cannot run is skipped with the reason, in the files too.
//!
//! The measuring modules make [`results`]' types; the page and the charts are
//! rendered from `bench/results.json` read back ([`render`]), which is what
//! `--render` does alone.

mod always_on;
mod analyzer;
mod in_process;
mod instructions;
mod pairs;
mod render;
mod results;
mod saturation;
mod server;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use crate::shell::{target_dir, workspace_root};
use always_on::{AlwaysOnEnv, always_on};
use analyzer::analyzer_section;
use in_process::{build_inproc_alloc_bench, in_process};
use pairs::{
    DEEP_STACK_DEPTH, Env, FRAME_POINTER_FLAGS, NO_FRAME_POINTER_FLAGS, Tool, build_pairs,
    prepare_bcc_headers, program_stats, time_pairs,
};
use results::{FORMAT_VERSION, Machine, Outcome, Pairs, Results, Timing, Timings};
use server::{LOADS, QUICK_LOADS, ServerEnv, build_inproc_server, server_load, server_programs};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// malloc/free pairs per timed run [default: 1000000; --quick: 200000].
    #[arg(long)]
    pairs: Option<u64>,
    /// Rounds; each runs every tool once, interleaved; medians are reported
    /// [default: 5; --quick: 3].
    #[arg(long)]
    rounds: Option<usize>,
    /// Events of the recordings the analyzer is timed on
    /// [default: 1000000,10000000,50000000; --quick: 1000000].
    #[arg(long, value_delimiter = ',')]
    analyzer_events: Vec<u64>,
    /// Seconds `churn` runs at each load in the server section [default: 10; --quick: 2].
    #[arg(long)]
    load_seconds: Option<u64>,
    /// A developer's check in under two minutes: fewer pairs, shorter loads, the
    /// analyzer on 1 M events only. Writes the same files.
    #[arg(long)]
    quick: bool,
    /// Run only these sections and print their JSON, writing no file (for working
    /// on one part; the published files always come from a whole run). The
    /// analyzer's replayed recordings are kept in target/bench then.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    /// With --only: `tools/call`s each churned session sends after its
    /// handshake (`churn --calls`), for sessions that do work rather than
    /// only begin; a whole run churns sessions of one call [default: 1].
    #[arg(long)]
    calls: Option<u32>,
    /// Measure nothing: write docs/BENCHMARKS.md and docs/images/bench-*.svg
    /// from bench/results.json as it is, as a whole run renders them (for
    /// working on the page).
    #[arg(long, conflicts_with_all = ["pairs", "rounds", "analyzer_events", "load_seconds", "quick", "only"])]
    render: bool,
}

/// The parts of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Section {
    /// The pairs program under each tool, and the probe's per-program timing.
    Pairs,
    /// `fixture-server` under load with each tool.
    Server,
    /// The in-process mode on `Box` pairs, beside heaptrack.
    InProcess,
    /// Recording size and the analyzer's throughput.
    Analyzer,
    /// Sampled at the default mean, left on: detection time and estimate on
    /// the cache server in both modes, the disk a day takes, a day read.
    AlwaysOn,
    /// The saturation rounds alone: the sampled modes' throughput beside the
    /// unprobed server's, fresh servers alternating (part of a whole run's
    /// server section; alone with `--only saturation`).
    Saturation,
    /// Instructions per session under callgrind: the cooperative build off
    /// and sampled beside the unprobed server (part of a whole run's server
    /// section; alone with `--only instructions`).
    Instructions,
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let started = Instant::now();
    if args.calls.is_some() && (args.only.is_empty() || args.render) {
        // The published files are of sessions of one call: another count
        // is for working on one section.
        anyhow::bail!("--calls is for a working run: give it with --only");
    }
    if args.render {
        render::write_files(&workspace_root())?;
        println!("wrote docs/BENCHMARKS.md and docs/images/bench-*.svg from bench/results.json");
        return Ok(());
    }
    let wanted = |section| args.only.is_empty() || args.only.contains(&section);
    let pairs = args
        .pairs
        .unwrap_or(if args.quick { 200_000 } else { 1_000_000 });
    let rounds = args.rounds.unwrap_or(if args.quick { 3 } else { 5 }).max(1);
    let analyzer_events = if !args.analyzer_events.is_empty() {
        args.analyzer_events.clone()
    } else if args.quick {
        vec![1_000_000]
    } else {
        vec![1_000_000, 10_000_000, 50_000_000]
    };
    let probe = crate::build::probe()?;
    let bin = crate::build::release_bins(&["leakscope-fixtures", "leakscope-analyzer"])?;
    let inproc_target = target_dir().join("bench-inproc");
    let (inproc_alloc_bench, inproc_server) =
        if wanted(Section::InProcess) || wanted(Section::Server) || wanted(Section::Saturation) {
            (
                build_inproc_alloc_bench(&inproc_target)?,
                build_inproc_server(&inproc_target)?,
            )
        } else {
            Default::default()
        };
    let scratch = target_dir().join("bench");
    std::fs::create_dir_all(&scratch)?;
    prepare_bcc_headers();
    let mut results = Results {
        format_version: FORMAT_VERSION,
        quick: args.quick,
        machine: machine(),
        pairs: None,
        pairs_deep: None,
        pairs_nofp: None,
        server: None,
        server_programs: None,
        saturation_rounds: None,
        server_instructions: None,
        in_process: None,
        recording: None,
        analyzer: None,
        always_on: None,
        seconds: 0.0,
    };

    if wanted(Section::Pairs) {
        let env = Env {
            pairs_bin: build_pairs(&scratch, "pairs", &[])?,
            flags: &[],
            unwind: "auto",
            depth: None,
            probe: probe.clone(),
            scratch: scratch.clone(),
        };
        results.pairs = Some(pairs_section(&env, pairs, rounds, &Tool::ALL));
        // The same pairs 30 calls down a frame-pointer stack: what a server's
        // allocation inside an async task looks like to a stack walker.
        let deep = Env {
            pairs_bin: build_pairs(&scratch, "pairs-fp", &FRAME_POINTER_FLAGS)?,
            flags: &FRAME_POINTER_FLAGS,
            unwind: "frame-pointers",
            depth: Some(DEEP_STACK_DEPTH),
            ..env
        };
        // --quick keeps to leakscope and its floor here: bcc's compile and
        // heaptrack's start would take it past its two minutes.
        let deep_tools: &[Tool] = if args.quick {
            &[Tool::Unprobed, Tool::Floor, Tool::Leakscope]
        } else {
            &Tool::STACK_WALKERS
        };
        results.pairs_deep = Some(pairs_section(&deep, pairs, rounds, deep_tools));
        // And built without frame pointers, as most servers ship: leakscope
        // walks it by the tables it compiles from .eh_frame.
        let nofp = Env {
            pairs_bin: build_pairs(&scratch, "pairs-nofp", &NO_FRAME_POINTER_FLAGS)?,
            flags: &NO_FRAME_POINTER_FLAGS,
            unwind: "tables",
            ..deep
        };
        results.pairs_nofp = Some(pairs_section(
            &nofp,
            pairs,
            rounds,
            &[
                Tool::Unprobed,
                Tool::Floor,
                Tool::Leakscope,
                Tool::LeakscopeSampled,
            ],
        ));
    }
    // The server sections share one environment: `seconds` and `loads` are
    // the load's (the instructions count a fixed churn and read neither).
    let server_env = ServerEnv {
        bin: &bin,
        inproc_server: &inproc_server,
        probe: &probe,
        scratch: &scratch,
        seconds: args.load_seconds.unwrap_or(if args.quick { 2 } else { 10 }),
        loads: if args.quick { &QUICK_LOADS } else { &LOADS },
        calls: args.calls.unwrap_or(1),
    };
    if wanted(Section::Server) {
        results.server = Some(server_load(&server_env)?);
    }
    if wanted(Section::Server) || wanted(Section::Saturation) {
        // Fewer rounds in --quick: two still give each ratio a round of its own.
        let saturation_rounds = if args.quick { 2 } else { 5 };
        results.saturation_rounds = Some(Outcome::of(saturation::saturation_rounds(
            &server_env,
            saturation_rounds,
        )));
    }
    if wanted(Section::Server) {
        results.server_programs = Some(if args.quick {
            Outcome::Skipped {
                skipped: "--quick".into(),
            }
        } else {
            Outcome::of(server_programs(&server_env))
        });
    }
    if wanted(Section::Instructions) {
        results.server_instructions = Some(if args.quick {
            Outcome::Skipped {
                skipped: "--quick".into(),
            }
        } else {
            Outcome::of(instructions::instructions(&server_env))
        });
    }
    if wanted(Section::InProcess) {
        results.in_process = Some(in_process(
            pairs,
            rounds,
            &bin.join("alloc-bench"),
            &inproc_alloc_bench,
            &bin.join("alloc-bench-cooperative"),
            &scratch,
        )?);
    }
    if wanted(Section::Analyzer) {
        let (recording, analyzer) = analyzer_section(
            &bin,
            &probe,
            &scratch,
            &analyzer_events,
            args.quick,
            args.only.is_empty(),
        )?;
        results.recording = Some(recording);
        results.analyzer = Some(analyzer);
    }
    if wanted(Section::AlwaysOn) {
        let env = AlwaysOnEnv {
            bin: &bin,
            probe: &probe,
            scratch: &scratch,
            seconds: if args.quick { 30 } else { 120 },
            day: !args.quick,
        };
        results.always_on = Some(always_on(&env)?);
    }
    results.seconds = started.elapsed().as_secs_f64();

    if !args.only.is_empty() {
        print!("{}", results.to_json()?);
        return Ok(());
    }
    let root = workspace_root();
    std::fs::create_dir_all(root.join("bench"))?;
    std::fs::write(root.join("bench/results.json"), results.to_json()?)?;
    // The page and charts from the file, as `--render` makes them.
    render::write_files(&root)?;
    println!(
        "wrote docs/BENCHMARKS.md, docs/images/bench-*.svg and bench/results.json in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The pairs program under every tool, rounds interleaved, and where the
/// probe's time goes.
fn pairs_section(env: &Env, pairs: u64, rounds: usize, tools: &[Tool]) -> Pairs {
    let mut samples: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut skipped: BTreeMap<&'static str, String> = BTreeMap::new();
    time_pairs(env, Tool::Unprobed, pairs / 10).ok(); // warm the page cache
    for round in 1..=rounds {
        for &tool in tools {
            if skipped.contains_key(tool.key()) {
                continue;
            }
            match time_pairs(env, tool, pairs) {
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
    let programs = program_stats(env, pairs).unwrap_or_else(|e| {
        eprintln!("no per-program figures: {e:#}");
        Vec::new()
    });
    let median_of = |key: &str| samples.get(key).map(|s| median(s.clone()));
    let program = match env.depth {
        None => "bench/tools/pairs.c, cc -O1".to_owned(),
        Some(depth) => format!(
            "bench/tools/pairs.c --depth {depth}, cc -O1 {}",
            env.flags.join(" ")
        ),
    };
    let timings: BTreeMap<String, Timing> = tools
        .iter()
        .map(|tool| {
            let timing = Timing {
                ns: median_of(tool.key()),
                skipped: skipped.get(tool.key()).cloned(),
                spread_ns: samples.get(tool.key()).map(|s| [min(s), max(s)]),
            };
            (tool.key().to_owned(), timing)
        })
        .collect();
    let mut section = Pairs {
        n: pairs,
        rounds,
        depth: env.depth,
        program,
        tools: Timings(timings),
        leakscope_vs_floor: None,
        leakscope_vs_floor_spread: None,
        leakscope_own_ns: None,
        bcc_memleak_vs_leakscope: None,
        bcc_memleak_vs_leakscope_spread: None,
        bcc_memleak_vs_floor: None,
        bcc_memleak_vs_floor_spread: None,
        bcc_memleak_own_vs_leakscope_own: None,
        bcc_memleak_own_vs_leakscope_own_spread: None,
        leakscope_programs: programs,
    };
    let (floor, ours) = (median_of("floor"), median_of("leakscope"));
    // The ratios are taken within each round, between runs a few seconds
    // apart, then their median: the machine's load drifts over a run, and
    // runs side by side share more of it than medians taken apart do. A
    // round whose ratio is not finite (a zero difference) has none.
    let per_round = |f: &dyn Fn(usize) -> Option<f64>| -> Option<(f64, [f64; 2])> {
        let ratios: Vec<f64> = (0..rounds)
            .filter_map(f)
            .filter(|r| r.is_finite())
            .collect();
        (!ratios.is_empty()).then(|| (median(ratios.clone()), [min(&ratios), max(&ratios)]))
    };
    let sample = |key: &str, round: usize| samples.get(key).and_then(|s| s.get(round)).copied();
    let vs_floor = per_round(&|r| {
        let (base, floor, ours) = (
            sample("unprobed", r)?,
            sample("floor", r)?,
            sample("leakscope", r)?,
        );
        Some((ours - base) / (floor - base))
    });
    if let (Some((ratio, spread)), Some(floor), Some(ours)) = (vs_floor, floor, ours) {
        section.leakscope_vs_floor = Some(ratio);
        section.leakscope_vs_floor_spread = Some(spread);
        section.leakscope_own_ns = Some(ours - floor);
    }
    if let Some((ratio, spread)) =
        per_round(&|r| Some(sample("bcc_memleak", r)? / sample("leakscope", r)?))
    {
        section.bcc_memleak_vs_leakscope = Some(ratio);
        section.bcc_memleak_vs_leakscope_spread = Some(spread);
    }
    // What the ratio above could be at best: leakscope's own work at zero.
    if let Some((ratio, spread)) =
        per_round(&|r| Some(sample("bcc_memleak", r)? / sample("floor", r)?))
    {
        section.bcc_memleak_vs_floor = Some(ratio);
        section.bcc_memleak_vs_floor_spread = Some(spread);
    }
    // The tools' own work, past the traps both pay: what each one's programs
    // and reader cost. Rounds where leakscope measured at or below the floor
    // (noise) have no ratio.
    if let Some((ratio, spread)) = per_round(&|r| {
        let floor = sample("floor", r)?;
        let ours = sample("leakscope", r)? - floor;
        (ours > 0.0).then_some((sample("bcc_memleak", r)? - floor) / ours)
    }) {
        section.bcc_memleak_own_vs_leakscope_own = Some(ratio);
        section.bcc_memleak_own_vs_leakscope_own_spread = Some(spread);
    }
    section
}

/// Reads `output` until a line `accept` takes; a wrapper that starts the
/// program (heaptrack) prints its own lines first. If the output ends first,
/// the child is killed and reaped and the error says `what` was expected.
fn wait_for_line<T>(
    child: &mut std::process::Child,
    output: &mut impl std::io::BufRead,
    what: &str,
    mut accept: impl FnMut(&str) -> Option<T>,
) -> Result<T> {
    let mut line = String::new();
    loop {
        line.clear();
        if output.read_line(&mut line)? == 0 {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{what} never came: the program's output ended first");
        }
        if let Some(found) = accept(line.trim()) {
            return Ok(found);
        }
    }
}

/// The median (the upper one of an even count), 0 for none: the analyzer's rule.
pub(super) fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(0.0)
}

pub(super) fn min(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::INFINITY, f64::min)
}

pub(super) fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(0.0, f64::max)
}

/// The machine the figures are from.
fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
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
    Machine {
        kernel,
        cpu,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        date,
    }
}
