//! The tables of every executable a process maps, laid out as a walk reads
//! them: one array of rows, and the mappings that index it (each file's
//! table once, however many times it is mapped).

use std::collections::HashMap;

use leakscope_recording::Mapping;
use leakscope_recording::target::Target;
use leakscope_unwind::{ExecMapping, Table, Tables};
use object::{Object, ObjectSegment};

/// A process's tables, as the probe loads them into the programs' maps.
pub type ProcessTables = Tables;

/// One file's table, and where its code is in the file.
struct FileTable {
    first_row: u32,
    rows: u32,
    base: u64,
    /// `(file offset, file size, virtual address)` of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

/// The tables of `target`'s executable mappings, each file opened as
/// [`Target::open`] does (the probe runs as root; the target names them).
pub fn of(target: &Target) -> ProcessTables {
    let mut tables = ProcessTables::default();
    let mut files: HashMap<&str, Option<FileTable>> = HashMap::new();
    for mapping in &target.mappings {
        let file = files
            .entry(mapping.path.as_str())
            .or_insert_with(|| add_file(&mut tables, target, &mapping.path));
        if let Some(file) = file
            && let Some(exec) = exec_mapping(mapping, file)
        {
            tables.mappings.push(exec);
        }
    }
    tables.sort();
    tables
}

/// Reads `path`'s table and appends its rows; `None` (and a line in
/// [`Tables::missing`]) when it has none.
fn add_file(tables: &mut Tables, target: &Target, path: &str) -> Option<FileTable> {
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
        let (first_row, rows) = tables
            .add_rows(&table.rows)
            .ok_or_else(|| anyhow::anyhow!("more than 4 G rows"))?;
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
            tables.missing.push((path.to_owned(), format!("{e:#}")));
            None
        }
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
impl leakscope_unwind::Source for OwnStack<'_> {
    fn mapping(&mut self, pc: u64) -> Option<ExecMapping> {
        self.tables.mapping(pc)
    }

    fn row(&mut self, index: u32) -> Option<leakscope_unwind::UnwindRow> {
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
