//! The in-process section: the cooperative allocator and the dhat-backed mode
//! beside the system allocator and heaptrack.

use crate::bench::results::InProcess;

pub(super) fn section(md: &mut String, ip: &InProcess) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "## In-process mode\n\n`alloc-bench`'s `box N`: {} `Box<[u8; 64]>` allocations and drops \
         per run, {} rounds, every mode in its own long-lived process, rounds interleaved. \
         heaptrack runs the same program (`heaptrack alloc-bench`): it is the in-process tool \
         users pick.\n",
        ip.n, ip.rounds
    );
    let _ = writeln!(
        md,
        "| mode | ns per pair | vs system allocator | vs heaptrack |\n| --- | ---: | ---: | ---: |"
    );
    let system = ip.system_ns;
    let heaptrack = ip.heaptrack_ns.unwrap_or(f64::NAN);
    for (label, ns) in [
        ("system allocator", Some(ip.system_ns)),
        ("heaptrack (started with the program)", ip.heaptrack_ns),
        (
            "leakscope_inproc::Alloc, not recording (dhat's wrapper idle)",
            Some(ip.wrapper_idle_ns),
        ),
        (
            "recording: the leakscope recorder alone (`Recorder::start`)",
            Some(ip.recorder_only_ns),
        ),
        (
            "recording: dhat's profiler + the leakscope recorder (`leakscope_inproc::start`)",
            Some(ip.recording_ns),
        ),
        (
            "cooperative allocator (`Alloc<System>`), off: what a production build carries",
            Some(ip.cooperative_off_ns),
        ),
        (
            "cooperative allocator, recording on (what attach switches on)",
            Some(ip.cooperative_on_ns),
        ),
        (
            "cooperative allocator, recording sampled every 512 KiB (`attach --sample`)",
            Some(ip.cooperative_sampled_ns),
        ),
        (
            "cooperative allocator, recording on, stacks by the unwind tables (as a build without frame pointers walks them)",
            ip.cooperative_on_tables_ns,
        ),
        (
            "cooperative allocator, recording on, stacks by `_Unwind_Backtrace` (as dhat walks them)",
            ip.cooperative_on_libgcc_ns,
        ),
    ] {
        if ns.is_none() && label.contains("stacks by") {
            // Results from before the row was measured.
            continue;
        }
        let Some(ns) = ns else {
            let _ = writeln!(
                md,
                "| {label} | skipped: {} | | |",
                ip.heaptrack_skipped.as_deref().unwrap_or("not measured")
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
    if let Some(heaptrack) = ip.heaptrack_ns {
        let ours = ip.recorder_only_ns;
        let _ = writeln!(
            md,
            "\nThe recorder alone costs **{:.2}x heaptrack** per pair (the goal is at most 1x): it \
             walks the stack by frame pointer and appends a fixed-size event to a preallocated \
             buffer, where heaptrack unwinds with libunwind and writes through a pipe.",
            ours / heaptrack
        );
    }
    let (off, on, sampled) = (
        ip.cooperative_off_ns,
        ip.cooperative_on_ns,
        ip.cooperative_sampled_ns,
    );
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
    let _ = writeln!(
        md,
        "\nSampled every 512 KiB on average, **{sampled:.1} ns** a pair, {:.2} ns over \
         off: a countdown and a branch per allocation and a pointer test per free; a \
         sample (about one per 8,000 pairs of 64 B here) pays the stack walk and the \
         buffer.",
        sampled - off
    );
    if let (Some(unwind), Some(libgcc)) = (ip.cooperative_on_tables_ns, ip.cooperative_on_libgcc_ns)
    {
        let _ = writeln!(
            md,
            "\nIn a build without frame pointers the recorder walks each stack by the unwind \
             tables it compiled at start (the probe's rows and step, a per-thread cache of rows \
             by address): **{unwind:.1} ns** a pair recording on, against {on:.1} by frame \
             pointer and {libgcc:.1} with `_Unwind_Backtrace` (as dhat does) on the same stacks \
             (`alloc-bench`'s `box` loop, a dozen frames down to `_start`)."
        );
    }
    let _ = writeln!(
        md,
        "\nThe dhat-backed mode is what it is: dhat's profiler captures a full backtrace per \
         allocation and keeps its own table of every live block, and that dominates. It is for \
         heap-profile tests, where `dhat::HeapStats` gives a test its assertions; it is not for \
         production.\n"
    );
}
