//! Return addresses to function names, through the recording's own mappings.
//!
//! Each address is turned into (file, file offset) with the recorded `Mapping`s,
//! so symbolization needs the same files, not the live process. blazesym reads
//! the symbols and DWARF (inline frames included); results are cached per address.
//!
//! **Names with their path.** A build with line tables only (`debug =
//! "line-tables-only"`, what profiling builds use) names functions in DWARF by
//! their bare name (`remember`, `{closure#0}`, `with_capacity_in<u8>`), with no
//! module path. So the function an address is in takes its full name from the
//! ELF symbol table, and an inlined frame's bare name reads with its module's
//! path ([`ModulePaths`], from its source file: `alloc::raw_vec::
//! with_capacity_in`, `leakscope_fixtures::cache::handle`). A site is then named
//! by the program's own code, not by the standard library it inlined.
//!
//! A file is used only if it is the one the target ran: when the recording has
//! its build-id, the file here must have the same one. A rebuilt binary would
//! otherwise give wrong names, so wrong categories and a wrong verdict; its
//! frames stay addresses and [`Symbolizer::unmatched`] says which files.
//!
//! **Each file is opened once** ([`open`]): checked on that descriptor (a
//! regular file, its build-id), then handed to blazesym as
//! `/proc/self/fd/N`, so a file swapped under the analyzer (a FIFO, which
//! would hang it) is never opened. One that someone else could truncate
//! while blazesym maps it (not this user's or root's, or writable by others:
//! the access past its end would be a SIGBUS) is copied first into a sealed
//! memory file (`leakscope_recording::target::unchangeable`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use leakscope_recording::Mapping;
use leakscope_recording::demangle;

use crate::model::Frame;

/// A frame as blazesym gave it, with the source file its code is in.
struct Resolved {
    function: String,
    location: Option<String>,
    path: Option<std::path::PathBuf>,
}

pub struct Symbolizer {
    mappings: Vec<Mapping>,
    blaze: Blaze,
    modules: ModulePaths,
    cache: HashMap<u64, Vec<Frame>>,
    /// Per file: the descriptor blazesym reads it through, or why it
    /// cannot be used.
    files: HashMap<String, Result<Opened, String>>,
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
            modules: ModulePaths::default(),
            cache: HashMap::new(),
            files: HashMap::new(),
            unmatched: BTreeMap::new(),
        }
    }

    pub fn add_mapping(&mut self, mapping: Mapping) {
        self.files
            .entry(mapping.path.clone())
            .or_insert_with(|| open(&mapping));
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
                && let Some(Err(why)) = self.files.get(&mapping.path)
            {
                self.unmatched
                    .entry(mapping.path.clone())
                    .or_insert_with(|| why.clone());
            }
            let frames: Vec<Frame> = self
                .resolve(ip)
                .into_iter()
                .map(|frame| {
                    let module = frame
                        .path
                        .filter(|_| !has_path(&frame.function))
                        .and_then(|path| self.modules.of(&path));
                    Frame {
                        function: match module {
                            Some(module) => format!("{module}::{}", frame.function),
                            None => frame.function,
                        },
                        location: frame.location,
                    }
                })
                .collect();
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

    fn resolve(&self, ip: u64) -> Vec<Resolved> {
        let unknown = || {
            vec![Resolved {
                function: format!("{ip:#x}"),
                location: None,
                path: None,
            }]
        };
        let Some(mapping) = self.mappings.iter().find(|m| m.contains(ip)) else {
            return unknown();
        };
        let Some(Ok(opened)) = self.files.get(&mapping.path) else {
            return unknown();
        };
        // A return address points just past the call: look one byte back.
        let offset = ip.saturating_sub(1) - mapping.start + mapping.file_offset;
        let source = Source::Elf(Elf::new(&opened.path));
        let Ok(results) = self.blaze.symbolize(&source, Input::FileOffset(&[offset])) else {
            return unknown();
        };
        match results.into_iter().next() {
            Some(Symbolized::Sym(sym)) => {
                let location = |info: Option<&blazesym::symbolize::CodeInfo<'_>>| {
                    info.map(|c| format!("{}:{}", c.file.to_string_lossy(), c.line.unwrap_or(0)))
                };
                let path = |info: Option<&blazesym::symbolize::CodeInfo<'_>>| {
                    info.map(|c| c.to_path().into_owned())
                };
                let mut frames: Vec<Resolved> = sym
                    .inlined
                    .iter()
                    .rev()
                    .map(|f| Resolved {
                        function: demangle(&f.name),
                        location: location(f.code_info.as_ref()),
                        path: path(f.code_info.as_ref()),
                    })
                    .collect();
                let mut function = demangle(&sym.name);
                if !has_path(&function)
                    && let Some(full) = self.symbol_table_name(&opened.path, offset)
                {
                    function = full;
                }
                frames.push(Resolved {
                    function,
                    location: location(sym.code_info.as_deref()),
                    path: path(sym.code_info.as_deref()),
                });
                frames
            }
            _ => unknown(),
        }
    }

    /// The ELF symbol table's name of the function at `offset` of `file`:
    /// its full path, which DWARF with line tables only does not give.
    fn symbol_table_name(&self, file: &str, offset: u64) -> Option<String> {
        let mut elf = Elf::new(file);
        elf.debug_syms = false;
        let results = self
            .blaze
            .symbolize(&Source::Elf(elf), Input::FileOffset(&[offset]))
            .ok()?;
        match results.into_iter().next()? {
            Symbolized::Sym(sym) => Some(demangle(&sym.name)),
            _ => None,
        }
    }
}

/// Whether a demangled name carries a module path (`a::b`, `<a::T as b::U>::f`)
/// outside its generic arguments.
fn has_path(name: &str) -> bool {
    let mut depth = 0i32;
    let mut previous = ' ';
    let mut colons = 0;
    for c in name.chars() {
        match c {
            '<' if depth == 0 && previous == ' ' && colons == 0 => {
                // A qualified name: `<T as Trait>::f` names its type.
                return true;
            }
            '<' => depth += 1,
            '>' if previous != '-' => depth -= 1,
            ':' if depth == 0 => {
                colons += 1;
                if colons == 2 {
                    return true;
                }
            }
            _ => colons = 0,
        }
        previous = c;
    }
    false
}

/// The module path of a source file, for the bare names DWARF gives inlined
/// functions: from where cargo and rustup put sources
/// (`.../rustc/HASH/library/alloc/src/raw_vec/mod.rs` is `alloc::raw_vec`,
/// `.../registry/src/INDEX/tokio-1.48.0/src/sync/mpsc/bounded.rs` is
/// `tokio::sync::mpsc::bounded`), or from the package's `Cargo.toml` beside
/// its `src/` (a workspace's own crates). `None` when neither tells.
#[derive(Default)]
pub struct ModulePaths {
    known: HashMap<std::path::PathBuf, Option<String>>,
}

impl ModulePaths {
    pub fn of(&mut self, file: &Path) -> Option<String> {
        if let Some(known) = self.known.get(file) {
            return known.clone();
        }
        let found = module_path(file);
        self.known.insert(file.to_owned(), found.clone());
        found
    }
}

fn module_path(file: &Path) -> Option<String> {
    let components: Vec<&str> = file.iter().filter_map(|c| c.to_str()).collect();
    // The last `src` directory: what follows is the module tree.
    let src = components.iter().rposition(|c| *c == "src")?;
    if src == 0 {
        return None;
    }
    let package_dir = components[src - 1];
    let krate = if src >= 2 && components[src - 2] == "library" {
        // rustup's standard library sources: library/<crate>/src.
        package_dir.to_owned()
    } else if let Some(name) = registry_crate(package_dir) {
        name
    } else {
        let root: std::path::PathBuf = file.iter().take(src).collect();
        package_name(&root.join("Cargo.toml"))?
    };
    let mut modules: Vec<&str> = components[src + 1..].to_vec();
    let last = modules.pop()?;
    let stem = last.strip_suffix(".rs")?;
    // src/bin/x.rs is crate x; src/main.rs and src/lib.rs the crate root.
    let krate = match modules.as_slice() {
        ["bin"] => {
            modules.clear();
            return Some(stem.replace('-', "_"));
        }
        _ => krate,
    };
    if !matches!(stem, "mod" | "lib" | "main") {
        modules.push(stem);
    }
    let mut path = krate.replace('-', "_");
    for module in modules {
        path.push_str("::");
        path.push_str(module);
    }
    Some(path)
}

/// `tokio-1.48.0` (a registry or git checkout's directory) is crate `tokio`.
fn registry_crate(dir: &str) -> Option<String> {
    let (name, version) = dir.rsplit_once('-')?;
    let numeric = version.split('.').count() >= 3
        && version
            .split(['.', '-', '+'])
            .next()
            .is_some_and(|major| major.parse::<u64>().is_ok());
    (numeric && !name.is_empty()).then(|| name.to_owned())
}

/// The `[package] name` of a `Cargo.toml`, if it is a regular file here. The
/// path comes from the recorded binary's debug info, so it is opened without
/// blocking (a FIFO named `Cargo.toml` fails at once) and read 1 MiB at most.
fn package_name(manifest: &Path) -> Option<String> {
    use std::io::Read;
    let file = leakscope_recording::target::open_regular(manifest, None).ok()?;
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package
            && let Some(value) = line.strip_prefix("name")
            && let Some(value) = value.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// A file of the recording's, open for blazesym.
struct Opened {
    /// `/proc/self/fd/N` of `_file`: the descriptor checked, reopened.
    path: String,
    _file: std::fs::File,
}

/// The file behind `mapping`, opened once and checked on that descriptor,
/// or why it cannot be used here.
fn open(mapping: &Mapping) -> Result<Opened, String> {
    use std::os::fd::AsRawFd;
    // A recording names the files; only regular files are opened (never a
    // device such as /dev/zero, or a FIFO, which a crafted recording could
    // name), without blocking.
    let file =
        leakscope_recording::target::open_regular(Path::new(&mapping.path), None).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => "not found here".to_owned(),
                _ => e.to_string(),
            }
        })?;
    if let Some(recorded) = mapping.build_id.as_deref() {
        match leakscope_recording::target::build_id_of_file(&file) {
            Some(found) if found == recorded => {}
            Some(found) => {
                return Err(format!(
                    "its build-id {found} differs from the recorded {recorded} (rebuilt or replaced since)"
                ));
            }
            None => {
                return Err(format!(
                    "it has no build-id; the recorded one is {recorded}"
                ));
            }
        }
    }
    let file = leakscope_recording::target::unchangeable(file)
        .map_err(|e| format!("cannot copy it to read it safely: {e}"))?;
    Ok(Opened {
        path: format!("/proc/self/fd/{}", file.as_raw_fd()),
        _file: file,
    })
}

#[cfg(test)]
mod tests;
