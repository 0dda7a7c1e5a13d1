//! The recording reader on arbitrary bytes: never a panic, never unbounded work;
//! a bad file is an error or a torn tail. The analyzer's pipeline runs on what it
//! reads, so a crafted recording cannot crash `leakscope report` either. Mapping
//! records are left out: they name files to open for symbols, which is the
//! symbolizer's business (tested on its own), and would make every run read them.
#![no_main]

use std::path::Path;

use leakscope_analyzer::Rules;
use leakscope_analyzer::Builder;
use leakscope_recording::Record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = leakscope_recording::RecordingReader::new(data, Path::new("fuzz.lsrec"))
    else {
        return;
    };
    let header = reader.header().clone();
    let mut builder = Builder::new(Rules::builtin(), 1_000_000_000, 100_000_000)
        .scope_functions(&header.settings.scope_functions);
    for record in reader.by_ref() {
        if !matches!(record, Record::Mapping(_)) {
            builder.push(record);
        }
    }
    let tail = reader.tail().cloned().expect("drained");
    let timeline = builder.finish(header, tail);
    let _ = leakscope_analyzer::summarize(&timeline);
});
