//! `--redact`: a report for a public bug tracker, without the machine's paths
//! and hostnames.
//!
//! Every absolute path becomes its last component (`/home/ann/srv/target/release/server`
//! -> `server`; a source location keeps its file and line, `lib.rs:42`), also after
//! `:` or `;` (`file:/home/ann/x`, `PATH=/a/b;/c/d`) and with spaces in it
//! (`/home/ann/My Projects/srv`); the URL hosts and IPv4 addresses become `<host>`,
//! and this machine's hostname becomes `<host>` wherever it appears. Function
//! names, figures and categories stay: they are the report.

/// What a redacted output must not contain, learnt from this machine.
pub struct Redactor {
    hostname: Option<String>,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    pub fn new() -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| h.len() >= 3 && h != "localhost");
        Self { hostname }
    }

    /// `text` with paths, URL hosts and the hostname taken out.
    pub fn text(&self, text: &str) -> String {
        let mut out = strip_addresses(&strip_url_hosts(&strip_paths(text)));
        if let Some(host) = &self.hostname {
            out = out.replace(host.as_str(), "<host>");
        }
        out
    }
}

/// Characters a path is made of, for this purpose.
fn path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@' | '~' | '%')
}

/// Characters after which a `/` starts a path (a `:` only when it does not
/// begin a URL's `://`).
fn boundary(chars: &[char], at: usize) -> bool {
    let Some(p) = at.checked_sub(1) else {
        return true;
    };
    match chars[p] {
        ':' => chars.get(at + 1) != Some(&'/'),
        c => {
            c.is_whitespace()
                || matches!(
                    c,
                    '`' | '"' | '\'' | '(' | '[' | '=' | ',' | '>' | ';' | '<' | '{'
                )
        }
    }
}

/// A path goes on past a space when what follows the space, up to the next
/// whitespace, is more of a path (`/home/ann/My Projects/srv`): a word that
/// starts with a letter, made of path characters with a `/` among them (so
/// `/tmp/x 50/50` keeps its figure).
fn continues_past_space(chars: &[char], space: usize) -> Option<usize> {
    if chars.get(space) != Some(&' ') {
        return None;
    }
    let start = space + 1;
    let end = (start..chars.len())
        .find(|&j| !path_char(chars[j]))
        .unwrap_or(chars.len());
    let word = &chars[start..end];
    (end > start && word[0].is_alphabetic() && word.contains(&'/')).then_some(end)
}

/// Every absolute path with two or more components, down to its last one.
fn strip_paths(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i] == '/' && boundary(&chars, i);
        if !starts {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut end = (i..chars.len())
            .find(|&j| !path_char(chars[j]))
            .unwrap_or(chars.len());
        while let Some(further) = continues_past_space(&chars, end) {
            end = further;
        }
        let path: String = chars[i..end].iter().collect();
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        if components.len() >= 2 {
            out.push_str(components.last().expect("two or more"));
        } else {
            out.push_str(&path);
        }
        i = end;
    }
    out
}

/// `scheme://host[:port]` -> `scheme://<host>`.
fn strip_url_hosts(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| c == '/' || c.is_whitespace() || matches!(c, '"' | '`' | ')'))
            .unwrap_or(after.len());
        if end > 0 {
            out.push_str("<host>");
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// IPv4 addresses (`10.1.2.3`, with or without a port) outside URLs -> `<host>`.
fn strip_addresses(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let at_start = i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '.');
        if at_start
            && chars[i].is_ascii_digit()
            && let Some(end) = ipv4_end(&chars, i)
        {
            out.push_str("<host>");
            i = end;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Where a dotted quad starting at `start` ends, if one does (four numbers
/// up to 255, not followed by more of a name or number).
fn ipv4_end(chars: &[char], start: usize) -> Option<usize> {
    let mut i = start;
    for part in 0..4 {
        let digits = (i..chars.len().min(i + 3))
            .take_while(|&j| chars[j].is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        let number: String = chars[i..i + digits].iter().collect();
        if number.parse::<u16>().ok()? > 255 {
            return None;
        }
        i += digits;
        if part < 3 {
            if chars.get(i) != Some(&'.') {
                return None;
            }
            i += 1;
        }
    }
    let follows = chars.get(i).copied();
    let more = follows.is_some_and(|c| c.is_ascii_alphanumeric())
        || (follows == Some('.') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()));
    (!more).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_hosts_are_taken_out() {
        let redactor = Redactor {
            hostname: Some("build-7.corp".into()),
        };
        let text = "target: `/home/ann/srv/target/release/server` (pid 4), at \
            /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rmcp-3.11.0/src/lib.rs:42; \
            served at http://10.1.2.3:8080/mcp on build-7.corp; 12.3 KiB/s, 50/50, /s";
        assert_eq!(
            redactor.text(text),
            "target: `server` (pid 4), at lib.rs:42; served at http://<host>/mcp on <host>; \
             12.3 KiB/s, 50/50, /s"
        );
    }

    #[test]
    fn paths_after_separators_with_spaces_and_bare_addresses_are_taken_out() {
        let redactor = Redactor { hostname: None };
        assert_eq!(
            redactor.text("file:/home/ann/x.lsrec; PATH=/home/ann/bin;/opt/ann/bin"),
            "file:x.lsrec; PATH=bin;bin"
        );
        assert_eq!(
            redactor.text("exe `/home/ann/My Projects/srv/target/server` ran"),
            "exe `server` ran"
        );
        assert_eq!(
            redactor.text("peer 10.1.2.3:8080 and 192.168.0.1, rmcp 3.11.0, 1.2.3.4.5"),
            "peer <host>:8080 and <host>, rmcp 3.11.0, 1.2.3.4.5"
        );
        assert_eq!(
            redactor.text("see https://example.com/a for /s and 50/50"),
            "see https://<host>/a for /s and 50/50"
        );
    }
}
