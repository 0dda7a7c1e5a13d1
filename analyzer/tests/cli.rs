//! The `leakscope` command line on recordings and files given to it: bad
//! input gets one clear line and a non-zero exit, never a panic.

use std::path::Path;
use std::process::Command;

#[test]
fn bad_input_gets_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = |name: &str| dir.path().join(name);
    let run = |path: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .arg("report")
            .arg(path)
            .arg("--out")
            .arg(scratch("bad"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(Path::new("/nonexistent.lsrec"));
    assert!(
        !ok && err.lines().count() == 1 && err.contains("cannot read"),
        "{err}"
    );
    // Its cause once, not once more for the error's chain.
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let junk = scratch("junk.lsrec");
    std::fs::write(&junk, "hello").unwrap();
    let (ok, err) = run(&junk);
    assert!(!ok && err.contains("not a leakscope recording"), "{err}");
    let mut newer = b"LSREC\0\r\n".to_vec();
    newer.extend_from_slice(&99u32.to_le_bytes());
    let newer_path = scratch("newer.lsrec");
    std::fs::write(&newer_path, newer).unwrap();
    let (ok, err) = run(&newer_path);
    assert!(!ok && err.contains("format version 99"), "{err}");
    // A truncated recording still reports its readable prefix, and says so in one line.
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/leaky-5-sessions.lsrec");
    let bytes = std::fs::read(sample).unwrap();
    let truncated = scratch("truncated.lsrec");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (ok, err) = run(&truncated);
    assert!(ok, "{err}");
    // Warnings only, one line each (the sample's binary may also be missing here).
    assert!(
        err.lines().all(|l| l.starts_with("leakscope: warning: ")),
        "{err}"
    );
    let truncation: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("truncated at byte"))
        .collect();
    assert!(
        truncation.len() == 1 && truncation[0].contains("readable prefix"),
        "{err}"
    );
    // An output directory that is a symbolic link is never written through.
    let elsewhere = scratch("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let link = scratch("report-link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
        .arg("report")
        .arg(&truncated)
        .arg("--out")
        .arg(&link)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// More bad input, each one clear line and a non-zero exit (or, for damage
/// after the header, a report of the readable prefix with a one-line warning).
#[test]
fn damaged_files_and_bad_rules_get_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = |name: &str| dir.path().join(name);
    let leakscope = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(env!("CARGO_BIN_EXE_leakscope"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let out_dir = scratch("damaged-report");
    let report = |path: &Path, extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["report".as_ref(), path.as_os_str()];
        args.extend(["--out".as_ref(), out_dir.as_os_str()]);
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        leakscope(&args)
    };
    // An empty file.
    let empty = scratch("empty.lsrec");
    std::fs::write(&empty, b"").unwrap();
    let (ok, err) = report(&empty, &[]);
    assert!(
        !ok && err.lines().count() == 1 && err.contains("not a leakscope recording"),
        "{err}"
    );
    // A flipped bit inside a frame: the frames before it are reported, with one warning.
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/recordings/leaky-5-sessions.lsrec");
    let mut bytes = std::fs::read(&sample).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    let flipped = scratch("flipped.lsrec");
    std::fs::write(&flipped, &bytes).unwrap();
    let (ok, err) = report(&flipped, &[]);
    assert!(ok, "{err}");
    assert!(
        err.lines().all(|l| l.starts_with("leakscope: warning: ")),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("checksum")).count(),
        1,
        "{err}"
    );
    // A flipped bit in the header.
    let mut header = std::fs::read(&sample).unwrap();
    header[20] ^= 0xff;
    let bad_header = scratch("bad-header.lsrec");
    std::fs::write(&bad_header, &header).unwrap();
    let (ok, err) = report(&bad_header, &[]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    // A rules file with a syntax error names the file and the place, in one line.
    let rules = scratch("bad-rules.toml");
    std::fs::write(&rules, "[[rule]\ncategory = \"other\"\n").unwrap();
    let (ok, err) = report(&sample, &["--rules", rules.to_str().unwrap()]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("bad-rules.toml") && err.contains("line 1"),
        "{err}"
    );
    // A malformed dhat-heap.json.
    let dhat = scratch("dhat-heap.json");
    std::fs::write(&dhat, "{\"dhatFileVersion\": 2, \"pps\": [").unwrap();
    let (ok, err) = leakscope(&["dhat".as_ref(), dhat.as_os_str()]);
    assert!(!ok && err.lines().count() == 1, "{err}");
}
