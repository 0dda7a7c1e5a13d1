//! The demo: the whole story on a leaky rmcp fixture. Start it, attach the probe,
//! abandon sessions, wait past keep-alive, and write the report.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use leakscope_fixtures::process::{DebugSessions, FixtureProcess, ProbeProcess};

use crate::shell::workspace_root;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Sessions the churn client opens and abandons.
    #[arg(long, default_value_t = 100)]
    sessions: u64,
    /// The fixture's session keep-alive, in seconds.
    #[arg(long, default_value_t = 5)]
    keep_alive: u64,
    /// Where the recording and the report go (default: the target directory's `demo/`).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Also record the fixed composition under the same churn and write
    /// `leakscope diff leaky.lsrec fixed.lsrec` into `diff/`.
    #[arg(long)]
    diff: bool,
}

/// What the fixture itself saw around one recorded churn.
pub struct Recorded {
    pub before: DebugSessions,
    pub after: DebugSessions,
}

/// Starts `fixture-server --composition COMPOSITION`, attaches the probe, abandons
/// `sessions` sessions, waits past keep-alive, and finishes the recording at `out`.
pub fn record_churn(
    bin: &Path,
    probe: &Path,
    composition: &str,
    sessions: u64,
    keep_alive_s: u64,
    out: &Path,
) -> Result<Recorded> {
    let keep_alive = format!("{keep_alive_s}s");
    let server = FixtureProcess::start(
        &bin.join("fixture-server"),
        &["--composition", composition, "--keep-alive", &keep_alive],
    )?;
    println!(
        "fixture-server ({composition}) at {} (pid {})",
        server.mcp_url,
        server.pid()
    );
    let before = server.debug_sessions()?;
    println!("before churn:           {before:?}");
    let probe = ProbeProcess::start(
        crate::shell::privileged(probe),
        server.pid(),
        out,
        // The demo's recording from an earlier run is replaced.
        &["--force"],
        Stdio::inherit(),
    )?;
    println!("{}", probe.attached);
    let count = sessions.to_string();
    let status = Command::new(bin.join("churn"))
        .args(["--url", &server.mcp_url, "--count", &count, "--rate", "50"])
        .status()
        .context("cannot run churn")?;
    if !status.success() {
        bail!("churn failed ({status})");
    }
    println!("after churn:            {:?}", server.debug_sessions()?);
    std::thread::sleep(Duration::from_secs(keep_alive_s + 2));
    let after = server.debug_sessions()?;
    println!("after keep-alive + 2 s: {after:?}");
    // SIGINT makes the probe finish its recording.
    probe.signal_and_wait(2)?;
    Ok(Recorded { before, after })
}

pub fn run(args: &DemoArgs) -> Result<()> {
    let probe = crate::build::probe()?;
    let bin = crate::build::release_bins(&["leakscope-fixtures", "leakscope-analyzer"])?;
    let out = match &args.out {
        Some(out) => workspace_root().join(out),
        None => crate::shell::target_dir().join("demo"),
    };
    std::fs::create_dir_all(&out)?;
    let recording = out.join("leaky.lsrec");
    let Recorded { before, after } = record_churn(
        &bin,
        &probe,
        "leaky",
        args.sessions,
        args.keep_alive,
        &recording,
    )?;
    let per_session =
        (after.heap_in_use_bytes as f64 - before.heap_in_use_bytes as f64) / args.sessions as f64;
    println!(
        "fixture's own view: {} of {} abandoned sessions still in the map; heap grew {:.1} KiB per session",
        after.sessions,
        args.sessions,
        per_session / 1024.0
    );
    let report_dir = out.join("report");
    leakscope(
        &bin,
        &[
            "report".as_ref(),
            recording.as_os_str(),
            "--out".as_ref(),
            report_dir.as_os_str(),
        ],
    )?;
    println!("recording: {}", recording.display());
    println!("report:    {}", report_dir.join("report.md").display());
    if args.diff {
        let fixed = out.join("fixed.lsrec");
        record_churn(
            &bin,
            &probe,
            "fixed",
            args.sessions,
            args.keep_alive,
            &fixed,
        )?;
        let diff_dir = out.join("diff");
        leakscope(
            &bin,
            &[
                "diff".as_ref(),
                recording.as_os_str(),
                fixed.as_os_str(),
                "--out".as_ref(),
                diff_dir.as_os_str(),
            ],
        )?;
        println!("diff:      {}", diff_dir.join("diff.md").display());
    }
    Ok(())
}

/// Runs the release `leakscope` with `args`; fails when it does.
fn leakscope(bin: &Path, args: &[&std::ffi::OsStr]) -> Result<()> {
    let status = Command::new(bin.join("leakscope")).args(args).status()?;
    if !status.success() {
        bail!("leakscope {:?} failed ({status})", args.first());
    }
    Ok(())
}

/// `cargo xtask recordings`: regenerates the small recordings in `fixtures/recordings/`
/// that the analyzer's unit tests read (5 abandoned sessions, leaky and fixed).
pub fn regenerate_recordings() -> Result<()> {
    let probe = crate::build::probe()?;
    let bin = crate::build::release_bins(&["leakscope-fixtures"])?;
    let dir = workspace_root().join("fixtures/recordings");
    std::fs::create_dir_all(&dir)?;
    for composition in ["leaky", "fixed"] {
        let out = dir.join(format!("{composition}-5-sessions.lsrec"));
        record_churn(&bin, &probe, composition, 5, 1, &out)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

/// kill(2), without pulling the libc crate into xtask.
pub unsafe fn libc_kill(pid: i32, signal: i32) {
    unsafe extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { kill(pid, signal) };
}
