//! `docs/BENCHMARKS.md` and its chart, from `results.json` alone.

use serde_json::Value;

use super::{BenchArgs, pairs::Tool};

pub(super) fn fmt_ns(v: &Value) -> String {
    v.as_f64()
        .map(|ns| format!("{ns:.1}"))
        .unwrap_or_else(|| "-".into())
}

/// `docs/BENCHMARKS.md`, from `results` alone.
/// " (rounds: 1.21x-1.34x)" for a `[min, max]` of per-round ratios, or nothing.
fn spread_of(spread: &Value) -> String {
    match spread.as_array().map(|s| (s[0].as_f64(), s[1].as_f64())) {
        Some((Some(lo), Some(hi))) => format!(" (rounds: {lo:.2}x-{hi:.2}x)"),
        _ => String::new(),
    }
}

/// The pairs table of one program: a row per tool of `tools`.
fn pairs_table(md: &mut String, p: &Value, tools: &[Tool]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "| tool | ns per pair | spread | vs nothing attached | command |\n| --- | ---: | ---: | ---: | --- |"
    );
    let base = p["unprobed_ns"].as_f64();
    for tool in tools {
        let ns = &p[format!("{}_ns", tool.key())];
        let spread = p[format!("{}_spread_ns", tool.key())]
            .as_array()
            .map(|s| format!("{}-{}", fmt_ns(&s[0]), fmt_ns(&s[1])))
            .unwrap_or_else(|| "-".into());
        let ratio = match (ns.as_f64(), base) {
            (Some(ns), Some(base)) => format!("{:.1}x", ns / base),
            _ => "-".into(),
        };
        let shown = match p[format!("{}_skipped", tool.key())].as_str() {
            Some(why) => format!("skipped: {why}"),
            None => fmt_ns(ns),
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
fn vs_floor(md: &mut String, p: &Value) {
    use std::fmt::Write as _;
    if let (Some(vs_floor), Some(own)) = (
        p["leakscope_vs_floor"].as_f64(),
        p["leakscope_own_ns"].as_f64(),
    ) {
        let _ = writeln!(
            md,
            "leakscope costs **{vs_floor:.2}x the uprobe floor** per pair{} (what it adds over \
             nothing attached, divided by what no-op uprobes at the same points add, within each \
             round; the median of the rounds): {own:.0} ns of its own work per pair. The goal is \
             1.3x.",
            spread_of(&p["leakscope_vs_floor_spread"])
        );
    }
}

/// The kernel's timing of each of the probe's programs, if measured.
fn program_table(md: &mut String, p: &Value) {
    use std::fmt::Write as _;
    let programs = p["leakscope_programs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
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
    for row in &programs {
        let _ = writeln!(
            md,
            "| `{}` | {} | {:.0} | {} |",
            row["program"].as_str().unwrap_or("?"),
            row["runs"],
            row["ns_per_run"].as_f64().unwrap_or(0.0),
            row["verified_insns"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), |n| n.to_string())
        );
    }
}

/// The pairs again, deep in a frame-pointer stack.
fn deep_section(md: &mut String, p: &Value) {
    use std::fmt::Write as _;
    if p.is_null() {
        return;
    }
    let _ = writeln!(
        md,
        "\n### Deep stacks\n\nThe same pairs {} calls down a stack built with frame pointers \
         ({}): every allocation has a full 32-frame stack, as one made inside a server's async \
         task has (leakscope asks for frame-pointer builds). PAIRS is that program here. The \
         floor's traps are the same at any depth; the cost of walking the stack is not.\n",
        p["depth"],
        p["program"].as_str().unwrap_or("?")
    );
    // The tools this run timed (--quick times fewer).
    let timed: Vec<Tool> = Tool::STACK_WALKERS
        .into_iter()
        .filter(|tool| p.get(format!("{}_ns", tool.key())).is_some())
        .collect();
    pairs_table(md, p, &timed);
    let _ = writeln!(md);
    vs_floor(md, p);
    if let Some(r) = p["bcc_memleak_vs_leakscope"].as_f64() {
        let _ = writeln!(
            md,
            "\nbcc memleak costs **{r:.1}x** what leakscope costs per pair here{}.",
            spread_of(&p["bcc_memleak_vs_leakscope_spread"])
        );
    }
    program_table(md, p);
}

pub(super) fn render(results: &Value, args: &BenchArgs) -> String {
    use std::fmt::Write as _;
    let p = &results["pairs"];
    let m = &results["machine"];
    let mut md = String::new();
    let command = if args.quick {
        "cargo xtask bench --quick"
    } else {
        "cargo xtask bench"
    };
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `{command}` ({:.0} s) on {} ({} CPUs, {}), kernel {}, {}. Every figure below is \
         from that one run; rerun the command to get yours (`--quick` takes under two minutes and \
         writes the same files). Side by side means interleaved: each round runs every tool once, \
         in the order of the table; figures are medians over rounds, with the spread.\n",
        results["seconds"].as_f64().unwrap_or(0.0),
        m["cpu"].as_str().unwrap_or("?"),
        m["cpus"],
        if results["quick"] == true {
            "quick mode"
        } else {
            "full mode"
        },
        m["kernel"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(
        md,
        "## malloc(64) + free pairs\n\n`bench/tools/pairs.c` (built with `cc -O1`) times {} pairs \
         per run, {} rounds. PAIRS below is that program; tools attached by pid attach while it \
         waits (`--wait`), then it runs.\n",
        p["n"], p["rounds"]
    );
    pairs_table(&mut md, p, &Tool::ALL);
    let _ = writeln!(md, "\n![ns per pair by tool](images/bench-pairs.svg)\n");
    vs_floor(&mut md, p);
    program_table(&mut md, p);
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
    match p["bcc_memleak_vs_leakscope"].as_f64() {
        Some(r) => {
            let _ = writeln!(
                md,
                "\nbcc memleak costs **{r:.1}x** what leakscope costs per pair{}, on the same \
                 program in the same run. The goal is at least 4x.",
                spread_of(&p["bcc_memleak_vs_leakscope_spread"])
            );
            if let Some(ceiling) = p["bcc_memleak_vs_floor"].as_f64() {
                let _ = writeln!(
                    md,
                    "It cannot be met by a uprobe tool on this machine: bcc memleak costs \
                     {ceiling:.1}x the floor, so a tool that did nothing at all in its programs \
                     would be {ceiling:.1}x cheaper than bcc memleak, no more."
                );
            }
            if let Some(own) = p["bcc_memleak_own_vs_leakscope_own"].as_f64() {
                let _ = writeln!(
                    md,
                    "Past the traps both pay, bcc memleak's own work costs **{own:.1}x** \
                     leakscope's{}.",
                    spread_of(&p["bcc_memleak_own_vs_leakscope_own_spread"])
                );
            }
        }
        None => {
            let _ = writeln!(
                md,
                "\nbcc memleak was skipped: {}.",
                p["bcc_memleak_skipped"].as_str().unwrap_or("?")
            );
        }
    }
    deep_section(&mut md, &results["pairs_deep"]);
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

    let ip = &results["in_process"];
    let _ = writeln!(
        md,
        "## In-process mode\n\n`alloc-bench`'s `box N`: {} `Box<[u8; 64]>` allocations and drops \
         per run, {} rounds, every mode in its own long-lived process, rounds interleaved. \
         heaptrack runs the same program (`heaptrack alloc-bench`): it is the in-process tool \
         users pick.\n",
        ip["n"], ip["rounds"]
    );
    let _ = writeln!(
        md,
        "| mode | ns per pair | vs system allocator | vs heaptrack |\n| --- | ---: | ---: | ---: |"
    );
    let system = ip["system_ns"].as_f64().unwrap_or(f64::NAN);
    let heaptrack = ip["heaptrack_ns"].as_f64().unwrap_or(f64::NAN);
    for (label, key) in [
        ("system allocator", "system_ns"),
        ("heaptrack (started with the program)", "heaptrack_ns"),
        (
            "leakscope_inproc::Alloc, not recording (dhat's wrapper idle)",
            "wrapper_idle_ns",
        ),
        (
            "recording: the leakscope recorder alone (`Recorder::start`)",
            "recorder_only_ns",
        ),
        (
            "recording: dhat's profiler + the leakscope recorder (`leakscope_inproc::start`)",
            "recording_ns",
        ),
        (
            "cooperative allocator (`Alloc<System>`), off: what a production build carries",
            "cooperative_off_ns",
        ),
        (
            "cooperative allocator, recording on (what attach switches on)",
            "cooperative_on_ns",
        ),
        (
            "cooperative allocator, recording sampled every 512 KiB (`attach --sample`)",
            "cooperative_sampled_ns",
        ),
    ] {
        let Some(ns) = ip[key].as_f64() else {
            let _ = writeln!(
                md,
                "| {label} | skipped: {} | | |",
                ip["heaptrack_skipped"].as_str().unwrap_or("not measured")
            );
            continue;
        };
        let _ = writeln!(
            md,
            "| {label} | {ns:.1} | {:.1}x | {:.2}x |",
            ns / system,
            ns / heaptrack
        );
    }
    if let (Some(ours), Some(heaptrack)) =
        (ip["recorder_only_ns"].as_f64(), ip["heaptrack_ns"].as_f64())
    {
        let _ = writeln!(
            md,
            "\nThe recorder alone costs **{:.2}x heaptrack** per pair (the goal is at most 1x): it \
             walks the stack by frame pointer and appends a fixed-size event to a preallocated \
             buffer, where heaptrack unwinds with libunwind and writes through a pipe.",
            ours / heaptrack
        );
    }
    if let (Some(off), Some(on)) = (
        ip["cooperative_off_ns"].as_f64(),
        ip["cooperative_on_ns"].as_f64(),
    ) {
        let goal = 1.1 * system + 3.0;
        let _ = writeln!(
            md,
            "\nThe cooperative allocator off costs **{off:.1} ns** a pair against the system \
             allocator's {system:.1} (the goal: at most 1.1x + 3 ns = {goal:.1} ns; {}): one \
             relaxed load of its mode per call. Recording on, **{:.2}x heaptrack** per pair \
             (the goal: below 1x).",
            if off <= goal { "met" } else { "not met" },
            on / heaptrack
        );
        if let Some(sampled) = ip["cooperative_sampled_ns"].as_f64() {
            let _ = writeln!(
                md,
                "\nSampled every 512 KiB on average, **{sampled:.1} ns** a pair, {:.2} ns over \
                 off: a countdown and a branch per allocation and a pointer test per free; a \
                 sample (about one per 8,000 pairs of 64 B here) pays the stack walk and the \
                 buffer.",
                sampled - off
            );
        }
    }
    let _ = writeln!(
        md,
        "\nThe dhat-backed mode is what it is: dhat's profiler captures a full backtrace per \
         allocation and keeps its own table of every live block, and that dominates. It is for \
         heap-profile tests, where `dhat::HeapStats` gives a test its assertions; it is not for \
         production.\n"
    );

    render_server(&mut md, &results["server"]);
    render_server_programs(&mut md, &results["server_programs"]);

    let r = &results["recording"];
    let _ = writeln!(
        md,
        "## Recording size\n\n{:.1} bytes per event: {} events in {} bytes ({}). The goal is at most 16.\n",
        r["bytes_per_event"].as_f64().unwrap_or(0.0),
        r["events"],
        r["file_bytes"],
        r["source"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        md,
        "## Analyzer\n\n`leakscope report` (release build) on recordings made by replaying the \
         recording above until they hold N events, each copy's addresses and times shifted past \
         the last, so what each copy keeps adds to the live set. Peak RSS is the process's \
         high-water resident set (`VmHWM`, polled every millisecond while it runs).\n"
    );
    let _ = writeln!(
        md,
        "| events | file | seconds | events/s | peak RSS | blocks live at the end |\n| ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in results["analyzer"]["runs"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {:.1} MiB | {:.2} | {:.2} M | {:.1} MiB | {} |",
            row["events"],
            row["file_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            row["seconds"].as_f64().unwrap_or(0.0),
            row["events_per_s"].as_f64().unwrap_or(0.0) / 1e6,
            row["peak_rss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            row["live_blocks_at_end"]
        );
    }
    let flat = &results["analyzer"]["flat_live_set"];
    if flat["events"].is_u64() {
        let _ = writeln!(
            md,
            "| {} (pairs, flat live set) | {:.1} MiB | {:.2} | {:.2} M | {:.1} MiB | {} |",
            flat["events"],
            flat["file_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            flat["seconds"].as_f64().unwrap_or(0.0),
            flat["events_per_s"].as_f64().unwrap_or(0.0) / 1e6,
            flat["peak_rss_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            flat["live_blocks_at_end"]
        );
    }
    let analyzer = &results["analyzer"];
    if let (Some(start), Some(marginal)) = (
        analyzer["start_seconds"].as_f64(),
        analyzer["marginal_events_per_s"].as_f64(),
    ) {
        let _ = writeln!(
            md,
            "\nEvery report starts with the same fixed work, whatever its events: naming frames \
             from the server binary's debug info (blazesym) and drawing the charts. On the \
             recording above itself ({} events) the whole report takes {:.2} s, which is most of \
             the smallest run's time. Past it, between the two largest runs, the analyzer takes \
             {:.2} M events/s.",
            analyzer["start_events"],
            start,
            marginal / 1e6
        );
    }
    let _ = writeln!(
        md,
        "\nThe goal is at least 5 M events/s, with memory that follows the blocks live at the \
         end, not the events: the last row replays the pairs section's probe recording \
         (malloc+free pairs, so next to nothing stays live) to as many events as the largest \
         run. Reading (file, zstd, postcard) runs on a thread of its own, a few frames ahead \
         of the stages.\n"
    );
    super::always_on::render(&mut md, &results["always_on"]);
    let _ = writeln!(
        md,
        "## Soak\n\nThe probe on a leaking server for half an hour, its memory and CPU sampled \
         every 10 s: [soak.md](soak.md) (`cargo xtask soak --minutes 30`).\n\n`bench/results.json` \
         holds every figure above."
    );
    md
}

/// A bar chart of ns per pair, as SVG. Hand-written: six labelled bars do not
/// need plotters in xtask, and the file stays small and diffable.
pub(super) fn bar_chart(p: &Value) -> String {
    use std::fmt::Write as _;
    let bars: Vec<(&str, f64)> = Tool::ALL
        .iter()
        .filter_map(|t| {
            p[format!("{}_ns", t.key())]
                .as_f64()
                .map(|ns| (t.key(), ns))
        })
        .collect();
    let top = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let (width, row, left, right) = (760.0, 34.0, 130.0, 110.0);
    let height = 50.0 + row * bars.len() as f64;
    let mut svg = crate::svg::open(
        width,
        height,
        &format!(
            "ns per malloc(64)+free pair (median), {} pairs per run",
            p["n"]
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

/// The server-under-load section: one table per load.
fn render_server(md: &mut String, server: &Value) {
    use super::server::{ServerTool, load_key, loads_of};
    use std::fmt::Write as _;
    if server.is_null() {
        return;
    }
    let loads = loads_of(server);
    let rates: Vec<String> = loads.iter().flatten().map(|r| format!("{r:.0}")).collect();
    let rates = match rates.as_slice() {
        [] => String::new(),
        [one] => format!("{one} sessions/s, "),
        [init @ .., last] => format!("{} and {last} sessions/s, ", init.join(", ")),
    };
    let _ = writeln!(
        md,
        "## The server under load\n\n`{}` driven by `churn` (each session: `initialize`, \
         `notifications/initialized`, one `tools/call`, then abandoned) for {} s at each load: \
         {rates}then as fast as it goes; at most {} sessions in flight. One server per \
         tool; the loads run on it in that order. Latency is per request, to the end of its \
         reply. Server CPU includes the probes' eBPF programs, which run in the server's \
         context; tool CPU is the tool's own processes (the probe, bcc's python, heaptrack's \
         interpreter).\n",
        server["server"].as_str().unwrap_or("fixture-server"),
        server["seconds_per_load"],
        server["saturation_concurrency"],
    );
    let _ = writeln!(
        md,
        "![median latency by sessions/s, to saturation](images/bench-server.svg)\n"
    );
    let tools = &server["tools"];
    let base = |load: &str| tools["unprobed"]["loads"][load]["sessions_per_s"].as_f64();
    for load in loads {
        let key = load_key(load);
        let _ = writeln!(
            md,
            "### {}\n\n| tool | sessions/s | vs nothing attached | p50 ms | p99 ms | server CPU ms per session | tool CPU s |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            match load {
                Some(rate) => format!("{rate:.0} sessions/s"),
                None => "Saturation".into(),
            }
        );
        for tool in ServerTool::ALL {
            let t = &tools[tool.key()];
            if let Some(why) = t["skipped"].as_str() {
                let _ = writeln!(md, "| {} | skipped: {why} | | | | | |", tool.label());
                continue;
            }
            let row = &t["loads"][key.as_str()];
            let rate = row["sessions_per_s"].as_f64().unwrap_or(f64::NAN);
            let _ = writeln!(
                md,
                "| {} | {rate:.1} | {} | {:.2} | {:.2} | {:.2} | {} |",
                tool.label(),
                base(&key).map_or("-".into(), |b| format!("{:.2}x", rate / b)),
                row["latency_p50_ms"].as_f64().unwrap_or(f64::NAN),
                row["latency_p99_ms"].as_f64().unwrap_or(f64::NAN),
                row["server_cpu_ms_per_session"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                row["tool_cpu_s"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.2}")),
            );
        }
        let _ = writeln!(md);
    }
    let lost: Vec<String> = ServerTool::ALL
        .iter()
        .filter_map(|tool| {
            tools[tool.key()]["lost_events"]
                .as_u64()
                .map(|n| format!("{}: {n}", tool.label()))
        })
        .collect();
    let _ = writeln!(
        md,
        "Events lost over the whole run (from each recording; bcc memleak and heaptrack do not \
         report theirs): {}. The goal at 10 sessions/s is at least 0.9x the throughput with \
         nothing attached.\n",
        if lost.is_empty() {
            "-".into()
        } else {
            lost.join(", ")
        }
    );
}

/// The server section's curve, as SVG: median request latency against the
/// sessions/s each tool reached, one line per tool through its load points up
/// to saturation (where a line turns up, the server is out of breath). `None`
/// without a server section. Hand-written like [`bar_chart`].
pub(super) fn server_chart(server: &Value) -> Option<String> {
    use super::server::{ServerTool, load_key, loads_of};
    use std::fmt::Write as _;
    let tools = server.get("tools")?;
    let loads = loads_of(server);
    let lines: Vec<(&str, Vec<(f64, f64)>)> = ServerTool::ALL
        .iter()
        .filter_map(|tool| {
            let rows = &tools[tool.key()]["loads"];
            let points: Vec<(f64, f64)> = loads
                .iter()
                .filter_map(|&load| {
                    let row = &rows[load_key(load).as_str()];
                    Some((
                        row["sessions_per_s"].as_f64()?,
                        row["latency_p50_ms"].as_f64()?,
                    ))
                })
                .collect();
            (!points.is_empty()).then_some((tool.key(), points))
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let points = || lines.iter().flat_map(|(_, p)| p.iter());
    let max_x = nice_ceiling(points().map(|p| p.0).fold(1.0, f64::max));
    // Latency on a log scale: a tool's start-up (heaptrack's, in a short run)
    // can put one point tens of times above the rest.
    let decade = |v: f64| v.max(0.01).log10();
    let low_y = points()
        .map(|p| decade(p.1))
        .fold(f64::MAX, f64::min)
        .floor();
    let high_y = points()
        .map(|p| decade(p.1))
        .fold(f64::MIN, f64::max)
        .ceil()
        .max(low_y + 1.0);
    let (width, height, left, right, top, bottom) = (760.0, 420.0, 70.0, 190.0, 40.0, 50.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let x = |v: f64| left + plot_w * v / max_x;
    let y = |v: f64| top + plot_h * (1.0 - (decade(v) - low_y) / (high_y - low_y));
    let mut svg = crate::svg::open(
        width,
        height,
        "fixture-server under churn: median request latency by sessions/s reached",
    );
    for i in 0..=4 {
        let vx = max_x * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{vx}</text>"#,
            x(vx),
            top + plot_h + 18.0,
        );
    }
    for power in low_y as i32..=high_y as i32 {
        for mantissa in [1.0, 2.0, 5.0] {
            let vy = mantissa * 10f64.powi(power);
            if decade(vy) > high_y + 1e-9 {
                break;
            }
            let _ = writeln!(
                svg,
                r##"<line x1="{left}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="{}"/><text x="{}" y="{:.1}" text-anchor="end">{vy}</text>"##,
                left + plot_w,
                if mantissa == 1.0 { "#bbb" } else { "#eee" },
                left - 6.0,
                y(vy) + 4.0,
                py = y(vy),
            );
        }
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#333"/><line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle">sessions/s reached</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">p50 ms (log scale)</text>"##,
        left + plot_w / 2.0,
        height - 10.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        b = top + plot_h,
        r = left + plot_w,
    );
    const COLORS: [&str; 8] = [
        "#7f7f7f", "#d62728", "#e377c2", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
    ];
    for (i, (name, points)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(px, py) in points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#,
                x(px),
                y(py)
            );
        }
        let ly = top + 10.0 + 22.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{name}</text>"#,
            left + plot_w + 16.0,
            left + plot_w + 40.0,
            left + plot_w + 46.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>\n");
    Some(svg)
}

/// The smallest of 1, 2 or 5 times a power of ten, times four, that is at
/// least `v`: an axis end whose quarters are round numbers.
fn nice_ceiling(v: f64) -> f64 {
    let quarter = v / 4.0;
    let power = 10f64.powf(quarter.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= quarter)
        .unwrap_or(10.0 * power);
    step * 4.0
}

/// Where the probe's time goes on the server (see `server::server_programs`).
fn render_server_programs(md: &mut String, p: &Value) {
    use std::fmt::Write as _;
    if p.is_null() {
        return;
    }
    let _ = writeln!(md, "### Where the probe's time goes on the server\n");
    if let Some(why) = p["skipped"].as_str() {
        let _ = writeln!(md, "Not measured in this run: {why}.\n");
        return;
    }
    let cpu = &p["server_cpu_ms_per_session"];
    let ms = |key: &str| cpu[key].as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(
        md,
        "Three more servers at {:.0} sessions/s for {} s each: server CPU per session {:.2} ms with \
         nothing attached, {:.2} ms with no-op programs at the probe's attach points (the uprobe \
         traps alone: `leakscope-probe attach --pid PID --bare`), {:.2} ms with the probe \
         (`leakscope-probe attach --pid PID --bpf-stats`). On this server the probe costs \
         **{:.2}x the floor**: a real server's allocations are made deep in async code, so each \
         stack walk copies more of the stack than in the pairs above. Per program, the \
         kernel's own timing:\n",
        p["rate"].as_f64().unwrap_or(f64::NAN),
        p["seconds"],
        ms("unprobed"),
        ms("floor"),
        ms("leakscope"),
        p["leakscope_vs_floor"].as_f64().unwrap_or(f64::NAN),
    );
    let _ = writeln!(
        md,
        "| program | runs per session | ns per run | us per session |\n| --- | ---: | ---: | ---: |"
    );
    let mut rows: Vec<&Value> = p["programs"].as_array().into_iter().flatten().collect();
    rows.sort_by(|a, b| {
        let us = |v: &Value| v["us_per_session"].as_f64().unwrap_or(0.0);
        us(b).total_cmp(&us(a))
    });
    for row in rows {
        let _ = writeln!(
            md,
            "| `{}` | {:.1} | {:.0} | {:.1} |",
            row["program"].as_str().unwrap_or("?"),
            row["runs_per_session"].as_f64().unwrap_or(0.0),
            row["ns_per_run"].as_f64().unwrap_or(0.0),
            row["us_per_session"].as_f64().unwrap_or(0.0),
        );
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ends_are_round_and_cover_the_data() {
        assert_eq!(nice_ceiling(357.0), 400.0);
        assert_eq!(nice_ceiling(4.51), 8.0);
        assert_eq!(nice_ceiling(0.9), 1.0);
        for v in [0.07, 1.0, 3.3, 99.6, 1234.0] {
            assert!(nice_ceiling(v) >= v, "{v}");
        }
    }

    #[test]
    fn server_chart_draws_one_line_per_tool_inside_the_plot() {
        let row = |rate: f64, p50: f64| serde_json::json!({ "sessions_per_s": rate, "latency_p50_ms": p50 });
        let server = serde_json::json!({ "tools": {
            "unprobed": { "loads": { "10_per_s": row(10.0, 1.0), "100_per_s": row(99.0, 0.9), "saturation": row(357.0, 0.7) } },
            "leakscope": { "loads": { "10_per_s": row(10.0, 1.8), "saturation": row(336.0, 1.9) } },
            "bcc_memleak": { "skipped": "no bcc" },
        }});
        let svg = server_chart(&server).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 5);
        for circle in svg.split("<circle").skip(1) {
            let attr = |name: &str| -> f64 {
                let rest = &circle[circle.find(&format!("{name}=\"")).unwrap() + name.len() + 2..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            };
            assert!((70.0..=570.0).contains(&attr("cx")), "{circle}");
            assert!((40.0..=370.0).contains(&attr("cy")), "{circle}");
        }
        assert!(server_chart(&serde_json::Value::Null).is_none());
    }
}
