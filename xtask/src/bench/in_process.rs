//! The in-process mode's cost per pair.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail};

use super::median;
use super::results::InProcess;

/// The in-process mode's cost on `Box` pairs, every mode in its own long-lived
/// `alloc-bench`, timed round by round (A B C D E, A B C D E, ...):
/// the system allocator; heaptrack started with the same program (the in-process
/// tool users pick); `leakscope_inproc::Alloc` over dhat idle; the recorder alone
/// (`Recorder::start`); dhat's profiler plus the recorder (`start`); and the
/// cooperative allocator a production build carries (`Alloc<System>`), off,
/// with recording on, and sampling every 512 KiB on average.
pub(super) fn in_process(
    pairs: u64,
    rounds: usize,
    alloc_bench: &Path,
    inproc_alloc_bench: &Path,
    cooperative_alloc_bench: &Path,
    scratch: &Path,
) -> Result<InProcess> {
    let pairs = (pairs / 10).max(1000);
    let command = format!("box {pairs}");
    let heaptrack_out = scratch.join("heaptrack.alloc-bench");
    let mut heaptrack_command = Command::new("heaptrack");
    heaptrack_command
        .arg("-o")
        .arg(&heaptrack_out)
        .arg(alloc_bench);
    let out = scratch.join("inproc.lsrec");
    let mut modes: Vec<(&'static str, Bench, Option<String>)> = vec![
        ("system_ns", Bench::start(Command::new(alloc_bench))?, None),
        (
            "wrapper_idle_ns",
            Bench::start(Command::new(inproc_alloc_bench))?,
            None,
        ),
        (
            "recorder_only_ns",
            Bench::start(Command::new(inproc_alloc_bench))?,
            Some(format!("record-only {}", out.display())),
        ),
        (
            "recording_ns",
            Bench::start(Command::new(inproc_alloc_bench))?,
            Some(format!("record {}", out.display())),
        ),
        (
            "cooperative_off_ns",
            Bench::start(Command::new(cooperative_alloc_bench))?,
            None,
        ),
        (
            "cooperative_on_ns",
            Bench::start(Command::new(cooperative_alloc_bench))?,
            Some(format!("record-only {}", out.display())),
        ),
        (
            "cooperative_sampled_ns",
            Bench::start(Command::new(cooperative_alloc_bench))?,
            Some(format!(
                "record-sampled {} {}",
                out.display(),
                leakscope_recording::sampling::DEFAULT_MEAN_BYTES
            )),
        ),
        (
            "cooperative_on_tables_ns",
            {
                // The same build, walking its stacks as one without frame
                // pointers does: by the unwind tables.
                let mut bench = Bench::start(Command::new(cooperative_alloc_bench))?;
                bench.ask("unwind")?;
                bench
            },
            Some(format!("record-only {}", out.display())),
        ),
        (
            "cooperative_on_libgcc_ns",
            {
                // And with `_Unwind_Backtrace`, as dhat unwinds.
                let mut bench = Bench::start(Command::new(cooperative_alloc_bench))?;
                bench.ask("unwind-libgcc")?;
                bench
            },
            Some(format!("record-only {}", out.display())),
        ),
    ];
    let heaptrack = match Bench::start(heaptrack_command) {
        Ok(bench) => {
            modes.insert(1, ("heaptrack_ns", bench, None));
            None
        }
        Err(e) => Some(format!(
            "heaptrack cannot run alloc-bench ({e:#}; apt-get install heaptrack)"
        )),
    };
    // One untimed run each: page faults, heaptrack's first interning of stacks.
    for (_, bench, _) in &mut modes {
        bench.time(&command)?;
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        for ((_, bench, record), samples) in modes.iter_mut().zip(&mut samples) {
            if let Some(record) = record {
                bench.ask(record)?;
            }
            samples.push(bench.time(&command)?);
            if record.is_some() {
                bench.ask("stop")?;
            }
        }
    }
    let mut medians = BTreeMap::new();
    for ((key, bench, _), samples) in modes.into_iter().zip(samples) {
        bench.finish();
        medians.insert(key, median(samples));
    }
    // Every mode above but heaptrack always runs.
    let ns = |key: &str| {
        medians
            .get(key)
            .copied()
            .with_context(|| format!("alloc-bench's {key} was not timed"))
    };
    let result = InProcess {
        n: pairs,
        rounds,
        system_ns: ns("system_ns")?,
        heaptrack_ns: medians.get("heaptrack_ns").copied(),
        heaptrack_skipped: heaptrack,
        wrapper_idle_ns: ns("wrapper_idle_ns")?,
        recorder_only_ns: ns("recorder_only_ns")?,
        recording_ns: ns("recording_ns")?,
        cooperative_off_ns: ns("cooperative_off_ns")?,
        cooperative_on_ns: ns("cooperative_on_ns")?,
        cooperative_sampled_ns: ns("cooperative_sampled_ns")?,
        cooperative_on_tables_ns: medians.get("cooperative_on_tables_ns").copied(),
        cooperative_on_libgcc_ns: medians.get("cooperative_on_libgcc_ns").copied(),
    };
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(out.with_file_name("dhat-heap.json"));
    let _ = std::fs::remove_file(heaptrack_out.with_extension("alloc-bench.zst"));
    Ok(result)
}

/// Builds `alloc-bench` with the in-process mode, in a target directory of its
/// own, so neither build undoes the other.
pub(super) fn build_inproc_alloc_bench(target: &Path) -> Result<std::path::PathBuf> {
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
        &target.to_string_lossy(),
    ])?;
    Ok(target.join("release/alloc-bench"))
}

/// `alloc-bench`, driven over its stdin protocol.
pub(super) struct Bench {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Bench {
    /// Starts `command` (alloc-bench, or a wrapper that runs it) and waits for
    /// `ready`; a wrapper's own lines before it are skipped.
    fn start(mut command: Command) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let input = child.stdin.take().expect("piped");
        let mut output = BufReader::new(child.stdout.take().expect("piped"));
        super::wait_for_line(&mut child, &mut output, "alloc-bench's `ready`", |line| {
            (line == "ready").then_some(())
        })?;
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
