//! How sites read: the frame that names a site. The rules of how frames read
//! (the allocator's and the standard library's frames skipped, names
//! shortened) are `leakscope_recording::frames`', shared with the probe.

pub use leakscope_recording::frames::{is_library_frame, own_frame, short_name};

use crate::stages::sites::Site;

/// The frame that best names a site, shortened: the one whose rule chose its
/// category, else the program's innermost own frame.
pub fn site_name(site: &Site) -> String {
    site.decided_by
        .and_then(|i| site.frames.get(i))
        .map(|f| f.function.as_str())
        .or_else(|| own_frame(site.frames.iter().map(|f| f.function.as_str())))
        .map(short_name)
        .unwrap_or_else(|| "[unknown stack]".into())
}
