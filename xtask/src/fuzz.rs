//! `cargo xtask fuzz`: the cargo-fuzz targets in `fuzz/` (the recording reader
//! with the analyzer's pipeline behind it, recordings built record by record
//! with every output behind them, and the DHAT importer), run with
//! libFuzzer on nightly for a fixed number of executions each. `cargo xtask
//! test` runs a short round; `docs/robustness.md` records a long one.

use std::process::Command;

use anyhow::Result;

use crate::shell::{self, output, run, workspace_root};

/// cargo-fuzz, installed on demand like bpf-linker.
const CARGO_FUZZ: &str = "cargo-fuzz@0.13.2";

/// (target, seed directory, share of `--runs`) triples. `records` runs every
/// output, charts and PNG encoding included, and symbolizes its own
/// sanitized executable (~1.4 executions a second here, against thousands for
/// the others): it gets a two-hundredth (100 in `cargo xtask test`'s round,
/// ~70 s; 200 took 141 s of a CI run).
const TARGETS: [(&str, &str, u64); 3] = [
    ("reader", "fuzz/seeds/reader", 1),
    ("records", "fuzz/seeds/records", 200),
    ("dhat", "fuzz/seeds/dhat", 1),
];

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Executions per target.
    #[arg(long, default_value_t = 1_000_000)]
    pub runs: u64,
}

pub fn run_targets(args: &FuzzArgs) -> Result<()> {
    ensure_cargo_fuzz()?;
    for (target, seeds, share) in TARGETS {
        let corpus = workspace_root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let mut fuzz = Command::new("rustup");
        fuzz.args(["run", "nightly", "cargo", "fuzz", "run", target])
            .arg(&corpus)
            .arg(workspace_root().join(seeds))
            .args([
                "--",
                &format!("-runs={}", (args.runs / share).max(100)),
                "-max_len=65536",
                "-timeout=10",
                "-print_final_stats=1",
            ])
            // rustup's proxies pick the toolchain from these; let `rustup run` decide.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .env_remove("RUSTC");
        run(&mut fuzz)?;
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<()> {
    let installed =
        output(Command::new(shell::cargo_binary()).args(["fuzz", "--version"])).unwrap_or_default();
    if !installed.contains("cargo-fuzz") {
        run(Command::new(shell::cargo_binary()).args(["install", CARGO_FUZZ, "--locked"]))?;
    }
    Ok(())
}
