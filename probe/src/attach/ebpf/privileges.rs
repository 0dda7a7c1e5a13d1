//! Whether this process may load and attach eBPF programs, asked before
//! anything is planned, so the kernel's bare "Operation not permitted" from
//! the loader never has to be explained.

use anyhow::{Result, bail};

/// CAP_BPF (39) and CAP_PERFMON (38), or CAP_SYS_ADMIN (21, which kernels
/// before 5.8 require and later ones still accept), in the effective set. Root
/// is checked the same way: root in a container, or under a capability bounding
/// set, may hold neither, and the kernel's bare "Operation not permitted" from
/// the loader would not say why.
pub(super) fn check_privileges() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    if has_bpf_capabilities(effective) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        bail!(
            "attaching needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN: this process is root but holds neither (effective capabilities {effective:#x}; a container or a capability bounding set dropped them)"
        );
    }
    bail!("attaching needs root, or CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN (try sudo)");
}

fn has_bpf_capabilities(effective: u64) -> bool {
    let bpf_and_perfmon = (1u64 << 39) | (1u64 << 38);
    let sys_admin = 1u64 << 21;
    effective & bpf_and_perfmon == bpf_and_perfmon || effective & sys_admin != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CAP_BPF with CAP_PERFMON, or CAP_SYS_ADMIN alone (what kernels before
    /// 5.8 need, and later ones accept): either is enough, nothing less.
    #[test]
    fn either_capability_set_is_enough_to_attach() {
        let (sys_admin, perfmon, bpf) = (1u64 << 21, 1u64 << 38, 1u64 << 39);
        assert!(has_bpf_capabilities(sys_admin));
        assert!(has_bpf_capabilities(bpf | perfmon));
        assert!(!has_bpf_capabilities(bpf));
        assert!(!has_bpf_capabilities(perfmon));
        assert!(!has_bpf_capabilities(0));
    }
}
