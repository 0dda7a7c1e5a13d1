//! What an rmcp release does with sessions still live at a recording's end.

use leakscope_recording::preset::{Preset, ReleaseRule};

/// What the release a recording's target was built with does with sessions
/// still live at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaping {
    /// It reaps a session idle this long (its default keep-alive). Without an
    /// init timeout (`init_timeout_s` none), a session whose client never
    /// sent `initialize` is not in its keep-alive loop and waits forever.
    After {
        version: String,
        keep_alive_s: u64,
        init_timeout_s: Option<u64>,
    },
    /// It has no keep-alive by default: an abandoned session's worker never ends.
    Never { version: String },
    /// The release is not known (no rmcp version in the binary, or one the
    /// preset has no defaults for).
    Unknown,
}

impl Reaping {
    /// What the built-in preset says of rmcp `version`.
    pub fn of(version: Option<&str>) -> Self {
        let Some(version) = version else {
            return Reaping::Unknown;
        };
        let preset = Preset::builtin();
        match preset.release(version) {
            Some(ReleaseRule {
                keep_alive_s: Some(keep_alive_s),
                init_timeout_s,
                ..
            }) => Reaping::After {
                version: version.to_owned(),
                keep_alive_s: *keep_alive_s,
                init_timeout_s: *init_timeout_s,
            },
            Some(_) => Reaping::Never {
                version: version.to_owned(),
            },
            None => Reaping::Unknown,
        }
    }
}
