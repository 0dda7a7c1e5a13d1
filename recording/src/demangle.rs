//! Demangling, in one place: presets, attribution rules and symbolizers all match
//! the names this produces, so they must agree on one form.

/// rustc-demangle's alternate form (no hash, no `.llvm.N` suffix); C names come
/// back unchanged (minus a symbol version such as `@GLIBC_2.2.5`).
pub fn demangle(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(name) => format!("{name:#}"),
        Err(_) => raw.split('@').next().unwrap_or(raw).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn demangles_rust_and_keeps_c_names() {
        assert_eq!(demangle("malloc"), "malloc");
        assert_eq!(demangle("malloc@GLIBC_2.2.5"), "malloc");
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.1234"),
            "core::ptr::drop_in_place"
        );
    }
}
