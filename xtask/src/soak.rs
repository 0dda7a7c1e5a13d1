//! `cargo xtask soak --minutes 30`: the probe on a leaking server for a long
//! time. `fixture-server --composition leaky` is churned at a steady rate of
//! abandoned sessions with the probe attached; every 10 s the probe's resident
//! memory and CPU time, the server's resident memory, its own heap figure and
//! the recording's bytes on disk are sampled. The probe's memory must stay
//! flat while the server's grows with every leaked session. Writes
//! `docs/NAME.md`, `docs/images/NAME.svg` and `bench/NAME.json` (`soak`).
//!
//! The same run left on as a user leaves it (issue 28): `--sample` records a
//! sample, `--cooperative` records `fixture-server-cooperative` through its
//! control socket instead of by eBPF, `--rotate 10m --keep 3` bounds the
//! disk, and `--delete` closes every session, so the server keeps nothing
//! and whatever grows in it is the recorder's.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use leakscope_fixtures::process::{FixtureProcess, ProbeProcess};
use serde_json::{Value, json};

use crate::shell::{target_dir, workspace_root};

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// How long to churn, in minutes.
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Abandoned sessions per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    every: u64,
    /// Record a sample of the allocations, one every SIZE bytes on average
    /// (`attach --sample`; 512KiB when given without a value).
    #[arg(long, num_args = 0..=1, default_missing_value = "512KiB")]
    sample: Option<String>,
    /// The server is `fixture-server-cooperative` (the cooperative allocator
    /// over glibc's), recorded through its control socket, not by eBPF.
    #[arg(long)]
    cooperative: bool,
    /// Write the recording in segments, a new one this often (`attach --rotate`).
    #[arg(long)]
    rotate: Option<String>,
    /// With --rotate: segments kept on disk (`attach --keep`).
    #[arg(long, requires = "rotate")]
    keep: Option<u32>,
    /// The server is built as users ship theirs: `fixture-server-jemalloc`
    /// (tikv-jemallocator as the global allocator) in release with no frame
    /// pointers and no debug info (`testkit::plain_build`), so the probe
    /// walks its stacks by the tables it compiles from `.eh_frame`; its heap
    /// figure is jemalloc's own (`stats.allocated`).
    #[arg(long, conflicts_with = "cooperative")]
    plain: bool,
    /// Close each session with HTTP DELETE: the server keeps nothing, so its
    /// memory shows what the recording itself costs it over time.
    #[arg(long)]
    delete: bool,
    /// The eBPF probe's kernel table of sampled blocks alive holds this many
    /// (`attach --sampled-blocks`, hidden; 1 Mi by default): small, to see a
    /// recording go on once it is full.
    #[arg(long, conflicts_with = "cooperative", requires = "sample")]
    sampled_blocks: Option<u32>,
    /// What the outputs are called: docs/NAME.md, docs/images/NAME.svg,
    /// bench/NAME.json.
    #[arg(long, default_value = "soak")]
    name: String,
}

impl SoakArgs {
    /// The server program: the cooperative build is switched on by the same
    /// attach (through its control socket), the plain one is probed by eBPF.
    fn server(&self) -> &'static str {
        if self.cooperative {
            "fixture-server-cooperative"
        } else if self.plain {
            "fixture-server-jemalloc"
        } else {
            "fixture-server"
        }
    }

    /// What the probe is given past `--pid` and `--out`.
    fn attach_args(&self) -> Vec<String> {
        let mut args = vec!["--force".to_owned()];
        if let Some(size) = &self.sample {
            args.extend(["--sample".to_owned(), size.clone()]);
        }
        if let Some(every) = &self.rotate {
            args.extend(["--rotate".to_owned(), every.clone()]);
        }
        if let Some(keep) = self.keep {
            args.extend(["--keep".to_owned(), keep.to_string()]);
        }
        if let Some(blocks) = self.sampled_blocks {
            args.extend(["--sampled-blocks".to_owned(), blocks.to_string()]);
        }
        args
    }

    /// The command that wrote the outputs, to rerun them.
    fn command(&self) -> String {
        let mut command = format!(
            "cargo xtask soak --minutes {} --rate {}",
            self.minutes, self.rate
        );
        for arg in self.attach_args().iter().skip(1) {
            command.push(' ');
            command.push_str(arg);
        }
        if self.cooperative {
            command.push_str(" --cooperative");
        }
        if self.plain {
            command.push_str(" --plain");
        }
        if self.delete {
            command.push_str(" --delete");
        }
        if self.name != "soak" {
            command.push_str(&format!(" --name {}", self.name));
        }
        command
    }
}

/// One sample.
struct Sample {
    t_s: f64,
    probe_rss: u64,
    /// The probe's own memory: its RSS less the files it maps.
    probe_rss_anon: u64,
    /// Probe CPU seconds (user + system) so far.
    probe_cpu_s: f64,
    server_rss: u64,
    server_heap: u64,
    server_sessions: u64,
    /// The recording's bytes on disk (every segment kept).
    recording_bytes: u64,
}

pub fn run(args: &SoakArgs) -> Result<()> {
    if args.minutes == 0 || args.rate <= 0.0 || args.every == 0 {
        bail!("--minutes, --rate and --every must be positive");
    }
    if args.name.is_empty()
        || !args
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!("--name is a file name's stem: letters, digits, '-' and '_'");
    }
    let probe = crate::build::probe()?;
    let bin = crate::build::release_bins(&["leakscope-fixtures", "leakscope-analyzer"])?;
    let server_dir = if args.plain {
        leakscope_fixtures::testkit::plain_build_in(&target_dir())
    } else {
        bin.clone()
    };
    // A directory a soak: two soaks can run side by side.
    let dir = target_dir().join("soak").join(&args.name);
    std::fs::create_dir_all(&dir)?;
    let recording = dir.join("soak.lsrec");
    // The server runs from a copy: the report at the end names frames only from
    // the very file the target ran, and a build during a long soak would
    // replace target/release/fixture-server.
    let server_bin = dir.join(args.server());
    std::fs::copy(server_dir.join(args.server()), &server_bin)
        .with_context(|| format!("cannot copy {} for the soak", args.server()))?;
    let server = FixtureProcess::start(
        &server_bin,
        &["--composition", "leaky", "--keep-alive", "5s"],
    )?;
    let attach_args = args.attach_args();
    let attach_args: Vec<&str> = attach_args.iter().map(String::as_str).collect();
    let probe_child = ProbeProcess::start(
        crate::shell::privileged(&probe),
        server.pid(),
        &recording,
        &attach_args,
        // Kept for what it says at the end (a kernel table that was full).
        Stdio::from(std::fs::File::create(dir.join("probe.stderr"))?),
    )?;
    // Under sudo the child is sudo; the probe is its child.
    let probe_pid = probe_pid(probe_child.pid());
    let count = (args.minutes as f64 * 60.0 * args.rate).round() as u64;
    let mut churn = Command::new(bin.join("churn"));
    churn
        .args(["--url", &server.mcp_url, "--count", &count.to_string()])
        .args(["--rate", &args.rate.to_string()])
        // churn stops at --max-time (5 min by default): give it the whole soak.
        .args(["--max-time", &format!("{}s", args.minutes * 60 + 60)]);
    if args.delete {
        churn.arg("--delete");
    }
    let mut churn = churn
        .stdout(Stdio::null())
        .spawn()
        .context("cannot run churn")?;
    println!(
        "soak: {count} sessions at {}/s into {} (pid {}), probe pid {probe_pid} ({}), sampling every {} s",
        args.rate,
        args.server(),
        server.pid(),
        attach_args.join(" "),
        args.every
    );
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let debug = server.debug_sessions()?;
        let sample = Sample {
            t_s: start.elapsed().as_secs_f64(),
            probe_rss: crate::procs::rss_bytes(probe_pid),
            probe_rss_anon: crate::procs::rss_anon_bytes(probe_pid),
            probe_cpu_s: crate::procs::cpu_seconds(probe_pid),
            server_rss: crate::procs::rss_bytes(server.pid()),
            server_heap: debug.heap_in_use_bytes,
            server_sessions: debug.sessions,
            recording_bytes: recording_bytes(&recording),
        };
        println!(
            "{:>6.0} s: probe RSS {:.1} MiB ({:.1} anonymous), probe CPU {:.1} s; server RSS {:.1} MiB, heap {:.1} MiB, {} sessions in the map; recording {:.1} MiB",
            sample.t_s,
            mib(sample.probe_rss),
            mib(sample.probe_rss_anon),
            sample.probe_cpu_s,
            mib(sample.server_rss),
            mib(sample.server_heap),
            sample.server_sessions,
            mib(sample.recording_bytes),
        );
        samples.push(sample);
        if churn.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_secs(args.every));
    }
    // SIGINT makes the probe finish its recording.
    probe_child.signal_and_wait(2)?;
    let report_started = Instant::now();
    let status = Command::new(bin.join("leakscope"))
        .arg("report")
        .arg(&recording)
        .arg("--out")
        .arg(dir.join("report"))
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("leakscope report on the soak recording failed");
    }
    let report_s = report_started.elapsed().as_secs_f64();
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/summary.json"))?)?;
    let probe_said = std::fs::read_to_string(dir.join("probe.stderr")).unwrap_or_default();
    write_outputs(
        args,
        &samples,
        &summary,
        recording_bytes(&recording),
        report_s,
        &probe_said,
    )
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// The bytes of `recording` on disk: the file, or with `--rotate` its
/// segments (`soak.000001.lsrec`, ...).
fn recording_bytes(recording: &std::path::Path) -> u64 {
    let (Some(dir), Some(stem)) = (
        recording.parent(),
        recording.file_stem().and_then(|s| s.to_str()),
    ) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(stem) && name.ends_with(".lsrec")
        })
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.len())
        .sum()
}

/// The probe's pid: `pid` itself, or its only child when `pid` is sudo.
fn probe_pid(pid: u32) -> u32 {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "sudo" {
        return pid;
    }
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()
        .and_then(|c| c.split_whitespace().next()?.parse().ok())
        .unwrap_or(pid)
}

fn write_outputs(
    args: &SoakArgs,
    samples: &[Sample],
    summary: &Value,
    recording_bytes: u64,
    report_s: f64,
    probe_said: &str,
) -> Result<()> {
    use std::fmt::Write as _;
    let table_full = probe_said.contains("table of sampled blocks alive was full");
    let first = samples.first().context("no sample")?;
    let last = samples.last().context("no sample")?;
    let range = |value: fn(&Sample) -> u64| {
        let values = samples.iter().map(value);
        (values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
    };
    let (rss_min, rss_max) = range(|s| s.probe_rss);
    let (anon_min, anon_max) = range(|s| s.probe_rss_anon);
    let (server_rss_min, server_rss_max) = range(|s| s.server_rss);
    let disk_max = range(|s| s.recording_bytes).1.max(recording_bytes);
    let duration = (last.t_s - first.t_s).max(1e-9);
    let heap_growth = last.server_heap as f64 - first.server_heap as f64;
    let cpu_share = (last.probe_cpu_s - first.probe_cpu_s) / duration;
    let results = json!({
        "command": args.command(),
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "server": args.server(),
        "sample": args.sample,
        "sampled_blocks": args.sampled_blocks,
        "sampled_table_full": table_full,
        "rotate": args.rotate,
        "keep": args.keep,
        "delete": args.delete,
        "plain": args.plain,
        "samples": samples.iter().map(|s| json!({
            "t_s": s.t_s, "probe_rss_bytes": s.probe_rss,
            "probe_rss_anon_bytes": s.probe_rss_anon, "probe_cpu_s": s.probe_cpu_s,
            "server_rss_bytes": s.server_rss, "server_heap_bytes": s.server_heap,
            "server_sessions": s.server_sessions, "recording_bytes": s.recording_bytes,
        })).collect::<Vec<_>>(),
        "probe_rss_min_bytes": rss_min,
        "probe_rss_max_bytes": rss_max,
        "probe_rss_anon_min_bytes": anon_min,
        "probe_rss_anon_max_bytes": anon_max,
        "probe_cpu_share": cpu_share,
        "server_rss_min_bytes": server_rss_min,
        "server_rss_max_bytes": server_rss_max,
        "server_heap_growth_bytes": heap_growth,
        "recording_bytes": recording_bytes,
        "recording_bytes_max": disk_max,
        "report_s": report_s,
        "verdict": summary["verdict"],
        "sessions": summary["sessions"]["count"],
    });
    let root = workspace_root();
    let name = &args.name;
    std::fs::write(
        root.join(format!("bench/{name}.json")),
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    std::fs::write(root.join(format!("docs/images/{name}.svg")), chart(samples))?;
    let mut md = String::new();
    let how = match (&args.sample, args.cooperative) {
        (None, false) => "`leakscope-probe` attached throughout (every call, by eBPF)".to_owned(),
        (None, true) => {
            "`leakscope-probe` attached throughout (every call, through the cooperative allocator)"
                .to_owned()
        }
        (Some(size), false) => {
            format!("`leakscope-probe attach --sample {size}` throughout (by eBPF)")
        }
        (Some(size), true) => format!(
            "`leakscope-probe attach --sample {size}` throughout (through the cooperative allocator)"
        ),
    };
    let how = if args.plain {
        format!(
            "{how}; the server built as users ship theirs (release, no frame pointers, no debug \
             info, jemalloc as its global allocator), its stacks walked by the `.eh_frame` tables \
             the probe compiles, its heap figure jemalloc's `stats.allocated`"
        )
    } else {
        how
    };
    let how = match args.sampled_blocks {
        Some(blocks) => format!(
            "{how}, its kernel table of sampled blocks alive made to hold {blocks} (`--sampled-blocks`; 1 Mi by default)"
        ),
        None => how,
    };
    let rotation = match (&args.rotate, args.keep) {
        (Some(every), Some(keep)) => format!(", in segments of {every}, the last {keep} kept"),
        (Some(every), None) => format!(", in segments of {every}"),
        _ => String::new(),
    };
    let sessions = if args.delete {
        "sessions each closed by HTTP DELETE (the server keeps nothing: what grows in it is the recorder's)"
    } else {
        "abandoned sessions"
    };
    let _ = writeln!(
        md,
        "# Soak: {} a leaking server{}\n",
        if args.sample.is_some() {
            "a sampled recording left on"
        } else {
            "the probe on"
        },
        if args.cooperative {
            " (cooperative)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "Written by `{}`: `{} --composition leaky` (keep-alive 5 s) churned with {} {sessions} per \
         second for {} minutes, {how}{rotation}, sampled every {} s. Rerun the command for your own.\n",
        args.command(),
        args.server(),
        args.rate,
        args.minutes,
        args.every
    );
    let _ = writeln!(
        md,
        "![probe RSS, server RSS and server heap over time](images/{name}.svg)\n"
    );
    let _ = writeln!(
        md,
        "- probe resident memory: {:.1} to {:.1} MiB over the run ({:.1} to {:.1} MiB of it its own, `RssAnon`: the rest is files it maps, the target's executable among them);\n- probe CPU: {:.1}% of one core on average;\n\
         - the server's resident memory: {:.1} to {:.1} MiB; its own heap figure ({}): {:+.1} MiB, {} sessions left in its map;\n\
         - the recording: {:.1} MiB on disk at the end (at most {:.1} MiB during the run); `leakscope report` read it in {:.1} s; its verdict: {}\n",
        mib(rss_min),
        mib(rss_max),
        mib(anon_min),
        mib(anon_max),
        cpu_share * 100.0,
        mib(server_rss_min),
        mib(server_rss_max),
        if args.plain {
            "jemalloc's `stats.allocated`"
        } else {
            "`mallinfo2`"
        },
        heap_growth / 1048576.0,
        last.server_sessions,
        mib(recording_bytes),
        mib(disk_max),
        report_s,
        summary["verdict"].as_str().unwrap_or("?")
    );
    if table_full {
        let _ = writeln!(
            md,
            "The probe's kernel table of sampled blocks alive filled during the run; the probe said: \"{}\"\n",
            probe_said
                .lines()
                .find(|l| l.contains("was full"))
                .unwrap_or("")
                .trim_start_matches("leakscope-probe: ")
        );
    }
    let _ = writeln!(
        md,
        "| time | probe RSS | of it anonymous | probe CPU (cumulative) | server RSS | server heap | sessions in the map | recording on disk |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let step = (samples.len() / 30).max(1);
    // Every step-th sample, and the last one unless it was just shown.
    let shown_last = (samples.len() - 1).is_multiple_of(step);
    let tail = (!shown_last).then_some(last);
    for s in samples.iter().step_by(step).chain(tail) {
        let _ = writeln!(
            md,
            "| {:.0} s | {:.1} MiB | {:.1} MiB | {:.1} s | {:.1} MiB | {:.1} MiB | {} | {:.1} MiB |",
            s.t_s,
            mib(s.probe_rss),
            mib(s.probe_rss_anon),
            s.probe_cpu_s,
            mib(s.server_rss),
            mib(s.server_heap),
            s.server_sessions,
            mib(s.recording_bytes),
        );
    }
    let _ = writeln!(md, "\nEvery sample is in `bench/{name}.json`.");
    std::fs::write(root.join(format!("docs/{name}.md")), md)?;
    println!("wrote docs/{name}.md, docs/images/{name}.svg and bench/{name}.json");
    Ok(())
}

/// Probe RSS, server RSS and server heap over time, on one scale, as SVG.
/// Hand-written like the bench's bars: two polylines need no plotting crate.
fn chart(samples: &[Sample]) -> String {
    use std::fmt::Write as _;
    let (w, h, left, top, bottom) = (760.0, 320.0, 70.0, 40.0, 40.0);
    let plot_h = h - top - bottom;
    let t_max = samples.last().map_or(1.0, |s| s.t_s).max(1.0);
    let heap_max = samples
        .iter()
        .map(|s| s.server_heap)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let rss_max = samples
        .iter()
        .map(|s| s.probe_rss.max(s.server_rss))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // Both lines share the vertical room; the larger of the two maxima sets it,
    // so a flat probe line reads as flat next to the growing heap.
    let y_max = heap_max.max(rss_max) * 1.1;
    let x = |t: f64| left + (w - left - 20.0) * t / t_max;
    let y = |v: f64| top + plot_h * (1.0 - v / y_max);
    let line = |value: &dyn Fn(&Sample) -> f64| {
        samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.t_s), y(value(s))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = crate::svg::open(
        w,
        h,
        &format!(
            "Soak: probe RSS (red; dashed: its own, RssAnon), the server's RSS (green) and heap (blue), MiB, over {t_max:.0} s"
        ),
    );
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#999"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#999"/>"##,
        top + plot_h,
        w - 20.0,
        top + plot_h,
        top + plot_h
    );
    for frac in [0.0, 0.5, 1.0] {
        let v = y_max / 1.1 * frac;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{:.0}</text>"#,
            left - 6.0,
            y(v) + 4.0,
            v / 1048576.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{t_max:.0} s</text>"#,
        w - 20.0,
        h - 12.0
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        line(&|s| s.server_heap as f64)
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#d62728" stroke-width="2" points="{}"/>"##,
        line(&|s| s.probe_rss as f64)
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="5,4" points="{}"/>"##,
        line(&|s| s.probe_rss_anon as f64)
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#2ca02c" stroke-width="2" points="{}"/>"##,
        line(&|s| s.server_rss as f64)
    );
    svg.push_str("</svg>\n");
    svg
}
