//! `cargo xtask ...`: leakscope's workflows. Everything that needs the nightly
//! toolchain, bpf-linker or a particular build profile goes through here, so
//! plain `cargo build`/`cargo test` stay ordinary.

mod bench;
mod build;
mod demo;
mod fuzz;
mod preset_check;
mod procs;
mod setup;
mod shell;
mod soak;
mod svg;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "leakscope developer workflows")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the eBPF build needs when missing: nightly's rust-src, bpf-linker 0.10.0.
    Setup,
    /// The project's tests, as CI runs them: fmt, clippy, every test, and a check that the eBPF object built.
    Test,
    /// The main job: a leaky rmcp fixture, abandoned sessions, and what happens to them.
    Demo(demo::DemoArgs),
    /// Build the analyzer (release) and run `leakscope report ARGS...`, e.g. `leak.lsrec --out report/`.
    Report {
        /// Arguments for `leakscope report` (see `--help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Regenerate fixtures/recordings/ (small probe recordings the analyzer's unit tests read; needs root).
    Recordings,
    /// What leakscope costs beside bcc memleak, heaptrack and DHAT, and the analyzer's speed: writes docs/BENCHMARKS.md and bench/results.json.
    Bench(bench::BenchArgs),
    /// The probe on a leaking server for a long time (default 30 min): its memory and CPU against the server's growth; writes docs/soak.md.
    Soak(soak::SoakArgs),
    /// Run the cargo-fuzz targets (recording reader + analyzer, DHAT importer) for N executions each.
    Fuzz(fuzz::FuzzArgs),
    /// Build a stock rmcp server against each release and count what the preset matches, scope by scope.
    PresetCheck(preset_check::PresetCheckArgs),
    /// Build the probe (release) and run `leakscope-probe attach ARGS...`, e.g. `--pid 1234 --duration 60s`.
    Attach {
        /// Arguments for `leakscope-probe attach` (see `--help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let outcome: Result<()> = match cli.command {
        Command::Setup => setup::ensure_prerequisites(),
        Command::Test => test(),
        Command::Demo(args) => demo::run(&args),
        Command::Attach { args } => attach(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Recordings => demo::regenerate_recordings(),
        Command::PresetCheck(args) => preset_check::run(&args),
        Command::Fuzz(args) => fuzz::run_targets(&args),
        Command::Report { args } => report(&args),
    };
    if let Err(e) = outcome {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn attach(args: &[String]) -> Result<()> {
    let probe = build::probe()?;
    let status = shell::privileged(&probe)
        .arg("attach")
        .args(args)
        .status()?;
    std::process::exit(status.code().unwrap_or(1));
}

fn report(args: &[String]) -> Result<()> {
    let bin = build::release_bins(&["leakscope-analyzer"])?;
    let status = std::process::Command::new(bin.join("leakscope"))
        .arg("report")
        .args(args)
        .status()?;
    std::process::exit(status.code().unwrap_or(1));
}

fn test() -> Result<()> {
    setup::ensure_prerequisites()?;
    shell::cargo(&["fmt", "--all", "--", "--check"])?;
    // No file imports a file that imports it back (the layout a newcomer reads).
    shell::run(std::process::Command::new("python3").arg("scripts/check-cycles.py"))?;
    // Every file the README and docs/ name is there (files move as modules split).
    shell::run(std::process::Command::new("python3").arg("scripts/check-doc-paths.py"))?;
    // With fixture-server-actix's feature, off in workspace builds (it
    // changes other crates' features: fixtures/Cargo.toml), so its code is
    // linted too, in the same pass (a second pass re-checked every crate that
    // uses serde_json: ~90 s of a cold CI run).
    shell::cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "leakscope-fixtures/actix",
        "--",
        "-D",
        "warnings",
    ])?;
    setup::check_stable_only_crates()?;
    // The release builds the tests serve (servers built plainly, over
    // jemalloc, with tokio_unstable; stock rmcp releases), made before any
    // test records: made inside a test, they took both cores from the tests
    // beside it (`testkit::make_every_release_build`). As the user, never
    // through sudo: they write the target directory. `--workspace` so that
    // features unify as in the run below, which then rebuilds nothing of it.
    shell::cargo(&[
        "test",
        "--workspace",
        "--test",
        "release_builds",
        "--",
        "--ignored",
    ])?;
    let mut test = std::process::Command::new(shell::cargo_binary());
    test.args(["test", "--workspace", "--all-targets"]);
    if !shell::is_root() {
        // The eBPF tests need root: run the test binaries through sudo, as
        // aya-template runs its programs; everything is still built as the user.
        println!("not root: test binaries run through `sudo -E` so the eBPF tests can attach");
        test.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", "sudo -E");
    }
    shell::run(&mut test)?;
    setup::check_ebpf_object()?;
    // A short fuzzing round of every target (docs/robustness.md has a long one).
    fuzz::run_targets(&fuzz::FuzzArgs { runs: 20_000 })?;
    println!("xtask test: all checks passed");
    Ok(())
}
