//! `leakscope-probe`: attach to a running process and record; print recordings.
//! Argument handling and what to print; the work is in the library.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use leakscope_probe::attach::{
    AttachEvent, AttachOptions, Candidate, Rotation, Stats, Unwind, attach,
};
use leakscope_probe::plan::{missing_scopes, scope_matches};
use leakscope_probe::symbols::ElfSymbols;
use leakscope_recording::ScopeKind;
use leakscope_recording::output::{Existing, Owner};
use leakscope_recording::preset::Preset;
use leakscope_recording::printable::printable;
use leakscope_recording::sampling::Sampling;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Record which code keeps memory alive in a running process (eBPF uprobes, or the process's own cooperative allocator)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `attach --unwind` (see [`Unwind`]).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum UnwindArg {
    Auto,
    FramePointers,
    Tables,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Attach to a running process by pid and record allocations, frees and session lifecycle.
    Attach {
        /// The process to attach to (it keeps running; nothing is restarted).
        #[arg(long)]
        pid: u32,
        /// Stop after this long (e.g. 60s, 5m). Without it: until Ctrl-C or the target exits.
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
        /// The recording to write (must end in .lsrec). Default: leakscope-PID.lsrec.
        /// Created mode 0600 (owned by the user who ran sudo, when run through it);
        /// never written through a symbolic link; an existing file needs --force.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace an existing --out (a regular file; a symbolic link is still refused).
        #[arg(long)]
        force: bool,
        /// A preset file naming the lifecycle functions (default: the built-in rmcp preset).
        #[arg(long)]
        preset: Option<PathBuf>,
        /// Ring buffer size in MiB (a power of two); larger loses fewer events under bursts.
        #[arg(long, default_value_t = 8)]
        ring_buffer_mib: u32,
        /// Benchmarks: attach no-op programs at the same points, to measure the bare uprobe cost.
        #[arg(long, hide = true)]
        bare: bool,
        /// At the end, print each eBPF program's runs and mean time per run (the
        /// probe's own cost per call in the target, measured by the kernel).
        #[arg(long)]
        bpf_stats: bool,
        /// Record with eBPF uprobes (as root) even when the process records
        /// itself (its allocator is `leakscope_inproc::Alloc`, listening): to
        /// see its C allocations too, or to compare the two modes.
        #[arg(long)]
        ebpf: bool,
        /// Record a sample of the allocations, one every SIZE bytes allocated
        /// on average (e.g. 512KiB, the default when given without a value;
        /// jemalloc's and Go's), instead of every call: what a server can
        /// leave switched on for hours. Bytes become estimates, sessions and
        /// tasks stay exact. `--sample 1` records every call, as no flag does.
        #[arg(long, value_name = "SIZE", num_args = 0..=1, default_missing_value = "512KiB", value_parser = parse_sample)]
        sample: Option<Sampling>,
        /// Write the recording in segments, a new one this often (e.g. 1h):
        /// OUT.000001.lsrec, OUT.000002.lsrec, ... each a whole recording;
        /// `leakscope report OUT` reads those on disk as one. For a recording
        /// that stays on: with --keep, its disk is bounded.
        #[arg(long, value_name = "EVERY", value_parser = humantime::parse_duration)]
        rotate: Option<Duration>,
        /// With --rotate: segments kept on disk (the one being written
        /// included); older ones are deleted.
        #[arg(long, value_name = "N", default_value_t = 24, requires = "rotate", value_parser = clap::value_parser!(u32).range(1..))]
        keep: u32,
        /// How stacks are walked: `auto` walks a build with frame pointers by
        /// them and any other by the tables the probe compiles from each
        /// executable's .eh_frame (whole stacks from a plain `cargo build
        /// --release`); `frame-pointers` and `tables` force one.
        #[arg(long, value_enum, default_value_t = UnwindArg::Auto)]
        unwind: UnwindArg,
        /// Tests: entries of the kernel's table of sampled blocks alive, to
        /// see what a recording does once it is full.
        #[arg(long, hide = true, default_value_t = leakscope_probe_ebpf::SAMPLED_BLOCKS, value_parser = clap::value_parser!(u32).range(1..))]
        sampled_blocks: u32,
    },
    /// Which lifecycle functions a preset finds in an executable, scope by scope
    /// (what `attach` would probe), without attaching. Exits 1 when a scope the
    /// session model needs (create, spawn, poll, drop) matches nothing.
    PresetCheck {
        /// The executable (a server binary with symbols).
        #[arg(long)]
        exe: PathBuf,
        /// A preset file (default: the built-in rmcp preset).
        #[arg(long)]
        preset: Option<PathBuf>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a recording as JSON lines: the header first, then one record per line.
    Dump {
        /// A .lsrec recording.
        file: PathBuf,
    },
}

#[tokio::main]
async fn main() {
    if let Err(e) = run(Cli::parse()).await {
        // One line, whatever the error's source printed.
        // What the target said (a refusal) may be in it: shown, not obeyed.
        eprintln!(
            "leakscope-probe: {}",
            printable(&format!("{e:#}").replace('\n', " "), 2000)
        );
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Attach {
            pid,
            duration,
            out,
            force,
            preset,
            ring_buffer_mib,
            bare,
            bpf_stats,
            ebpf,
            sample,
            rotate,
            keep,
            unwind,
            sampled_blocks,
        } => {
            let out = out.unwrap_or_else(|| PathBuf::from(format!("leakscope-{pid}.lsrec")));
            if out.extension().and_then(|e| e.to_str()) != Some("lsrec") {
                bail!("--out must name a .lsrec file (got {})", out.display());
            }
            if !ring_buffer_mib.is_power_of_two() || ring_buffer_mib > MAX_RING_BUFFER_MIB {
                bail!(
                    "--ring-buffer-mib must be a power of two from 1 to {MAX_RING_BUFFER_MIB} (got {ring_buffer_mib})"
                );
            }
            let preset = match preset {
                Some(path) => Preset::load(&path)?,
                None => Preset::builtin(),
            };
            let status = status_bar(std::io::stderr().is_terminal());
            let outcome = attach(
                AttachOptions {
                    pid,
                    out: out.clone(),
                    existing: if force {
                        Existing::Replace
                    } else {
                        Existing::Refuse
                    },
                    owner: Owner::invoking_user(),
                    duration,
                    preset,
                    ring_buffer_bytes: ring_buffer_mib << 20,
                    bare,
                    bpf_stats,
                    ebpf,
                    sampling: sample.unwrap_or(Sampling::Every),
                    rotation: rotate.map(|every| Rotation { every, keep }),
                    unwind: match unwind {
                        UnwindArg::Auto => Unwind::Auto,
                        UnwindArg::FramePointers => Unwind::FramePointers,
                        UnwindArg::Tables => Unwind::Tables,
                    },
                    sampled_blocks,
                },
                |event| match event {
                    AttachEvent::Warning(text) => {
                        status.suspend(|| {
                            eprintln!("leakscope-probe: warning: {}", printable(&text, 2000))
                        })
                    }
                    AttachEvent::Attached { pid, probes } => {
                        println!("attached: pid={pid} probes={probes}");
                        let _ = std::io::stdout().flush();
                    }
                    AttachEvent::InProcess { pid } => {
                        println!(
                            "attached: pid={pid} in-process (it records itself through leakscope_inproc::Alloc; no eBPF)"
                        );
                        let _ = std::io::stdout().flush();
                    }
                    AttachEvent::Progress {
                        stats,
                        events_per_s,
                        top,
                    } => status.set_message(status_text(stats, events_per_s, top)),
                },
            )
            .await;
            status.finish_and_clear();
            let outcome = outcome?;
            let stats = outcome.stats;
            eprintln!(
                "leakscope-probe: {} events ({} allocations, {} frees, {} lost) written to {} ({})",
                stats.events,
                stats.allocs,
                stats.frees,
                stats.lost,
                outcome.written.display(),
                outcome.end.describe()
            );
            if rotate.is_some() {
                eprintln!(
                    "leakscope-probe: written in segments (at most {keep} on disk); `leakscope report {}` reads them as one",
                    out.display()
                );
            }
            if stats.malformed > 0 {
                eprintln!(
                    "leakscope-probe: {} records from the kernel could not be decoded and count as lost (is the eBPF object from another build of the probe?)",
                    stats.malformed
                );
            }
            if stats.sampled_map_full {
                eprintln!(
                    "leakscope-probe: the kernel's table of sampled blocks alive was full: the frees of the blocks it could not take were matched by the probe (nothing lost)"
                );
            }
            if stats.untracked > 0 {
                eprintln!(
                    "leakscope-probe: {} blocks were made while the status line's count was full: they are in the recording, not in its live figure",
                    stats.untracked
                );
            }
            if stats.trampolines_unresolved > 0 {
                eprintln!(
                    "leakscope-probe: {} stacks end at a uretprobe trampoline whose call's entry was not seen (a dropped record, or another tool's uretprobe on the target)",
                    stats.trampolines_unresolved
                );
            }
            if let Some(cuts) = stats.unwind_cuts {
                let why = [
                    "in code with no table",
                    "below a table's first row",
                    "at a rule the tables do not follow",
                    "at a signal frame",
                    "where rbp was lost",
                    "at a stack read that failed",
                    "at a frame above its caller's",
                    "at a uretprobe trampoline whose call's entry was not seen",
                ];
                let said: Vec<String> = cuts
                    .iter()
                    .zip(why)
                    .filter(|(count, _)| **count > 0)
                    .map(|(count, why)| format!("{count} {why}"))
                    .collect();
                if !said.is_empty() {
                    eprintln!(
                        "leakscope-probe: stacks walked by table that stopped before the outermost frame: {}",
                        said.join(", ")
                    );
                }
            }
            for program in &outcome.programs {
                eprintln!(
                    "leakscope-probe: bpf-stats program={} runs={} ns_per_run={:.0} verified_insns={}",
                    program.program,
                    program.runs,
                    program.run_time.as_nanos() as f64 / program.runs as f64,
                    program
                        .verified_insns
                        .map_or_else(|| "unknown".to_owned(), |n| n.to_string())
                );
            }
            Ok(())
        }
        Command::PresetCheck { exe, preset, json } => {
            let preset = match preset {
                Some(path) => Preset::load(&path)?,
                None => Preset::builtin(),
            };
            preset_check(&exe, &preset, json)
        }
        Command::Dump { file } => leakscope_recording::dump(&file, std::io::stdout().lock()),
    }
}

/// `--sample SIZE`: a byte count such as `512KiB`, `1MiB` or `4096`.
fn parse_sample(text: &str) -> Result<Sampling, String> {
    let bytes: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("{text:?} is not a size such as 512KiB: {e}"))?;
    Ok(Sampling::every_bytes(bytes.as_u64()))
}

/// The largest ring buffer: 2 GiB is the kernel's limit for a BPF ring buffer
/// and the most a u32 byte count holds.
const MAX_RING_BUFFER_MIB: u32 = 1024;

/// The scopes the session model cannot do without.
const REQUIRED_SCOPES: [ScopeKind; 4] = [
    ScopeKind::SessionCreate,
    ScopeKind::WorkerSpawn,
    ScopeKind::WorkerPoll,
    ScopeKind::WorkerDrop,
];

fn preset_check(exe: &std::path::Path, preset: &Preset, json: bool) -> Result<()> {
    let symbols = ElfSymbols::load(exe)?;
    let matches = scope_matches(&symbols, preset);
    let missing = missing_scopes(&matches);
    let rmcp = symbols.crate_version("rmcp");
    if json {
        let scopes: Vec<serde_json::Value> = matches
            .iter()
            .map(|m| {
                serde_json::json!({
                    "kind": m.kind.name(),
                    "functions": m.functions.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "exe": exe.display().to_string(),
                "rmcp_version": rmcp,
                "preset": preset.name,
                "scopes": scopes,
                "missing": missing.iter().map(|k| k.name()).collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "{} (rmcp {}), preset {}:",
            exe.display(),
            rmcp.as_deref().unwrap_or("unknown"),
            preset.name
        );
        for m in &matches {
            println!("  {:<15} {} function(s)", m.kind.name(), m.functions.len());
            for f in &m.functions {
                println!("      {}", f.name);
            }
        }
    }
    let required_missing: Vec<&str> = missing
        .iter()
        .filter(|k| REQUIRED_SCOPES.contains(k))
        .map(|k| k.name())
        .collect();
    if !required_missing.is_empty() {
        bail!(
            "{}: no function matches {}",
            exe.display(),
            required_missing.join(", ")
        );
    }
    Ok(())
}

fn status_bar(enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn status_text(stats: &Stats, rate: f64, top: Option<&Candidate>) -> String {
    let estimated = if stats.sampled { "~" } else { "" };
    let mut text = format!(
        "{:.0} events/s | live {estimated}{} {} | sessions born {} ended {} | lost {}",
        rate,
        bytesize::ByteSize::b(stats.live_bytes).display().iec(),
        if stats.sampled {
            "estimated"
        } else {
            "tracked"
        },
        stats.sessions_born,
        stats.workers_ended,
        stats.lost
    );
    if let Some(top) = top {
        text.push_str(&format!(
            " | top leak candidate: {} {estimated}{} (+{} in {} s)",
            printable(&top.site, 120),
            bytesize::ByteSize::b(top.live_bytes).display().iec(),
            bytesize::ByteSize::b(top.grew_bytes).display().iec(),
            top.over.as_secs()
        ));
    }
    text
}
