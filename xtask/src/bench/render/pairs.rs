//! The malloc+free pairs section: every tool on one C program.

use super::{fmt_ns, shown, spread_of};
use crate::bench::pairs::Tool;
use crate::bench::results::Pairs;

/// The section: the tools side by side, the floor, per program, the deep stacks.
pub(super) fn section(md: &mut String, p: &Pairs, deep: Option<&Pairs>, nofp: Option<&Pairs>) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "## malloc(64) + free pairs\n\n`bench/tools/pairs.c` (built with `cc -O1`) times {} pairs \
         per run, {} rounds. PAIRS below is that program; tools attached by pid attach while it \
         waits (`--wait`), then it runs.\n",
        p.n, p.rounds
    );
    pairs_table(md, p, &Tool::ALL);
    let _ = writeln!(md, "\n![ns per pair by tool](images/bench-pairs.svg)\n");
    vs_floor(md, p);
    program_table(md, p);
    let _ = writeln!(
        md,
        "\n`malloc_enter` sends the call's size and stack pointer (and, for realloc alone, the \
         time); `malloc_exit` sends the block and the caller's stack, which it reads by walking \
         the frame-pointer chain itself in a copy of the target's stack, one read per walk once an \
         earlier walk of the thread has read that far (where a uretprobe's trampoline stands \
         in for a return address, the probe puts back the real one, which the function's entry \
         sent); `free_enter` sends one small \
         record. Each is one ring-buffer record; the probe pairs entries with returns in \
         userspace, so the programs keep no per-call map."
    );
    match p.bcc_memleak_vs_leakscope {
        Some(r) => {
            let _ = writeln!(
                md,
                "\nbcc memleak costs **{r:.1}x** what leakscope costs per pair{}, on the same \
                 program in the same run. The goal is at least 4x.",
                spread_of(p.bcc_memleak_vs_leakscope_spread)
            );
            if let Some(ceiling) = p.bcc_memleak_vs_floor {
                let _ = writeln!(
                    md,
                    "It cannot be met by a uprobe tool on this machine: bcc memleak costs \
                     {ceiling:.1}x the floor, so a tool that did nothing at all in its programs \
                     would be {ceiling:.1}x cheaper than bcc memleak, no more."
                );
            }
            if let Some(own) = p.bcc_memleak_own_vs_leakscope_own {
                let _ = writeln!(
                    md,
                    "Past the traps both pay, bcc memleak's own work costs **{own:.1}x** \
                     leakscope's{}.",
                    spread_of(p.bcc_memleak_own_vs_leakscope_own_spread)
                );
            }
        }
        None => {
            let _ = writeln!(
                md,
                "\nbcc memleak was skipped: {}.",
                p.tools
                    .get(Tool::BccMemleak.key())
                    .and_then(|t| t.skipped.as_deref())
                    .unwrap_or("?")
            );
        }
    }
    if let Some(deep) = deep {
        deep_section(md, deep);
    }
    if let Some(nofp) = nofp {
        nofp_section(md, nofp, deep);
    }
    let _ = writeln!(
        md,
        "\nheaptrack and DHAT run inside the program (`LD_PRELOAD` and valgrind's JIT), so they \
         pay no trap per call; they must be started with the program, which a long-running \
         server rarely allows. leakscope and bcc memleak attach to a running process.\n"
    );
    let _ = writeln!(
        md,
        "bcc memleak and leakscope cannot be attached to the same library at the same time: the \
         kernel keeps one uprobe per file offset and refuses a second whose reference counter \
         differs (dmesg: `ref_ctr_offset mismatch`). They are measured one after the other.\n"
    );
    let _ = writeln!(md, "### Setting up the other tools\n");
    let _ = writeln!(
        md,
        "```sh\napt-get update\napt-get install -y bpfcc-tools heaptrack valgrind linux-headers-6.1.0-47-amd64\n\
         mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing\n\
         # bcc needs kernel headers; this kernel ships none: merge the nearest Debian ones\n\
         mkdir -p /opt/bcc-kernel-src\n\
         cp -a /usr/src/linux-headers-6.1.0-47-common/. /opt/bcc-kernel-src/\n\
         cp -a /usr/src/linux-headers-6.1.0-47-amd64/. /opt/bcc-kernel-src/\n\
         export BCC_KERNEL_SOURCE=/opt/bcc-kernel-src   # the bench sets it when /opt/bcc-kernel-src exists\n```\n"
    );
}

/// The pairs table of one program: a row per tool of `tools`.
fn pairs_table(md: &mut String, p: &Pairs, tools: &[Tool]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "| tool | ns per pair | spread | vs nothing attached | command |\n| --- | ---: | ---: | ---: | --- |"
    );
    let base = p.tools.ns(Tool::Unprobed.key());
    for tool in tools {
        let timing = p.tools.get(tool.key()).cloned().unwrap_or_default();
        let spread = timing
            .spread_ns
            .map(|[lo, hi]| format!("{}-{}", fmt_ns(Some(lo)), fmt_ns(Some(hi))))
            .unwrap_or_else(|| "-".into());
        let ratio = match (timing.ns, base) {
            (Some(ns), Some(base)) => format!("{:.1}x", ns / base),
            _ => "-".into(),
        };
        let shown = match &timing.skipped {
            Some(why) => format!("skipped: {why}"),
            None => fmt_ns(timing.ns),
        };
        let _ = writeln!(
            md,
            "| {} | {shown} | {spread} | {ratio} | {} |",
            tool.label(),
            tool.command()
        );
    }
}

/// leakscope against the floor, one paragraph.
fn vs_floor(md: &mut String, p: &Pairs) {
    use std::fmt::Write as _;
    if let (Some(vs_floor), Some(own)) = (p.leakscope_vs_floor, p.leakscope_own_ns) {
        let _ = writeln!(
            md,
            "leakscope costs **{vs_floor:.2}x the uprobe floor** per pair{} (what it adds over \
             nothing attached, divided by what no-op uprobes at the same points add, within each \
             round; the median of the rounds): {own:.0} ns of its own work per pair. The goal is \
             1.3x.",
            spread_of(p.leakscope_vs_floor_spread)
        );
    }
}

/// The kernel's timing of each of the probe's programs, if measured.
fn program_table(md: &mut String, p: &Pairs) {
    use std::fmt::Write as _;
    let programs = &p.leakscope_programs;
    if programs.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\nWhere leakscope's time goes, from one more run with `leakscope-probe attach \
         --bpf-stats` (the kernel's own timing of each eBPF program, BPF_ENABLE_STATS; the \
         rest of a pair's cost is the uprobe traps themselves), and the instructions the \
         kernel's verifier processed to load each (it refuses a program past 1 M):\n\n\
         | program | runs | ns per run | verifier instructions |\n| --- | ---: | ---: | ---: |"
    );
    for row in programs {
        let _ = writeln!(
            md,
            "| `{}` | {} | {:.0} | {} |",
            row.program,
            row.runs,
            row.ns_per_run,
            row.verified_insns
                .map_or_else(|| "-".to_owned(), |n| n.to_string())
        );
    }
}

/// The pairs again, deep in a frame-pointer stack.
fn deep_section(md: &mut String, p: &Pairs) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "\n### Deep stacks\n\nThe same pairs {} calls down a stack built with frame pointers \
         ({}): every allocation has a full 32-frame stack, as one made inside a server's async \
         task has (the probe walks this build by its frame pointers; pairs without them, walked by \
         the tables the probe compiles, are the next section). PAIRS is that program here. The \
         floor's traps are the same at any depth; the cost of walking the stack is not.\n",
        shown(&p.depth),
        p.program
    );
    // The tools this run timed (--quick times fewer).
    let timed: Vec<Tool> = Tool::STACK_WALKERS
        .into_iter()
        .filter(|tool| p.tools.get(tool.key()).is_some())
        .collect();
    pairs_table(md, p, &timed);
    let _ = writeln!(md);
    vs_floor(md, p);
    if let Some(r) = p.bcc_memleak_vs_leakscope {
        let _ = writeln!(
            md,
            "\nbcc memleak costs **{r:.1}x** what leakscope costs per pair here{}.",
            spread_of(p.bcc_memleak_vs_leakscope_spread)
        );
    }
    program_table(md, p);
}

/// The deep pairs built without frame pointers: the walk by table beside the
/// floor and beside the frame-pointer walk of the same stacks.
fn nofp_section(md: &mut String, p: &Pairs, deep: Option<&Pairs>) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "\n### Deep stacks without frame pointers (`pairs_nofp`)\n\nThe same {}-call-deep pairs \
         built as most servers ship, without frame pointers ({}): leakscope walks them by the \
         tables it compiles from the program's and libc's `.eh_frame` (docs/probe.md, \
         \"Unwinding without frame pointers\"). PAIRS is that program here.\n",
        shown(&p.depth),
        p.program
    );
    pairs_table(
        md,
        p,
        &[
            Tool::Unprobed,
            Tool::Floor,
            Tool::Leakscope,
            Tool::LeakscopeSampled,
        ],
    );
    let _ = writeln!(md);
    vs_floor(md, p);
    let tables = p.tools.ns(Tool::Leakscope.key());
    let floor = p.tools.ns(Tool::Floor.key());
    if let (Some(tables), Some(floor)) = (tables, floor) {
        let _ = writeln!(
            md,
            "\nWalked by table, leakscope costs **{:.2}x** the floor per pair for the whole stack \
             (the goal: at most 2x).",
            tables / floor
        );
    }
    if let (Some(tables), Some(fp)) = (tables, deep.and_then(|d| d.tools.ns(Tool::Leakscope.key())))
    {
        let _ = writeln!(
            md,
            "The frame-pointer walk of the same stacks (above) costs {}; the walk by table \
             {:.2}x that.",
            fmt_ns(Some(fp)),
            tables / fp
        );
    }
    if let (Some(sampled), Some(floor)) = (p.tools.ns(Tool::LeakscopeSampled.key()), floor) {
        let _ = writeln!(
            md,
            "Sampling every 512 KiB on average (`--sample`), {}: **{:.2}x** the floor. Only a \
             sampled allocation (one in ~8,000 of these 64-byte blocks) walks its stack; the \
             others pay the countdown in `malloc_exit`.",
            fmt_ns(Some(sampled)),
            sampled / floor
        );
    }
    program_table(md, p);
}

/// A bar chart of ns per pair, as SVG. Hand-written: six labelled bars do not
/// need plotters in xtask, and the file stays small and diffable.
pub(super) fn bar_chart(p: &Pairs) -> String {
    use std::fmt::Write as _;
    let bars: Vec<(&str, f64)> = Tool::ALL
        .iter()
        .filter_map(|t| p.tools.ns(t.key()).map(|ns| (t.key(), ns)))
        .collect();
    let top = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let (width, row, left, right) = (760.0, 34.0, 130.0, 110.0);
    let height = 50.0 + row * bars.len() as f64;
    let mut svg = crate::svg::open(
        width,
        height,
        &format!(
            "ns per malloc(64)+free pair (median), {} pairs per run",
            p.n
        ),
    );
    for (i, (name, ns)) in bars.iter().enumerate() {
        let y = 40.0 + row * i as f64;
        let w = (width - left - right) * ns / top;
        let color = match *name {
            "leakscope" => "#d62728",
            "floor" => "#7f7f7f",
            _ => "#1f77b4",
        };
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{name}</text><rect x="{left}" y="{}" width="{w:.1}" height="{}" fill="{color}"/><text x="{}" y="{}">{ns:.0} ns</text>"#,
            left - 8.0,
            y + 17.0,
            y + 4.0,
            row - 10.0,
            left + w + 6.0,
            y + 17.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}
