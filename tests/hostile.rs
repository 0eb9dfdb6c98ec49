//! Faults and hostile targets, through the real binary against real
//! processes: outputs to devices, FIFOs, full devices and planted symlinks;
//! signal storms; spoofed thread ids; exec, truncated mapped files, D-state
//! and frozen threads, another tracer, pid reuse, odd names; capability scope.
//!
//! The fault tests run on a representative subset of the matrix (see
//! `subset`), the output tests on one interpreter (writing does not depend
//! on it). Every test is bounded in time. Run as root.

mod common;
mod common_output;

use common::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests here load the machine (signal storms, 1 kHz recordings) and
/// measure how long threads stay stopped: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// CPython 3.6, 3.9, 3.11 (pyenv and Debian's static build), 3.12, 3.13.
fn subset(i: &Interpreter) -> bool {
    matches!(i.version, (3, 6) | (3, 9) | (3, 11) | (3, 12) | (3, 13))
}

fn py312() -> &'static Interpreter {
    pyenv((3, 12))
}

/// Debian's static 3.11 release build, from the harness.
fn debian_python() -> String {
    find_interpreter("Debian's static 3.11 release build", |i| {
        i.label.starts_with("debian ") && i.static_build && !i.debug
    })
    .python
    .to_str()
    .expect("a UTF-8 path")
    .to_string()
}

fn is_root() -> bool {
    // SAFETY: plain id getter.
    unsafe { libc::geteuid() == 0 }
}

fn run(args: &[&str], timeout: Duration) -> Output {
    let mut c = Command::new(pyinspect_bin());
    c.args(args);
    run_command(c, timeout)
}

fn no_crash(out: &Output) {
    assert!(
        out.status.code().is_some() && out.status.code() != Some(101),
        "crashed or panicked\n{}",
        out.describe()
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
}

fn stat_of(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Nanoseconds a thread has run on a CPU (the first field of schedstat).
fn run_time(path: &str) -> Option<u64> {
    stat_of(path)?.split_whitespace().next()?.parse().ok()
}

fn state_letter(stat: &str) -> Option<char> {
    pyinspect::procfs::parse_stat_state(stat)
}

/// Watches every thread of `pid` until stopped: the longest run of
/// consecutive observations (at most 3 ms apart, with no CPU time run in
/// between) in which a thread was in
/// ptrace stop ('t'), and whether any pid in `never` was ever traced.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<WatchResult>>,
}

#[derive(Debug, Default)]
struct WatchResult {
    longest_stop: Duration,
    observations: u64,
    never_traced_violations: Vec<String>,
}

impl Watcher {
    fn start(pid: i32, never: Vec<i32>) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut r = WatchResult::default();
            // A thread seen stopped twice was held the whole time between
            // only if it ran no CPU time in between: a profiler that stops a
            // thread at 1 kHz frees a CPU for this watcher exactly while the
            // thread is stopped, so on a small machine the watcher tends to
            // look only then, and would take many short stops for one.
            let mut since: HashMap<String, (Instant, Option<u64>)> = HashMap::new();
            let mut last = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                let now = Instant::now();
                if now - last > Duration::from_millis(3) {
                    // We were not looking: a run of stops cannot be told.
                    since.clear();
                }
                last = now;
                if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                    for t in rd.flatten() {
                        let name = t.file_name().to_string_lossy().into_owned();
                        let Some(st) = stat_of(&format!("/proc/{pid}/task/{name}/stat")) else {
                            continue;
                        };
                        r.observations += 1;
                        if state_letter(&st) == Some('t') {
                            let ran = run_time(&format!("/proc/{pid}/task/{name}/schedstat"));
                            let entry = since.entry(name).or_insert((now, ran));
                            if entry.1 != ran {
                                *entry = (now, ran);
                            }
                            r.longest_stop = r.longest_stop.max(now - entry.0);
                        } else {
                            since.remove(&name);
                        }
                    }
                }
                for v in &never {
                    if let Some(s) = stat_of(&format!("/proc/{v}/status")) {
                        let tracer = s
                            .lines()
                            .find_map(|l| l.strip_prefix("TracerPid:"))
                            .map(|x| x.trim().to_string());
                        if tracer.as_deref().is_some_and(|t| t != "0") {
                            r.never_traced_violations
                                .push(format!("{v} traced by {tracer:?}"));
                        }
                    }
                    if let Some(st) = stat_of(&format!("/proc/{v}/stat")) {
                        if state_letter(&st) == Some('t') {
                            r.never_traced_violations
                                .push(format!("{v} in ptrace stop"));
                        }
                    }
                }
                std::thread::sleep(Duration::from_micros(300));
            }
            r
        });
        Watcher {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> WatchResult {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap()
    }
}

/// The pause budget a thread may be held stopped for.
const BUDGET: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------- outputs

const FORMATS: [&str; 5] = ["flamegraph", "speedscope", "chrometrace", "raw", "pprof"];

fn check_format(format: &str, bytes: &[u8]) {
    assert!(!bytes.is_empty(), "{format}: nothing written");
    match format {
        "flamegraph" => {
            common_output::svg_text(bytes);
        }
        "speedscope" | "chrometrace" => {
            serde_json::from_slice::<serde_json::Value>(bytes).expect("valid JSON");
        }
        "raw" => assert!(!common_output::raw_stacks(bytes).is_empty()),
        "pprof" => assert!(common_output::pprof(bytes).1 > 0),
        _ => unreachable!(),
    }
}

#[test]
fn every_format_to_stdout_null_fifo_and_full() {
    let _serial = serial();
    let fx = Fixture::spawn(py312(), "hostile.py", &["spin"]);
    let pid = fx.pid.to_string();
    let dir = tempfile::tempdir().unwrap();
    for format in FORMATS {
        let base = ["record", "-p", &pid, "-d", "0.3", "-f", format, "-o"];
        // /dev/stdout and '-': the profile arrives on our pipe.
        for dest in ["/dev/stdout", "-"] {
            let mut args = base.to_vec();
            args.push(dest);
            let mut c = Command::new(pyinspect_bin());
            c.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{format} to {dest}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            check_format(format, &o.stdout);
        }
        // /dev/null: accepted, nothing to check but success.
        let mut args = base.to_vec();
        args.push("/dev/null");
        run(&args, Duration::from_secs(30)).assert_success();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        // A FIFO read by us.
        let fifo = dir.path().join(format!("{format}.fifo"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let f2 = fifo.clone();
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            std::fs::File::open(&f2)
                .unwrap()
                .read_to_end(&mut v)
                .unwrap();
            v
        });
        let mut args = base.to_vec();
        args.push(fifo.to_str().unwrap());
        run(&args, Duration::from_secs(30)).assert_success();
        check_format(format, &reader.join().unwrap());
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        // /dev/full: one error line naming the path and the cause once.
        let mut args = base.to_vec();
        args.push("/dev/full");
        let o = run(&args, Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(1), "{}", o.describe());
        let errs: Vec<&str> = o
            .stderr
            .lines()
            .filter(|l| l.contains("No space left"))
            .collect();
        assert_eq!(errs.len(), 1, "{}", o.describe());
        assert!(errs[0].contains("/dev/full"), "{}", o.describe());
        assert_eq!(errs[0].matches("No space left").count(), 1, "{}", errs[0]);
    }
}

fn as_nobody(args: &[&str]) {
    let st = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "as nobody: {args:?}");
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// Restores a sysctl when dropped.
struct Sysctl {
    path: &'static str,
    old: String,
}

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let old = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, value).unwrap();
        Sysctl { path, old }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.old.trim());
    }
}

#[test]
fn planted_symlinks_are_replaced_never_followed() {
    let _serial = serial();
    assert!(
        is_root(),
        "this test plants links as nobody and writes as root"
    );
    let fx = Fixture::spawn(py312(), "hostile.py", &["spin"]);
    let pid = fx.pid.to_string();
    let record_to = |path: &Path| {
        run(
            &[
                "record",
                "-p",
                &pid,
                "-d",
                "0.3",
                "-f",
                "raw",
                "-o",
                path.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        )
        .assert_success();
    };
    // A root-owned file and a root-only directory the links point into.
    let private = tempfile::tempdir().unwrap();
    let secret = private.path().join("secret");
    std::fs::write(&secret, "SECRET").unwrap();
    let absent = private.path().join("created-by-root");
    // A world-writable directory (no sticky bit).
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    // 1. A link to an existing root file.
    let link = shared.path().join("profile.txt");
    as_nobody(&["ln", "-s", secret.to_str().unwrap(), link.to_str().unwrap()]);
    record_to(&link);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "SECRET");
    assert!(!is_symlink(&link), "the planted link was kept");
    assert!(!common_output::raw_stacks(&std::fs::read(&link).unwrap()).is_empty());

    // 2. A dangling link: no new root-owned file appears at its target.
    let link2 = shared.path().join("dangling.txt");
    as_nobody(&[
        "ln",
        "-s",
        absent.to_str().unwrap(),
        link2.to_str().unwrap(),
    ]);
    record_to(&link2);
    assert!(
        !absent.exists(),
        "a file was created through the dangling link"
    );
    assert!(!is_symlink(&link2));

    // 3. In /tmp (sticky) with fs.protected_symlinks off.
    {
        let _guard = Sysctl::set("/proc/sys/fs/protected_symlinks", "0");
        let link3 = PathBuf::from(format!("/tmp/pyinspect-planted-{}.txt", std::process::id()));
        let _ = std::fs::remove_file(&link3);
        as_nobody(&[
            "ln",
            "-s",
            secret.to_str().unwrap(),
            link3.to_str().unwrap(),
        ]);
        record_to(&link3);
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "SECRET");
        assert!(!is_symlink(&link3));
        let _ = std::fs::remove_file(&link3);
    }

    // 4. A link of our own (root's) is honoured: the file it names is written.
    let mine = shared.path().join("mine.txt");
    let real = private.path().join("real.txt");
    std::os::unix::fs::symlink(&real, &mine).unwrap();
    record_to(&mine);
    assert!(is_symlink(&mine));
    assert!(!common_output::raw_stacks(&std::fs::read(&real).unwrap()).is_empty());
    // No temporary file is left behind anywhere.
    for d in [shared.path(), private.path()] {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            assert!(
                !e.file_name().to_string_lossy().ends_with(".tmp"),
                "left behind: {:?}",
                e.path()
            );
        }
    }
}

// ---------------------------------------------------------------- signals

#[test]
fn signal_storm_loses_none_doubles_none_holds_none() {
    let _serial = serial();
    for_each_interpreter("signal_storm", subset, |interp| {
        for native in [false, true] {
            let fx = Fixture::spawn(interp, "hostile.py", &["signals"]);
            let pid = fx.pid;
            let fx_pid = pid;
            let watcher = Watcher::start(pid, vec![]);
            let ps = pid.to_string();
            let mut args = vec![
                "record",
                "-p",
                &ps,
                "-r",
                "1000",
                "-d",
                "3",
                "-f",
                "raw",
                "-o",
                "/dev/null",
            ];
            if native {
                args.push("--native");
            }
            let mut c = Command::new(pyinspect_bin());
            c.args(&args).stdout(Stdio::null()).stderr(Stdio::piped());
            let rec = c.spawn().unwrap();
            // Bursts of queued SIGRTMIN while the recording runs (from its
            // first sample on).
            let mut sent = 0u64;
            let t0 = Instant::now();
            wait_following(rec.id(), fx_pid);
            while t0.elapsed() < Duration::from_millis(2500) {
                for _ in 0..50 {
                    // SAFETY: kill(2) on our child with a valid signal.
                    if unsafe { libc::kill(fx_pid, libc::SIGRTMIN()) } == 0 {
                        sent += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let out = rec.wait_with_output().unwrap();
            let w = watcher.finish();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            // Every signal arrives once: the count settles at what was sent.
            let deadline = Instant::now() + Duration::from_secs(5);
            let count = || -> u64 { fx.ask(libc::SIGUSR1, "COUNT ").parse().unwrap() };
            let mut got = count();
            while got < sent && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                got = count();
            }
            drop(fx);
            eprintln!(
                "signal_storm [{}] native={native}: sent {sent}, counted {got}, longest ptrace stop {:?} over {} observations; {}",
                interp.label,
                w.longest_stop,
                w.observations,
                stderr.lines().find(|l| l.contains("samples")).unwrap_or("")
            );
            assert!(out.status.success(), "{stderr}");
            assert_eq!(got, sent, "signals lost or doubled (native={native})");
            assert!(
                w.longest_stop <= BUDGET,
                "a thread stayed in ptrace stop {:?} (native={native})",
                w.longest_stop
            );
            assert!(!stderr.contains("permission denied"), "{stderr}");
        }
    });
}

// ---------------------------------------------------------------- spoofing

#[test]
fn spoofed_thread_ids_never_reach_another_process() {
    let _serial = serial();
    for_each_interpreter(
        "spoofed_tids",
        |i| i.at_least(3, 11) && subset(i),
        |interp| {
            // The victim: another user's process.
            let mut victim = Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "sleep",
                    "60",
                ])
                .spawn()
                .unwrap();
            let vpid = victim.id() as i32;
            let victim_pid = vpid.to_string();
            let mut fx = Fixture::spawn(interp, "hostile.py", &["spoof", &victim_pid]);
            let pid = fx.pid.to_string();
            let watcher = Watcher::start(fx.pid, vec![vpid]);
            for args in [
                vec!["dump", "-p", &pid],
                vec!["dump", "-p", &pid, "--native"],
                vec![
                    "record",
                    "-p",
                    &pid,
                    "-r",
                    "1000",
                    "-d",
                    "1",
                    "-f",
                    "raw",
                    "-o",
                    "/dev/null",
                ],
                vec![
                    "record",
                    "-p",
                    &pid,
                    "-r",
                    "1000",
                    "-d",
                    "1",
                    "-f",
                    "raw",
                    "-o",
                    "/dev/null",
                    "--native",
                ],
            ] {
                let out = run(&args, Duration::from_secs(60));
                no_crash(&out);
                assert!(out.status.success(), "{}", out.describe());
            }
            let w = watcher.finish();
            assert!(
                w.never_traced_violations.is_empty(),
                "the victim was attached: {:?}",
                w.never_traced_violations
            );
            fx.assert_alive();
            let _ = victim.kill();
            let _ = victim.wait();
        },
    );
}

// ---------------------------------------------------------------- exec

fn tracer_of(pid: i32) -> Option<String> {
    stat_of(&format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .map(|x| x.trim().to_string())
}

/// Waits until pyinspect process `rec` samples `pid` (from its first
/// sample on it keeps each thread's /proc/PID/task/TID/stat open): the
/// handshake before acting.
fn wait_following(rec: u32, pid: i32) {
    let want = format!("/proc/{pid}/task/");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let open = std::fs::read_dir(format!("/proc/{rec}/fd"))
            .map(|rd| {
                rd.flatten().any(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with(&want))
                })
            })
            .unwrap_or(false);
        if open {
            return;
        }
        assert!(Instant::now() < deadline, "pyinspect never opened {want}*");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn exec_from_a_worker_thread_ends_the_record() {
    let _serial = serial();
    for_each_interpreter("exec_mid_record", subset, |interp| {
        let py = interp.python.to_str().unwrap();
        // Delays after the trigger: the exec lands at different points of
        // the sampling (often mid-pause at 1 kHz). From a worker thread the
        // exec'ing thread takes the leader's tid; from the main thread the
        // leader stays and only its memory changes, even to the same
        // program (the last trial).
        let trials: [(&str, &str, Vec<&str>); 6] = [
            ("exec", "0", vec!["/bin/sleep", "30"]),
            (
                "exec",
                "0.13",
                vec![py, "-c", "import time; time.sleep(30)"],
            ),
            ("exec", "0.31", vec!["/bin/sleep", "30"]),
            ("exec", "0.57", vec![py, "-c", "while True: pass"]),
            ("exec-main", "0.05", vec!["/bin/sleep", "30"]),
            ("exec-main", "0.21", vec![py, "-c", "while True: pass"]),
        ];
        for (mode, delay, prog) in trials {
            let mut args = vec![mode, delay];
            args.extend(prog.iter().copied());
            let fx = Fixture::spawn(interp, "hostile.py", &args);
            let pid = fx.pid.to_string();
            let mut c = Command::new(pyinspect_bin());
            c.args([
                "record",
                "-p",
                &pid,
                "-r",
                "1000",
                "-f",
                "raw",
                "-o",
                "/dev/null",
                "-d",
                "20",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
            let rec = c.spawn().unwrap();
            wait_following(rec.id(), fx.pid);
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: kill(2) on the fixture: its trigger to exec.
            unsafe { libc::kill(fx.pid, libc::SIGUSR2) };
            let started = Instant::now();
            let out = rec.wait_with_output().unwrap();
            let took = started.elapsed();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.code().is_some_and(|c| c != 101), "{stderr}");
            assert!(
                took < Duration::from_secs(10),
                "record went on after the exec ({mode} {delay}: {took:?})\n{stderr}"
            );
            assert!(out.status.success(), "{stderr}");
            assert!(stderr.contains("exec'd"), "{stderr}");
            // The new program runs, untraced and not stopped, and a harmless
            // signal does not stop it.
            assert_eq!(tracer_of(fx.pid).as_deref(), Some("0"));
            // SAFETY: kill(2) on the fixture with a signal it ignores.
            unsafe { libc::kill(fx.pid, libc::SIGWINCH) };
            std::thread::sleep(Duration::from_millis(50));
            assert_not_stopped(fx.pid);
        }
    });
}

// ---------------------------------------------------------------- truncation

#[test]
fn a_mapped_file_truncated_under_us_never_crashes() {
    let _serial = serial();
    for_each_interpreter(
        "truncated_mapping",
        |i| matches!(i.version, (3, 9) | (3, 12)),
        |interp| {
            let dir = tempfile::tempdir().unwrap();
            let lib = dir.path().join("libpython3.99-fake.so");
            let mut fx = Fixture::spawn(interp, "hostile.py", &["truncate", lib.to_str().unwrap()]);
            let pid = fx.pid.to_string();
            let mut failures = Vec::new();
            for i in 0..30 {
                let mut args = vec!["dump", "-p", &pid];
                if i % 2 == 1 {
                    args.push("--native");
                }
                let out = run(&args, Duration::from_secs(60));
                no_crash(&out);
                if !out.status.success() {
                    failures.push(out.stderr.clone());
                }
            }
            for native in [false, true] {
                let path = dir.path().join(format!("p{native}.txt"));
                let mut args = vec![
                    "record",
                    "-p",
                    &pid,
                    "-r",
                    "200",
                    "-d",
                    "2",
                    "-f",
                    "raw",
                    "-o",
                    path.to_str().unwrap(),
                ];
                if native {
                    args.push("--native");
                }
                let out = run(&args, Duration::from_secs(60));
                no_crash(&out);
                assert!(out.status.success(), "{}", out.describe());
                assert!(!common_output::raw_stacks(&std::fs::read(&path).unwrap()).is_empty());
            }
            eprintln!(
                "truncated_mapping [{}]: 30 dumps, {} failed cleanly",
                interp.label,
                failures.len()
            );
            assert!(failures.len() <= 3, "{failures:?}");
            fx.assert_alive();
        },
    );
}

// ---------------------------------------------------------------- D state

fn vfork_lib(dir: &Path) -> PathBuf {
    let src = dir.join("vfork.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\n#include <sys/wait.h>\n\
         int hold_vfork(int secs) { pid_t p = vfork(); if (p == 0) { sleep(secs); _exit(0); }\n\
         int st; waitpid(p, &st, 0); return 0; }\n",
    )
    .unwrap();
    let lib = dir.join("libvfork.so");
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    lib
}

#[test]
fn a_d_state_thread_is_not_waited_for() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let lib = vfork_lib(dir.path());
    for_each_interpreter(
        "d_state_vfork",
        |i| i.at_least(3, 8) && subset(i),
        |interp| {
            let mut fx = Fixture::spawn(
                interp,
                "hostile.py",
                &["vfork", lib.to_str().unwrap(), "30"],
            );
            let vt = fx.ready["vforker"].as_i64().unwrap();
            // Wait until the vforking thread sits in D.
            let deadline = Instant::now() + Duration::from_secs(10);
            while stat_of(&format!("/proc/{}/task/{vt}/stat", fx.pid))
                .as_deref()
                .and_then(state_letter)
                != Some('D')
            {
                assert!(
                    Instant::now() < deadline,
                    "the vfork thread never reached D state"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let pid = fx.pid.to_string();
            let watcher = Watcher::start(fx.pid, vec![]);
            for args in [
                vec!["dump", "-p", &pid],
                vec!["dump", "-p", &pid, "--native"],
                vec!["dump", "-p", &pid, "--native-all"],
            ] {
                let t = Instant::now();
                let out = run(&args, Duration::from_secs(30));
                assert!(out.status.success(), "{}", out.describe());
                assert!(
                    t.elapsed() < Duration::from_secs(3),
                    "{args:?} took {:?}",
                    t.elapsed()
                );
                assert!(
                    out.stdout.contains(&format!("Thread {vt}")),
                    "{}",
                    out.describe()
                );
                assert!(out.stdout.contains("vforker"), "{}", out.describe());
            }
            let t = Instant::now();
            let out = run(
                &[
                    "record",
                    "-p",
                    &pid,
                    "-r",
                    "1000",
                    "-d",
                    "1",
                    "--native",
                    "-f",
                    "raw",
                    "-o",
                    "/dev/null",
                ],
                Duration::from_secs(30),
            );
            assert!(out.status.success(), "{}", out.describe());
            assert!(t.elapsed() < Duration::from_secs(5));
            let w = watcher.finish();
            eprintln!(
                "d_state_vfork [{}]: longest ptrace stop {:?}",
                interp.label, w.longest_stop
            );
            assert!(w.longest_stop <= BUDGET, "{:?}", w.longest_stop);
            assert_not_stopped(fx.pid);
            fx.assert_alive();
        },
    );
}

/// A cgroup with a freezer: v2's cgroup.freeze where it works, else v1's.
struct Frozen {
    dir: PathBuf,
    v2: bool,
}

impl Frozen {
    fn freeze(pid: i32, v2: bool) -> Frozen {
        let base = if !v2 {
            "/sys/fs/cgroup/freezer"
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            // A pure v2 machine: the unified hierarchy is the root.
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/unified"
        };
        let dir = PathBuf::from(format!(
            "{base}/pyinspect-test-{}-{pid}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        if v2 {
            std::fs::write(dir.join("cgroup.freeze"), "1").unwrap();
        } else {
            std::fs::write(dir.join("freezer.state"), "FROZEN").unwrap();
        }
        let f = Frozen { dir, v2 };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f.is_frozen() {
            assert!(Instant::now() < deadline, "the cgroup did not freeze");
            std::thread::sleep(Duration::from_millis(10));
        }
        f
    }
    fn is_frozen(&self) -> bool {
        if self.v2 {
            stat_of(self.dir.join("cgroup.events").to_str().unwrap())
                .is_some_and(|e| e.contains("frozen 1"))
        } else {
            stat_of(self.dir.join("freezer.state").to_str().unwrap())
                .is_some_and(|s| s.trim() == "FROZEN")
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if self.v2 {
            let _ = std::fs::write(self.dir.join("cgroup.freeze"), "0");
        } else {
            let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        }
        // Move the processes back to the root, then remove the group.
        let root = self.dir.parent().unwrap().join("cgroup.procs");
        if let Some(procs) = stat_of(self.dir.join("cgroup.procs").to_str().unwrap()) {
            for p in procs.lines() {
                let _ = std::fs::write(&root, p);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn freezers() -> Vec<bool> {
    let mut v = Vec::new();
    if Path::new("/sys/fs/cgroup/freezer/cgroup.procs").exists() {
        v.push(false);
    }
    let v2_root = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "/sys/fs/cgroup"
    } else {
        "/sys/fs/cgroup/unified"
    };
    let probe = PathBuf::from(format!("{v2_root}/pyinspect-probe-{}", std::process::id()));
    if std::fs::create_dir(&probe).is_ok() {
        if probe.join("cgroup.freeze").exists() {
            v.push(true);
        }
        let _ = std::fs::remove_dir(&probe);
    }
    assert!(!v.is_empty(), "no cgroup freezer on this machine");
    v
}

#[test]
fn a_frozen_cgroup_is_bounded_and_interruptible() {
    let _serial = serial();
    let kinds = freezers();
    for_each_interpreter(
        "frozen_cgroup",
        |i| matches!(i.version, (3, 6) | (3, 12)),
        |interp| {
            for &v2 in &kinds {
                let fx = Fixture::spawn(interp, "hostile.py", &["spin"]);
                let pid = fx.pid.to_string();
                let frozen = Frozen::freeze(fx.pid, v2);
                for args in [
                    vec!["dump", "-p", &pid],
                    vec!["dump", "-p", &pid, "--native"],
                ] {
                    let t = Instant::now();
                    let out = run(&args, Duration::from_secs(30));
                    no_crash(&out);
                    assert!(
                        t.elapsed() < Duration::from_secs(5),
                        "{args:?} (v2={v2}) took {:?}\n{}",
                        t.elapsed(),
                        out.describe()
                    );
                    assert!(out.status.success(), "v2={v2}\n{}", out.describe());
                    // Frozen wherever it was (maybe still printing READY).
                    let thread = format!("Thread {pid}");
                    assert!(out.stdout.contains(&thread), "{}", out.describe());
                    assert!(out.stdout.contains("hostile.py"), "{}", out.describe());
                }
                // record: bounded by its duration, and SIGINT ends it early.
                let mut c = Command::new(pyinspect_bin());
                c.args([
                    "record",
                    "-p",
                    &pid,
                    "-r",
                    "500",
                    "-f",
                    "raw",
                    "-o",
                    "/dev/null",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
                let mut rec = c.spawn().unwrap();
                // Its handler set (else SIGINT kills it), then mid-recording.
                common::wait_for_handler(rec.id() as i32, libc::SIGINT);
                std::thread::sleep(Duration::from_millis(700));
                // SAFETY: kill(2) on our child.
                unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
                let t = Instant::now();
                let status = loop {
                    if let Some(s) = rec.try_wait().unwrap() {
                        break s;
                    }
                    if t.elapsed() > Duration::from_secs(5) {
                        let _ = rec.kill();
                        panic!("record did not end on SIGINT with a frozen target (v2={v2})");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                assert!(status.code().is_some(), "{status}");
                drop(frozen);
                assert_not_stopped(fx.pid);
            }
        },
    );
}

// ---------------------------------------------------------------- tracer

#[test]
fn a_target_under_strace_names_its_tracer() {
    let _serial = serial();
    for_each_interpreter(
        "under_strace",
        |i| matches!(i.version, (2, 7) | (3, 11) | (3, 13)),
        |interp| {
            let mut fx = Fixture::spawn(interp, "deep.py", &["3"]);
            let mut strace = Command::new("strace")
                .args([
                    "-f",
                    "-qq",
                    "-e",
                    "trace=none",
                    "-o",
                    "/dev/null",
                    "-p",
                    &fx.pid.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while tracer_of(fx.pid).as_deref() != Some(&strace.id().to_string()) {
                assert!(Instant::now() < deadline, "strace did not attach");
                std::thread::sleep(Duration::from_millis(10));
            }
            let pid = fx.pid.to_string();
            let out = run(&["dump", "-p", &pid], Duration::from_secs(30));
            let line = assert_one_clean_error_line(&out);
            assert!(line.contains(&strace.id().to_string()), "{line}");
            assert!(line.contains("strace"), "{line}");
            assert!(line.contains("--nonblocking"), "{line}");
            assert!(!line.contains("permission denied"), "{line}");
            let out = run(
                &["record", "-p", &pid, "-d", "0.5", "-o", "/dev/null"],
                Duration::from_secs(30),
            );
            let line = assert_one_clean_error_line(&out);
            assert!(
                line.contains("strace") && line.contains("--nonblocking"),
                "{line}"
            );
            // --nonblocking reads it anyway.
            run(
                &["dump", "-p", &pid, "--nonblocking"],
                Duration::from_secs(30),
            )
            .assert_success();
            let _ = strace.kill();
            let _ = strace.wait();
            fx.assert_alive();
        },
    );
}

// ---------------------------------------------------------------- pid reuse

/// Start `argv` so that it gets pid `want`, through ns_last_pid. Other
/// processes may take the pid first: None then.
fn spawn_at_pid(want: i32, argv: &[&str]) -> Option<std::process::Child> {
    std::fs::write("/proc/sys/kernel/ns_last_pid", (want - 1).to_string()).ok()?;
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    if child.id() as i32 == want {
        Some(child)
    } else {
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

#[test]
fn pid_reuse_ends_the_record() {
    let _serial = serial();
    assert!(is_root());
    let impostor = debian_python();
    let impostor = impostor.as_str();
    let code = "import sys\ndef impostor_function():\n    while True: pass\nprint('READY', flush=True)\nimpostor_function()\n";
    let mut reused = 0;
    for trial in 0..8 {
        let mut fx = Fixture::spawn(py312(), "hostile.py", &["spin"]);
        let pid = fx.pid;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.txt");
        let ps = pid.to_string();
        let mut c = Command::new(pyinspect_bin());
        c.args([
            "record",
            "-p",
            &ps,
            "-r",
            "200",
            "-f",
            "raw",
            "-d",
            "20",
            "-o",
            path.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut rec = c.spawn().unwrap();
        wait_following(rec.id(), pid);
        std::thread::sleep(Duration::from_millis(300));
        // End the target (and reap it: its pid is free), then start an
        // impostor Python under the same pid.
        let _ = fx.child.kill();
        let _ = fx.child.wait();
        let Some(mut imp) = spawn_at_pid(pid, &[impostor, "-c", code]) else {
            let _ = rec.kill();
            let _ = rec.wait();
            eprintln!("pid_reuse trial {trial}: pid {pid} was taken by another process");
            continue;
        };
        let mut line = String::new();
        BufReader::new(imp.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        reused += 1;
        let t = Instant::now();
        let status = loop {
            if let Some(s) = rec.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > Duration::from_secs(5) {
                let _ = rec.kill();
                let _ = imp.kill();
                panic!("record followed the impostor for 5 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut err = String::new();
        rec.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "{err}");
        let raw = std::fs::read(&path).unwrap();
        assert!(
            !String::from_utf8_lossy(&raw).contains("impostor"),
            "sampled the impostor"
        );
        let _ = imp.kill();
        let _ = imp.wait();
        // The fixture's drop signals its own process group, which the
        // impostor (in ours) is not part of.
        if reused >= 3 {
            break;
        }
    }
    eprintln!("pid_reuse: the pid was reused in {reused} trials; record ended on each");
    assert!(reused >= 1, "could not reuse a pid in 8 trials");
}

// ---------------------------------------------------------------- names

#[test]
fn odd_names_are_escaped_in_every_output() {
    let _serial = serial();
    for_each_interpreter(
        "odd_names",
        |i| i.at_least(3, 8) && subset(i),
        |interp| {
            let fx = Fixture::spawn(interp, "hostile.py", &["names"]);
            let pid = fx.pid.to_string();
            let clean = |what: &str, s: &[u8]| {
                for bad in [0u8, 7, 0x1b] {
                    assert!(!s.contains(&bad), "{what}: raw byte {bad:#x}");
                }
                assert!(
                    !String::from_utf8_lossy(s).contains('\u{9b}'),
                    "{what}: raw C1"
                );
            };
            let out = run(&["dump", "-p", &pid], Duration::from_secs(30));
            out.assert_success();
            clean("dump", out.stdout.as_bytes());
            assert!(
                out.stdout.contains("odd\\x00nul\\x07bel\\x1b[31mesc"),
                "{}",
                out.stdout
            );
            let out = run(&["dump", "-p", &pid, "--json"], Duration::from_secs(30));
            out.assert_success();
            clean("dump --json", out.stdout.as_bytes());
            out.json_lines();
            for format in FORMATS {
                let mut c = Command::new(pyinspect_bin());
                c.args(["record", "-p", &pid, "-d", "0.5", "-f", format, "-o", "-"]);
                let o = c.output().unwrap();
                assert!(
                    o.status.success(),
                    "{format}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                check_format(format, &o.stdout);
                if format != "pprof" {
                    clean(format, &o.stdout);
                    // JSON writes the backslash of the escape as `\\`.
                    let text = String::from_utf8_lossy(&o.stdout);
                    assert!(
                        text.contains("odd\\x00nul") || text.contains("odd\\\\x00nul"),
                        "{format}"
                    );
                }
            }
            // The eBPF engine's samples, with the threads' names.
            let mut c = Command::new(pyinspect_bin());
            c.args(["record", "-p", &pid, "-d", "1", "-f", "raw", "-o", "-"])
                .args(["--engine", "bpf", "--threads"]);
            let o = c.output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            clean("record --engine bpf", &o.stdout);
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.lines()
                    .any(|l| l.starts_with("thread ") && l.contains("odd\\x00nul")),
                "--engine bpf: {text}"
            );
        },
    );
}

// ------------------------------------------------- messages: churn, kernel thread, zombie

#[test]
fn churn_kernel_threads_and_zombies_are_named_rightly() {
    let _serial = serial();
    let fx = Fixture::spawn(py312(), "hostile.py", &["churn"]);
    let pid = fx.pid.to_string();
    let mut failed = Vec::new();
    for _ in 0..60 {
        let out = run(&["dump", "-p", &pid], Duration::from_secs(30));
        no_crash(&out);
        if !out.status.success() {
            failed.push(out.stderr.clone());
        }
    }
    assert!(
        failed.iter().all(|e| !e.contains("has not started")),
        "{failed:?}"
    );
    assert!(failed.len() <= 1, "{failed:?}");
    // kthreadd is pid 2 where the kernel has one.
    if stat_of("/proc/2/stat").is_some_and(|s| s.contains("(kthreadd)")) {
        let out = run(&["dump", "-p", "2"], Duration::from_secs(30));
        let line = assert_one_clean_error_line(&out);
        assert!(line.contains("kernel thread"), "{line}");
    }
    // A zombie: a child that exited and is not reaped yet.
    let z = Command::new("true").spawn().unwrap();
    let zpid = z.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat_of(&format!("/proc/{zpid}/stat"))
        .as_deref()
        .and_then(state_letter)
        != Some('Z')
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = run(&["dump", "-p", &zpid.to_string()], Duration::from_secs(30));
    let line = assert_one_clean_error_line(&out);
    assert!(line.contains("zombie"), "{line}");
    drop(z);
}

// ---------------------------------------------------------------- capability scope

/// A copy of the binary with cap_sys_ptrace+ep, runnable by nobody.
fn capable_binary(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("pyinspect-cap");
    copy_program(Path::new(pyinspect_bin()), &bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = Command::new("setcap")
        .args(["cap_sys_ptrace+ep"])
        .arg(&bin)
        .status()
        .expect("setcap (apt-get install libcap2-bin)");
    assert!(st.success());
    bin
}

fn nobody(bin: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin)
        .args(args)
        .current_dir("/");
    run_command(c, Duration::from_secs(60))
}

#[test]
fn capability_scope_is_the_invoking_user() {
    let _serial = serial();
    assert!(
        is_root(),
        "this test runs a capable copy as nobody against root's process"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = capable_binary(dir.path());
    // Root's process (Debian's python, whose files nobody may read:
    // the capability does not open root's directories): refused, with the
    // reason and the way out.
    let debian = interpreters()
        .iter()
        .find(|i| i.label.starts_with("debian"))
        .expect("Debian's python3.11");
    let root_fx = Fixture::spawn(debian, "hostile.py", &["spin"]);
    let rp = root_fx.pid.to_string();
    let out = nobody(&bin, &["dump", "-p", &rp]);
    let line = assert_one_clean_error_line(&out);
    assert!(
        line.contains("--allow-any-user") && line.contains("uid 0"),
        "{line}"
    );
    let out = nobody(&bin, &["dump", "-p", &rp, "--locals"]);
    assert_one_clean_error_line(&out);
    // The capability's owner can lift the scope.
    let out = nobody(&bin, &["dump", "-p", &rp, "--allow-any-user"]);
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("spin_forever"), "{}", out.describe());
    // nobody's own process: allowed.
    let mut own = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            &debian_python(),
            "-c",
        ])
        .arg("def own_loop():\n    while True: pass\nprint('READY', flush=True)\nown_loop()\n")
        .current_dir("/")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut l = String::new();
    BufReader::new(own.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .unwrap();
    let out = nobody(&bin, &["dump", "-p", &own.id().to_string()]);
    let _ = own.kill();
    let _ = own.wait();
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("own_loop"), "{}", out.describe());
    // Launch mode: the program gets none of the capability.
    let outdir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outdir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let prof = outdir.path().join("p.txt");
    let out = nobody(
        &bin,
        &[
            "record", "-d", "2", "-f", "raw", "-o", prof.to_str().unwrap(), "--",
            &debian_python(), "-c",
            "import time\nprint(open('/proc/self/status').read(), flush=True)\nt=time.time()\nwhile time.time()-t < 0.5: pass\n",
        ],
    );
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        let v = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{cap}:")))
            .unwrap_or_else(|| panic!("no {cap} line\n{}", out.describe()))
            .trim()
            .to_string();
        assert!(v.chars().all(|c| c == '0'), "{cap} {v}\n{}", out.describe());
    }
}

/// A full file system: one error naming the path and the cause once, no
/// half profile under the name, no temporary file left behind, and an
/// earlier profile at that name kept whole.
#[test]
fn a_full_disk_leaves_no_half_profile() {
    let _serial = serial();
    assert!(is_root(), "this test mounts a small tmpfs");
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12k", "pyinspect-full"])
        .arg(mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.to_path_buf());
    let fx = Fixture::spawn(py312(), "hostile.py", &["spin"]);
    let pid = fx.pid.to_string();
    let out_path = mnt.join("profile.svg");
    std::fs::write(&out_path, "previous profile").unwrap();
    let o = run(
        &[
            "record",
            "-p",
            &pid,
            "-d",
            "0.3",
            "-o",
            out_path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(1), "{}", o.describe());
    let errs: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.contains("No space left"))
        .collect();
    assert_eq!(errs.len(), 1, "{}", o.describe());
    assert!(errs[0].contains(out_path.to_str().unwrap()), "{}", errs[0]);
    assert_eq!(errs[0].matches("No space left").count(), 1, "{}", errs[0]);
    assert_eq!(
        std::fs::read_to_string(&out_path).unwrap(),
        "previous profile"
    );
    let names: Vec<String> = std::fs::read_dir(mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["profile.svg".to_string()],
        "left behind: {names:?}"
    );
}
