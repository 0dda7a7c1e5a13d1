use super::*;

#[test]
fn figures_link_once_and_never_inside_a_link() {
    let figures = vec![
        ("50 of 50 sessions".to_owned(), "#per-session"),
        ("12.3 KiB (p50)".to_owned(), "#per-session"),
        ("50".to_owned(), "#elsewhere"),
    ];
    let linked = link_figures(
        "50 of 50 sessions leaked; each retains 12.3 KiB (p50), 50 more",
        &figures,
    );
    assert_eq!(
        linked,
        "[50 of 50 sessions](#per-session) leaked; each retains [12.3 KiB (p50)](#per-session), [50](#elsewhere) more"
    );
}
