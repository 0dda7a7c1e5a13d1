//! The probe's command line on bad input: one clear line, non-zero exit, no panic.

use std::process::Command;

fn probe(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leakscope-probe"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dump_of_a_missing_file_is_a_one_line_error() {
    let (ok, err) = probe(&["dump", "/nonexistent/x.lsrec"]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot read /nonexistent/x.lsrec"), "{err}");
}

#[test]
fn dump_of_a_non_recording_says_so() {
    let path = std::env::temp_dir().join(format!("not-a-recording-{}.lsrec", std::process::id()));
    std::fs::write(&path, b"certainly not a recording").unwrap();
    let (ok, err) = probe(&["dump", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("is not a leakscope recording"), "{err}");
}

#[test]
fn attach_to_a_missing_pid_is_a_one_line_error() {
    let (ok, err) = probe(&["attach", "--pid", "999999999", "--out", "/tmp/never.lsrec"]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no process with pid 999999999") || err.contains("needs root"),
        "{err}"
    );
}

#[test]
fn attach_refuses_an_output_that_is_not_lsrec() {
    let (ok, err) = probe(&["attach", "--pid", "1", "--out", "/tmp/x.txt"]);
    assert!(!ok);
    assert!(err.contains(".lsrec"), "{err}");
}
