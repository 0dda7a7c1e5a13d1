//! `cargo xtask bench`: what the probe costs the target, as ratios measured side by side.
//!
//! One `alloc-bench` process runs malloc/free pairs in rounds; each round times the
//! same loop unprobed, under no-op uprobes at the probe's attach points (the floor
//! any uprobe tool pays), and under the full probe. Medians over rounds are printed
//! with the ns each mode adds per pair; nothing is asserted (the machine is noisy).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// malloc/free pairs per timed run.
    #[arg(long, default_value_t = 1_000_000)]
    pairs: u64,
    /// Rounds (each times every mode once); medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Unprobed,
    BareUprobes,
    FullProbe,
}

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

    /// ns per pair for `run N` (libc) or `box N` (global allocator).
    fn time(&mut self, command: &str) -> Result<f64> {
        let answer = self.ask(command)?;
        answer
            .parse()
            .with_context(|| format!("alloc-bench said {answer:?}"))
    }

    fn run(&mut self, pairs: u64) -> Result<f64> {
        self.time(&format!("run {pairs}"))
    }

    fn finish(self) {
        let Bench {
            mut child, input, ..
        } = self;
        drop(input);
        let _ = child.wait();
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The in-process mode's cost on `Box` allocations: the system allocator, dhat's
/// wrapper alone, and dhat's profiler plus the leakscope recorder.
fn in_process(args: &BenchArgs, system_build: &Path) -> Result<()> {
    let pairs = (args.pairs / 10).max(1000);
    let command = format!("box {pairs}");
    let mut plain = Bench::start(system_build)?;
    plain.time(&command)?;
    let system = median(
        (0..args.rounds)
            .map(|_| plain.time(&command))
            .collect::<Result<_>>()?,
    );
    plain.finish();
    crate::shell::cargo(&[
        "build",
        "--release",
        "-p",
        "leakscope-fixtures",
        "--features",
        "dhat-heap",
        "--bin",
        "alloc-bench",
    ])?;
    let mut inproc = Bench::start(system_build)?;
    inproc.time(&command)?;
    let wrapper = median(
        (0..args.rounds)
            .map(|_| inproc.time(&command))
            .collect::<Result<_>>()?,
    );
    let out = std::env::temp_dir().join("leakscope-bench-inproc.lsrec");
    let mut recording = Vec::new();
    for _ in 0..args.rounds {
        inproc.ask(&format!("record {}", out.display()))?;
        recording.push(inproc.time(&command)?);
        inproc.ask("stop")?;
    }
    inproc.finish();
    let recording = median(recording);
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(out.with_file_name("dhat-heap.json"));
    println!();
    println!(
        "Box<[u8; 64]> alloc+drop pairs: {pairs} per run, {} rounds, medians",
        args.rounds
    );
    println!("| mode | ns per pair | vs system allocator |");
    println!("| --- | --- | --- |");
    println!("| system allocator | {system:.1} | 1.0x |");
    println!(
        "| inproc::Alloc, not recording (dhat wrapper idle) | {wrapper:.1} | {:.1}x |",
        wrapper / system
    );
    println!(
        "| inproc::Alloc recording (dhat profiler + leakscope recorder) | {recording:.1} | {:.0}x |",
        recording / system
    );
    Ok(())
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let probe = crate::build_probe()?;
    let release = crate::build_release_bins(&["leakscope-fixtures"])?;
    let mut bench = Bench::start(&release.join("alloc-bench"))?;
    bench.run(args.pairs / 10)?; // warm up the allocator and the page cache

    let modes = [Mode::Unprobed, Mode::BareUprobes, Mode::FullProbe];
    let mut results: Vec<(Mode, Vec<f64>)> = modes.iter().map(|m| (*m, vec![])).collect();
    let out = std::env::temp_dir().join("leakscope-bench.lsrec");
    for round in 0..args.rounds {
        for (mode, samples) in &mut results {
            let attached = match mode {
                Mode::Unprobed => None,
                Mode::BareUprobes => Some(attach(&probe, bench.child.id(), &out, true)?),
                Mode::FullProbe => Some(attach(&probe, bench.child.id(), &out, false)?),
            };
            let ns = bench.run(args.pairs)?;
            if let Some(probe) = attached {
                stop(probe)?;
            }
            eprintln!("round {}: {mode:?}: {ns:.1} ns/pair", round + 1);
            samples.push(ns);
        }
    }
    bench.finish();
    let _ = std::fs::remove_file(&out);

    let median = |mode: Mode| {
        median(
            results
                .iter()
                .find(|(m, _)| *m == mode)
                .expect("mode")
                .1
                .clone(),
        )
    };
    let (base, bare, full) = (
        median(Mode::Unprobed),
        median(Mode::BareUprobes),
        median(Mode::FullProbe),
    );
    println!(
        "malloc(64)+free pairs: {} per run, {} rounds, medians",
        args.pairs, args.rounds
    );
    println!("| mode | ns per pair | added vs unprobed |");
    println!("| --- | --- | --- |");
    println!("| unprobed | {base:.1} | - |");
    println!(
        "| bare uprobes (no-op programs, same points) | {bare:.1} | {:.1} |",
        bare - base
    );
    println!("| leakscope probe | {full:.1} | {:.1} |", full - base);
    println!(
        "leakscope adds {:.2}x the bare-uprobe floor ({:.1} ns of its own code per pair)",
        (full - base) / (bare - base),
        full - bare
    );
    in_process(args, &release.join("alloc-bench"))
}

fn attach(probe: &Path, pid: u32, out: &Path, bare: bool) -> Result<Child> {
    let mut command = crate::shell::privileged(probe);
    command
        .args(["attach", "--pid", &pid.to_string(), "--out"])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if bare {
        command.arg("--bare");
    }
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
