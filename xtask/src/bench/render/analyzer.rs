//! The recording-size and analyzer sections.

use super::shown;
use crate::bench::results::{Analyzer, AnalyzerRun, Recording};

pub(super) fn section(md: &mut String, r: &Recording, analyzer: &Analyzer) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "## Recording size\n\n{:.1} bytes per event: {} events in {} bytes ({}). The goal is at most 16.\n",
        r.bytes_per_event.unwrap_or(0.0),
        r.events,
        r.file_bytes,
        r.source
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
    for row in &analyzer.runs {
        run_row(md, row, "");
    }
    if let Some(flat) = analyzer.flat_live_set.measured() {
        run_row(md, flat, " (pairs, flat live set)");
    }
    if let Some(marginal) = analyzer.marginal_events_per_s {
        let start = analyzer.start_seconds;
        let _ = writeln!(
            md,
            "\nEvery report starts with the same fixed work, whatever its events: naming frames \
             from the server binary's debug info (blazesym) and drawing the charts. On the \
             recording above itself ({} events) the whole report takes {:.2} s, which is most of \
             the smallest run's time. Past it, between the two largest runs, the analyzer takes \
             {:.2} M events/s.",
            analyzer.start_events,
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
}

/// One timed report: its events (and what `what` they are), file, time,
/// rate, peak RSS and the blocks live at its end.
fn run_row(md: &mut String, row: &AnalyzerRun, what: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "| {}{what} | {:.1} MiB | {:.2} | {:.2} M | {:.1} MiB | {} |",
        row.events,
        row.file_bytes as f64 / 1048576.0,
        row.seconds,
        row.events_per_s / 1e6,
        row.peak_rss_bytes as f64 / 1048576.0,
        shown(&row.live_blocks_at_end)
    );
}
