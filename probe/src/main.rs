fn main() {
    println!("eBPF object: {} bytes", leakscope_probe::EBPF_OBJECT.len());
}
