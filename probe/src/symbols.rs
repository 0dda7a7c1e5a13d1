//! Function symbols of the target's ELF files, by demangled name.
//!
//! The probe attaches by file offset, so for each function we keep its virtual
//! address, size and the file offset of its first byte. Names are demangled with
//! rustc-demangle's alternate form (no hash, no `.llvm.N` suffix), which is what
//! presets match against. Also used to name return addresses in tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use leakscope_recording::demangle;
use leakscope_recording::target::{Target, TargetFile, hex, open_regular};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use wildmatch::WildMatch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Demangled, without hash.
    pub name: String,
    pub vaddr: u64,
    pub size: u64,
    /// Where the first byte is in the file (what uprobes attach to).
    pub file_offset: u64,
}

/// A loadable segment: how virtual addresses map to file offsets.
#[derive(Debug, Clone, Copy)]
struct Segment {
    vaddr: u64,
    file_offset: u64,
    file_size: u64,
}

pub struct ElfSymbols {
    /// The path a probe attaches to: it names exactly the file read here
    /// while [`file`](Self::file) is open.
    pub path: PathBuf,
    /// The file as its user names it (the target's path, or the one given),
    /// for messages.
    pub name: String,
    /// The target's file, when it is one ([`ElfSymbols::of_target`]): kept
    /// open by every probe planned on it, since its path may be
    /// `/proc/self/fd/N`.
    pub file: Option<Arc<TargetFile>>,
    pub build_id: Option<String>,
    data: memmap2::Mmap,
    /// Sorted by `vaddr`, one entry per address.
    functions: Vec<Function>,
    segments: Vec<Segment>,
}

impl ElfSymbols {
    /// The ELF file at `path`, named by the user (`preset-check --exe`, tests).
    pub fn load(path: &Path) -> Result<Self> {
        let file =
            open_regular(path, None).with_context(|| format!("cannot read {}", path.display()))?;
        // SAFETY: read-only private mapping (see `TargetFile::map`).
        let data = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("cannot map {}", path.display()))?;
        Self::parse(data, path.to_owned(), path.display().to_string(), None)
    }

    /// The file the target maps at `path` (its executable or a library),
    /// opened and mapped without trusting a name the target controls (see
    /// [`TargetFile`]).
    pub fn of_target(target: &Target, path: &str) -> Result<Self> {
        let file = target.open(path)?;
        let data = file.map()?;
        let attach_path = file.path().to_owned();
        Self::parse(data, attach_path, path.to_owned(), Some(Arc::new(file)))
            .with_context(|| format!("{path} of pid {}", target.pid))
    }

    fn parse(
        data: memmap2::Mmap,
        path: PathBuf,
        name: String,
        opened: Option<Arc<TargetFile>>,
    ) -> Result<Self> {
        let path = &path;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{} is not an ELF file", path.display()))?;
        let segments: Vec<Segment> = file
            .segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    file_offset,
                    file_size,
                }
            })
            .collect();
        let build_id = file.build_id().ok().flatten().map(hex);
        let mut functions: Vec<Function> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                let raw = s.name().ok()?;
                let vaddr = s.address();
                let file_offset = file_offset_of(&segments, vaddr)?;
                Some(Function {
                    name: demangle(raw),
                    vaddr,
                    size: s.size(),
                    file_offset,
                })
            })
            .collect();
        functions.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then(b.size.cmp(&a.size)));
        functions.dedup_by(|a, b| a.vaddr == b.vaddr && a.name == b.name);
        drop(file);
        Ok(Self {
            path: path.to_owned(),
            name,
            file: opened,
            build_id,
            data,
            functions,
            segments,
        })
    }

    /// Every function whose demangled name matches `pattern` (`*` = any text),
    /// one per address.
    pub fn matching(&self, pattern: &str) -> Vec<&Function> {
        let matcher = WildMatch::new(pattern);
        let mut found: Vec<&Function> = self
            .functions
            .iter()
            .filter(|f| matcher.matches(&f.name))
            .collect();
        found.dedup_by_key(|f| f.vaddr);
        found
    }

    /// The function with exactly this (demangled) name, if any.
    pub fn named(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The function containing virtual address `vaddr`.
    pub fn function_at(&self, vaddr: u64) -> Option<&Function> {
        let after = self.functions.partition_point(|f| f.vaddr <= vaddr);
        self.functions[..after]
            .iter()
            .rev()
            .take(8)
            .find(|f| vaddr < f.vaddr + f.size.max(1))
    }

    /// The virtual address that file offset `offset` is loaded at.
    pub fn vaddr_of_file_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.file_offset..s.file_offset + s.file_size).contains(&offset))
            .map(|s| s.vaddr + (offset - s.file_offset))
    }

    /// The first bytes of a function's code, for decoding its prologue.
    pub fn code(&self, function: &Function, max: usize) -> &[u8] {
        let start = function.file_offset as usize;
        let len = (function.size as usize).clamp(1, max);
        self.data.get(start..start + len).unwrap_or(&[])
    }

    /// The version of crate `name` the binary was built from (see
    /// [`leakscope_recording::target::crate_version`]).
    pub fn crate_version(&self, name: &str) -> Option<String> {
        leakscope_recording::target::crate_version(&self.data, name)
    }

    /// Whether the file's code keeps frame pointers (see
    /// [`leakscope_recording::frame_pointers`]).
    pub fn frame_pointers(&self) -> leakscope_recording::FramePointers {
        leakscope_recording::frame_pointers::frame_pointers(&self.data)
    }

    pub fn has_function(&self, pattern: &str) -> bool {
        !self.matching(pattern).is_empty()
    }
}

fn file_offset_of(segments: &[Segment], vaddr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| (s.vaddr..s.vaddr + s.file_size).contains(&vaddr))
        .map(|s| s.file_offset + (vaddr - s.vaddr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_functions_of_this_test_binary() {
        let me = std::env::current_exe().unwrap();
        let symbols = ElfSymbols::load(&me).unwrap();
        let found = symbols.matching("*symbols::tests::finds_functions_of_this_test_binary");
        assert!(!found.is_empty());
        let f = found[0];
        assert_eq!(
            symbols.function_at(f.vaddr + 1).map(|g| &g.name),
            Some(&f.name)
        );
        assert_eq!(symbols.vaddr_of_file_offset(f.file_offset), Some(f.vaddr));
        let version = symbols
            .crate_version("rustc-demangle")
            .expect("debug info names the crate's source path");
        assert!(version.starts_with("0.1."), "{version}");
        assert_eq!(symbols.crate_version("no-such-crate"), None);
    }
}
