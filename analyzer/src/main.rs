use clap::Parser;

/// Analyze leakscope recordings.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {}

fn main() {
    let _ = Cli::parse();
}
