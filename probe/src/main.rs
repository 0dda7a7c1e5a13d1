//! `leakscope-probe`: attach to a running process and record; print recordings.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use leakscope_probe::attach::{AttachOptions, attach};
use leakscope_probe::preset::Preset;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Record which code keeps memory alive in a running process (eBPF uprobes)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        #[arg(long)]
        out: Option<PathBuf>,
        /// A preset file naming the lifecycle functions (default: the built-in rmcp preset).
        #[arg(long)]
        preset: Option<PathBuf>,
        /// Ring buffer size in MiB (a power of two); larger loses fewer events under bursts.
        #[arg(long, default_value_t = 8)]
        ring_buffer_mib: u32,
        /// Benchmarks: attach no-op programs at the same points, to measure the bare uprobe cost.
        #[arg(long, hide = true)]
        bare: bool,
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
        eprintln!("leakscope-probe: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Attach {
            pid,
            duration,
            out,
            preset,
            ring_buffer_mib,
            bare,
        } => {
            let out = out.unwrap_or_else(|| PathBuf::from(format!("leakscope-{pid}.lsrec")));
            if out.extension().and_then(|e| e.to_str()) != Some("lsrec") {
                bail!("--out must name a .lsrec file (got {})", out.display());
            }
            if !ring_buffer_mib.is_power_of_two() {
                bail!("--ring-buffer-mib must be a power of two (got {ring_buffer_mib})");
            }
            let preset = match preset {
                Some(path) => Preset::load(&path)?,
                None => Preset::builtin(),
            };
            attach(AttachOptions {
                pid,
                out,
                duration,
                preset,
                ring_buffer_bytes: ring_buffer_mib << 20,
                status_line: std::io::stderr().is_terminal(),
                bare,
            })
            .await?;
            Ok(())
        }
        Command::Dump { file } => leakscope_probe::recording::dump(&file, std::io::stdout().lock()),
    }
}
