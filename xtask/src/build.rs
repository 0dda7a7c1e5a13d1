//! The builds every driver shares (`demo`, `soak`, `bench`, `preset-check`,
//! `attach`, `report`): the release probe with its eBPF object, and release
//! binaries of the workspace's packages.

use anyhow::Result;

/// The release probe binary, built (with its eBPF object) if needed.
pub fn probe() -> Result<std::path::PathBuf> {
    crate::setup::ensure_prerequisites()?;
    crate::shell::cargo(&["build", "--release", "-p", "leakscope-probe"])?;
    Ok(crate::shell::target_dir().join("release/leakscope-probe"))
}

/// `cargo build --release` of some packages' binaries; returns `target/release`.
pub fn release_bins(packages: &[&str]) -> Result<std::path::PathBuf> {
    let mut args = vec!["build", "--release"];
    for package in packages {
        args.extend(["-p", package]);
    }
    args.push("--bins");
    crate::shell::cargo(&args)?;
    Ok(crate::shell::target_dir().join("release"))
}
