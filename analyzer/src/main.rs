//! `leakscope`: analyze recordings. Argument handling and what to print; the work
//! is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use leakscope_analyzer::{Owner, PprofOptions, ReportOptions, report_with_progress};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Explain which code keeps memory alive, from a leakscope recording"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write report.md, summary.json, charts (SVG+PNG), flamegraph.svg, trace.json and profile.pb.gz for a recording.
    Report {
        /// A .lsrec recording (from leakscope-probe or the in-process mode).
        recording: PathBuf,
        /// Directory for the outputs (created if missing).
        #[arg(long, default_value = "report")]
        out: PathBuf,
        /// A TOML rules file of extra categories (tried before the built-in rmcp rules).
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Frees within this long after a worker's end count as transient, later ones as reclaimed.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        grace: Duration,
        /// The application's own trace (tracing-chrome JSON, e.g. from
        /// leakscope_inproc::chrome_layer) to merge into trace.json, on one clock.
        #[arg(long, value_name = "TRACE_JSON")]
        app_trace: Option<PathBuf>,
        /// Take this machine's paths and hostnames out of every output, for a
        /// public bug tracker (paths become their file names, hosts `<host>`).
        #[arg(long)]
        redact: bool,
    },
    /// Compare two recordings of the same load (a buggy and a fixed build): write
    /// diff.md, diff.json and before/after charts (SVG+PNG).
    Diff {
        /// The recording before the change.
        before: PathBuf,
        /// The recording after the change.
        after: PathBuf,
        /// Directory for the outputs (created if missing).
        #[arg(long, default_value = "diff")]
        out: PathBuf,
        /// A TOML rules file of extra categories, for both recordings.
        #[arg(long)]
        rules: Option<PathBuf>,
        /// As for `report`, for both recordings.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        grace: Duration,
        /// As for `report`: no paths or hostnames in the outputs.
        #[arg(long)]
        redact: bool,
    },
    /// Write a recording's heap profile in pprof's format (gzipped profile.proto),
    /// for go tool pprof, Grafana Pyroscope or Parca.
    Pprof {
        /// A .lsrec recording.
        recording: PathBuf,
        /// Where to write the profile.
        #[arg(long, default_value = "profile.pb.gz")]
        out: PathBuf,
        /// A TOML rules file of extra categories (the `category` label).
        #[arg(long)]
        rules: Option<PathBuf>,
        /// As for `report`: decides which sessions are leaked (the `session_state` label).
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        grace: Duration,
    },
    /// Print a recording as JSON lines (header first).
    Dump { recording: PathBuf },
    /// Attribute a DHAT profile's t-end bytes to the same categories (Markdown table).
    Dhat {
        /// A dhat-heap.json written by dhat-rs.
        profile: PathBuf,
        /// Also write the attribution as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Extra rules, tried before the built-in rmcp rules.
        #[arg(long)]
        rules: Option<PathBuf>,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        // One line, whatever the error's source printed.
        eprintln!("leakscope: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Report {
            recording,
            out,
            rules,
            grace,
            app_trace,
            redact,
        } => {
            let options = ReportOptions {
                out_dir: out.clone(),
                rules,
                grace_ns: grace.as_nanos() as u64,
                app_trace,
                redact,
                owner: Owner::invoking_user(),
            };
            let outcome =
                with_progress(|progress| report_with_progress(&recording, &options, progress))?;
            for warning in &outcome.warnings {
                eprintln!("leakscope: warning: {}: {warning}", recording.display());
            }
            println!("{}", outcome.summary.verdict);
            println!("report written to {}", out.join("report.md").display());
            Ok(())
        }
        Command::Dhat {
            profile,
            json,
            rules,
        } => {
            let rules = match rules {
                Some(path) => leakscope_analyzer::Rules::with_user_file(&path)?,
                None => leakscope_analyzer::Rules::builtin(),
            };
            let attribution = leakscope_analyzer::dhat::attribute_profile(&profile, &rules)?;
            print!("{}", leakscope_analyzer::dhat::render(&attribution));
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&attribution)?)?;
            }
            Ok(())
        }
        Command::Diff {
            before,
            after,
            out,
            rules,
            grace,
            redact,
        } => {
            let options = ReportOptions {
                out_dir: out.clone(),
                rules,
                grace_ns: grace.as_nanos() as u64,
                app_trace: None,
                redact,
                owner: Owner::invoking_user(),
            };
            let outcome = with_progress(|progress| {
                leakscope_analyzer::diff_with_progress(&before, &after, &options, progress)
            })?;
            for warning in &outcome.warnings {
                eprintln!("leakscope: warning: {warning}");
            }
            println!("{}", outcome.diff.verdict);
            println!("diff written to {}", out.join("diff.md").display());
            Ok(())
        }
        Command::Pprof {
            recording,
            out,
            rules,
            grace,
        } => {
            let options = PprofOptions {
                out: out.clone(),
                rules,
                grace_ns: grace.as_nanos() as u64,
                owner: Owner::invoking_user(),
            };
            let warnings = with_progress(|progress| {
                leakscope_analyzer::pprof_with_progress(&recording, &options, progress)
            })?;
            for warning in &warnings {
                eprintln!("leakscope: warning: {}: {warning}", recording.display());
            }
            println!("profile written to {}", out.display());
            Ok(())
        }
        Command::Dump { recording } => {
            leakscope_recording::dump(&recording, std::io::stdout().lock())?;
            Ok(())
        }
    }
}

/// Runs `work` with a progress callback that draws a bar of bytes read (on a
/// terminal only), cleared when the work is done.
fn with_progress<T>(work: impl FnOnce(&dyn Fn(leakscope_analyzer::Progress)) -> T) -> T {
    let bar = progress_bar();
    let outcome = work(&|p| {
        bar.set_length(p.total);
        bar.set_position(p.read);
    });
    bar.finish_and_clear();
    outcome
}

/// A bar of bytes read, on a terminal only.
fn progress_bar() -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("reading {bar:30} {bytes}/{total_bytes}")
            .expect("valid template"),
    );
    bar
}
