//! `--redact`: a report for a public bug tracker, without the machine's paths
//! and hostnames.
//!
//! Every absolute path becomes its last component (`/home/ann/srv/target/release/server`
//! -> `server`; a source location keeps its file and line, `lib.rs:42`), the URL
//! hosts become `<host>`, and this machine's hostname becomes `<host>` wherever it
//! appears. Function names, figures and categories stay: they are the report.

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
        let mut out = strip_url_hosts(&strip_paths(text));
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

/// Characters after which a `/` starts a path.
fn boundary(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '(' | '[' | '=' | ',' | '>'),
    }
}

/// Every absolute path with two or more components, down to its last one.
fn strip_paths(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i] == '/' && boundary(i.checked_sub(1).map(|p| chars[p]));
        if !starts {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let end = (i..chars.len())
            .find(|&j| !path_char(chars[j]))
            .unwrap_or(chars.len());
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
}
