//! `pyinspect record` end to end: the real binary against real interpreters.

mod common;
mod common_output;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{fixture, BIN};

/// pyenv's build of `version`: the harness finds it, and fails when it is
/// missing.
fn pyenv(version: (u32, u32)) -> PathBuf {
    common::pyenv(version).python.clone()
}

/// The newest release builds of the matrix (sid's 3.14 and 3.15), for the
/// launch-mode and subprocess tests that otherwise run on 3.12.
fn newest_pythons() -> Vec<PathBuf> {
    [(3, 14), (3, 15)]
        .iter()
        .map(|&v| {
            common::find_interpreter(&format!("a {}.{} release build", v.0, v.1), |i| {
                i.version == v && !i.debug
            })
            .python
            .clone()
        })
        .collect()
}

fn py312() -> PathBuf {
    pyenv((3, 12))
}

struct Recorded {
    out: Output,
    file: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Recorded {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    fn raw(&self) -> Vec<(String, u64)> {
        common_output::raw_stacks(&self.file)
    }
    fn count_with(&self, needle: &str) -> u64 {
        self.raw()
            .iter()
            .filter(|(s, _)| s.contains(needle))
            .map(|(_, c)| c)
            .sum()
    }
}

/// Run `pyinspect record -o <tmp file> <args>` to completion.
fn record(args: &[&str]) -> Recorded {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile");
    let out = Command::new(BIN)
        .arg("record")
        .arg("-o")
        .arg(&path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let file = std::fs::read(&path).unwrap_or_default();
    let r = Recorded {
        out,
        file,
        _dir: dir,
    };
    assert!(!r.stderr().contains("panicked"), "{}", r.stderr());
    r
}

fn launch_args<'a>(python: &'a Path, script: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--", python.to_str().unwrap(), script];
    v.extend_from_slice(rest);
    v
}

/// Check one format's file and return the function-bearing text it holds.
fn read_back(format: &str, bytes: &[u8], ctx: &str) -> String {
    match format {
        "raw" => {
            let stacks = common_output::raw_stacks(bytes);
            assert!(!stacks.is_empty(), "{ctx}");
            stacks
                .into_iter()
                .map(|(s, _)| s)
                .collect::<Vec<_>>()
                .join("\n")
        }
        "flamegraph" => common_output::svg_text(bytes),
        "speedscope" => {
            let (names, busy) = common_output::speedscope(bytes);
            assert!(busy > 0, "{ctx}");
            names.join("\n")
        }
        "chrometrace" => common_output::chrome_trace(bytes).join("\n"),
        "pprof" => {
            let (names, count) = common_output::pprof(bytes);
            assert!(count > 0, "{ctx}");
            names.join("\n")
        }
        "gecko" => {
            let g = common_output::gecko(bytes);
            assert!(g.weights.values().sum::<u64>() > 0, "{ctx}");
            assert!(!g.threads.is_empty(), "{ctx}");
            g.functions.join("\n")
        }
        "html" => {
            let v = common_output::html_data(bytes);
            let frames: Vec<&str> = v["frames"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f.as_str())
                .collect();
            frames.join("\n")
        }
        "heatmap" => {
            let lines = common_output::heatmap(bytes);
            assert!(!lines.is_empty(), "{ctx}");
            // Where the fixture's file is readable here, its text is shown.
            let text = String::from_utf8_lossy(bytes);
            if lines
                .keys()
                .any(|(f, _)| f.ends_with("record_threads.py") && Path::new(f).exists())
            {
                assert!(text.contains("stop.is_set()"), "{ctx}");
            }
            text.into_owned()
        }
        f => panic!("unknown format {f}"),
    }
}

const FORMATS: [&str; 8] = [
    "flamegraph",
    "speedscope",
    "chrometrace",
    "raw",
    "pprof",
    "gecko",
    "html",
    "heatmap",
];

/// The accuracy test measures time shares, which other tests' busy
/// fixtures on the same two cores would distort: it runs alone.
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[test]
fn every_format_reads_back_on_every_required_version() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    // Each version gets two formats (rotating), so every format meets
    // several versions and the suite stays short.
    let threads = fixture("record_threads.py");
    // The whole matrix (a missing interpreter fails in the harness).
    common::for_each_interpreter(
        "every_format_reads_back",
        |_| true,
        |interp| {
            let i = common::interpreters()
                .iter()
                .position(|x| x.label == interp.label)
                .unwrap();
            let python = &interp.python;
            for k in 0..2 {
                let format = FORMATS[(2 * i + k) % FORMATS.len()];
                let mut args = vec!["-f", format, "-r", "200"];
                args.extend(launch_args(python, &threads, &["0.7"]));
                let r = record(&args);
                assert_eq!(
                    r.code(),
                    Some(0),
                    "{} {format}: {}",
                    python.display(),
                    r.stderr()
                );
                let ctx = format!("{} {format}: {}", python.display(), r.stderr());
                let text = read_back(format, &r.file, &ctx);
                for name in ["busy_main", "busy_worker"] {
                    assert!(
                        text.contains(name),
                        "{} {format}: {name} missing\n{}",
                        python.display(),
                        r.stderr()
                    );
                }
                assert!(r.stderr().contains("wrote"), "{}", r.stderr());
            }
        },
    );
}

#[test]
fn smoke_every_installed_version() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let threads = fixture("record_threads.py");
    common::for_each_interpreter(
        "record_smoke",
        |_| true,
        |interp| {
            let python = &interp.python;
            let mut args = vec!["-f", "raw", "-r", "100"];
            args.extend(launch_args(python, &threads, &["0.4"]));
            let r = record(&args);
            assert_eq!(r.code(), Some(0), "{}: {}", python.display(), r.stderr());
            assert!(r.count_with("busy_main") > 0, "{}", python.display());
        },
    );
}

#[test]
fn launched_program_exit_status_is_passed_on() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let mut pythons = vec![
        py312(),
        pyenv((2, 7)),
        common::find_interpreter("Debian's static 3.11 release build", |i| {
            i.label.starts_with("debian ") && i.static_build && !i.debug
        })
        .python
        .clone(),
    ];
    pythons.extend(newest_pythons());
    for python in pythons {
        let threads = fixture("record_threads.py");
        let mut args = vec!["-f", "raw"];
        args.extend(launch_args(&python, &threads, &["0.3", "3"]));
        let r = record(&args);
        assert_eq!(r.code(), Some(3), "{}: {}", python.display(), r.stderr());
        // The profile of what was sampled is still written.
        assert!(r.count_with("busy_main") > 0);
    }
}

#[test]
fn default_output_name_is_program_and_time() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["record", "-f", "raw", "--", py312().to_str().unwrap()])
        .arg(fixture("record_threads.py"))
        .arg("0.3")
        .output()
        .unwrap();
    assert!(out.status.success());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let n = &names[0];
    // record_threads-YYYYmmddTHHMMSS.txt
    assert!(
        n.starts_with("record_threads-") && n.ends_with(".txt"),
        "{n}"
    );
    assert_eq!(n.len(), "record_threads-".len() + 15 + 4, "{n}");
}

/// Wait (bounded) for a `READY ` line on `stdout`, then keep draining it.
fn await_ready(stdout: std::process::ChildStdout, timeout: Duration) {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("READY ") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(timeout)
        .unwrap_or_else(|e| panic!("no READY from the launched fixture within {timeout:?}: {e}"));
}

fn sigint(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

#[test]
fn ctrl_c_writes_the_profile_and_leaves_the_target_running() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let interp = common::find_interpreter("pyenv's 3.12", |i| {
        i.version == (3, 12) && i.label.starts_with("pyenv ")
    });
    let mut target = common::Fixture::spawn(interp, "record_threads.py", &["--ready", "30"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt");
    let rec = Command::new(BIN)
        .args(["record", "-f", "raw", "-r", "500", "-o"])
        .arg(&path)
        .args(["--pid", &target.pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its SIGINT handler set (sent before, SIGINT would kill it), a second
    // of samples.
    common::wait_for_handler(rec.id() as i32, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(1000));
    sigint(rec.id());
    let out = rec.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let stacks = common_output::raw_stacks(&std::fs::read(&path).unwrap());
    assert!(stacks.iter().any(|(s, _)| s.contains("busy_main")));
    // Still running, no thread left stopped (the kernel detached every
    // tracee before pyinspect's exit was reported), and its Python runs.
    assert!(target.child.try_wait().unwrap().is_none());
    common::assert_not_stopped(target.pid);
}

#[test]
fn signal_to_pyinspect_reaches_the_launched_child() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt");
    let mut rec = Command::new(BIN)
        .args(["record", "-f", "raw", "-o"])
        .arg(&path)
        .args(["--", py312().to_str().unwrap()])
        .arg(fixture("record_threads.py"))
        .args(["30", "--ready"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The launched child's stdout is pyinspect's: its READY says Python runs
    // (and will take SIGINT as KeyboardInterrupt); then a few dozen ticks.
    await_ready(rec.stdout.take().unwrap(), Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    sigint(rec.id());
    let out = rec.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The child got SIGINT (KeyboardInterrupt) and exited well before its 30 s.
    assert!(started.elapsed() < Duration::from_secs(8));
    let stacks = common_output::raw_stacks(&std::fs::read(&path).unwrap());
    assert!(
        stacks.iter().any(|(s, _)| s.contains("busy_main")),
        "{stderr}"
    );
}

#[test]
fn subprocesses_follow_multiprocessing_workers() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let mut pythons = vec![py312()];
    pythons.extend(newest_pythons());
    for py in pythons {
        let mut args = vec!["-s", "-f", "raw", "-r", "200"];
        let script = fixture("record_workers.py");
        args.extend(launch_args(&py, &script, &["1.5"]));
        let r = record(&args);
        assert_eq!(r.code(), Some(0), "{}: {}", py.display(), r.stderr());
        let stacks = r.raw();
        let mut worker_pids = std::collections::HashSet::new();
        for (s, _) in &stacks {
            assert!(s.starts_with("process "), "{s}");
            if s.contains("worker_task") {
                let pid: i32 = s["process ".len()..]
                    .split(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                worker_pids.insert(pid);
            }
        }
        assert!(
            worker_pids.len() >= 2,
            "{}: {worker_pids:?}\n{}",
            py.display(),
            r.stderr()
        );
    }
}

#[test]
fn idle_threads_only_with_idle() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let py = py312();
    let script = fixture("record_threads.py");
    let mut args = vec!["-f", "raw", "-r", "200"];
    args.extend(launch_args(&py, &script, &["1"]));
    let r = record(&args);
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert!(r.count_with("busy_main") > 0);
    assert!(r.count_with("busy_worker") > 0);
    // A thread sleeping in the kernel is idle; only a rare sample catches
    // it between sleeps.
    // On a loaded machine a thread just woken waits runnable (R) for a CPU,
    // which the kernel reports as running: allow for that.
    let (sleeping, busy) = (r.count_with("sleeping_worker"), r.count_with("busy_main"));
    assert!(sleeping * 3 < busy, "{sleeping} {busy}");

    let mut args = vec!["-i", "-f", "raw", "-r", "200"];
    args.extend(launch_args(&py, &script, &["1"]));
    let r = record(&args);
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert!(r.count_with("sleeping_worker") * 2 > r.count_with("busy_main"));
}

#[test]
fn gil_keeps_only_the_holder() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let py = py312();
    let script = fixture("record_threads.py");
    let mut args = vec!["-g", "-t", "-f", "raw", "-r", "200", "-d", "1"];
    args.extend(launch_args(&py, &script, &["3"]));
    let gil = record(&args);
    let mut args = vec!["-i", "-t", "-f", "raw", "-r", "200", "-d", "1"];
    args.extend(launch_args(&py, &script, &["3"]));
    let all = record(&args);
    let total = |r: &Recorded| r.raw().iter().map(|(_, c)| c).sum::<u64>();
    // At most one thread per tick with --gil: 200 ticks expected in 1 s
    // (Poisson, so a few more at most), where all threads would give 600.
    // The sleeper does take the GIL each time it wakes (20 times a
    // second), and holds it until its `time.sleep` call returns; on a busy
    // machine the kernel can preempt it there. So a tick rarely, and
    // truthfully, finds it the holder (1 run in about 15 under load, at
    // `time.sleep`'s line); never more than a sliver of the samples, where
    // without --gil it has a third of them.
    let sleeping = gil.count_with("sleeping_worker");
    assert!(
        sleeping * 50 <= total(&gil),
        "{sleeping} of {}",
        total(&gil)
    );
    assert!(gil.count_with("busy_main") > 0 && gil.count_with("busy_worker") > 0);
    assert!(total(&gil) <= 270, "{}", total(&gil));
    assert!(all.count_with("sleeping_worker") > 0);
}

#[test]
fn function_mode_reports_first_lines() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let py = py312();
    let script = fixture("record_threads.py");
    let mut args = vec!["-F", "-f", "raw", "-r", "200"];
    args.extend(launch_args(&py, &script, &["0.5"]));
    let r = record(&args);
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    let source = std::fs::read_to_string(&script).unwrap();
    let def = 1 + source
        .lines()
        .position(|l| l.starts_with("def busy_main"))
        .unwrap();
    let want = format!("busy_main (record_threads.py:{def})");
    let leaves: Vec<String> = r
        .raw()
        .into_iter()
        .filter_map(|(s, _)| s.rsplit(';').next().map(str::to_string))
        .filter(|l| l.starts_with("busy_main"))
        .collect();
    assert!(!leaves.is_empty());
    assert!(leaves.iter().all(|l| *l == want), "{leaves:?}");
}

#[test]
fn hot_function_share_is_accurate() {
    let _alone = ALONE.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt");
    let out = Command::new(BIN)
        .args(["record", "-f", "raw", "-r", "1000", "-o"])
        .arg(&path)
        .args(["--", py312().to_str().unwrap()])
        .arg(fixture("record_hot.py"))
        .arg("4")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("true_share "))
        .expect("the fixture prints its share")
        .trim()
        .parse()
        .unwrap();
    let stacks = common_output::raw_stacks(&std::fs::read(&path).unwrap());
    let count = |f: &str| -> u64 {
        stacks
            .iter()
            .filter(|(s, _)| s.contains(f))
            .map(|(_, c)| c)
            .sum()
    };
    let (hot, cold) = (count("hot_function"), count("cold_function"));
    assert!(hot + cold > 1000, "{hot} {cold}");
    let share = hot as f64 / (hot + cold) as f64;
    assert!(
        (share - truth).abs() <= 0.02,
        "sampled {share:.4}, true {truth:.4}"
    );
}

fn assert_fails(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("record")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("pyinspect: ") || first.starts_with("error: "),
        "{args:?}: {stderr}"
    );
    stderr
}

/// `10k` and `10khz` are rates; a rate no machine holds (100 kHz: a read
/// takes longer than the 10 µs interval) is delivered as far as it goes and
/// the summary says it was not held, and why.
#[test]
fn rate_suffixes_and_a_rate_that_cannot_be_held() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let threads = fixture("record_threads.py");
    let py = py312();
    for rate in ["2.5k", "1khz"] {
        let mut args = vec!["-f", "raw", "-r", rate, "--nonblocking"];
        args.extend(launch_args(&py, &threads, &["0.5"]));
        let r = record(&args);
        assert_eq!(r.code(), Some(0), "{rate}: {}", r.stderr());
        assert!(!r.raw().is_empty(), "{rate}");
    }
    let mut args = vec!["-f", "raw", "-r", "100k", "--nonblocking", "-i"];
    args.extend(launch_args(&py, &threads, &["1.5"]));
    let r = record(&args);
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    let line = r
        .stderr()
        .lines()
        .find(|l| l.contains("the asked rate was not held"))
        .unwrap_or_else(|| panic!("no rate note\n{}", r.stderr()))
        .to_string();
    assert!(line.contains("of 100.0 kHz"), "{line}");
    assert!(
        ["machine load", "target size", "CPU"]
            .iter()
            .any(|c| line.contains(&format!("because of {c}"))),
        "{line}"
    );
}

#[test]
fn bad_input_is_one_clear_line() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let py = py312();
    let py = py.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("x.txt");
    let o = o.to_str().unwrap();
    for rate in ["0", "-5", "1e9", "abc", "nan", "200k", "10kk", "k", "5 mhz"] {
        let e = assert_fails(&["-r", rate, "-o", o, "--", py, "-c", "pass"]);
        assert!(e.contains("rate"), "{e}");
    }
    for d in ["abc", "0", "-1"] {
        let e = assert_fails(&["-d", d, "-o", o, "--", py, "-c", "pass"]);
        assert!(e.contains("duration"), "{e}");
    }
    let e = assert_fails(&["-f", "gif", "-o", o, "--", py, "-c", "pass"]);
    assert!(e.contains("gif"), "{e}");

    // An unwritable output fails before the program is launched.
    let marker = dir.path().join("ran");
    let code = format!("open({:?}, 'w')", marker.to_str().unwrap());
    for bad in ["/nonexistent-dir/x.svg", "/proc/x.svg", "/"] {
        let e = assert_fails(&["-o", bad, "--", py, "-c", &code]);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("cannot write"), "{e}");
    }
    assert!(!marker.exists());

    let e = assert_fails(&["-o", o, "--", "/nonexistent/program", "x"]);
    assert!(e.contains("cannot launch"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");

    // A pid that is gone before sampling starts.
    let mut c = Command::new("true").spawn().unwrap();
    let gone = c.id().to_string();
    c.wait().unwrap();
    let e = assert_fails(&["-o", o, "--pid", &gone]);
    assert_eq!(e.lines().count(), 1, "{e}");

    assert_fails(&["-o", o]);
    let e = assert_fails(&["--nonblocking", "--native", "-o", o, "--", py, "-c", "pass"]);
    assert!(e.contains("--native"), "{e}");
    // Nothing left behind by failed runs.
    assert!(!Path::new(o).exists());
}

#[test]
fn a_non_python_pid_is_refused_quickly() {
    let _shared = ALONE.read().unwrap_or_else(|e| e.into_inner());
    let mut sleeper = Command::new("sleep").arg("10").spawn().unwrap();
    let started = Instant::now();
    let e = assert_fails(&[
        "-f",
        "raw",
        "-o",
        "/tmp/pyinspect-np.txt",
        "--pid",
        &sleeper.id().to_string(),
    ]);
    assert!(e.contains("not a Python process"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let pid = sleeper.id() as i32;
    let state = common::stat_state(pid, pid);
    assert!(matches!(state, Some('S' | 'R')), "{state:?}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

/// The voluntary context switches of a process's main thread: each ptrace
/// stop is one.
fn voluntary_switches(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// A thread whose frames stand still (a loop without calls) is read while
/// it runs, each read checked by a second: it is not stopped at each
/// sample, where `--native`, which needs its registers, stops it each time.
/// Its stacks are the same either way. On every interpreter, as the check
/// walks each version's frames.
#[test]
fn a_thread_whose_frames_stand_still_is_not_stopped_each_sample() {
    let _alone = ALONE.write().unwrap_or_else(|e| e.into_inner());
    common::for_each_interpreter(
        "unstopped_reads",
        |_| true,
        |interp| {
            let fx = common::Fixture::spawn(interp, "hostile.py", &["spin"]);
            let pid = fx.pid.to_string();
            let dir = tempfile::tempdir().unwrap();
            let (mut switches, mut samples) = (Vec::new(), Vec::new());
            for extra in [&[][..], &["--native"][..]] {
                let path = dir.path().join("p.txt");
                let before = voluntary_switches(fx.pid);
                let out = Command::new(BIN)
                    .args([
                        "record", "-p", &pid, "-r", "500", "-d", "0.6", "-f", "raw", "-o",
                    ])
                    .arg(&path)
                    .args(extra)
                    .output()
                    .unwrap();
                let label = &interp.label;
                assert!(
                    out.status.success(),
                    "{label}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                switches.push(voluntary_switches(fx.pid) - before);
                let stacks = common_output::raw_stacks(&std::fs::read(&path).unwrap());
                let total: u64 = stacks.iter().map(|(_, c)| c).sum();
                let spinning: u64 = stacks
                    .iter()
                    .filter(|(s, _)| s.contains("spin_forever"))
                    .map(|(_, c)| c)
                    .sum();
                // --native unwinds each sample: few of them in a debug build
                // of ours on a debug interpreter (12 in 0.6 s, loaded).
                assert!(total >= 10, "{label} {extra:?}: {total} samples");
                assert!(
                    spinning * 10 >= total * 9,
                    "{label} {extra:?}: {spinning} of {total}"
                );
                samples.push(total);
            }
            eprintln!(
                "unstopped_reads [{}]: voluntary switches {} in {} samples, {} in {} with --native",
                interp.label, switches[0], samples[0], switches[1], samples[1]
            );
            // Each --native sample stops the thread.
            assert!(
                switches[1] * 2 >= samples[1],
                "{}: {switches:?} {samples:?}",
                interp.label
            );
            // Without it, most samples stop nothing. Some checks fail (2.7
            // drops and takes the GIL every 100 instructions once threads
            // exist, so its holder can read empty), and each failure stops
            // a few samples.
            assert!(
                switches[0] * 4 < samples[0],
                "{}: {switches:?} {samples:?}",
                interp.label
            );
        },
    );
}
