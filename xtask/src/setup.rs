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

/// Fails unless a BPF ELF object of the probe exists in the build tree.
pub fn check_ebpf_object() -> Result<()> {
    let build_dirs = ["target/debug/build", "target/release/build"];
    for dir in build_dirs {
        let Ok(entries) = std::fs::read_dir(workspace_root().join(dir)) else {
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
