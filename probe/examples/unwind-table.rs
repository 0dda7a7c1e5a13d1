//! What an executable's unwind table costs: `cargo run --release -p
//! leakscope-probe --example unwind-table -- FILE...` prints, per file, its
//! code and `.eh_frame` sizes, the table's functions and rows, the map memory
//! its rows take, and the time to compile it (issue 30 asks what a 50 MB-text
//! binary costs).

use std::time::Instant;

use leakscope_probe::unwind::Table;
use leakscope_probe_ebpf::unwind::{ROWS_PER_CHUNK, UnwindRow, kind};
use object::{Object, ObjectSection, SectionKind};

fn main() {
    for path in std::env::args().skip(1) {
        let data = match std::fs::read(&path) {
            Ok(data) => data,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let (text, eh_frame) = match object::File::parse(&*data) {
            Ok(file) => (
                file.sections()
                    .filter(|s| s.kind() == SectionKind::Text)
                    .map(|s| s.size())
                    .sum::<u64>(),
                file.section_by_name(".eh_frame").map_or(0, |s| s.size()),
            ),
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let started = Instant::now();
        let table = match Table::from_elf(&data) {
            Ok(table) => table,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let took = started.elapsed();
        let rows = table.rows.len();
        let chunks = rows.div_ceil(ROWS_PER_CHUNK);
        let bytes = chunks * ROWS_PER_CHUNK * size_of::<UnwindRow>();
        let unsupported = table
            .rows
            .iter()
            .filter(|r| r.kind == kind::UNSUPPORTED)
            .count();
        println!(
            "{path}: {:.1} MB of code, {:.1} MB of .eh_frame: {} functions, {rows} rows \
             ({:.1} per KiB of code, {unsupported} cut), {:.1} MB of map in {chunks} chunks, \
             compiled in {:.2} s",
            text as f64 / 1e6,
            eh_frame as f64 / 1e6,
            table.functions,
            rows as f64 / (text as f64 / 1024.0),
            bytes as f64 / 1e6,
            took.as_secs_f64(),
        );
    }
}
