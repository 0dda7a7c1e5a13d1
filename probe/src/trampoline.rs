//! The target's uretprobe trampoline: where the kernel sends a probed
//! function's return. The programs' own stack walk must know it to tell a
//! return address from the trampoline's, which it marks for the capture to
//! replace (see `leakscope_probe_ebpf::trampoline`); until it is known, every
//! stack is `bpf_get_stack`'s.
//!
//! The kernel maps the trampoline (`[uprobes]` in `/proc/PID/maps`) the first
//! time a probe of the process fires, so it is looked for after the first
//! events, not at attach time.

use std::ops::Range;

use anyhow::Result;
use aya::maps::{Array, MapData};
use leakscope_probe_ebpf::trampoline;

/// The `[uprobes]` region of `pid`, once the kernel has mapped it.
pub fn find(pid: u32) -> Option<Range<u64>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    parse(&maps)
}

fn parse(maps: &str) -> Option<Range<u64>> {
    let line = maps
        .lines()
        .find(|line| line.trim_end().ends_with(" [uprobes]"))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    Some(u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?)
}

/// Tells the programs where the trampoline is; from then on they walk stacks
/// themselves.
pub fn publish(map: &mut Array<MapData, u64>, region: &Range<u64>) -> Result<()> {
    // The end first: a program that sees the start already sees a valid range.
    map.set(trampoline::END, region.end, 0)?;
    map.set(trampoline::START, region.start, 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_uprobes_region_among_the_others() {
        let maps = "\
55d0c0a00000-55d0c0a21000 r-xp 00000000 08:01 1234  /usr/bin/server
7ffd1c3f0000-7ffd1c411000 rw-p 00000000 00:00 0     [stack]
7fe0e1fff000-7fe0e2000000 r-xp 00000000 00:00 0     [uprobes]
";
        assert_eq!(parse(maps), Some(0x7fe0e1fff000..0x7fe0e2000000));
        assert_eq!(
            parse("7ffd1c3f0000-7ffd1c411000 rw-p 00000000 00:00 0 [stack]\n"),
            None
        );
    }

    #[test]
    fn a_process_no_probe_has_fired_in_has_none() {
        assert_eq!(find(std::process::id()), None);
    }
}
