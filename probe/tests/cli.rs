//! The probe's command line on bad input: one clear line, non-zero exit, no panic.

use std::process::Command;

/// `name` in this test process's own scratch directory, made fresh (0700) on
/// first use: never a path someone else could have made first.
fn scratch(name: &str) -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("leakscope-cli-")
            // mkdtemp's own 0700: tempfile's default is 0777 less the umask.
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .unwrap()
            .keep()
    })
    .join(name)
}

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
    let path = scratch("not-a-recording.lsrec");
    std::fs::write(&path, b"certainly not a recording").unwrap();
    let (ok, err) = probe(&["dump", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("is not a leakscope recording"), "{err}");
}

#[test]
fn attach_to_a_missing_pid_is_a_one_line_error() {
    let out = scratch("never-missing.lsrec");
    let (ok, err) = probe(&[
        "attach",
        "--pid",
        "999999999",
        "--out",
        out.to_str().unwrap(),
    ]);
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

#[test]
fn a_preset_with_a_syntax_error_is_one_line_naming_the_place() {
    let path = scratch("bad-preset.toml");
    std::fs::write(&path, "name = \"x\"\n[[scope]\nkind = 1\n").unwrap();
    let exe = std::env::current_exe().unwrap();
    let (ok, err) = probe(&[
        "preset-check",
        "--exe",
        exe.to_str().unwrap(),
        "--preset",
        path.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("is not a valid preset") && err.contains("line 2"),
        "{err}"
    );
}

#[test]
fn a_preset_that_matches_nothing_says_which_scopes() {
    // This test binary has no rmcp in it: every required scope is missing.
    let exe = std::env::current_exe().unwrap();
    let (ok, err) = probe(&["preset-check", "--exe", exe.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no function matches session-create"), "{err}");
}

#[test]
fn attach_to_a_kernel_thread_is_a_one_line_error() {
    // pid 2 is kthreadd on Linux: no executable, no user memory.
    let out = scratch("never-kthread.lsrec");
    let (ok, err) = probe(&["attach", "--pid", "2", "--out", out.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("kernel thread") || err.contains("needs root"),
        "{err}"
    );
}

#[test]
fn an_oversized_ring_buffer_is_refused_not_wrapped() {
    let (ok, err) = probe(&["attach", "--pid", "1", "--ring-buffer-mib", "4096"]);
    assert!(!ok);
    assert!(err.contains("from 1 to 1024"), "{err}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The probe run through util-linux `setpriv` with `setpriv` options, so a
/// root test can take away the uid or the capabilities attaching needs.
fn probe_under_setpriv(setpriv: &[&str], args: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args(setpriv)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_leakscope-probe"))
        .args(args)
        .output()
        .expect("setpriv (util-linux) is needed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn attach_args(out: &str) -> Vec<String> {
    [
        "attach",
        "--pid",
        &std::process::id().to_string(),
        "--out",
        out,
        "--duration",
        "1s",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
fn attach_as_a_user_is_a_one_line_error() {
    let out = scratch("as-user.lsrec");
    let out = out.to_str().unwrap();
    let args = attach_args(out);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, err) = if is_root() {
        // nobody, with no supplementary groups and no capabilities.
        probe_under_setpriv(&["--reuid=65534", "--regid=65534", "--clear-groups"], &args)
    } else {
        probe(&args)
    };
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("attaching needs root, or CAP_BPF and CAP_PERFMON"),
        "{err}"
    );
    assert!(!std::path::Path::new(out).exists(), "nothing written");
}

/// Root in a container, or under a capability bounding set, may hold neither
/// CAP_BPF nor CAP_SYS_ADMIN: the error says that, not "try sudo".
#[test]
fn attach_as_root_without_bpf_capabilities_is_a_one_line_error() {
    if !is_root() {
        let why = "needs root, to drop capabilities from it";
        if std::env::var("LEAKSCOPE_REQUIRE_EBPF").as_deref() == Ok("1") {
            panic!("LEAKSCOPE_REQUIRE_EBPF=1 but this test {why}");
        }
        eprintln!("skipping attach_as_root_without_bpf_capabilities_is_a_one_line_error: {why}");
        return;
    }
    let out = scratch("root-no-bpf.lsrec");
    let out = out.to_str().unwrap();
    let args = attach_args(out);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, err) = probe_under_setpriv(
        &["--bounding-set=-bpf,-perfmon,-sys_admin", "--inh-caps=-all"],
        &args,
    );
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("this process is root but holds neither"),
        "{err}"
    );
    assert!(!std::path::Path::new(out).exists(), "nothing written");
}

/// `probe ARGS` with `env` set, killed (and failed) if it runs past 10 s: a
/// FIFO named as a preset must not hang it.
fn probe_with_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leakscope-probe"))
        .args(args)
        // Only the sudo user a test names (not the one running the tests).
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("leakscope-probe {args:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The probe runs as root: a preset is read as the user who ran `sudo` would
/// read it, so a root-only file is refused and no line of it is printed; a
/// FIFO is refused at once instead of hanging the probe.
#[test]
fn a_preset_is_read_with_the_sudo_users_rights_and_never_from_a_fifo() {
    let dir = scratch("preset");
    std::fs::create_dir(&dir).unwrap();
    // Open to every user, so the file's own mode is what refuses the sudo user.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        dir.parent().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_leakscope-probe");

    let fifo = dir.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path this test owns.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (ok, err) = probe_with_env(
        &[
            "preset-check",
            "--exe",
            exe,
            "--preset",
            fifo.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok && err.contains("not a regular file"), "{err}");

    if is_root() {
        let secret = dir.join("shadow");
        std::fs::write(&secret, "root:$6$the-secret-hash:19000:0:99999:7:::\n").unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let args = [
            "preset-check",
            "--exe",
            exe,
            "--preset",
            secret.to_str().unwrap(),
        ];
        let (ok, err) = probe_with_env(&args, &[("SUDO_UID", "65534"), ("SUDO_GID", "65534")]);
        assert!(!ok, "{err}");
        assert!(!err.contains("the-secret-hash"), "{err}");
        assert!(err.to_lowercase().contains("permission denied"), "{err}");
        // Root itself (no sudo user) reads it, and it is simply not a preset.
        let (ok, err) = probe_with_env(&args, &[]);
        assert!(!ok && err.contains("is not a valid preset"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sample_that_is_not_a_size_is_refused_with_an_example() {
    let out = scratch("never-sampled.lsrec");
    let (ok, err) = probe(&[
        "attach",
        "--pid",
        "1",
        "--sample",
        "lots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("\"lots\" is not a size such as 512KiB"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn keep_needs_rotate_and_at_least_one_segment() {
    let out = scratch("never-rotated.lsrec");
    let path = out.to_str().unwrap();
    let (ok, err) = probe(&["attach", "--pid", "1", "--keep", "3", "--out", path]);
    assert!(!ok);
    assert!(err.contains("--rotate"), "{err}");
    let (ok, err) = probe(&[
        "attach", "--pid", "1", "--rotate", "1h", "--keep", "0", "--out", path,
    ]);
    assert!(!ok);
    assert!(err.contains("--keep"), "{err}");
    let (ok, err) = probe(&["attach", "--pid", "1", "--rotate", "soon", "--out", path]);
    assert!(!ok);
    assert!(err.contains("--rotate"), "{err}");
    assert!(!out.exists());
}
