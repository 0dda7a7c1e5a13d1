//! Which lifecycle functions of the target a preset's scope rules match,
//! and their probes.

use leakscope_probe_ebpf::{program, scope_cookie};
use leakscope_recording::preset::Preset;
use leakscope_recording::target::Target;
use leakscope_recording::{ScopeFunction, ScopeKind};

use super::{Probe, later_offsets, probe};
use crate::attach_offset::entry_probe_offset;
use crate::symbols::{ElfSymbols, Function};

/// The functions of the executable that one scope rule of a preset matches.
#[derive(Debug)]
pub struct ScopeMatch<'a> {
    pub kind: ScopeKind,
    pub returns: bool,
    /// Which argument the entry sends.
    pub arg: u8,
    /// One per address, whichever of the rule's patterns matched it.
    pub functions: Vec<&'a Function>,
}

/// What each scope rule of `preset` matches in `exe` (what `attach` would probe).
pub fn scope_matches<'a>(exe: &'a ElfSymbols, preset: &Preset) -> Vec<ScopeMatch<'a>> {
    preset
        .scopes
        .iter()
        .map(|rule| {
            let mut functions: Vec<&Function> = rule
                .patterns
                .iter()
                .flat_map(|pattern| exe.matching(pattern))
                .collect();
            functions.sort_by_key(|f| f.vaddr);
            functions.dedup_by_key(|f| f.vaddr);
            ScopeMatch {
                kind: rule.kind,
                returns: rule.returns,
                arg: rule.arg,
                functions,
            }
        })
        .collect()
}

/// Scope kinds the preset names that matched nothing (a kind named by several
/// rules is missing only when none of them matched).
pub fn missing_scopes(matches: &[ScopeMatch<'_>]) -> Vec<ScopeKind> {
    let mut missing: Vec<ScopeKind> = Vec::new();
    for found in matches {
        let matched = matches
            .iter()
            .any(|m| m.kind == found.kind && !m.functions.is_empty());
        if !matched && !missing.contains(&found.kind) {
            missing.push(found.kind);
        }
    }
    missing
}

/// The lifecycle functions' probes, planned into `probes`.
pub(super) struct Scopes {
    /// "kind: function" for each probed lifecycle function.
    pub names: Vec<String>,
    /// Scope kinds the preset names that matched no function of the target.
    pub missing: Vec<ScopeKind>,
    /// Every probed lifecycle function and where its code is.
    pub functions: Vec<ScopeFunction>,
}

/// Plans the probes of every lifecycle function `preset` names (and tokio's
/// task polls) into `probes`.
pub(super) fn scope_probes(
    target: &Target,
    exe: &ElfSymbols,
    preset: &Preset,
    probes: &mut Vec<Probe>,
) -> Scopes {
    let mut names = Vec::new();
    let mut functions = Vec::new();
    let mut matches = scope_matches(exe, preset);
    let missing_scopes = missing_scopes(&matches);
    // tokio's task polls, in every target whatever its preset (a preset that
    // names them itself is not probed twice).
    if !preset.scopes.iter().any(|rule| rule.kind.is_task()) {
        matches.extend(scope_matches(exe, &Preset::tokio()));
    }
    for found in &matches {
        for function in &found.functions {
            let cookie = Some(scope_cookie(
                found.kind as u32,
                found.returns,
                u32::from(found.arg),
            ));
            let entry_offset = if found.returns {
                0
            } else {
                entry_probe_offset(exe.code(function, 64), false)
            };
            let mut entry = probe(program::SCOPE_ENTER, exe, function, entry_offset, cookie);
            if !found.returns {
                entry.fallback_offsets = later_offsets(exe, function, entry_offset);
            }
            probes.push(entry);
            if found.returns {
                probes.push(probe(program::SCOPE_EXIT, exe, function, 0, cookie));
            }
            names.push(format!("{}: {}", found.kind.name(), function.name));
            functions.push(ScopeFunction {
                kind: found.kind,
                path: target.exe.clone(),
                file_offset: function.file_offset,
                size: function.size,
                returns: found.returns,
            });
        }
    }
    Scopes {
        names,
        missing: missing_scopes,
        functions,
    }
}
