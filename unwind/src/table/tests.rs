use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::*;

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

fn table_of(path: &Path) -> Table {
    let data = std::fs::read(path).unwrap();
    Table::from_elf(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rsp(cfa_off: u16) -> Rule {
    Rule {
        kind: kind::CFA_RSP,
        cfa_off,
        rbp: 0,
    }
}

#[test]
fn a_gap_between_functions_is_a_row_and_alike_rows_are_one() {
    let table = Table::from_functions(vec![
        // Listed out of order: laid out by address.
        Function {
            start: 0x1020,
            end: 0x1030,
            rules: vec![(0x1020, rsp(8))],
        },
        Function {
            start: 0x1000,
            end: 0x1010,
            rules: vec![(0x1000, rsp(8)), (0x1004, rsp(16)), (0x100c, rsp(8))],
        },
        // Right after the one before: no gap, and its first rule is the same.
        Function {
            start: 0x1030,
            end: 0x1040,
            rules: vec![(0x1030, rsp(8)), (0x1031, Rule::STOP)],
        },
    ])
    .unwrap();
    assert_eq!(table.base, 0x1000);
    let rows: Vec<(u32, u8, u16)> = table
        .rows
        .iter()
        .map(|r| (r.pc, r.kind, r.cfa_off))
        .collect();
    assert_eq!(
        rows,
        [
            (0x00, kind::CFA_RSP, 8),
            (0x04, kind::CFA_RSP, 16),
            (0x0c, kind::CFA_RSP, 8),
            (0x10, kind::UNSUPPORTED, 0),
            (0x20, kind::CFA_RSP, 8),
            (0x31, kind::STOP, 0),
            (0x40, kind::UNSUPPORTED, 0),
        ]
    );
    assert_eq!(table.row_for(0xfff), None);
    assert_eq!(table.row_for(0x1005).unwrap().cfa_off, 16);
    assert_eq!(table.row_for(0x1015).unwrap().kind, kind::UNSUPPORTED);
    assert_eq!(table.row_for(0x1030).unwrap().kind, kind::CFA_RSP);
    assert_eq!(table.row_for(0x9999).unwrap().kind, kind::UNSUPPORTED);
}

#[test]
fn a_function_inside_another_holds_from_its_start() {
    let table = Table::from_functions(vec![
        Function {
            start: 0x1000,
            end: 0x1100,
            rules: vec![(0x1000, rsp(8)), (0x1080, rsp(24))],
        },
        Function {
            start: 0x1040,
            end: 0x1050,
            rules: vec![(0x1040, rsp(16))],
        },
    ])
    .unwrap();
    let pcs: Vec<u32> = table.rows.iter().map(|r| r.pc).collect();
    assert!(pcs.is_sorted(), "{pcs:x?}");
    assert_eq!(table.row_for(0x1045).unwrap().cfa_off, 16);
}

#[test]
fn plt_expressions_are_told_by_their_threshold() {
    let plt = |lit| {
        [
            0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22,
        ]
    };
    assert_eq!(plt_threshold(&plt(0x3b)), Some(11));
    assert_eq!(plt_threshold(&plt(0x3a)), Some(10));
    assert_eq!(plt_threshold(&plt(0x39)), None);
    assert_eq!(plt_threshold(&plt(0x3b)[..10]), None);
}

#[test]
fn what_is_not_elf_or_has_no_eh_frame_has_no_table() {
    assert!(matches!(
        Table::from_elf(b"not an ELF file"),
        Err(TableError::Elf(_))
    ));
}

/// libc's table has what the walk must tell apart: its `.plt` (a CFA
/// expression), its signal trampoline (`__restore_rt`, an `S` CIE), and
/// functions that enter as the ABI says (CFA = rsp + 8).
#[test]
fn libc_has_plt_signal_and_entry_rows() {
    let table = table_of(Path::new(LIBC));
    let count = |k| table.rows.iter().filter(|r| r.kind == k).count();
    assert!(count(kind::PLT11) + count(kind::PLT10) >= 1, "no PLT row");
    assert!(count(kind::SIGNAL) >= 1, "no signal row");
    assert!(table.functions > 1000, "{} functions", table.functions);
    eprintln!(
        "libc: {} functions, {} rows ({} unsupported, {} stop)",
        table.functions,
        table.rows.len(),
        count(kind::UNSUPPORTED),
        count(kind::STOP),
    );
}

/// binutils' own reading of the same `.eh_frame` (`readelf
/// --debug-dump=frames-interp`), an implementation independent of gimli:
/// at every row it prints, the table's row must say the same, for libc and
/// for this test program (Rust, its dependencies and std).
#[test]
fn every_row_agrees_with_readelf() {
    let exe = std::env::current_exe().unwrap();
    for path in [Path::new(LIBC), exe.as_path()] {
        let table = table_of(path);
        let expected = readelf_rows(path);
        assert!(
            expected.len() > 1000,
            "{}: {} rows",
            path.display(),
            expected.len()
        );
        let mut wrong = Vec::new();
        for row in &expected {
            let got = table.row_for(row.at).copied();
            if !row.agrees(got) {
                wrong.push(format!("{row:?} but {got:?}"));
            }
        }
        eprintln!(
            "{}: {} of readelf's {} rows agree; table {} rows, {} functions",
            path.display(),
            expected.len() - wrong.len(),
            expected.len(),
            table.rows.len(),
            table.functions,
        );
        assert!(
            wrong.is_empty(),
            "{}: {} rows disagree, first: {:#?}",
            path.display(),
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    }
}

/// One row of readelf's table: at `at`, the CFA, rbp and return address
/// columns as it prints them ("rsp+8", "c-16", "u", "exp", ...).
#[derive(Debug)]
struct Printed {
    at: u64,
    cfa: String,
    rbp: Option<String>,
    ra: Option<String>,
}

impl Printed {
    fn agrees(&self, got: Option<UnwindRow>) -> bool {
        let Some(got) = got else {
            return false;
        };
        match self.ra.as_deref() {
            Some("c-8") => {}
            Some("u") => return got.kind == kind::STOP,
            _ => return got.kind == kind::UNSUPPORTED,
        }
        let cfa = |prefix: &str| {
            self.cfa
                .strip_prefix(prefix)
                .and_then(|n| n.parse::<u64>().ok())
        };
        let cfa_agrees = match (cfa("rsp+"), cfa("rbp+")) {
            (Some(n), _) => u16::try_from(n).map_or(got.kind == kind::UNSUPPORTED, |n| {
                got.kind == kind::CFA_RSP && got.cfa_off == n
            }),
            (_, Some(n)) => u16::try_from(n).map_or(got.kind == kind::UNSUPPORTED, |n| {
                got.kind == kind::CFA_RBP && got.cfa_off == n
            }),
            _ if self.cfa == "exp" => {
                [kind::PLT10, kind::PLT11, kind::UNSUPPORTED].contains(&got.kind)
            }
            _ => got.kind == kind::UNSUPPORTED,
        };
        if !cfa_agrees {
            return false;
        }
        if got.kind == kind::UNSUPPORTED {
            return true;
        }
        match self.rbp.as_deref() {
            // readelf prints "u" for a register with no rule yet, and for one
            // that is undefined.
            None | Some("u") => got.rbp == 0 || got.rbp == RBP_LOST,
            Some("s") => got.rbp == 0,
            Some(other) => match other.strip_prefix("c-").and_then(|n| n.parse::<i64>().ok()) {
                Some(n) if n % 8 == 0 && n / 8 < 128 => i64::from(got.rbp) == -n / 8,
                _ => got.rbp == RBP_LOST,
            },
        }
    }
}

/// readelf's rows of every function of `path` but the signal trampolines
/// (readelf prints their rules; the table says `SIGNAL`) and those the
/// linker discarded (address 0).
fn readelf_rows(path: &Path) -> Vec<Printed> {
    let output = Command::new("readelf")
        .arg("--debug-dump=frames-interp")
        .arg(path)
        .output()
        .expect("readelf (binutils) runs");
    // readelf exits 1 on a file without debug sections, having printed
    // the table whole.
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("Contents of the .eh_frame section"),
        "readelf printed no .eh_frame for {}",
        path.display()
    );
    let mut augmentations: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    let mut function: Option<(u64, u64)> = None;
    let mut columns: Vec<String> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [offset, _, _, "CIE", augmentation, ..] => {
                augmentations.insert(offset.to_string(), augmentation.trim_matches('"').into());
                function = None;
            }
            [_, _, _, "FDE", cie, range, ..] => {
                let cie = cie.trim_start_matches("cie=");
                let signal = augmentations.get(cie).is_some_and(|a| a.contains('S'));
                let (lo, hi) = range.trim_start_matches("pc=").split_once("..").unwrap();
                let lo = u64::from_str_radix(lo, 16).unwrap();
                let hi = u64::from_str_radix(hi, 16).unwrap();
                function = (!signal && lo != 0 && hi > lo).then_some((lo, hi));
            }
            ["LOC", ..] => columns = words.iter().map(|w| w.to_string()).collect(),
            [at, ..] if function.is_some() && words.len() == columns.len() => {
                let Ok(at) = u64::from_str_radix(at, 16) else {
                    continue;
                };
                let (lo, hi) = function.unwrap();
                if !(lo..hi).contains(&at) {
                    continue;
                }
                let column = |name: &str| {
                    columns
                        .iter()
                        .position(|c| c == name)
                        .map(|i| words[i].to_string())
                };
                rows.push(Printed {
                    at,
                    cfa: column("CFA").unwrap(),
                    rbp: column("rbp"),
                    ra: column("ra"),
                });
            }
            _ => {}
        }
    }
    rows
}

/// The table of a section in memory ends at its terminator, and is the
/// file's own table once addresses are the same.
#[test]
fn a_section_read_from_memory_ends_at_its_terminator() {
    let data = std::fs::read(LIBC).unwrap();
    let file = object::File::parse(&*data).unwrap();
    use object::{Object, ObjectSection};
    let section = file.section_by_name(".eh_frame").unwrap();
    let header = file.section_by_name(".eh_frame_hdr").unwrap();
    let mut bytes = section.data().unwrap().to_vec();
    // What follows the section in memory: not entries.
    bytes.extend_from_slice(&[0xab; 64]);
    let from_memory = Table::from_eh_frame(&bytes, section.address(), header.address()).unwrap();
    assert_eq!(from_memory, table_of(Path::new(LIBC)));
    assert_eq!(terminated_length(&[0; 16]), 0);
    assert_eq!(terminated_length(&[8, 0, 0, 0, 1, 2]), 0, "a cut entry");
}

/// From memory, bytes after the last entry that are not a terminator end
/// the table where they start; the entries before them are kept.
#[test]
fn a_section_in_memory_without_a_terminator_keeps_its_entries() {
    let data = std::fs::read(LIBC).unwrap();
    let file = object::File::parse(&*data).unwrap();
    use object::{Object, ObjectSection};
    let section = file.section_by_name(".eh_frame").unwrap();
    let header = file.section_by_name(".eh_frame_hdr").unwrap();
    let mut bytes = section.data().unwrap().to_vec();
    let whole = terminated_length(&bytes);
    bytes.truncate(whole);
    // Code after the section, whose words read as a CIE of no version.
    bytes.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0, 0x90, 0x90, 0x90, 0x90]);
    let from_memory = Table::from_eh_frame(&bytes, section.address(), header.address()).unwrap();
    assert_eq!(from_memory, table_of(Path::new(LIBC)));
}
