//! The tables of every executable a process maps, laid out as a walk reads
//! them: one array of rows, and the mappings that index it (each file's
//! table once, however many times it is mapped).

use std::collections::HashMap;

use leakscope_probe_ebpf::unwind::{ExecMapping, UnwindRow};
use leakscope_recording::Mapping;
use leakscope_recording::target::Target;
use object::{Object, ObjectSegment};

use super::table::Table;

/// What a walk of a process needs: its executable mappings, sorted by
/// address, each with its rows among [`ProcessTables::rows`].
#[derive(Debug, Default)]
pub struct ProcessTables {
    pub mappings: Vec<ExecMapping>,
    pub rows: Vec<UnwindRow>,
    /// Files mapped executable with no table, and why: a walk that reaches
    /// their code stops there.
    pub missing: Vec<(String, String)>,
}

/// One file's table, and where its code is in the file.
struct FileTable {
    first_row: u32,
    rows: u32,
    base: u64,
    /// `(file offset, file size, virtual address)` of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl ProcessTables {
    /// The tables of `target`'s executable mappings, each file opened as
    /// [`Target::open`] does (the probe runs as root; the target names them).
    pub fn of(target: &Target) -> ProcessTables {
        let mut tables = ProcessTables::default();
        let mut files: HashMap<&str, Option<FileTable>> = HashMap::new();
        for mapping in &target.mappings {
            let file = files
                .entry(mapping.path.as_str())
                .or_insert_with(|| tables.add_file(target, &mapping.path));
            if let Some(file) = file
                && let Some(exec) = exec_mapping(mapping, file)
            {
                tables.mappings.push(exec);
            }
        }
        tables.mappings.sort_by_key(|m| m.start);
        tables
    }

    /// Reads `path`'s table and appends its rows; `None` (and a line in
    /// [`missing`](Self::missing)) when it has none.
    fn add_file(&mut self, target: &Target, path: &str) -> Option<FileTable> {
        let compiled = (|| -> anyhow::Result<FileTable> {
            let data = target.open(path)?.map()?;
            let table = Table::from_elf(&data)?;
            let segments = object::File::parse(&*data)?
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect();
            let first_row = u32::try_from(self.rows.len())?;
            let rows = u32::try_from(table.rows.len())?;
            self.rows.extend_from_slice(&table.rows);
            Ok(FileTable {
                first_row,
                rows,
                base: table.base,
                segments,
            })
        })();
        match compiled {
            Ok(file) => Some(file),
            Err(e) => {
                self.missing.push((path.to_owned(), format!("{e:#}")));
                None
            }
        }
    }

    /// The mapping `pc` is in.
    pub fn mapping(&self, pc: u64) -> Option<ExecMapping> {
        let after = self.mappings.partition_point(|m| m.start <= pc);
        let mapping = self.mappings.get(after.checked_sub(1)?)?;
        (pc < mapping.end).then_some(*mapping)
    }
}

/// Where `mapping`'s rows are and how its addresses become row `pc`s: the
/// loadable segment it maps most of gives the address its bytes were linked
/// at. (Not the segment that holds its first byte: a mapping starts at the
/// page below its segment, often inside the segment before.)
fn exec_mapping(mapping: &Mapping, file: &FileTable) -> Option<ExecMapping> {
    let mapped = mapping.file_offset..mapping.file_offset + (mapping.end - mapping.start);
    let overlap = |&&(offset, size, _): &&(u64, u64, u64)| {
        (offset + size)
            .min(mapped.end)
            .saturating_sub(offset.max(mapped.start))
    };
    let segment = file.segments.iter().max_by_key(overlap)?;
    if overlap(&segment) == 0 {
        return None;
    }
    let &(offset, _, vaddr) = segment;
    // The address the mapping's first byte was linked at (below the
    // segment's start when the mapping begins on the page below it).
    let linked = vaddr.wrapping_add(mapping.file_offset).wrapping_sub(offset);
    let load_bias = mapping.start.wrapping_sub(linked);
    Some(ExecMapping {
        start: mapping.start,
        end: mapping.end,
        bias: load_bias.wrapping_add(file.base),
        first_row: file.first_row,
        rows: file.rows,
    })
}

/// A walk of this process's own stack, between two addresses: for tests,
/// the same step the kernel's walk takes, over memory read directly.
#[cfg(test)]
pub(crate) struct OwnStack<'a> {
    pub tables: &'a ProcessTables,
    /// The stack's readable range.
    pub low: u64,
    pub high: u64,
}

#[cfg(test)]
impl leakscope_probe_ebpf::unwind::Source for OwnStack<'_> {
    fn mapping(&mut self, pc: u64) -> Option<ExecMapping> {
        self.tables.mapping(pc)
    }

    fn row(&mut self, index: u32) -> Option<UnwindRow> {
        self.tables.rows.get(index as usize).copied()
    }

    fn read(&mut self, address: u64) -> Option<u64> {
        if address < self.low || address.checked_add(8)? > self.high || !address.is_multiple_of(8) {
            return None;
        }
        // SAFETY: within this thread's stack (the caller's bounds), aligned.
        Some(unsafe { std::ptr::read_volatile(address as *const u64) })
    }
}

#[cfg(test)]
mod tests;
