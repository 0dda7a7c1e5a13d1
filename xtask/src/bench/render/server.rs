//! The server-under-load section and its chart.

use crate::bench::results::{
    LoadRow, Outcome, SaturationRounds, ServerInstructions, ServerLoad, ServerPrograms,
};
use crate::bench::server::{ServerTool, load_key, loads_of};

/// The server-under-load section: one table per load.
pub(super) fn section(md: &mut String, server: &ServerLoad) {
    use std::fmt::Write as _;
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
        server.server, server.seconds_per_load, server.saturation_concurrency,
    );
    let _ = writeln!(
        md,
        "![median latency by sessions/s, to saturation](images/bench-server.svg)\n"
    );
    let base = |load: &str| row_of(server, ServerTool::Unprobed, load)?.sessions_per_s;
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
            if let Some(why) = server.tools.get(tool.key()).and_then(Outcome::skipped) {
                let _ = writeln!(md, "| {} | skipped: {why} | | | | | |", tool.label());
                continue;
            }
            let row = row_of(server, tool, &key);
            let figure = |f: fn(&LoadRow) -> Option<f64>| row.and_then(f).unwrap_or(f64::NAN);
            let rate = figure(|r| r.sessions_per_s);
            let _ = writeln!(
                md,
                "| {} | {rate:.1} | {} | {:.2} | {:.2} | {:.2} | {} |",
                tool.label(),
                base(&key).map_or("-".into(), |b| format!("{:.2}x", rate / b)),
                figure(|r| Some(r.latency_p50_ms)),
                figure(|r| Some(r.latency_p99_ms)),
                figure(|r| Some(r.server_cpu_ms_per_session)),
                row.and_then(|r| r.tool_cpu_s)
                    .map_or("-".into(), |s| format!("{s:.2}")),
            );
        }
        let _ = writeln!(md);
    }
    let lost: Vec<String> = ServerTool::ALL
        .iter()
        .filter_map(|tool| {
            let measured = server.tools.get(tool.key())?.measured()?;
            measured
                .lost_events
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

/// One tool's figures at one load, if it ran there.
fn row_of<'a>(server: &'a ServerLoad, tool: ServerTool, load: &str) -> Option<&'a LoadRow> {
    server.tools.get(tool.key())?.measured()?.loads.get(load)
}

/// The server section's curve, as SVG: median request latency against the
/// sessions/s each tool reached, one line per tool through its load points up
/// to saturation (where a line turns up, the server is out of breath). `None`
/// when no tool ran. Hand-written like [`bar_chart`](super::pairs::bar_chart).
pub(super) fn server_chart(server: &ServerLoad) -> Option<String> {
    use std::fmt::Write as _;
    let loads = loads_of(server);
    let lines: Vec<(&str, Vec<(f64, f64)>)> = ServerTool::ALL
        .iter()
        .filter_map(|&tool| {
            let points: Vec<(f64, f64)> = loads
                .iter()
                .filter_map(|&load| {
                    let row = row_of(server, tool, &load_key(load))?;
                    Some((row.sessions_per_s?, row.latency_p50_ms))
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

/// Saturation side by side (see `saturation::saturation_rounds`).
pub(super) fn rounds_section(md: &mut String, rounds: &Outcome<SaturationRounds>) {
    use std::fmt::Write as _;
    let _ = writeln!(md, "### Saturation side by side\n");
    let Some(r) = rounds.measured() else {
        let _ = writeln!(md, "Skipped: {}\n", rounds.skipped().unwrap_or("?"));
        return;
    };
    let _ = writeln!(
        md,
        "One 10 s run per tool, as in the table above, is within this machine's noise. So {} \
         rounds, each starting a fresh server per tool at saturation for {} s, the tools \
         alternating (the order reversed every other round); each ratio is taken within its \
         round, and the figure is the median of the rounds.\n\n\
         | tool | sessions/s per round | server CPU ms per session (median) | the tool's own process, CPU ms per session (median) | the tool's own process, CPU s per s (median) | vs nothing attached (median) | rounds |\n\
         | --- | --- | ---: | ---: | ---: | ---: | --- |",
        r.rounds, r.seconds
    );
    for tool in [
        ServerTool::Unprobed,
        ServerTool::CooperativeOff,
        ServerTool::CooperativeSampled,
        ServerTool::LeakscopeSampled,
    ] {
        let Some(rates) = r.sessions_per_s.get(tool.key()) else {
            continue;
        };
        let cpu = r
            .server_cpu_ms_per_session
            .get(tool.key())
            .map(|c| crate::bench::median(c.clone()))
            .unwrap_or(f64::NAN);
        let own = r
            .tool_cpu_ms_per_session
            .get(tool.key())
            .map(|c| format!("{:.3}", crate::bench::median(c.clone())))
            .unwrap_or_else(|| "-".into());
        // CPU seconds a second: a round's CPU per session times its sessions a second.
        let per_s = r
            .tool_cpu_ms_per_session
            .get(tool.key())
            .map(|c| {
                let each = c.iter().zip(rates).map(|(ms, rate)| ms * rate / 1000.0);
                format!("{:.2}", crate::bench::median(each.collect()))
            })
            .unwrap_or_else(|| "-".into());
        let (ratio, range) = match r.vs_unprobed.get(tool.key()) {
            Some(v) => (
                format!("**{:.2}x**", v.median),
                format!("{:.2}x-{:.2}x", v.min, v.max),
            ),
            None => ("1.00x".into(), "-".into()),
        };
        let rates: Vec<String> = rates.iter().map(|x| format!("{x:.0}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {cpu:.2} | {own} | {per_s} | {ratio} | {range} |",
            tool.label(),
            rates.join(", ")
        );
    }
    let _ = writeln!(md);
    if let Some(drift) = r
        .sessions_per_s
        .get(ServerTool::Unprobed.key())
        .and_then(|rates| reference_drift(rates))
    {
        let _ = writeln!(
            md,
            "{drift}
"
        );
    }
}

/// What to say when the unprobed server's own rate moved more than 10% over
/// the rounds: on a VM whose host takes back memory or time, every ratio of
/// such a run reads the machine as much as the tool (a whole run read a
/// sampled cooperative server at 1.03x of an unprobed one that slowed from
/// 5,324 to 4,754 sessions/s round by round; `--only saturation` right after
/// read 0.90x).
fn reference_drift(rates: &[f64]) -> Option<String> {
    let median = crate::bench::median(rates.to_vec());
    let (min, max) = rates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    if median.is_nan() || median <= 0.0 || (max - min) / median <= 0.10 {
        return None;
    }
    let rates: Vec<String> = rates.iter().map(|x| format!("{x:.0}")).collect();
    Some(format!(
        "**The unprobed server's own rate moved {:.0}% over these rounds** ({} sessions/s, \
         round by round): this run's ratios read this machine as much as the tools. \
         `cargo xtask bench --only saturation` measures the rounds again.",
        (max - min) / median * 100.0,
        rates.join(", ")
    ))
}

/// Instructions per session (see `instructions::instructions`).
pub(super) fn instructions_section(md: &mut String, i: &Outcome<ServerInstructions>) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "### Instructions per session
"
    );
    let Some(i) = i.measured() else {
        let _ = writeln!(
            md,
            "Not measured in this run: {}.\n",
            i.skipped().unwrap_or("?")
        );
        return;
    };
    let _ = writeln!(
        md,
        "Instructions retired per session, counted by callgrind over {} sessions of churn after a \
         warm-up, every thread of the server included (the recorder's writer too). They count \
         work, not time, and repeat within ~0.5% where the rounds above spread by tens of \
         percent: what a change to the recorder's path saves shows here first. `leaky` is the \
         hand-composed fixture the rounds run (its own `mcp_session` span around each session's \
         work); `service` is rmcp's stock `StreamableHttpService`.\n\n\
         | composition | tool | instructions per session | vs nothing attached |\n\
         | --- | --- | ---: | ---: |",
        i.sessions
    );
    for (composition, tools) in &i.per_session {
        for tool in [
            ServerTool::Unprobed,
            ServerTool::CooperativeOff,
            ServerTool::CooperativeSampled,
        ] {
            let Some(ir) = tools.get(tool.key()) else {
                continue;
            };
            let ratio = i
                .vs_unprobed
                .get(composition)
                .and_then(|r| r.get(tool.key()))
                .map_or("1.00x".into(), |r| format!("**{r:.3}x**"));
            let _ = writeln!(
                md,
                "| {composition} | {} | {:.0}k | {ratio} |",
                tool.label(),
                ir / 1000.0
            );
        }
    }
    let _ = writeln!(md);
    for (composition, recorded) in &i.recorded_per_session {
        let get = |key: &str| recorded.get(key).copied().unwrap_or(0.0);
        let _ = writeln!(
            md,
            "What `{composition}`'s sampled recording held per session: {:.1} blocks recorded              whole (aligned for tokio's task cells and channels: what session states and task              counts rest on), {:.2} sampled allocations, {:.1} frees.\n",
            get("whole"),
            get("sampled"),
            get("frees")
        );
    }
    for (composition, parts) in &i.sampled_over_off {
        let total: f64 = parts.values().sum();
        let _ = writeln!(
            md,
            "Where `{composition}`'s sampled recording spends its {:.1}k instructions a session \
             over the build switched off (each function's self cost, the two runs' difference, \
             sorted into parts by name):\n\n| part | instructions per session |\n| --- | ---: |",
            total / 1000.0
        );
        let mut sorted: Vec<_> = parts.iter().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(a.1));
        for (part, ir) in sorted {
            let _ = writeln!(md, "| {part} | {:.1}k |", ir / 1000.0);
        }
        let _ = writeln!(md);
    }
}

/// Where the probe's time goes on the server (see `server::server_programs`).
pub(super) fn programs_section(md: &mut String, p: &Outcome<ServerPrograms>) {
    use std::fmt::Write as _;
    let _ = writeln!(md, "### Where the probe's time goes on the server\n");
    let p = match p {
        Outcome::Skipped { skipped: why } => {
            let _ = writeln!(md, "Not measured in this run: {why}.\n");
            return;
        }
        Outcome::Measured(p) => p,
    };
    let cpu = &p.server_cpu_ms_per_session;
    let _ = writeln!(
        md,
        "Three more servers at {:.0} sessions/s for {} s each: server CPU per session {:.2} ms with \
         nothing attached, {:.2} ms with no-op programs at the probe's attach points (the uprobe \
         traps alone: `leakscope-probe attach --pid PID --bare`), {:.2} ms with the probe \
         (`leakscope-probe attach --pid PID --bpf-stats`). On this server the probe costs \
         **{:.2}x the floor**: a real server's allocations are made deep in async code, so each \
         stack walk copies more of the stack than in the pairs above. Per program, the \
         kernel's own timing:\n",
        p.rate,
        p.seconds,
        cpu.unprobed,
        cpu.floor,
        cpu.leakscope,
        p.leakscope_vs_floor.unwrap_or(f64::NAN),
    );
    let _ = writeln!(
        md,
        "| program | runs per session | ns per run | us per session |\n| --- | ---: | ---: | ---: |"
    );
    let mut rows: Vec<_> = p.programs.iter().collect();
    rows.sort_by(|a, b| b.us_per_session.total_cmp(&a.us_per_session));
    for row in rows {
        let _ = writeln!(
            md,
            "| `{}` | {:.1} | {:.0} | {:.1} |",
            row.program, row.runs_per_session, row.ns_per_run, row.us_per_session,
        );
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_that_moved_over_the_rounds_is_said_and_a_steady_one_is_not() {
        let moved =
            reference_drift(&[5324.0, 5252.0, 4938.0, 4877.0, 4754.0]).expect("12% apart is said");
        assert!(moved.contains("moved 12%"), "{moved}");
        assert!(moved.contains("5324, 5252, 4938, 4877, 4754"), "{moved}");
        assert_eq!(
            reference_drift(&[6038.0, 6211.0, 5994.0, 6124.0, 6348.0]),
            None
        );
    }

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
        let row = |rate: f64, p50: f64| {
            serde_json::json!({
                "sessions": 1.0, "failed": 0, "sessions_per_s": rate, "latency_p50_ms": p50,
                "latency_p99_ms": p50, "server_cpu_ms_per_session": 1.0, "tool_cpu_s": null,
            })
        };
        let server = serde_json::json!({
            "seconds_per_load": 1, "rates": [10.0, 100.0], "saturation_concurrency": 16,
            "server": "fixture-server", "tools": {
            "unprobed": { "lost_events": null, "loads": { "10_per_s": row(10.0, 1.0), "100_per_s": row(99.0, 0.9), "saturation": row(357.0, 0.7) } },
            "leakscope": { "lost_events": 0, "loads": { "10_per_s": row(10.0, 1.8), "saturation": row(336.0, 1.9) } },
            "bcc_memleak": { "skipped": "no bcc" },
        }});
        let mut server: ServerLoad = serde_json::from_value(server).unwrap();
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
        server.tools.clear();
        assert!(server_chart(&server).is_none());
    }
}
