//! What each part of a sampled recording costs the target, measured by
//! leaving it out: built only with the feature `cost-breakdown`, never in a
//! production build (`scripts/lifecycle-cost.sh` builds its own server).
//!
//! Why: at a cooperative server's saturation a sampled recording costs
//! ~13-15% of its throughput, and the parts (polls, blocks recorded whole,
//! session facts, the buffer and what comes after it: the writer, the
//! probe) each cost a few percent, too little for one profile to tell
//! apart from this machine's noise. Leaving one out, side by side with the
//! build switched off, tells what it costs.
//!
//! `LEAKSCOPE_COST_SKIP`, read when a recording starts, names the parts
//! left out (comma-separated): `polls` (the layer records no poll),
//! `whole` (no block recorded whole, nor its free), `facts` (no session
//! fact), `buffer` (events are made, and dropped before the buffer). A
//! recording made so is not a faithful one.

/// A part of what a recording does.
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "cost-breakdown"), allow(dead_code))]
pub(crate) enum Part {
    Polls = 1,
    Whole = 2,
    Facts = 4,
    Buffer = 8,
}

#[cfg(feature = "cost-breakdown")]
mod skip {
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::Part;

    static SKIPPED: AtomicU8 = AtomicU8::new(0);

    pub(crate) fn configure() -> anyhow::Result<()> {
        let mut skipped = 0;
        let names = std::env::var("LEAKSCOPE_COST_SKIP").unwrap_or_default();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            skipped |= match name {
                "polls" => Part::Polls,
                "whole" => Part::Whole,
                "facts" => Part::Facts,
                "buffer" => Part::Buffer,
                other => anyhow::bail!(
                    "LEAKSCOPE_COST_SKIP: no part {other:?} (polls, whole, facts, buffer)"
                ),
            } as u8;
        }
        SKIPPED.store(skipped, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    pub(crate) fn skipped(part: Part) -> bool {
        SKIPPED.load(Ordering::Relaxed) & part as u8 != 0
    }
}

#[cfg(feature = "cost-breakdown")]
pub(crate) use skip::{configure, skipped};

/// Nothing is left out of a recording: always false, and gone from the code.
#[cfg(not(feature = "cost-breakdown"))]
#[inline(always)]
pub(crate) fn skipped(_: Part) -> bool {
    false
}

#[cfg(not(feature = "cost-breakdown"))]
pub(crate) fn configure() -> anyhow::Result<()> {
    Ok(())
}
