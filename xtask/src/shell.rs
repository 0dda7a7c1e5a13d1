//! Running cargo and other programs, echoing each command first.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Where cargo builds: `$CARGO_TARGET_DIR` (relative to the workspace root when
/// relative) or `target/`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

pub use leakscope_fixtures::ebpf_gate::is_root;

/// A command that runs `program` with the privileges eBPF needs: as it is when we
/// are root, else through `sudo -E` (aya-template's runner does the same). Only
/// the probe is raised; everything is built as the calling user.
pub fn privileged(program: &std::path::Path) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        eprintln!(
            "(running {} with sudo -E: eBPF needs root)",
            program.display()
        );
        let mut command = Command::new("sudo");
        command.arg("-E").arg(program);
        command
    }
}

/// `cargo ARGS` in the workspace root; fails when cargo does.
pub fn cargo(args: &[&str]) -> Result<()> {
    run(Command::new(cargo_binary()).args(args))
}

pub fn cargo_binary() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

pub fn run(command: &mut Command) -> Result<()> {
    command.current_dir(workspace_root());
    eprintln!("+ {}", describe(command));
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", describe(command)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", describe(command));
    }
    Ok(())
}

/// Output of a command that is expected to succeed.
pub fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {}", describe(command)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            describe(command),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}
