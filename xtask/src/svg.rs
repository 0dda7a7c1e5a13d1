//! The start every hand-written chart of xtask shares (the bench's and the
//! soak's): a white page of the given size with a title line. Charts stay
//! hand-written SVG so that the committed files are small and diffable.

/// An open `<svg>` element, `width` x `height`, with a white background and
/// `title` at the top left. The caller adds the chart and `</svg>`.
pub fn open(width: f64, height: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"10\" y=\"22\" font-size=\"15\">{title}</text>\n"
    )
}
