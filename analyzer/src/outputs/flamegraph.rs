//! `flamegraph.svg`: bytes still live at the end of the recording, by allocation
//! stack (inferno). Folded lines are `outermost;...;innermost bytes`.

use anyhow::Result;

use crate::model::Site;

/// inferno's folded format, one line per call site with live bytes.
pub fn folded(sites: &[Site]) -> Vec<String> {
    sites
        .iter()
        .filter(|s| s.retained_bytes > 0)
        .map(|site| {
            let mut frames: Vec<String> = site
                .frames
                .iter()
                .rev()
                .map(|f| f.function.replace(';', ":"))
                .collect();
            if frames.is_empty() {
                frames.push("[unknown stack]".into());
            }
            format!("{} {}", frames.join(";"), site.retained_bytes)
        })
        .collect()
}

/// The flame graph of `sites` (bytes live at the end, by stack) as SVG text.
pub fn svg(sites: &[Site], title: &str) -> Result<String> {
    let lines = folded(sites);
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = "bytes".into();
    options.colors =
        inferno::flamegraph::Palette::Multi(inferno::flamegraph::color::MultiPalette::Rust);
    let mut out = Vec::new();
    if lines.is_empty() {
        // inferno refuses empty input; an empty graph still says what it is.
        let lines = ["[nothing live at the end] 1"];
        inferno::flamegraph::from_lines(&mut options, lines.iter().copied(), &mut out)?;
    } else {
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)?;
    }
    Ok(String::from_utf8(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Category;
    use crate::model::Frame;

    fn frame(name: &str) -> Frame {
        Frame {
            function: name.into(),
            location: None,
        }
    }

    #[test]
    fn folds_outermost_first_with_bytes() {
        let site = Site {
            stack: Some(0),
            frames: vec![frame("malloc_caller"), frame("main")],
            category: Category::Other,
            decided_by: None,
            retained_bytes: 640,
            blocks: 2,
            samples: 2,
            session_bytes: 0,
            growth_bytes_per_s: 0.0,
            linearity: 0.0,
            first_alloc_ns: 0,
            last_alloc_ns: 0,
            activity_span: 0.0,
        };
        assert_eq!(folded(&[site]), vec!["main;malloc_caller 640".to_string()]);
    }
}
