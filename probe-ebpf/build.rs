//! The eBPF object depends on the `bpf-linker` binary, which cargo cannot see:
//! rebuild when it changes.
fn main() {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let linker = dir.join("bpf-linker");
            if linker.exists() {
                println!("cargo:rerun-if-changed={}", linker.display());
                break;
            }
        }
    }
}
