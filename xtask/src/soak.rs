//! `cargo xtask soak --minutes 30`: the probe on a leaking server for a long
//! time. `fixture-server --composition leaky` is churned at a steady rate of
//! abandoned sessions with the probe attached; every 10 s the probe's resident
//! memory and CPU time and the server's own heap figure are sampled. The
//! probe's memory must stay flat while the server's grows with every leaked
//! session. Writes `docs/soak.md`, `docs/images/soak.svg` and `bench/soak.json`.

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
}

/// One sample.
struct Sample {
    t_s: f64,
    probe_rss: u64,
    /// Probe CPU seconds (user + system) so far.
    probe_cpu_s: f64,
    server_heap: u64,
    server_sessions: u64,
}

pub fn run(args: &SoakArgs) -> Result<()> {
    if args.minutes == 0 || args.rate <= 0.0 || args.every == 0 {
        bail!("--minutes, --rate and --every must be positive");
    }
    let probe = crate::build::probe()?;
    let bin = crate::build::release_bins(&["leakscope-fixtures", "leakscope-analyzer"])?;
    let dir = target_dir().join("soak");
    std::fs::create_dir_all(&dir)?;
    let recording = dir.join("soak.lsrec");
    // The server runs from a copy: the report at the end names frames only from
    // the very file the target ran, and a build during a long soak would
    // replace target/release/fixture-server.
    let server_bin = dir.join("fixture-server");
    std::fs::copy(bin.join("fixture-server"), &server_bin)
        .context("cannot copy fixture-server for the soak")?;
    let server = FixtureProcess::start(
        &server_bin,
        &["--composition", "leaky", "--keep-alive", "5s"],
    )?;
    let probe_child = ProbeProcess::start(
        crate::shell::privileged(&probe),
        server.pid(),
        &recording,
        &["--force"],
        Stdio::null(),
    )?;
    // Under sudo the child is sudo; the probe is its child.
    let probe_pid = probe_pid(probe_child.pid());
    let count = (args.minutes as f64 * 60.0 * args.rate).round() as u64;
    let mut churn = Command::new(bin.join("churn"))
        .args(["--url", &server.mcp_url, "--count", &count.to_string()])
        .args(["--rate", &args.rate.to_string()])
        // churn stops at --max-time (5 min by default): give it the whole soak.
        .args(["--max-time", &format!("{}s", args.minutes * 60 + 60)])
        .stdout(Stdio::null())
        .spawn()
        .context("cannot run churn")?;
    println!(
        "soak: {count} sessions at {}/s into fixture-server (pid {}), probe pid {probe_pid}, sampling every {} s",
        args.rate,
        server.pid(),
        args.every
    );
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let debug = server.debug_sessions()?;
        let sample = Sample {
            t_s: start.elapsed().as_secs_f64(),
            probe_rss: crate::procs::rss_bytes(probe_pid),
            probe_cpu_s: crate::procs::cpu_seconds(probe_pid),
            server_heap: debug.heap_in_use_bytes,
            server_sessions: debug.sessions,
        };
        println!(
            "{:>6.0} s: probe RSS {:.1} MiB, probe CPU {:.1} s; server heap {:.1} MiB, {} sessions in the map",
            sample.t_s,
            sample.probe_rss as f64 / 1048576.0,
            sample.probe_cpu_s,
            sample.server_heap as f64 / 1048576.0,
            sample.server_sessions
        );
        samples.push(sample);
        if churn.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_secs(args.every));
    }
    // SIGINT makes the probe finish its recording.
    probe_child.signal_and_wait(2)?;
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
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/summary.json"))?)?;
    let recording_bytes = std::fs::metadata(&recording)?.len();
    write_outputs(args, &samples, &summary, recording_bytes)
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
) -> Result<()> {
    use std::fmt::Write as _;
    let first = samples.first().context("no sample")?;
    let last = samples.last().context("no sample")?;
    let rss_max = samples.iter().map(|s| s.probe_rss).max().unwrap_or(0);
    let rss_min = samples.iter().map(|s| s.probe_rss).min().unwrap_or(0);
    let duration = (last.t_s - first.t_s).max(1e-9);
    let heap_growth = last.server_heap as f64 - first.server_heap as f64;
    let cpu_share = (last.probe_cpu_s - first.probe_cpu_s) / duration;
    let results = json!({
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "samples": samples.iter().map(|s| json!({
            "t_s": s.t_s, "probe_rss_bytes": s.probe_rss, "probe_cpu_s": s.probe_cpu_s,
            "server_heap_bytes": s.server_heap, "server_sessions": s.server_sessions,
        })).collect::<Vec<_>>(),
        "probe_rss_min_bytes": rss_min,
        "probe_rss_max_bytes": rss_max,
        "probe_cpu_share": cpu_share,
        "server_heap_growth_bytes": heap_growth,
        "recording_bytes": recording_bytes,
        "verdict": summary["verdict"],
        "sessions": summary["sessions"]["count"],
    });
    let root = workspace_root();
    std::fs::write(
        root.join("bench/soak.json"),
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    std::fs::write(root.join("docs/images/soak.svg"), chart(samples))?;
    let mut md = String::new();
    let _ = writeln!(md, "# Soak: the probe on a leaking server\n");
    let _ = writeln!(
        md,
        "Written by `cargo xtask soak --minutes {} --rate {}`: `fixture-server --composition leaky` \
         (keep-alive 5 s) churned with {} abandoned sessions per second for {} minutes, \
         `leakscope-probe` attached throughout, sampled every {} s. Rerun the command for your own.\n",
        args.minutes, args.rate, args.rate, args.minutes, args.every
    );
    let _ = writeln!(
        md,
        "![probe RSS and server heap over time](images/soak.svg)\n"
    );
    let _ = writeln!(
        md,
        "- probe resident memory: {:.1} to {:.1} MiB over the run;\n- probe CPU: {:.1}% of one core on average;\n- the server's own heap figure (`mallinfo2`): {:+.1} MiB, {} sessions left in its map;\n- the recording: {:.1} MiB; the report's verdict: {}\n",
        rss_min as f64 / 1048576.0,
        rss_max as f64 / 1048576.0,
        cpu_share * 100.0,
        heap_growth / 1048576.0,
        last.server_sessions,
        recording_bytes as f64 / 1048576.0,
        summary["verdict"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        md,
        "| time | probe RSS | probe CPU (cumulative) | server heap | sessions in the map |\n| ---: | ---: | ---: | ---: | ---: |"
    );
    let step = (samples.len() / 30).max(1);
    // Every step-th sample, and the last one unless it was just shown.
    let shown_last = (samples.len() - 1).is_multiple_of(step);
    let tail = (!shown_last).then_some(last);
    for s in samples.iter().step_by(step).chain(tail) {
        let _ = writeln!(
            md,
            "| {:.0} s | {:.1} MiB | {:.1} s | {:.1} MiB | {} |",
            s.t_s,
            s.probe_rss as f64 / 1048576.0,
            s.probe_cpu_s,
            s.server_heap as f64 / 1048576.0,
            s.server_sessions
        );
    }
    let _ = writeln!(md, "\nEvery sample is in `bench/soak.json`.");
    std::fs::write(root.join("docs/soak.md"), md)?;
    println!("wrote docs/soak.md, docs/images/soak.svg and bench/soak.json");
    Ok(())
}

/// Probe RSS and server heap over time, each on its own scale, as SVG.
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
        .map(|s| s.probe_rss)
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
        &format!("Soak: probe RSS (red) and the server's heap (blue), MiB, over {t_max:.0} s"),
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
    svg.push_str("</svg>\n");
    svg
}
