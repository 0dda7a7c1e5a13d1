//! The DHAT importer on arbitrary text: an error or an attribution, never a panic.
#![no_main]

use leakscope_analyzer::attribute::Rules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = leakscope_analyzer::dhat::attribute_text(text, &Rules::builtin());
    }
});
