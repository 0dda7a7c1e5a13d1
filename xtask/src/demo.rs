//! The demo: what happens to abandoned rmcp sessions in the leaky composition.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use leakscope_fixtures::process::FixtureProcess;

use crate::shell::{cargo, workspace_root};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Sessions the churn client opens and abandons.
    #[arg(long, default_value_t = 100)]
    sessions: u64,
    /// The fixture's session keep-alive, in seconds.
    #[arg(long, default_value_t = 5)]
    keep_alive: u64,
}

pub fn run(args: &DemoArgs) -> Result<()> {
    cargo(&["build", "--release", "-p", "leakscope-fixtures", "--bins"])?;
    let bin = workspace_root().join("target/release");
    let keep_alive = format!("{}s", args.keep_alive);
    let server = FixtureProcess::start(
        &bin.join("fixture-server"),
        &["--composition", "leaky", "--keep-alive", &keep_alive],
    )?;
    println!(
        "fixture-server (leaky) at {} (pid {})",
        server.mcp_url,
        server.pid()
    );
    let before = server.debug_sessions()?;
    println!("before churn:           {before:?}");
    let count = args.sessions.to_string();
    let status = Command::new(bin.join("churn"))
        .args(["--url", &server.mcp_url, "--count", &count, "--rate", "50"])
        .status()
        .context("cannot run churn")?;
    if !status.success() {
        bail!("churn failed ({status})");
    }
    println!("after churn:            {:?}", server.debug_sessions()?);
    std::thread::sleep(Duration::from_secs(args.keep_alive + 2));
    let after = server.debug_sessions()?;
    println!("after keep-alive + 2 s: {after:?}");
    let per_session =
        (after.heap_in_use_bytes as f64 - before.heap_in_use_bytes as f64) / args.sessions as f64;
    println!(
        "{} of {} abandoned sessions still in the map; heap grew {:.1} KiB per session",
        after.sessions,
        args.sessions,
        per_session / 1024.0
    );
    Ok(())
}
