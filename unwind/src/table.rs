//! An executable's unwind table: its `.eh_frame` compiled into sorted
//! [`UnwindRow`]s, each the rule from its `pc` up to the next row's.
//!
//! gimli evaluates the call-frame instructions of each function (FDE) into
//! rows; a row the walk can follow keeps its CFA rule (rsp or rbp plus an
//! offset, or a PLT entry's expression) and where `rbp` was saved. What
//! it cannot follow is said, never guessed: an explicit `UNSUPPORTED` row for
//! a rule it cannot express and for every gap between two functions (the
//! issue: never a rule stretched over them), `STOP` where the return address
//! is undefined (the outermost frame), `SIGNAL` for a signal trampoline.
//! Consecutive rows with the same rule are one row.

use std::collections::HashMap;

use crate::{RBP_LOST, UnwindRow, kind};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, UnwindTableRow, X86_64,
};
use object::{Object, ObjectSection};

type Section<'a> = EhFrame<EndianSlice<'a, LittleEndian>>;

/// Why an executable has no table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("not an ELF file the probe reads: {0}")]
    Elf(#[from] object::Error),
    #[error("no .eh_frame section (built with -fno-asynchronous-unwind-tables?)")]
    NoEhFrame,
    #[error("its .eh_frame cannot be read: {0}")]
    EhFrame(#[from] gimli::Error),
    #[error("its functions span more than 4 GiB")]
    TooWide,
}

/// The rows of one executable, by address relative to [`Table::base`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The lowest function's start (an ELF virtual address): rows count from it.
    pub base: u64,
    /// Sorted by `pc`, no two consecutive alike; the last is an
    /// `UNSUPPORTED` row at the end of the highest function.
    pub rows: Vec<UnwindRow>,
    /// Functions (FDEs) read; those gimli could not parse are gaps.
    pub functions: usize,
}

/// A row's rule, before it is placed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Rule {
    kind: u8,
    cfa_off: u16,
    rbp: i8,
}

impl Rule {
    const UNSUPPORTED: Rule = Rule::only(kind::UNSUPPORTED);
    const STOP: Rule = Rule::only(kind::STOP);
    const SIGNAL: Rule = Rule::only(kind::SIGNAL);

    const fn only(kind: u8) -> Rule {
        Rule {
            kind,
            cfa_off: 0,
            rbp: 0,
        }
    }

    fn at(self, pc: u32) -> UnwindRow {
        UnwindRow {
            pc,
            cfa_off: self.cfa_off,
            kind: self.kind,
            rbp: self.rbp,
        }
    }
}

/// One function's rows: its range and the rule at each start.
struct Function {
    start: u64,
    end: u64,
    rules: Vec<(u64, Rule)>,
}

impl Table {
    /// The table of an ELF executable or shared object (its bytes, as mapped
    /// from the file).
    pub fn from_elf(data: &[u8]) -> Result<Table, TableError> {
        let file = object::File::parse(data)?;
        let section = file
            .section_by_name(".eh_frame")
            .ok_or(TableError::NoEhFrame)?;
        // Pointers in .eh_frame may be relative to these sections.
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        let address = |name| file.section_by_name(name).map(|s| s.address());
        if let Some(text) = address(".text") {
            bases = bases.set_text(text);
        }
        if let Some(header) = address(".eh_frame_hdr") {
            bases = bases.set_eh_frame_hdr(header);
        }
        if let Some(got) = address(".got") {
            bases = bases.set_got(got);
        }
        let eh_frame = EhFrame::new(section.data()?, LittleEndian);
        Self::from_functions(functions(&eh_frame, &bases, Entries::All)?)
    }

    /// The table of code already in memory: `eh_frame` is the `.eh_frame`
    /// section's bytes at address `eh_frame_address`, `eh_frame_hdr_address`
    /// where its `.eh_frame_hdr` is (pointers may be relative to either).
    /// The table's addresses are then the memory's (the in-process recorder
    /// compiles its own process's tables from what `dl_iterate_phdr` shows,
    /// no file read). `eh_frame` may run past the section: the entries end at
    /// its zero terminator.
    pub fn from_eh_frame(
        eh_frame: &[u8],
        eh_frame_address: u64,
        eh_frame_hdr_address: u64,
    ) -> Result<Table, TableError> {
        let eh_frame = &eh_frame[..terminated_length(eh_frame)];
        if eh_frame.is_empty() {
            return Err(TableError::NoEhFrame);
        }
        let bases = BaseAddresses::default()
            .set_eh_frame(eh_frame_address)
            .set_eh_frame_hdr(eh_frame_hdr_address);
        let eh_frame = EhFrame::new(eh_frame, LittleEndian);
        Self::from_functions(functions(&eh_frame, &bases, Entries::UpToFirstBad)?)
    }

    /// Lays the functions' rules out by address: a gap row wherever one
    /// function ends before the next begins, the later function's rules
    /// where two overlap.
    fn from_functions(mut functions: Vec<Function>) -> Result<Table, TableError> {
        functions.sort_by_key(|f| f.start);
        let base = functions.first().map_or(0, |f| f.start);
        let mut rows: Vec<UnwindRow> = Vec::new();
        let mut place = |address: u64, rule: Rule| -> Result<(), TableError> {
            let pc = u32::try_from(address - base).map_err(|_| TableError::TooWide)?;
            while rows.last().is_some_and(|last| last.pc >= pc) {
                // Two rules at one address, or a function that starts inside
                // the one before: the later one holds from here.
                rows.pop();
            }
            let row = rule.at(pc);
            if rows.last().is_none_or(|last| Rule::of(last) != rule) {
                rows.push(row);
            }
            Ok(())
        };
        let count = functions.len();
        for (i, function) in functions.iter().enumerate() {
            for &(address, rule) in &function.rules {
                if (function.start..function.end).contains(&address) {
                    place(address, rule)?;
                }
            }
            let next = functions.get(i + 1).map(|f| f.start);
            if next.is_none_or(|next| next > function.end) {
                place(function.end, Rule::UNSUPPORTED)?;
            }
        }
        Ok(Table {
            base,
            rows,
            functions: count,
        })
    }

    /// The row that covers `address` (an ELF virtual address), as the walk in
    /// the kernel finds it: the last row that starts at or before it. `None`
    /// below the table; past its end, the last (`UNSUPPORTED`) row.
    pub fn row_for(&self, address: u64) -> Option<&UnwindRow> {
        let relative = u32::try_from(address.checked_sub(self.base)?).ok()?;
        let after = self.rows.partition_point(|row| row.pc <= relative);
        self.rows.get(after.checked_sub(1)?)
    }
}

impl Rule {
    fn of(row: &UnwindRow) -> Rule {
        Rule {
            kind: row.kind,
            cfa_off: row.cfa_off,
            rbp: row.rbp,
        }
    }
}

/// Where `.eh_frame` is, from its `.eh_frame_hdr` (`header`, the bytes at
/// `header_address`): the header's first pointer, as `PT_GNU_EH_FRAME`
/// leads an unwinder to the section in memory.
pub fn eh_frame_address(header: &[u8], header_address: u64) -> Result<u64, TableError> {
    let bases = BaseAddresses::default().set_eh_frame_hdr(header_address);
    let parsed = gimli::EhFrameHdr::new(header, LittleEndian).parse(&bases, 8)?;
    match parsed.eh_frame_ptr() {
        gimli::Pointer::Direct(address) => Ok(address),
        gimli::Pointer::Indirect(_) => Err(TableError::EhFrame(
            gimli::Error::UnsupportedPointerEncoding(gimli::DW_EH_PE_indirect),
        )),
    }
}

/// The length of `.eh_frame`'s entries up to its zero terminator (or as many
/// whole entries as `data` holds): each starts with its length, 4 bytes, or
/// `0xffff_ffff` and 8 bytes.
fn terminated_length(data: &[u8]) -> usize {
    let mut at = 0usize;
    loop {
        let Some(word) = data.get(at..at + 4) else {
            return at;
        };
        let length = u32::from_le_bytes(word.try_into().expect("4 bytes")) as u64;
        let (header, length) = match length {
            0 => return at,
            0xffff_ffff => match data.get(at + 4..at + 12) {
                Some(long) => (12, u64::from_le_bytes(long.try_into().expect("8 bytes"))),
                None => return at,
            },
            length => (4, length),
        };
        let end = (at as u64).saturating_add(header).saturating_add(length);
        if end > data.len() as u64 {
            return at;
        }
        at = end as usize;
    }
}

/// How far [`functions`] reads `.eh_frame`'s entries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entries {
    /// The section's, exactly (from a file): an entry that cannot be read
    /// is an error.
    All,
    /// Up to the first entry that cannot be read (from memory, where the
    /// section's end is its terminator; an object linked without one has
    /// other bytes after its last entry, and the table is what came before).
    UpToFirstBad,
}

/// Every function of `eh_frame` with its rules. A function gimli cannot
/// parse or evaluate is left out: its range becomes a gap.
fn functions(
    eh_frame: &Section<'_>,
    bases: &BaseAddresses,
    entries_read: Entries,
) -> Result<Vec<Function>, TableError> {
    let mut context = Box::new(UnwindContext::new());
    // A CIE is shared by many FDEs: parsed once.
    let mut cies = HashMap::new();
    let mut functions = Vec::new();
    let mut entries = eh_frame.entries(bases);
    loop {
        let entry = match entries.next() {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(_) if entries_read == Entries::UpToFirstBad => break,
            Err(e) => return Err(e.into()),
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let parsed = partial.parse(|section, bases, offset| {
            if let Some(cie) = cies.get(&offset) {
                return Ok(Clone::clone(cie));
            }
            let cie = section.cie_from_offset(bases, offset)?;
            cies.insert(offset, cie.clone());
            Ok(cie)
        });
        let Ok(fde) = parsed else {
            continue;
        };
        let (start, end) = (fde.initial_address(), fde.end_address());
        if start == 0 || end <= start {
            // Discarded by the linker (its address zeroed), or empty.
            continue;
        }
        if fde.is_signal_trampoline() {
            functions.push(Function {
                start,
                end,
                rules: vec![(start, Rule::SIGNAL)],
            });
            continue;
        }
        let mut rules = Vec::new();
        let evaluated = (|| -> gimli::Result<()> {
            let mut table = fde.rows(eh_frame, bases, &mut *context)?;
            while let Some(row) = table.next_row()? {
                rules.push((row.start_address(), rule_of(row, eh_frame)));
            }
            Ok(())
        })();
        if evaluated.is_err() {
            rules = vec![(start, Rule::UNSUPPORTED)];
        }
        functions.push(Function { start, end, rules });
    }
    Ok(functions)
}

/// What the walk does with one of gimli's rows.
fn rule_of(row: &UnwindTableRow<usize>, eh_frame: &Section<'_>) -> Rule {
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        Some(RegisterRule::Undefined) => return Rule::STOP,
        _ => return Rule::UNSUPPORTED,
    }
    let (kind, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
            (kind::CFA_RSP, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RBP => {
            (kind::CFA_RBP, *offset)
        }
        CfaRule::Expression(expression) => {
            let bytes = expression.get(eh_frame).map(|e| e.0.slice());
            match bytes.ok().and_then(plt_threshold) {
                Some(11) => (kind::PLT11, 0),
                Some(10) => (kind::PLT10, 0),
                _ => return Rule::UNSUPPORTED,
            }
        }
        // Another register's (libc's setcontext, hand-written crypto).
        CfaRule::RegisterAndOffset { .. } => return Rule::UNSUPPORTED,
    };
    let Ok(cfa_off) = u16::try_from(offset) else {
        return Rule::UNSUPPORTED;
    };
    let rbp = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) => 0,
        Some(RegisterRule::Offset(at)) if at < 0 && at % 8 == 0 && at / 8 > i64::from(RBP_LOST) => {
            (at / 8) as i8
        }
        _ => RBP_LOST,
    };
    Rule { kind, cfa_off, rbp }
}

/// The threshold of a PLT entry's CFA expression, the one every x86-64
/// linker writes: `rsp + 8 + ((rip & 15) >= N) << 3` (`DW_OP_breg7 8;
/// DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge;
/// DW_OP_lit3; DW_OP_shl; DW_OP_plus`), N 10 or 11; `None` for any other.
fn plt_threshold(bytes: &[u8]) -> Option<u8> {
    const LIT0: u8 = 0x30;
    match *bytes {
        [
            0x77,
            0x08,
            0x80,
            0x00,
            0x3f,
            0x1a,
            lit,
            0x2a,
            0x33,
            0x24,
            0x22,
        ] if lit == LIT0 + 10 || lit == LIT0 + 11 => Some(lit - LIT0),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
