//! The tables of every executable a process maps, laid out as a walk reads
//! them: one array of rows, and the mappings that index it (each file's
//! table once, however many times it is mapped).

use crate::{ExecMapping, UnwindRow};

/// What a walk of a process needs: its executable mappings, sorted by
/// address, each with its rows among [`Tables::rows`].
#[derive(Debug, Default)]
pub struct Tables {
    pub mappings: Vec<ExecMapping>,
    pub rows: Vec<UnwindRow>,
    /// Files mapped executable with no table, and why: a walk that reaches
    /// their code stops there.
    pub missing: Vec<(String, String)>,
}

impl Tables {
    /// Appends a table's rows; returns where they are (`first_row`, `rows`)
    /// for the mappings that use them.
    pub fn add_rows(&mut self, rows: &[UnwindRow]) -> Option<(u32, u32)> {
        let first = u32::try_from(self.rows.len()).ok()?;
        let count = u32::try_from(rows.len()).ok()?;
        first.checked_add(count)?;
        self.rows.extend_from_slice(rows);
        Some((first, count))
    }

    /// Puts the mappings in address order, as [`mapping`](Self::mapping)
    /// and the programs' search want them.
    pub fn sort(&mut self) {
        self.mappings.sort_by_key(|m| m.start);
    }

    /// What a recording's header says of a walk by these tables.
    pub fn stack_walk(&self) -> leakscope_recording::StackWalk {
        leakscope_recording::StackWalk::EhFrame {
            mappings: self.mappings.len() as u32,
            rows: self.rows.len() as u64,
            without_table: self
                .missing
                .iter()
                .map(|(file, why)| format!("{file} ({why})"))
                .collect(),
        }
    }

    /// The mapping `pc` is in (the mappings sorted).
    pub fn mapping(&self, pc: u64) -> Option<ExecMapping> {
        let after = self.mappings.partition_point(|m| m.start <= pc);
        let mapping = self.mappings.get(after.checked_sub(1)?)?;
        (pc < mapping.end).then_some(*mapping)
    }
}
