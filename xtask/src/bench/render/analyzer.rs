//! The recording-size and analyzer sections.

use serde_json::Value;

pub(super) fn section(md: &mut String, results: &Value) {
    use std::fmt::Write as _;
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
}
