//! `docs/BENCHMARKS.md` and its charts, from `results.json` alone: one
//! module per section.

mod always_on;
mod analyzer;
mod in_process;
mod pairs;
mod server;

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::results::Results;

/// Reads `bench/results.json` under `root` and writes what it renders to:
/// `docs/images/bench-pairs.svg`, `docs/images/bench-server.svg` and
/// `docs/BENCHMARKS.md`. A whole run calls this once it has written the
/// file; `--render` calls it alone.
pub(super) fn write_files(root: &Path) -> Result<()> {
    let results = Results::read(&root.join("bench/results.json"))?;
    if let Some(p) = &results.pairs {
        std::fs::write(
            root.join("docs/images/bench-pairs.svg"),
            pairs::bar_chart(p),
        )?;
    }
    if let Some(svg) = results.server.as_ref().and_then(server::server_chart) {
        std::fs::write(root.join("docs/images/bench-server.svg"), svg)?;
    }
    std::fs::write(root.join("docs/BENCHMARKS.md"), render(&results))?;
    Ok(())
}

/// A figure as the file writes it (`null`, `100.0`, `7`): how the page has
/// always shown the figures it prints whole.
fn shown<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "?".into())
}

fn fmt_ns(ns: Option<f64>) -> String {
    ns.map(|ns| format!("{ns:.1}"))
        .unwrap_or_else(|| "-".into())
}

/// " (rounds: 1.21x-1.34x)" for a `[min, max]` of per-round ratios, or nothing.
fn spread_of(spread: Option<[f64; 2]>) -> String {
    match spread {
        Some([lo, hi]) => format!(" (rounds: {lo:.2}x-{hi:.2}x)"),
        None => String::new(),
    }
}

/// `docs/BENCHMARKS.md`, from `results` alone.
pub(super) fn render(results: &Results) -> String {
    use std::fmt::Write as _;
    let m = &results.machine;
    let mut md = String::new();
    let command = if results.quick {
        "cargo xtask bench --quick"
    } else {
        "cargo xtask bench"
    };
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `{command}` ({:.0} s) on {} ({} CPUs, {}), kernel {}, {}. Every figure below is \
         from that one run; rerun the command to get yours (`--quick` takes under two minutes and \
         writes the same files). Side by side means interleaved: each round runs every tool once, \
         in the order of the table; figures are medians over rounds, with the spread.\n",
        results.seconds,
        m.cpu.as_deref().unwrap_or("?"),
        m.cpus,
        if results.quick {
            "quick mode"
        } else {
            "full mode"
        },
        m.kernel.as_deref().unwrap_or("?"),
        m.date.as_deref().unwrap_or("?"),
    );
    if let Some(p) = &results.pairs {
        pairs::section(
            &mut md,
            p,
            results.pairs_deep.as_ref(),
            results.pairs_nofp.as_ref(),
        );
    }
    if let Some(ip) = &results.in_process {
        in_process::section(&mut md, ip);
    }
    if let Some(server) = &results.server {
        server::section(&mut md, server);
    }
    if let Some(rounds) = &results.saturation_rounds {
        server::rounds_section(&mut md, rounds);
    }
    if let Some(instructions) = &results.server_instructions {
        server::instructions_section(&mut md, instructions);
    }
    if let Some(programs) = &results.server_programs {
        server::programs_section(&mut md, programs);
    }
    if let (Some(recording), Some(analyzer)) = (&results.recording, &results.analyzer) {
        analyzer::section(&mut md, recording, analyzer);
    }
    if let Some(a) = &results.always_on {
        always_on::section(&mut md, a);
    }
    let _ = writeln!(
        md,
        "## Soak\n\nThe probe on a leaking server for half an hour, its memory and CPU sampled \
         every 10 s: [soak.md](soak.md) (`cargo xtask soak --minutes 30`).\n\n`bench/results.json` \
         holds every figure above."
    );
    md
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The committed `docs/BENCHMARKS.md` and charts are what the renderer
    /// makes of the committed `bench/results.json`: the page has no figure the
    /// run did not write, and a change to the renderer shows here.
    #[test]
    fn the_committed_page_is_rendered_from_the_committed_results() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let results = super::Results::read(&root.join("bench/results.json")).unwrap();
        let committed = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
        assert!(
            super::render(&results) == committed("docs/BENCHMARKS.md"),
            "docs/BENCHMARKS.md differs from what bench/results.json renders to"
        );
        assert!(
            super::pairs::bar_chart(results.pairs.as_ref().unwrap())
                == committed("docs/images/bench-pairs.svg"),
            "docs/images/bench-pairs.svg differs from what bench/results.json renders to"
        );
        assert!(
            super::server::server_chart(results.server.as_ref().unwrap())
                == Some(committed("docs/images/bench-server.svg")),
            "docs/images/bench-server.svg differs from what bench/results.json renders to"
        );
    }
}
