//! `cargo xtask preset-check --rmcp VERSION... --tokio VERSION...`: builds a
//! stock rmcp server against each rmcp release and a small tokio program
//! against each tokio release (outside the workspace, their own lockfiles; see
//! `leakscope_fixtures::stock_server` and `stock_tokio`) and reports, scope by
//! scope, how many functions the built-in presets match in them.
//! `--write-doc` rewrites the matrices in `docs/presets.md` from the run.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::shell::{target_dir, workspace_root};

/// tokio's task scopes, in the order the tokio table shows them.
const TASK_KINDS: [&str; 2] = ["task-poll", "task-poll-end"];

/// Scope kinds in the order the table shows them.
const KINDS: [&str; 5] = [
    "session-create",
    "worker-spawn",
    "worker-poll",
    "worker-drop",
    "session-close",
];

#[derive(Debug, clap::Args)]
pub struct PresetCheckArgs {
    /// rmcp releases to check (e.g. --rmcp 0.2.0 --rmcp 3.11.0).
    #[arg(long, required_unless_present = "tokio")]
    rmcp: Vec<String>,
    /// tokio releases to check against the built-in task signals (e.g. --tokio 1.20.0).
    #[arg(long)]
    tokio: Vec<String>,
    /// Rewrite the matrix in docs/presets.md with this run's results.
    #[arg(long)]
    write_doc: bool,
}

pub fn run(args: &PresetCheckArgs) -> Result<()> {
    let probe = crate::build::probe()?;
    if !args.tokio.is_empty() {
        check_tokio(&probe, &args.tokio, args.write_doc)?;
    }
    if args.rmcp.is_empty() {
        return Ok(());
    }
    let root = target_dir().join("stock-servers");
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for version in &args.rmcp {
        eprintln!("building a stock server against rmcp {version} ...");
        let binary = leakscope_fixtures::stock_server::build(&root, version)?;
        let (counts, ok) = scope_counts(&probe, &binary, None, &KINDS)?;
        if !ok {
            failed.push(version.clone());
        }
        println!(
            "rmcp {version}: {} -> {}",
            KINDS
                .iter()
                .zip(&counts)
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            if ok { "ok" } else { "MISSING required scopes" }
        );
        rows.push((version.clone(), counts, ok));
    }
    if args.write_doc {
        write_doc(&rows)?;
    }
    if !failed.is_empty() {
        bail!(
            "the preset misses required scopes for rmcp {}",
            failed.join(", ")
        );
    }
    Ok(())
}

/// How many functions each of `kinds` matches in `binary`, per
/// `leakscope-probe preset-check --json` (with `preset`, else the built-in).
fn scope_counts(
    probe: &std::path::Path,
    binary: &std::path::Path,
    preset: Option<&std::path::Path>,
    kinds: &[&str],
) -> Result<(Vec<usize>, bool)> {
    let mut command = Command::new(probe);
    command
        .args(["preset-check", "--json", "--exe"])
        .arg(binary);
    if let Some(preset) = preset {
        command.arg("--preset").arg(preset);
    }
    let out = command
        .output()
        .context("cannot run leakscope-probe preset-check")?;
    let report: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "leakscope-probe preset-check said: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let counts = kinds
        .iter()
        .map(|kind| {
            report["scopes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["kind"] == *kind)
                .map(|s| s["functions"].as_array().map_or(0, Vec::len))
                .sum()
        })
        .collect();
    Ok((counts, out.status.success()))
}

/// Builds the tokio program against each release and counts what the task
/// signals match; every one must match something.
fn check_tokio(probe: &std::path::Path, versions: &[String], write: bool) -> Result<()> {
    let root = target_dir().join("stock-tokio");
    let preset = workspace_root().join("recording/presets/tokio.toml");
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for version in versions {
        eprintln!("building a tokio program against tokio {version} ...");
        let binary = leakscope_fixtures::stock_tokio::build(&root, version)?;
        let (counts, _) = scope_counts(probe, &binary, Some(&preset), &TASK_KINDS)?;
        let ok = counts.iter().all(|&n| n > 0);
        if !ok {
            failed.push(version.clone());
        }
        println!(
            "tokio {version}: {} -> {}",
            TASK_KINDS
                .iter()
                .zip(&counts)
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            if ok { "ok" } else { "MISSING" }
        );
        rows.push((version.clone(), counts, ok));
    }
    if write {
        write_table("tokio-matrix", "tokio", &TASK_KINDS, "task scopes", &rows)?;
    }
    if !failed.is_empty() {
        bail!(
            "the task signals match nothing in tokio {}",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Replaces the rmcp table between the markers in docs/presets.md.
fn write_doc(rows: &[(String, Vec<usize>, bool)]) -> Result<()> {
    write_table("matrix", "rmcp", &KINDS, "required scopes", rows)
}

/// Replaces the table between `<!-- MARKER:start -->` and `<!-- MARKER:end -->`
/// in docs/presets.md: a row per release, a column per scope kind.
fn write_table(
    marker: &str,
    what: &str,
    kinds: &[&str],
    verdict: &str,
    rows: &[(String, Vec<usize>, bool)],
) -> Result<()> {
    let path = workspace_root().join("docs/presets.md");
    let text = std::fs::read_to_string(&path).context("docs/presets.md")?;
    let (start, end) = (
        format!("<!-- {marker}:start -->"),
        format!("<!-- {marker}:end -->"),
    );
    let (Some(a), Some(b)) = (text.find(&start), text.find(&end)) else {
        bail!("docs/presets.md has no {start} ... {end} markers");
    };
    let mut table = String::new();
    let _ = writeln!(table, "{start}");
    let _ = writeln!(table, "| {what} | {} | {verdict} |", kinds.join(" | "));
    let _ = writeln!(table, "| --- |{} --- |", " ---: |".repeat(kinds.len()));
    for (version, counts, ok) in rows {
        let cells: Vec<String> = counts.iter().map(usize::to_string).collect();
        let _ = writeln!(
            table,
            "| {version} | {} | {} |",
            cells.join(" | "),
            if *ok { "all found" } else { "MISSING" }
        );
    }
    let new = format!("{}{table}{}", &text[..a], &text[b..]);
    std::fs::write(&path, new)?;
    println!("wrote {}", path.display());
    Ok(())
}
