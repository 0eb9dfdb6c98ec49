//! Bad input to `pyinspect dump`: each gets one clear `pyinspect: ` line on
//! stderr and a failing exit status, never a panic, and the target is left
//! running, unstopped and responsive.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_not_stopped, assert_one_clean_error_line, for_each_interpreter, interpreters, pyinspect,
    run_command, Fixture, Output,
};

fn dump(pid: &str) -> Output {
    pyinspect(&["dump", "--pid", pid])
}

fn assert_mentions(line: &str, any_of: &[&str]) {
    let lower = line.to_lowercase();
    assert!(
        any_of.iter().any(|w| lower.contains(&w.to_lowercase())),
        "the error line should mention one of {any_of:?}: {line}"
    );
}

/// A non-Python process in its own process group, killed on drop.
struct Sleep(std::process::Child);

impl Sleep {
    fn start() -> Sleep {
        let child = Command::new("sleep")
            .arg("100")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start sleep");
        Sleep(child)
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn pid_that_cannot_exist() {
    // Beyond any pid_max: rejected as an argument or as a missing process.
    for flags in [&[][..], &["--json"][..]] {
        let mut args = vec!["dump", "--pid", "999999999"];
        args.extend_from_slice(flags);
        let out = pyinspect(&args);
        let line = assert_one_clean_error_line(&out);
        assert_mentions(&line, &["999999999"]);
    }
}

#[test]
fn pid_of_an_exited_process() {
    let mut child = Command::new("true").spawn().expect("run true");
    let pid = child.id().to_string();
    child.wait().expect("reap true");
    let line = assert_one_clean_error_line(&dump(&pid));
    assert_mentions(&line, &[&pid]);
    assert_mentions(
        &line,
        &[
            "no such process",
            "no process",
            "not running",
            "does not exist",
            "exited",
        ],
    );
}

#[test]
fn not_a_python_process() {
    let target = Sleep::start();
    let pid = target.pid().to_string();
    for extra in [
        &[][..],
        &["--json"][..],
        &["--locals"][..],
        &["--nonblocking"][..],
    ] {
        let mut args = vec!["dump", "--pid", pid.as_str()];
        args.extend_from_slice(extra);
        let line = assert_one_clean_error_line(&pyinspect(&args));
        // Naming the executable tells the user which process they picked.
        assert_mentions(&line, &["sleep"]);
        assert_not_stopped(target.pid());
    }
}

/// A copy of the binary that an unprivileged user can run, wherever the
/// target directory lives.
fn binary_for_nobody(dir: &Path) -> std::path::PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("pyinspect");
    common::copy_program(Path::new(common::pyinspect_bin()), &copy);
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

#[test]
fn permission_denied_says_what_is_needed() {
    assert!(
        unsafe { libc::geteuid() } == 0,
        "this test runs the binary as `nobody` against a root-owned Python: run the suite as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let binary = binary_for_nobody(dir.path());
    for_each_interpreter(
        "permission_denied",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "deep.py", &["3"]);
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&binary)
                .args(["dump", "--pid", &fx.pid.to_string()]);
            let out = run_command(command, Duration::from_secs(60));
            let line = assert_one_clean_error_line(&out);
            assert_mentions(&line, &["CAP_SYS_PTRACE", "root", "ptrace_scope"]);
            fx.assert_alive();
        },
    );
}

#[test]
fn invalid_pid_strings() {
    let cases: &[&[&str]] = &[
        &["dump", "--pid", "abc"],
        &["dump", "--pid", "-5"],
        &["dump", "--pid=-5"],
        &["dump", "--pid", "0"],
        &["dump", "--pid", ""],
        &["dump", "--pid", "12abc"],
        &["dump"],
    ];
    for args in cases {
        let out = pyinspect(args);
        let line = assert_one_clean_error_line(&out);
        if let Some(value) = args.get(2).filter(|v| !v.is_empty()) {
            assert_mentions(&line, &[value]);
        } else {
            assert_mentions(&line, &["pid"]);
        }
    }
}

#[test]
fn unknown_flags_leave_the_target_alone() {
    let interp = &interpreters()[0];
    let mut fx = Fixture::spawn(interp, "deep.py", &["3"]);
    let pid = fx.pid.to_string();
    let cases: &[&[&str]] = &[
        &["dump", "--pid", &pid, "--bogus"],
        &["dump", "--frobnicate", "--pid", &pid],
        &["dump", "--pid", &pid, "-Z"],
        &["dumpster", "--pid", &pid],
    ];
    for args in cases {
        let out = pyinspect(args);
        assert_one_clean_error_line(&out);
        assert!(out.stdout.is_empty(), "{}", out.describe());
        fx.assert_alive();
    }
}

/// Either a dump (valid JSON) or one clean error line; never a panic.
fn success_or_clean_error(out: &Output) {
    if out.status.success() {
        let processes = out.json_lines();
        assert!(processes.len() <= 1, "{}", out.describe());
        assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    } else {
        assert_one_clean_error_line(out);
    }
}

#[test]
fn process_exits_during_the_dump() {
    // Pythons that exit while being started, read or torn down: each dump
    // races a different phase.
    const SCRIPT: &str = "import threading, time\n\
        for i in range(4):\n    threading.Thread(target=time.sleep, args=(0.002 * i,)).start()\n\
        time.sleep(0.003)\n";
    for_each_interpreter(
        "exits_during_dump",
        |_| true,
        |interp| {
            for round in 0..6 {
                let mut child = Command::new(&interp.python)
                    .args(["-c", SCRIPT])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start python");
                let pid = child.id().to_string();
                if round % 2 == 1 {
                    std::thread::sleep(Duration::from_millis(5 * round as u64));
                }
                let out = pyinspect(&["dump", "--pid", &pid, "--json"]);
                let _ = child.wait();
                success_or_clean_error(&out);
            }

            // A zombie: exited, not yet reaped; /proc/PID still exists.
            let mut child = Command::new(&interp.python)
                .args(["-c", "pass"])
                .stdin(Stdio::null())
                .spawn()
                .expect("start python");
            let pid = child.id();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if common::stat_state(pid as i32, pid as i32) == Some('Z') {
                    break;
                }
                assert!(Instant::now() < deadline, "python -c pass did not exit");
                std::thread::sleep(Duration::from_millis(5));
            }
            let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
            let _ = child.wait();
            success_or_clean_error(&out);
        },
    );
}

#[test]
fn unrecognised_python_version_is_named() {
    // A program whose name claims a Python version pyinspect has no layout
    // for: the error must name that version, not just "unsupported".
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = dir.path().join("python3.99");
    common::copy_program(Path::new("/bin/sleep"), &fake);
    let child = Command::new(&fake)
        .arg("100")
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start fake python");
    let target = Sleep(child);
    let line = assert_one_clean_error_line(&dump(&target.pid().to_string()));
    assert_mentions(&line, &["3.99"]);
    // Newer than every table: readable only through a _Py_DebugOffsets
    // that this program (sleep under another name) lacks.
    assert_mentions(
        &line,
        &[
            "not support",
            "unsupported",
            "unrecognised",
            "could not be proven",
        ],
    );
    assert_mentions(&line, &["_Py_DebugOffsets"]);
    assert_not_stopped(target.pid());
}

#[test]
fn native_with_nonblocking_is_refused() {
    let target = Sleep::start();
    let out = pyinspect(&[
        "dump",
        "--pid",
        &target.pid().to_string(),
        "--native",
        "--nonblocking",
    ]);
    let line = assert_one_clean_error_line(&out);
    assert_mentions(&line, &["--nonblocking"]);
}

#[test]
fn top_refuses_a_bad_delay() {
    for delay in ["0", "-1", "abc", "99999"] {
        let out = pyinspect(&["top", "--pid", "1", "--delay", delay]);
        let line = assert_one_clean_error_line(&out);
        assert_mentions(&line, &["delay"]);
    }
}

/// Runs `pyinspect CMD ARGS...` for each command, and asserts that each
/// fails with one clean line, the same line and status from every one.
fn same_from_each(commands: &[&str], args: &[&str]) -> String {
    let mut seen: Vec<(String, Option<i32>, String)> = Vec::new();
    for cmd in commands {
        let mut full = vec![*cmd];
        full.extend_from_slice(args);
        let out = pyinspect(&full);
        let line = assert_one_clean_error_line(&out);
        assert!(out.stdout.is_empty(), "{}", out.describe());
        seen.push((cmd.to_string(), out.status.code(), line));
    }
    let (first_cmd, code, line) = &seen[0];
    for (cmd, c, l) in &seen[1..] {
        assert_eq!(
            (l, c),
            (line, code),
            "{cmd} {args:?} and {first_cmd} {args:?} should say the same"
        );
    }
    line.clone()
}

const ALL: &[&str] = &["dump", "record", "top"];
const SAMPLERS: &[&str] = &["record", "top"];

#[test]
fn each_rule_has_one_message_from_dump_record_and_top() {
    // A real, non-Python target: nothing may touch it, it stays running.
    let target = Sleep::start();
    let pid = target.pid().to_string();
    let p = pid.as_str();

    // --native (and what implies it) with --nonblocking.
    let line = same_from_each(ALL, &["--pid", p, "--native", "--nonblocking"]);
    assert_mentions(&line, &["--nonblocking"]);
    assert_mentions(&line, &["paused"]);
    for implied in ["--native-all", "--native-debug-info"] {
        let out = pyinspect(&["dump", "--pid", p, implied, "--nonblocking"]);
        assert_eq!(assert_one_clean_error_line(&out), line, "dump {implied}");
    }
    let short = same_from_each(ALL, &["-p", p, "-n", "--nonblocking"]);
    assert_eq!(short, line);

    // A process to follow: neither, or both of --pid and a command.
    let line = same_from_each(ALL, &[]);
    assert_mentions(&line, &["--pid"]);
    let line = same_from_each(SAMPLERS, &["--pid", p, "--", "sleep", "1"]);
    assert_mentions(&line, &["not both"]);

    // The pid's form, whichever command takes it.
    for bad in ["abc", "-5", "0", "12abc", "0xzz"] {
        let line = same_from_each(ALL, &["--pid", bad]);
        assert_mentions(&line, &[bad]);
        assert_mentions(&line, &["process id"]);
    }

    // The rate's range: the same explanation from record and top (top once
    // said "unexpected argument" for a negative rate).
    for bad in ["-5", "-0.5", "0", "abc", "nan", "inf", "10kk"] {
        for args in [&["--rate", bad, "--pid", p][..], &["--pid", p, "-r", bad]] {
            let line = same_from_each(SAMPLERS, args);
            assert_mentions(&line, &["above 0"]);
            assert_mentions(&line, &[bad]);
        }
        let out = pyinspect(&["top", &format!("--rate={bad}"), "--pid", p]);
        assert_mentions(&assert_one_clean_error_line(&out), &["above 0"]);
    }
    for high in ["200k", "1e9", "100001"] {
        let line = same_from_each(SAMPLERS, &["--pid", p, "--rate", high]);
        assert_mentions(&line, &["too high"]);
        assert_mentions(&line, &["100k"]);
    }
    let line = same_from_each(SAMPLERS, &["--pid", p, "--rate"]);
    assert_mentions(&line, &["--rate"]);

    // --async-mode only with --async.
    let line = same_from_each(SAMPLERS, &["--pid", p, "--async-mode", "all"]);
    assert_mentions(&line, &["--async"]);
    let line = same_from_each(SAMPLERS, &["--pid", p, "--async", "--async-mode", "some"]);
    assert_mentions(&line, &["some"]);

    // Unknown flags and stray arguments.
    let line = same_from_each(ALL, &["--pid", p, "--bogus"]);
    assert_mentions(&line, &["--bogus"]);
    let line = same_from_each(ALL, &["--pid", p, "stray"]);
    assert_mentions(&line, &["stray"]);

    assert_not_stopped(target.pid());
}

#[test]
fn record_only_rules_are_one_clear_line() {
    let target = Sleep::start();
    let p = target.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("x.svg");
    let o = o.to_str().unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["--mode", "wall", "--idle"], &["--mode", "--idle"]),
        (&["--mode", "gil", "--gil"], &["--mode", "--gil"]),
        (&["-m", "cpu", "-i"], &["--mode", "--idle"]),
        (&["--mode", "sideways"], &["sideways"]),
        (&["-F", "--nolineno"], &["--function", "--nolineno"]),
        (&["--format", "gif"], &["gif"]),
        (&["--duration", "0"], &["duration"]),
        (&["--duration", "-1"], &["duration"]),
        (&["--duration", "soon"], &["duration"]),
    ];
    for (extra, words) in cases {
        let mut args = vec!["record", "--pid", &p, "-o", o];
        args.extend_from_slice(extra);
        let line = assert_one_clean_error_line(&pyinspect(&args));
        for w in *words {
            assert_mentions(&line, &[w]);
        }
    }
    // py-spy's --idle with --gil is one mode, not a conflict: it gets as
    // far as the target (not Python).
    let out = pyinspect(&["record", "--pid", &p, "-o", o, "-i", "-g", "-d", "1"]);
    assert_mentions(&assert_one_clean_error_line(&out), &["sleep"]);
    assert!(!Path::new(o).exists(), "a failed record left {o}");
    assert_not_stopped(target.pid());
}
