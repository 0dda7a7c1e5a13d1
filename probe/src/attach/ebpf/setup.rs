//! Before anything is loaded: the privileges, the output path, the target,
//! the plan of probes and the recording's header, with a warning for each
//! lifecycle function the preset names and the target lacks.

use anyhow::{Context, Result};
use leakscope_probe_ebpf::{MAX_STACK_DEPTH, program};
use leakscope_recording::frame_pointers::FramePointers;
use leakscope_recording::target::Target;
use leakscope_recording::{Header, Producer, Settings};

use super::super::rotation::Output;
use super::super::{AttachEvent, AttachOptions, Unwind};
use super::privileges::check_privileges;
use crate::plan::{Plan, bare, make_plan};
use crate::symbols::ElfSymbols;
use crate::unwind::ProcessTables;

/// What the probes will be and what the recording will say of them.
pub(super) struct Prepared {
    pub(super) target: Target,
    pub(super) plan: Plan,
    pub(super) header: Header,
    /// The tables the programs walk stacks by, for a target built without
    /// frame pointers; `None`: by frame pointer.
    pub(super) unwind: Option<ProcessTables>,
}

/// Checks what can be checked before loading, and plans the probes.
pub(super) fn prepare(
    options: &AttachOptions,
    on_event: &mut impl FnMut(AttachEvent<'_>),
) -> Result<Prepared> {
    check_privileges()?;
    // First: a bad --out (a symbolic link, an existing file) costs no attach.
    // (It is created, checked again and race-free, just before loading.)
    Output::new(options).check()?;
    let target = Target::inspect(options.pid)?;
    let exe = ElfSymbols::of_target(&target, &target.exe)
        .with_context(|| format!("cannot read the executable of pid {}", target.pid))?;
    let mut plan = make_plan(&target, &exe, &options.preset)?;
    if options.bare {
        plan = bare(plan);
    }
    warn_of_missing_scopes(options, &target, &plan, on_event);
    let mut header = header(options, &target, &exe, &plan);
    // A build without frame pointers (or whose code is too little to tell)
    // is walked by tables from its executables' .eh_frame; one with them
    // keeps the frame-pointer walk, which costs less and needs nothing
    // compiled.
    let by_tables = match options.unwind {
        Unwind::Auto => header.frame_pointers != FramePointers::Kept,
        Unwind::FramePointers => false,
        Unwind::Tables => true,
    };
    if !by_tables && header.frame_pointers == FramePointers::Omitted {
        on_event(AttachEvent::Warning(format!(
            "{} was built without frame pointers and --unwind frame-pointers was asked: its allocation stacks will stop after a frame or two (sessions and totals are unaffected); --unwind auto walks it by its unwind tables, or rebuild it with {}",
            target.exe,
            leakscope_recording::frame_pointers::FIX
        )));
    }
    let unwind = by_tables.then(|| {
        let tables = crate::unwind::process::of(&target);
        header.stack_walk = tables.stack_walk();
        for (file, why) in &tables.missing {
            on_event(AttachEvent::Warning(format!(
                "{file} has no unwind table ({why}): stacks through its code stop there"
            )));
        }
        tables
    });
    Ok(Prepared {
        target,
        plan,
        header,
        unwind,
    })
}

/// The header: the target, the plan, and how its stacks will be walked.
fn header(options: &AttachOptions, target: &Target, exe: &ElfSymbols, plan: &Plan) -> Header {
    let mut notes = vec![];
    if let Some(p) = plan
        .probes
        .iter()
        .find(|p| p.program == program::FREE_ENTER)
    {
        notes.push(format!(
            "free probed at file offset {:#x} ({})",
            p.file_offset, p.function
        ));
    }
    let mut header = Header::new(
        Producer::Ebpf,
        format!("leakscope-probe {}", env!("CARGO_PKG_VERSION")),
        // The symbols are in memory already: the rmcp version comes from them,
        // not from reading the executable again.
        target.identity(exe.crate_version("rmcp")),
        Settings {
            alloc_layer: plan.layer,
            alloc_layer_reason: plan.layer_reason.clone(),
            stack_depth: MAX_STACK_DEPTH as u32,
            preset: Some(options.preset.name.clone()),
            scope_probes: plan.scopes.clone(),
            missing_scopes: plan.missing_scopes.clone(),
            scope_functions: plan.scope_functions.clone(),
            notes,
        },
    );
    header.frame_pointers = exe.frame_pointers();
    header.sampling = options.sampling;
    header
}

/// Says which lifecycle functions of the preset the target lacks.
fn warn_of_missing_scopes(
    options: &AttachOptions,
    target: &Target,
    plan: &Plan,
    on_event: &mut impl FnMut(AttachEvent<'_>),
) {
    if options.bare {
        return;
    }
    let session_scopes = plan
        .scope_functions
        .iter()
        .filter(|f| !f.kind.is_task())
        .count();
    if session_scopes == 0 {
        on_event(AttachEvent::Warning(format!(
            "no {} lifecycle functions in {}; recording allocations only (the report's findings by call site still work)",
            options.preset.name, target.exe
        )));
    } else {
        for kind in &plan.missing_scopes {
            let optional = options
                .preset
                .scopes
                .iter()
                .any(|rule| rule.kind == *kind && rule.optional);
            on_event(AttachEvent::Warning(format!(
                "preset {}: no function of {} matches scope {}{}",
                options.preset.name,
                target.exe,
                kind.name(),
                if optional {
                    " (optional: the session model does without it)"
                } else {
                    "; the report will say what the verdict cannot claim without it"
                }
            )));
        }
    }
}
