//! What the report warns of before its figures: a torn recording, stacks cut
//! short by a build without frame pointers, a mapped file that is not the one
//! the target ran.

use leakscope_recording::{Header, StackWalk, Tail};

use crate::stages::stacks::Stacks;

pub(super) fn of(header: &Header, tail: &Tail, stacks: &Stacks) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Tail::Torn { offset, reason } = &tail {
        warnings.push(format!(
            "the recording is truncated at byte {offset} ({reason}); reporting its readable prefix"
        ));
    }
    match &header.stack_walk {
        StackWalk::FramePointers
            if header.frame_pointers == leakscope_recording::FramePointers::Omitted
                && header.producer == leakscope_recording::Producer::Ebpf =>
        {
            warnings.push(format!(
                "{} was built without frame pointers (read from its code): its stacks stop after a frame or two, so sites are named by the few frames there are; sessions, totals and the verdict do not need stacks. Rebuild with {} for full stacks (or record it with a leakscope-probe that walks such builds by their unwind tables)",
                header.exe,
                leakscope_recording::frame_pointers::FIX
            ));
        }
        StackWalk::EhFrame { without_table, .. } if !without_table.is_empty() => {
            warnings.push(format!(
                "stacks were walked by the unwind tables of each executable (a build without frame pointers); these have none, and stacks through their code stop there: {}",
                without_table.join("; ")
            ));
        }
        _ => {}
    }
    if stacks.cut() > 0 {
        warnings.push(format!(
            "{} of {} stacks stop at a frame outside every mapped executable (a frame-pointer walk through code built without frame pointers reads data as return addresses): they are cut there, so their outer frames are missing",
            stacks.cut(),
            stacks.len()
        ));
    }
    for (file, why) in stacks.unmatched_files() {
        warnings.push(format!(
            "{file} is not the file the target ran ({why}): its frames stay addresses, so categories and sites that need them are unknown"
        ));
    }
    warnings
}

/// The lifecycle signals a recording lacks, from the scopes its preset named
/// that matched nothing, each with what the verdict cannot claim without it.
pub(super) fn missing_signals(header: &leakscope_recording::Header) -> Vec<String> {
    use leakscope_recording::ScopeKind;
    header
        .settings
        .missing_scopes
        .iter()
        .filter_map(|kind| {
            let consequence = match kind {
                ScopeKind::SessionCreate => {
                    "no session births: sessions cannot be counted; see the findings by call site"
                }
                ScopeKind::WorkerSpawn => {
                    "no worker spawns: the worker's task is not linked to its session"
                }
                ScopeKind::WorkerPoll => {
                    "no worker polls: the worker's own allocations are not charged to sessions"
                }
                ScopeKind::WorkerDrop => {
                    "no worker ends: a kept entry cannot be told leaked from live (reported unknown)"
                }
                ScopeKind::SessionClose
                | ScopeKind::SessionSpan
                | ScopeKind::TaskPoll
                | ScopeKind::TaskPollEnd => return None,
            };
            Some(format!("{}: {consequence}", kind.name()))
        })
        .collect()
}
