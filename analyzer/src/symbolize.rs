//! Return addresses to function names, through the recording's own mappings.
//!
//! Each address is turned into (file, file offset) with the recorded `Mapping`s,
//! so symbolization needs the same files, not the live process. blazesym reads
//! the symbols and DWARF (inline frames included); results are cached per address.
//!
//! A file is used only if it is the one the target ran: when the recording has
//! its build-id, the file here must have the same one. A rebuilt binary would
//! otherwise give wrong names, so wrong categories and a wrong verdict; its
//! frames stay addresses and [`Symbolizer::unmatched`] says which files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use leakscope_recording::Mapping;
use leakscope_recording::demangle;

/// One frame after symbolization; inlined calls become frames of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Demangled, without hash; `0x...` when unknown.
    pub function: String,
    pub location: Option<String>,
}

pub struct Symbolizer {
    mappings: Vec<Mapping>,
    blaze: Blaze,
    cache: HashMap<u64, Vec<Frame>>,
    /// Per file: why it cannot be used (`None`: it can).
    files: HashMap<String, Option<String>>,
    /// Files that could not be used and that a stack needed, with why.
    unmatched: BTreeMap<String, String>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    pub fn new() -> Self {
        Self {
            mappings: Vec::new(),
            blaze: Blaze::new(),
            cache: HashMap::new(),
            files: HashMap::new(),
            unmatched: BTreeMap::new(),
        }
    }

    pub fn add_mapping(&mut self, mapping: Mapping) {
        self.files
            .entry(mapping.path.clone())
            .or_insert_with(|| check_file(&mapping));
        self.mappings.push(mapping);
    }

    /// Files a stack needed that could not be used, each with why ("not found
    /// here", "build-id differs"): their frames are addresses.
    pub fn unmatched(&self) -> &BTreeMap<String, String> {
        &self.unmatched
    }

    /// Frames for one return address, innermost (inlined) first.
    pub fn frames(&mut self, ip: u64) -> &[Frame] {
        if !self.cache.contains_key(&ip) {
            if let Some(mapping) = self.mappings.iter().find(|m| m.contains(ip))
                && let Some(Some(why)) = self.files.get(&mapping.path)
            {
                self.unmatched
                    .entry(mapping.path.clone())
                    .or_insert_with(|| why.clone());
            }
            let frames = self.resolve(ip);
            self.cache.insert(ip, frames);
        }
        &self.cache[&ip]
    }

    /// Frames for a whole stack (return addresses, innermost first).
    pub fn stack(&mut self, ips: &[u64]) -> Vec<Frame> {
        ips.iter()
            .flat_map(|ip| self.frames(*ip).to_vec())
            .collect()
    }

    fn resolve(&self, ip: u64) -> Vec<Frame> {
        let unknown = || {
            vec![Frame {
                function: format!("{ip:#x}"),
                location: None,
            }]
        };
        let Some(mapping) = self.mappings.iter().find(|m| m.contains(ip)) else {
            return unknown();
        };
        if !matches!(self.files.get(&mapping.path), Some(None)) {
            return unknown();
        }
        // A return address points just past the call: look one byte back.
        let offset = ip.saturating_sub(1) - mapping.start + mapping.file_offset;
        let source = Source::Elf(Elf::new(&mapping.path));
        let Ok(results) = self.blaze.symbolize(&source, Input::FileOffset(&[offset])) else {
            return unknown();
        };
        match results.into_iter().next() {
            Some(Symbolized::Sym(sym)) => {
                let location = |info: Option<&blazesym::symbolize::CodeInfo<'_>>| {
                    info.map(|c| format!("{}:{}", c.file.to_string_lossy(), c.line.unwrap_or(0)))
                };
                let mut frames: Vec<Frame> = sym
                    .inlined
                    .iter()
                    .rev()
                    .map(|f| Frame {
                        function: demangle(&f.name),
                        location: location(f.code_info.as_ref()),
                    })
                    .collect();
                frames.push(Frame {
                    function: demangle(&sym.name),
                    location: location(sym.code_info.as_deref()),
                });
                frames
            }
            _ => unknown(),
        }
    }
}

/// Why the file behind `mapping` cannot be used here, or `None` when it can.
fn check_file(mapping: &Mapping) -> Option<String> {
    let path = Path::new(&mapping.path);
    if !path.exists() {
        return Some("not found here".into());
    }
    // A recording names the files; only regular files are opened (never a
    // device such as /dev/zero, which a crafted recording could name).
    if !path.is_file() {
        return Some("not a regular file".into());
    }
    let recorded = mapping.build_id.as_deref()?;
    match leakscope_recording::target::build_id_of(path) {
        Some(found) if found == recorded => None,
        Some(found) => Some(format!(
            "its build-id {found} differs from the recorded {recorded} (rebuilt or replaced since)"
        )),
        None => Some(format!(
            "it has no build-id; the recorded one is {recorded}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_of_this_process_through_its_mappings() {
        let target = leakscope_recording::target::Target::inspect(std::process::id()).unwrap();
        let mut symbolizer = Symbolizer::new();
        for mapping in target.mappings {
            symbolizer.add_mapping(mapping);
        }
        a_function_to_find();
        // Pretend the address one byte into the function is a return address.
        let ip = a_function_to_find as *const () as u64 + 2;
        let frames = symbolizer.frames(ip).to_vec();
        assert!(
            frames
                .iter()
                .any(|f| f.function.ends_with("a_function_to_find")),
            "{frames:?}"
        );
        assert_eq!(
            symbolizer.frames(0x10).to_vec()[0].function,
            "0x10",
            "unknown addresses stay addresses"
        );
        assert!(symbolizer.unmatched().is_empty());
    }

    /// A file whose build-id is not the recorded one (the binary was rebuilt
    /// after the recording) is not used: its frames stay addresses, and why is said.
    #[test]
    fn a_rebuilt_binary_is_not_used_for_names() {
        let target = leakscope_recording::target::Target::inspect(std::process::id()).unwrap();
        let mut symbolizer = Symbolizer::new();
        for mut mapping in target.mappings {
            if mapping.path == target.exe {
                mapping.build_id = Some("00112233".into());
            }
            symbolizer.add_mapping(mapping);
        }
        let ip = a_function_to_find as *const () as u64 + 2;
        let frames = symbolizer.frames(ip).to_vec();
        assert!(frames[0].function.starts_with("0x"), "{frames:?}");
        let why = &symbolizer.unmatched()[&target.exe];
        assert!(why.contains("differs from the recorded 00112233"), "{why}");
    }
}
