//! Prerequisites of the eBPF build, installed on demand, and the check that the
//! object really was built (CI must fail, not skip, when it was not).

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::shell::{self, output, run, workspace_root};

/// bpf-linker 0.10.0 links with nightly's own LLVM 22 (newer versions want a system LLVM 21+).
const BPF_LINKER_VERSION: &str = "0.10.0";

pub fn ensure_prerequisites() -> Result<()> {
    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .context("the nightly toolchain is needed to build the eBPF probe")?;
    if !components.lines().any(|line| line.starts_with("rust-src")) {
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    let installed = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if !installed.contains(BPF_LINKER_VERSION) {
        run(Command::new(shell::cargo_binary()).args([
            "install",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            "--locked",
        ]))?;
    }
    Ok(())
}

/// The crates a user builds without the eBPF toolchain: the analyzer (`leakscope
/// report`) and the in-process mode (a dev-dependency of their server).
const STABLE_ONLY: [&str; 2] = ["leakscope-analyzer", "leakscope-inproc"];

/// Proves that [`STABLE_ONLY`] build with stable alone: neither depends on the
/// probe or aya (`cargo tree`), and `cargo +stable check` of both succeeds with
/// `bpf-linker` hidden from `PATH`; so does the probe without its `ebpf`
/// feature (cooperative attach only).
pub fn check_stable_only_crates() -> Result<()> {
    let mut tree = Command::new(shell::cargo_binary());
    tree.args(["tree", "--edges", "normal,build", "--prefix", "none"]);
    for package in STABLE_ONLY {
        tree.args(["-p", package]);
    }
    let tree = output(tree.current_dir(workspace_root()))?;
    for forbidden in [
        "leakscope-probe ",
        "leakscope-probe-ebpf ",
        "aya ",
        "aya-build ",
    ] {
        if tree.lines().any(|line| line.starts_with(forbidden)) {
            bail!(
                "{} depend on {}: they must build without the eBPF toolchain",
                STABLE_ONLY.join(" and "),
                forbidden.trim()
            );
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let without_linker = std::env::join_paths(
        std::env::split_paths(&path).filter(|dir| !dir.join("bpf-linker").exists()),
    )
    .context("PATH")?;
    // Look rustup up on the full PATH: the child's PATH may not have it.
    let rustup = std::env::split_paths(&path)
        .map(|dir| dir.join("rustup"))
        .find(|candidate| candidate.is_file())
        .context("rustup is not on PATH")?;
    // `check`, not `build`: what needs the eBPF toolchain runs in build
    // scripts, which `check` runs too; code generation would prove nothing
    // more (and took a cold CI run ~100 s for these crates' own feature sets).
    let mut build = Command::new(&rustup);
    build.args(["run", "stable", "cargo", "check"]);
    let mut probe = Command::new(&rustup);
    probe.args(["run", "stable", "cargo", "check", "-p", "leakscope-probe"]);
    probe.arg("--no-default-features");
    for command in [&mut build, &mut probe] {
        command
            .env("PATH", &without_linker)
            // rustup's proxies pick the toolchain from these; let `rustup run` decide.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .env_remove("RUSTC");
    }
    for package in STABLE_ONLY {
        build.args(["-p", package]);
    }
    run(&mut build)?;
    // The probe for a cooperative attach alone (its `ebpf` feature off).
    run(&mut probe)?;
    println!(
        "{} and leakscope-probe --no-default-features check with stable and no bpf-linker",
        STABLE_ONLY.join(" and ")
    );
    Ok(())
}

/// Fails unless a BPF ELF object of the probe exists in the build tree.
pub fn check_ebpf_object() -> Result<()> {
    let target = shell::target_dir();
    let build_dirs = [target.join("debug/build"), target.join("release/build")];
    for dir in build_dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let object = entry.path().join("out/leakscope-probe-ebpf");
            if let Ok(bytes) = std::fs::read(&object) {
                // ELF, 64-bit, little endian, e_machine = EM_BPF (247).
                if bytes.len() > 20 && bytes.starts_with(b"\x7fELF") && bytes[18] == 247 {
                    println!("eBPF object: {} ({} bytes)", object.display(), bytes.len());
                    return Ok(());
                }
            }
        }
    }
    bail!("the eBPF object (leakscope-probe-ebpf) was not built; see the probe's build output")
}
