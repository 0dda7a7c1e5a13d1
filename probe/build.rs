//! Builds the eBPF object (`probe-ebpf`, bin target `leakscope-probe-ebpf`) for
//! `bpfel-unknown-none` with the `nightly` toolchain, so a plain `cargo build` of
//! the probe also builds what it loads. aya-build runs
//! `rustup run nightly cargo build -Z build-std=core --target bpfel-unknown-none`
//! and copies the object to `$OUT_DIR/leakscope-probe-ebpf`.
//!
//! With `--no-default-features` (the `ebpf` feature off) it builds nothing, and
//! the probe builds on stable alone, to attach cooperatively.
//!
//! Prerequisites (`cargo xtask setup` installs them): `rustup component add
//! rust-src --toolchain nightly` and `cargo install bpf-linker@0.10.0 --locked`.

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    // Without the `ebpf` feature there is nothing to build: the probe attaches
    // only cooperatively (`lib.rs`'s `EBPF_OBJECT` is empty).
    if std::env::var_os("CARGO_FEATURE_EBPF").is_none() {
        return Ok(());
    }
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let root_dir = std::path::Path::new(&manifest_dir).join("../probe-ebpf");
    let root_dir = root_dir.canonicalize().context("probe-ebpf/ is missing")?;
    if !on_path("bpf-linker") {
        bail!(
            "bpf-linker is not installed; the eBPF probe cannot be built. \
             Run `cargo xtask setup` (or `cargo install bpf-linker@0.10.0 --locked`)."
        );
    }
    share_ebpf_target_dir()?;
    let package = aya_build::Package {
        name: "leakscope-probe-ebpf",
        root_dir: root_dir.to_str().context("non-UTF-8 path")?,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
        .context("building the eBPF object failed; `cargo xtask setup` installs nightly's rust-src and bpf-linker")
}

/// aya-build compiles the eBPF crate (and `core`, with `-Z build-std`) in
/// `OUT_DIR/aya-build/target/leakscope-probe-ebpf`, and `OUT_DIR` differs
/// between a check and a build of the probe, and between profiles: a clean
/// `cargo xtask test` compiled it from scratch twice (clippy's pass, then the
/// tests'), a minute each. That directory is made a link to one directory
/// per cargo target directory (`ebpf-build` beside `debug/` and `release/`),
/// so every build of the probe under it shares one eBPF build; cargo's lock
/// on it serializes builds that run at once.
fn share_ebpf_target_dir() -> anyhow::Result<()> {
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // The cargo target directory: the nearest ancestor cargo tagged as one.
    let Some(target_dir) = out_dir
        .ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
    else {
        return Ok(()); // an unusual layout: aya-build's own directory does
    };
    let shared = target_dir.join("ebpf-build");
    std::fs::create_dir_all(&shared)?;
    let per_build = out_dir.join("aya-build/target/leakscope-probe-ebpf");
    if std::fs::symlink_metadata(&per_build).is_err() {
        std::fs::create_dir_all(per_build.parent().context("a parent")?)?;
        std::os::unix::fs::symlink(&shared, &per_build)?;
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}
