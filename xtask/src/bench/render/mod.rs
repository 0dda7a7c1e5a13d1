//! `docs/BENCHMARKS.md` and its charts, from `results.json` alone: one
//! module per section.

mod analyzer;
mod in_process;
mod pairs;
mod server;

use serde_json::Value;

use super::BenchArgs;

pub(super) use pairs::bar_chart;
pub(super) use server::server_chart;

pub(super) fn fmt_ns(v: &Value) -> String {
    v.as_f64()
        .map(|ns| format!("{ns:.1}"))
        .unwrap_or_else(|| "-".into())
}

/// " (rounds: 1.21x-1.34x)" for a `[min, max]` of per-round ratios, or nothing.
fn spread_of(spread: &Value) -> String {
    match spread.as_array().map(|s| (s[0].as_f64(), s[1].as_f64())) {
        Some((Some(lo), Some(hi))) => format!(" (rounds: {lo:.2}x-{hi:.2}x)"),
        _ => String::new(),
    }
}

/// `docs/BENCHMARKS.md`, from `results` alone.
pub(super) fn render(results: &Value, args: &BenchArgs) -> String {
    use std::fmt::Write as _;
    let m = &results["machine"];
    let mut md = String::new();
    let command = if args.quick {
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
        results["seconds"].as_f64().unwrap_or(0.0),
        m["cpu"].as_str().unwrap_or("?"),
        m["cpus"],
        if results["quick"] == true {
            "quick mode"
        } else {
            "full mode"
        },
        m["kernel"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
    );
    pairs::section(&mut md, results);
    in_process::section(&mut md, &results["in_process"]);
    server::section(&mut md, &results["server"]);
    server::programs_section(&mut md, &results["server_programs"]);
    analyzer::section(&mut md, results);
    crate::bench::always_on::render(&mut md, &results["always_on"]);
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
    /// The committed `docs/BENCHMARKS.md` is what the renderer makes of the
    /// committed `bench/results.json`: the page has no figure the run did not
    /// write, and a change to the renderer shows here.
    #[test]
    fn the_committed_page_is_rendered_from_the_committed_results() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let results: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("bench/results.json")).unwrap(),
        )
        .unwrap();
        let args = super::BenchArgs {
            pairs: None,
            rounds: None,
            analyzer_events: Vec::new(),
            load_seconds: None,
            quick: results["quick"] == true,
            only: Vec::new(),
        };
        let page = std::fs::read_to_string(root.join("docs/BENCHMARKS.md")).unwrap();
        assert!(
            super::render(&results, &args) == page,
            "docs/BENCHMARKS.md differs from what bench/results.json renders to"
        );
    }
}
