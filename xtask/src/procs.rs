//! Reading processes from `/proc`: the bench and the soak watch a server, its
//! wrapper and the tools attached to it.

/// `root` itself or the first process under it whose `comm` is `name`.
pub fn descendant_named(root: u32, name: &str) -> Option<u32> {
    // The kernel keeps 15 bytes of a program's name (`fixture-server-`
    // for `fixture-server-cooperative`).
    let name = &name[..name.len().min(15)];
    let comm = std::fs::read_to_string(format!("/proc/{root}/comm")).ok()?;
    if comm.trim() == name {
        return Some(root);
    }
    children(root)
        .into_iter()
        .find_map(|child| descendant_named(child, name))
}

pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// User plus system CPU seconds of one process (all its threads); 0 when
/// it cannot be read (it exited).
pub fn cpu_seconds(pid: u32) -> f64 {
    leakscope_recording::target::cpu_ticks(pid).unwrap_or(0) as f64 / clock_ticks_per_second()
}

/// CPU seconds of `root` and everything under it, except `skip`'s subtree.
pub fn tree_cpu_seconds(root: u32, skip: u32) -> f64 {
    if root == skip {
        return 0.0;
    }
    cpu_seconds(root)
        + children(root)
            .into_iter()
            .map(|child| tree_cpu_seconds(child, skip))
            .sum::<f64>()
}

pub fn clock_ticks_per_second() -> f64 {
    unsafe extern "C" {
        fn sysconf(name: i32) -> i64;
    }
    const SC_CLK_TCK: i32 = 2;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { sysconf(SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Resident set size of `pid` in bytes (0 when it cannot be read).
pub fn rss_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// The anonymous part of a process's resident memory (`RssAnon`): what it
/// holds itself, without the files it maps (a probe maps the target's
/// executable to name its sites).
pub fn rss_anon_bytes(pid: u32) -> u64 {
    status_bytes(pid, "RssAnon:")
}

/// A `/proc/PID/status` figure given in kB, in bytes; 0 when unread.
fn status_bytes(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}
