//! Text from a process or a file shown on a user's terminal: a target's
//! refusal line, its symbol names, a session id. A root tool prints it, so
//! what the text says must not become what the terminal does: control
//! characters (escape sequences retitle windows, move the cursor, rewrite
//! what was printed before) and bidirectional overrides (text that reads
//! other than it is) are shown as `?`, and the length is bounded.

/// `text` with every control character and bidirectional override shown as
/// `?`, cut to `max_chars` characters (then `…`).
pub fn printable(text: &str, max_chars: usize) -> String {
    let mut shown = String::with_capacity(text.len().min(max_chars + 3));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            shown.push('…');
            break;
        }
        let hidden =
            c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        shown.push(if hidden { '?' } else { c });
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_overrides_are_shown_not_obeyed() {
        assert_eq!(printable("ok: plain text", 100), "ok: plain text");
        assert_eq!(
            printable("\u{1b}]0;owned\u{7}\u{1b}[2J\r\nline", 100),
            "?]0;owned??[2J??line"
        );
        assert_eq!(printable("a\u{202e}b\u{9b}c", 100), "a?b?c");
        assert_eq!(
            printable(&"x".repeat(1000), 10),
            format!("{}…", "x".repeat(10))
        );
    }
}
