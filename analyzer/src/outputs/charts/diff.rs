//! The diff's charts: two recordings on shared axes, for `leakscope diff`.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::*;
use crate::model::Timeline;
use crate::outputs::diff::Diff;

/// The diff's charts: `diff-live` (both recordings' live bytes on one scale,
/// before above after) and `diff-sessions` (retained per session, before and
/// after, by birth order).
pub fn diff(before: &Timeline, after: &Timeline, diff: &Diff) -> Result<Vec<Rendered>> {
    register_font();
    let tall = (SIZE.0, SIZE.1 * 2);
    Ok(vec![
        render(
            "diff-live",
            tall,
            |area| draw_diff_live(area, before, after, diff),
            |area| draw_diff_live(area, before, after, diff),
        )?,
        render(
            "diff-sessions",
            SIZE,
            |area| draw_diff_sessions(area, diff),
            |area| draw_diff_sessions(area, diff),
        )?,
    ])
}

fn draw_diff_live<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    before: &Timeline,
    after: &Timeline,
    diff: &Diff,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(plot_err)?;
    let axes = Axes::of(before).union(Axes::of(after));
    let (top, bottom) = area.split_vertically(SIZE.1);
    draw_live(
        &top,
        before,
        &format!("Before: live bytes by category, {}", diff.before.label()),
        axes,
    )?;
    draw_live(
        &bottom,
        after,
        &format!("After: live bytes by category, {}", diff.after.label()),
        axes,
    )
}

fn draw_diff_sessions<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, diff: &Diff) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(plot_err)?;
    let max = diff
        .sessions
        .iter()
        .flat_map(|p| [p.before, p.after])
        .flatten()
        .map(|s| s.retained_bytes)
        .max()
        .unwrap_or(0) as f64;
    let unit = unit_for(max);
    let y_max = (max / unit.divisor * 1.15).max(1.0);
    let n = diff.sessions.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Retained per session: {} vs {}",
                diff.before.label(),
                diff.after.label()
            ),
            (FONT, 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("session, in birth order")
        .light_line_style(BLACK.mix(0.04))
        .y_desc(format!("retained ({})", unit.name))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(plot_err)?;
    let before = RGBColor(214, 39, 40);
    let after = RGBColor(31, 119, 180);
    let series = |pick: fn(
        &crate::outputs::diff::SessionPair,
    ) -> Option<crate::outputs::diff::SessionFigures>| {
        diff.sessions.iter().filter_map(move |p| {
            pick(p).map(|s| (p.index as f64, s.retained_bytes as f64 / unit.divisor))
        })
    };
    chart
        .draw_series(series(|p| p.before).map(|xy| TriangleMarker::new(xy, 5, before.filled())))
        .map_err(plot_err)?
        .label(format!("before: {}", diff.before.label()))
        .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 5, before.filled()));
    chart
        .draw_series(series(|p| p.after).map(|xy| Circle::new(xy, 4, after.filled())))
        .map_err(plot_err)?
        .label(format!("after: {}", diff.after.label()))
        .legend(move |(x, y)| Circle::new((x + 7, y), 4, after.filled()));
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
