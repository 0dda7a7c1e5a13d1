//! `cargo xtask preset-check --rmcp VERSION...`: builds a stock rmcp server
//! against each release (outside the workspace, its own lockfile; see
//! `leakscope_fixtures::stock_server`) and reports, scope by scope, how many
//! functions the built-in preset matches in it. `--write-doc` rewrites the
//! matrix in `docs/presets.md` from the run.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::shell::{target_dir, workspace_root};

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
    #[arg(long, required = true)]
    rmcp: Vec<String>,
    /// Rewrite the matrix in docs/presets.md with this run's results.
    #[arg(long)]
    write_doc: bool,
}

pub fn run(args: &PresetCheckArgs) -> Result<()> {
    let probe = crate::build_probe()?;
    let root = target_dir().join("stock-servers");
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for version in &args.rmcp {
        eprintln!("building a stock server against rmcp {version} ...");
        let binary = leakscope_fixtures::stock_server::build(&root, version)?;
        let out = Command::new(&probe)
            .args(["preset-check", "--json", "--exe"])
            .arg(&binary)
            .output()
            .context("cannot run leakscope-probe preset-check")?;
        let report: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "leakscope-probe preset-check said: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let counts: Vec<usize> = KINDS
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
        let ok = out.status.success();
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

/// Replaces the table between the markers in docs/presets.md.
fn write_doc(rows: &[(String, Vec<usize>, bool)]) -> Result<()> {
    let path = workspace_root().join("docs/presets.md");
    let text = std::fs::read_to_string(&path).context("docs/presets.md")?;
    let (start, end) = ("<!-- matrix:start -->", "<!-- matrix:end -->");
    let (Some(a), Some(b)) = (text.find(start), text.find(end)) else {
        bail!("docs/presets.md has no {start} ... {end} markers");
    };
    let mut table = String::new();
    let _ = writeln!(table, "{start}");
    let _ = writeln!(table, "| rmcp | {} | required scopes |", KINDS.join(" | "));
    let _ = writeln!(table, "| --- |{} --- |", " ---: |".repeat(KINDS.len()));
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
