//! The DHAT importer on arbitrary text: an error or an attribution, never a panic.
#![no_main]

use std::sync::OnceLock;

use leakscope_analyzer::Rules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Parsed once: the rules are not what is fuzzed here.
    static RULES: OnceLock<Rules> = OnceLock::new();
    let rules = RULES.get_or_init(Rules::builtin);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = leakscope_analyzer::dhat::attribute_text(text, rules);
    }
});
