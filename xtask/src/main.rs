//! `cargo xtask ...`: leakscope's workflows. Everything that needs the nightly
//! toolchain, bpf-linker or a particular build profile goes through here, so
//! plain `cargo build`/`cargo test` stay ordinary.

mod demo;
mod setup;
mod shell;

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
}

fn main() {
    let cli = Cli::parse();
    let outcome: Result<()> = match cli.command {
        Command::Setup => setup::ensure_prerequisites(),
        Command::Test => test(),
        Command::Demo(args) => demo::run(&args),
    };
    if let Err(e) = outcome {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn test() -> Result<()> {
    setup::ensure_prerequisites()?;
    shell::cargo(&["fmt", "--all", "--", "--check"])?;
    shell::cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    shell::cargo(&["test", "--workspace", "--all-targets"])?;
    setup::check_ebpf_object()?;
    println!("xtask test: all checks passed");
    Ok(())
}
