//! Charts (plotters), as SVG for the web and PNG for pasting into issues.
//!
//! * `retained-vs-reclaimed`: live bytes over time stacked by category, with the
//!   cumulative reclaimed bytes on a second axis and session births / worker exits
//!   marked along the top and bottom edges.
//! * `sessions`: per session, retained and reclaimed bytes against its birth time:
//!   a constant per-session leak reads as a flat band, a fixed server as zero.
//! * `diff-live` and `diff-sessions` ([`diff`]): two recordings on shared
//!   axes, for `leakscope diff`.
//!
//! PNG text is drawn with the embedded DejaVu Sans (`assets/`), so rendering does
//! not depend on the fonts of the machine.

use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::model::Category;
use crate::model::Timeline;
use crate::outputs::thin::{MAX_MARKERS, MAX_POINTS, thinned};

const FONT: &str = "sans-serif";
static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const SIZE: (u32, u32) = (1100, 560);

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, DEJAVU_SANS)
            .unwrap_or_else(|_| panic!("the embedded font is valid"));
    });
}

/// A byte unit that keeps axis labels short.
#[derive(Clone, Copy)]
struct Unit {
    name: &'static str,
    divisor: f64,
}

fn unit_for(max_bytes: f64) -> Unit {
    if max_bytes >= 4.0 * 1024.0 * 1024.0 {
        Unit {
            name: "MiB",
            divisor: 1024.0 * 1024.0,
        }
    } else {
        Unit {
            name: "KiB",
            divisor: 1024.0,
        }
    }
}

fn category_color(category: Category) -> RGBColor {
    match category {
        Category::SessionMap => RGBColor(214, 39, 40),
        Category::WorkerChannel => RGBColor(255, 127, 14),
        Category::WorkerOther => RGBColor(31, 119, 180),
        Category::Other => RGBColor(150, 150, 150),
    }
}

/// One chart, drawn twice: SVG text and PNG bytes.
pub struct Rendered {
    /// The file name without extension (`sessions`: `sessions.svg`, `sessions.png`).
    pub name: &'static str,
    pub svg: String,
    pub png: Vec<u8>,
}

/// Draws `draw` at `size` onto an SVG and a PNG.
fn render(
    name: &'static str,
    size: (u32, u32),
    draw: impl Fn(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
    draw_bitmap: impl Fn(&DrawingArea<BitMapBackend, Shift>) -> Result<()>,
) -> Result<Rendered> {
    let mut svg = String::new();
    draw(&SVGBackend::with_string(&mut svg, size).into_drawing_area())?;
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    draw_bitmap(&BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area())?;
    let mut png = Vec::new();
    // Flat-colored charts: the Sub filter compresses them as well as the
    // default adaptive one, at a fraction of the time (which was most of a
    // small report's, and of the fuzz target's every run).
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new_with_quality(
            &mut png,
            image::codecs::png::CompressionType::Default,
            image::codecs::png::FilterType::Sub,
        ),
        &rgb,
        size.0,
        size.1,
        image::ColorType::Rgb8,
    )?;
    Ok(Rendered { name, svg, png })
}

/// Both charts of a report: `retained-vs-reclaimed` and `sessions`.
pub fn all(timeline: &Timeline) -> Result<Vec<Rendered>> {
    register_font();
    [
        ("retained-vs-reclaimed", Chart::RetainedVsReclaimed),
        ("sessions", Chart::Sessions),
    ]
    .into_iter()
    .map(|(name, chart)| {
        render(
            name,
            SIZE,
            |area| chart.render(area, timeline),
            |area| chart.render(area, timeline),
        )
    })
    .collect()
}

#[derive(Clone, Copy)]
enum Chart {
    RetainedVsReclaimed,
    Sessions,
}

impl Chart {
    fn render<DB: DrawingBackend>(
        self,
        area: &DrawingArea<DB, Shift>,
        timeline: &Timeline,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        match self {
            Chart::RetainedVsReclaimed => draw_retained_vs_reclaimed(area, timeline),
            Chart::Sessions => draw_sessions(area, timeline),
        }
    }
}

fn title(timeline: &Timeline, what: &str) -> String {
    let h = &timeline.header;
    let exe = h.exe.rsplit('/').next().unwrap_or(&h.exe);
    let rmcp = h
        .rmcp_version
        .as_deref()
        .map(|v| format!(", rmcp {v}"))
        .unwrap_or_default();
    // A sampled recording's bytes are estimates: the chart says so.
    let sampled = h
        .sampling
        .mean_bytes()
        .map(|mean| {
            format!(
                ", estimated from samples every {}",
                crate::units::bytes(mean)
            )
        })
        .unwrap_or_default();
    format!("{what}: {exe} (pid {}{rmcp}{sampled})", h.pid)
}

/// The ranges of a live-bytes chart: one timeline's own, or shared by several
/// so that they compare at a glance.
#[derive(Clone, Copy)]
struct Axes {
    duration_s: f64,
    max_live: f64,
    max_reclaimed: f64,
}

impl Axes {
    fn of(timeline: &Timeline) -> Self {
        Self {
            duration_s: timeline.duration_s().max(0.001),
            max_live: timeline
                .samples
                .iter()
                .map(|s| s.live.iter().sum::<u64>())
                .max()
                .unwrap_or(0) as f64,
            max_reclaimed: timeline
                .samples
                .last()
                .map(|s| s.reclaimed_total)
                .unwrap_or(0) as f64,
        }
    }

    fn union(self, other: Self) -> Self {
        Self {
            duration_s: self.duration_s.max(other.duration_s),
            max_live: self.max_live.max(other.max_live),
            max_reclaimed: self.max_reclaimed.max(other.max_reclaimed),
        }
    }
}

fn draw_retained_vs_reclaimed<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    draw_live(
        area,
        timeline,
        &title(timeline, "Live bytes by category"),
        Axes::of(timeline),
    )
}

fn draw_live<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
    caption: &str,
    axes: Axes,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(plot_err)?;
    let Axes {
        duration_s: duration,
        max_live,
        max_reclaimed,
    } = axes;
    let unit = unit_for(max_live);
    let reclaimed_unit = unit_for(max_reclaimed);
    let y_max = (max_live / unit.divisor * 1.1).max(1.0);
    let y2_max = (max_reclaimed / reclaimed_unit.divisor * 1.05).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(80)
        .build_cartesian_2d(0.0..duration, 0.0..y_max)
        .map_err(plot_err)?
        .set_secondary_coord(0.0..duration, 0.0..y2_max);
    chart
        .configure_mesh()
        .x_desc("time since the recording started (s)")
        .light_line_style(BLACK.mix(0.04))
        .y_desc(format!("live ({})", unit.name))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    chart
        .configure_secondary_axes()
        .y_desc(format!("reclaimed, cumulative ({})", reclaimed_unit.name))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    // Stacked areas: draw the running totals from the top layer down.
    let order = [
        Category::SessionMap,
        Category::WorkerChannel,
        Category::WorkerOther,
        Category::Other,
    ];
    for top in (0..order.len()).rev() {
        let category = order[top];
        let color = category_color(category);
        let points = thinned(&timeline.samples, MAX_POINTS).map(|(_, s)| {
            let stacked: u64 = order[..=top].iter().map(|c| s.live[*c]).sum();
            (s.t_s, stacked as f64 / unit.divisor)
        });
        chart
            .draw_series(AreaSeries::new(points, 0.0, color.mix(0.55)).border_style(color))
            .map_err(plot_err)?
            .label(format!("live: {}", category.name()))
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.55).filled())
            });
    }
    chart
        .draw_secondary_series(LineSeries::new(
            thinned(&timeline.samples, MAX_POINTS)
                .map(|(_, s)| (s.t_s, s.reclaimed_total as f64 / reclaimed_unit.divisor)),
            BLACK.stroke_width(2),
        ))
        .map_err(plot_err)?
        .label("reclaimed, cumulative (right axis)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK.stroke_width(2)));
    let births = RGBColor(44, 160, 44);
    chart
        .draw_series(
            thinned(&timeline.session_births_s, MAX_MARKERS)
                .map(|(_, t)| TriangleMarker::new((*t, y_max * 0.985), 4, births.filled())),
        )
        .map_err(plot_err)?
        .label("session born")
        .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 4, births.filled()));
    let exits = RGBColor(148, 103, 189);
    chart
        .draw_series(
            thinned(&timeline.worker_ends_s, MAX_MARKERS)
                .map(|(_, t)| Cross::new((*t, y_max * 0.015), 4, exits.stroke_width(2))),
        )
        .map_err(plot_err)?
        .label("worker exited")
        .legend(move |(x, y)| Cross::new((x + 7, y), 4, exits.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(plot_err)?;
    area.present().map_err(plot_err)?;
    Ok(())
}

fn draw_sessions<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    timeline: &Timeline,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(plot_err)?;
    let start = timeline.start_ns;
    let born_s = |ns: u64| (ns.saturating_sub(start)) as f64 / 1e9;
    let last_birth = timeline
        .sessions
        .iter()
        .map(|s| born_s(s.born_ns))
        .fold(0.0, f64::max);
    let duration = (last_birth * 1.05).max(0.001);
    let max = timeline
        .sessions
        .iter()
        .map(|s| s.retained.max(s.reclaimed))
        .max()
        .unwrap_or(0) as f64;
    let unit = unit_for(max);
    let y_max = (max / unit.divisor * 1.15).max(1.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            title(timeline, "Per session: retained vs reclaimed"),
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..duration, 0.0..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("session birth (s since the recording started)")
        .light_line_style(BLACK.mix(0.04))
        .y_desc(format!("bytes per session ({})", unit.name))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    let reclaimed = RGBColor(31, 119, 180);
    chart
        .draw_series(thinned(&timeline.sessions, MAX_MARKERS).map(|(_, s)| {
            Circle::new(
                (born_s(s.born_ns), s.reclaimed as f64 / unit.divisor),
                4,
                reclaimed.filled(),
            )
        }))
        .map_err(plot_err)?
        .label("reclaimed (freed during the session or after its worker exited)")
        .legend(move |(x, y)| Circle::new((x + 7, y), 4, reclaimed.filled()));
    let retained = RGBColor(214, 39, 40);
    chart
        .draw_series(thinned(&timeline.sessions, MAX_MARKERS).map(|(_, s)| {
            TriangleMarker::new(
                (born_s(s.born_ns), s.retained as f64 / unit.divisor),
                5,
                retained.filled(),
            )
        }))
        .map_err(plot_err)?
        .label("retained (still live, worker gone)")
        .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 5, retained.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(plot_err)?;
    area.present().map_err(plot_err)?;
    Ok(())
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a chart failed: {e:?}")
}

mod diff;

pub use diff::diff;
