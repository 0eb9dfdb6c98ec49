//! Harness shared by the integration tests: the interpreters to test against,
//! the Python fixtures (spawned, waited for, killed on drop), and the binary.
//!
//! Every test crate uses a different part of this module, hence the allow.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The CPython versions every run must cover: a missing one fails the suite
/// rather than shrinking it silently.
const REQUIRED_PYENV: &[(u32, u32)] = &[
    (2, 7),
    (3, 6),
    (3, 7),
    (3, 8),
    (3, 9),
    (3, 10),
    (3, 11),
    (3, 12),
    (3, 13),
];
/// Debian bookworm's statically linked, stripped, non-PIE build, and its
/// debug build (apt package python3.11-dbg, which also brings the debug
/// file of the first under /usr/lib/debug).
const DEBIAN_PYTHONS: &[(&str, &str)] = &[
    ("/usr/bin/python3.11", "apt-get install python3.11"),
    ("/usr/bin/python3.11d", "apt-get install python3.11-dbg"),
];
/// Debian sid's builds, installed by `.ci/sid-pythons` under
/// `$PYINSPECT_SID/root` (default /opt/pyinspect-sid): copies of the stock
/// binaries patched to run on this host, whose debug files are not on it.
const SID_VERSIONS: &[&str] = &["3.13", "3.14", "3.15"];

#[derive(Debug, Clone)]
pub struct Interpreter {
    /// e.g. "pyenv 3.12.1", "debian 3.11.2 (static)", "sid 3.14.10d (static, debug)".
    pub label: String,
    pub python: PathBuf,
    /// (major, minor).
    pub version: (u32, u32),
    /// `platform.python_version()`, e.g. "3.14.10".
    pub full_version: String,
    /// A `Py_DEBUG` build (`python3.Xd`).
    pub debug: bool,
    /// The interpreter lives in the executable: no libpython is mapped.
    pub static_build: bool,
    /// The ELF file holding the interpreter has its symbol table here: its
    /// own `.symtab`, or a debug file under /usr/lib/debug/.build-id. Without
    /// one, its static functions (most of the eval loop) have no names.
    pub symbols: bool,
    /// That ELF file carries its own DWARF (`.debug_info`), as pyenv's builds
    /// do; stripped ones have it only in a separate debug file, if at all.
    pub own_dwarf: bool,
    /// That ELF file (libpython or the executable).
    pub interpreter_file: PathBuf,
}

impl Interpreter {
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        self.version >= (major, minor)
    }
}

fn pyenv_root() -> PathBuf {
    if let Ok(out) = Command::new("pyenv").arg("root").output() {
        let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !root.is_empty() {
            return PathBuf::from(root);
        }
    }
    if let Some(root) = std::env::var_os("PYENV_ROOT") {
        return PathBuf::from(root);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set and `pyenv root` failed");
    Path::new(&home).join(".pyenv")
}

/// Where `.ci/sid-pythons` installs Debian sid's interpreters.
pub fn sid_root() -> PathBuf {
    std::env::var_os("PYINSPECT_SID")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/pyinspect-sid"))
        .join("root")
}

/// What the interpreter says of itself (2.7-compatible): version, whether
/// it is a debug build, and the file its interpreter code is in.
fn describe(python: &Path) -> (u32, u32, String, bool, PathBuf) {
    let code = "import os, platform, sys\n\
                f = open('/proc/self/maps')\n\
                libs = [l.split()[-1] for l in f if 'libpython' in l.split()[-1]]\n\
                f.close()\n\
                sys.stdout.write('%d %d %s %d\\n%s\\n' % (sys.version_info[0], sys.version_info[1], \
                platform.python_version(), hasattr(sys, 'gettotalrefcount'), \
                libs and libs[0] or os.path.realpath(sys.executable)))\n";
    let out = Command::new(python)
        .args(["-c", code])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = text.lines();
    let mut parts = lines.next().unwrap_or("").split_whitespace();
    let mut next = || {
        parts
            .next()
            .unwrap_or_else(|| panic!("bad version output {text:?}"))
            .to_string()
    };
    let major = next().parse().expect("major");
    let minor = next().parse().expect("minor");
    let full = next();
    let debug = next() == "1";
    let file = PathBuf::from(lines.next().expect("interpreter file"));
    (major, minor, full, debug, file)
}

/// Whether an ELF file's symbols can be had here: its own `.symtab`, or the
/// debug file its build id names under /usr/lib/debug.
/// (symbols, own DWARF): see [`Interpreter::symbols`] and [`Interpreter::own_dwarf`].
fn has_symbols(file: &Path) -> (bool, bool) {
    use object::{Object, ObjectSection};
    let Ok(data) = std::fs::read(file) else {
        return (false, false);
    };
    let Ok(elf) = object::File::parse(&*data) else {
        return (false, false);
    };
    let own_dwarf = elf
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0);
    if elf.section_by_name(".symtab").is_some_and(|s| s.size() > 0) {
        return (true, own_dwarf);
    }
    let Ok(Some(id)) = elf.build_id() else {
        return (false, own_dwarf);
    };
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let debug_file = hex.len() > 2
        && Path::new(&format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ))
        .exists();
    (debug_file, own_dwarf)
}

fn interpreter(origin: &str, python: PathBuf) -> Interpreter {
    let (major, minor, full, debug, file) = describe(&python);
    let static_build = !file
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libpython"));
    let (symbols, own_dwarf) = has_symbols(&file);
    let mut facts = Vec::new();
    if static_build {
        facts.push("static");
    }
    if debug {
        facts.push("debug");
    }
    if !symbols {
        facts.push("no symbols");
    }
    let label = if facts.is_empty() || origin == "pyenv" {
        format!("{origin} {full}{}", if debug { "d" } else { "" })
    } else {
        format!(
            "{origin} {full}{} ({})",
            if debug { "d" } else { "" },
            facts.join(", ")
        )
    };
    Interpreter {
        label,
        python,
        version: (major, minor),
        full_version: full,
        debug,
        static_build,
        symbols,
        own_dwarf,
        interpreter_file: file,
    }
}

fn discover() -> Vec<Interpreter> {
    let versions = pyenv_root().join("versions");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&versions)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", versions.display()))
        .map(|entry| entry.expect("read_dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut found = Vec::new();
    for dir in dirs {
        let python = dir.join("bin/python");
        assert!(
            python.exists(),
            "{} has no bin/python: a broken pyenv version?",
            dir.display()
        );
        found.push(interpreter("pyenv", python));
    }
    let have: BTreeSet<(u32, u32)> = found.iter().map(|i| i.version).collect();
    let missing: Vec<String> = REQUIRED_PYENV
        .iter()
        .filter(|v| !have.contains(v))
        .map(|(a, b)| format!("{a}.{b}"))
        .collect();
    assert!(
        missing.is_empty(),
        "pyenv versions missing under {}: {} (install them with `pyenv install`; the suite never skips an interpreter)",
        versions.display(),
        missing.join(", ")
    );
    let mut absent = Vec::new();
    for (path, fix) in DEBIAN_PYTHONS {
        let python = PathBuf::from(path);
        if python.exists() {
            found.push(interpreter("debian", python));
        } else {
            absent.push(format!("{path} ({fix})"));
        }
    }
    let sid = sid_root().join("usr/bin");
    for v in SID_VERSIONS {
        for flavour in ["", "d"] {
            let python = sid.join(format!("python{v}{flavour}-hosted"));
            if python.exists() {
                found.push(interpreter("sid", python));
            } else {
                absent.push(format!("{} (run .ci/sid-pythons)", python.display()));
            }
        }
    }
    assert!(
        absent.is_empty(),
        "interpreters missing: {} (the suite never skips an interpreter)",
        absent.join(", ")
    );
    found.sort_by(|a, b| (a.version, &a.label).cmp(&(b.version, &b.label)));
    eprintln!(
        "interpreters covered ({}): {}",
        found.len(),
        found
            .iter()
            .map(|i| format!("{} ({})", i.label, i.python.display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    found
}

/// Every interpreter the tests must cover; fails when an expected one is missing.
pub fn interpreters() -> &'static [Interpreter] {
    static ALL: OnceLock<Vec<Interpreter>> = OnceLock::new();
    ALL.get_or_init(discover)
}

/// pyenv's build of `version` (its shared libpython, with symbols).
pub fn pyenv(version: (u32, u32)) -> &'static Interpreter {
    find_interpreter(&format!("pyenv's {}.{}", version.0, version.1), |i| {
        i.version == version && i.label.starts_with("pyenv ")
    })
}

/// The first interpreter of the matrix that `select` keeps; fails when none.
pub fn find_interpreter(what: &str, select: impl Fn(&Interpreter) -> bool) -> &'static Interpreter {
    interpreters()
        .iter()
        .find(|i| select(i))
        .unwrap_or_else(|| panic!("no interpreter in the matrix is {what}"))
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "(non-string panic)".to_string()
    }
}

/// Runs `check` for every interpreter that `select` keeps, a few at a time,
/// and fails with every interpreter's failure at once. Prints a summary line.
pub fn for_each_interpreter<S, F>(test: &str, select: S, check: F)
where
    S: Fn(&Interpreter) -> bool,
    F: Fn(&Interpreter) + Sync,
{
    let chosen: Vec<&Interpreter> = interpreters().iter().filter(|i| select(i)).collect();
    assert!(!chosen.is_empty(), "{test}: no interpreter selected");
    // Two cores here, and some fixtures keep one busy: more jobs only contend.
    let jobs = std::env::var("PYINSPECT_TEST_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(2)
        .max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(String, Option<String>)>> = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..jobs.min(chosen.len()) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(interp) = chosen.get(index) else {
                    break;
                };
                let started = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| check(interp)));
                let failure = outcome.err().map(|p| panic_text(p.as_ref()));
                eprintln!(
                    "{test} [{}]: {} in {:.1?}",
                    interp.label,
                    if failure.is_some() { "FAILED" } else { "ok" },
                    started.elapsed()
                );
                results
                    .lock()
                    .unwrap()
                    .push((interp.label.clone(), failure));
            });
        }
    });
    let results = results.into_inner().unwrap();
    let passed: Vec<&str> = results
        .iter()
        .filter(|(_, f)| f.is_none())
        .map(|(l, _)| l.as_str())
        .collect();
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(l, f)| f.as_ref().map(|f| format!("[{l}] {f}")))
        .collect();
    eprintln!(
        "{test}: {}/{} interpreters passed: {}",
        passed.len(),
        results.len(),
        passed.join(", ")
    );
    assert!(
        failed.is_empty(),
        "{test} failed on {} interpreter(s):\n{}",
        failed.len(),
        failed.join("\n\n")
    );
}

/// `python_fixtures/<name>` (the C fixtures' sources are under `native/`).
pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python_fixtures")
        .join(name)
}

/// [`fixture_path`] as a command-line argument.
pub fn fixture(name: &str) -> String {
    fixture_path(name).display().to_string()
}

/// A running fixture, killed with its whole process group (children included)
/// when dropped.
pub struct Fixture {
    pub child: Child,
    pub pid: i32,
    /// The JSON of the fixture's READY line.
    pub ready: Value,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    pub label: String,
}

fn collect_stderr(stream: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buffer = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&buffer);
    thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            sink.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    buffer
}

impl Fixture {
    /// Starts `python_fixtures/<name>` with `interp` and waits (bounded) for READY.
    pub fn spawn(interp: &Interpreter, name: &str, args: &[&str]) -> Fixture {
        Self::spawn_with_timeout(interp, name, args, Duration::from_secs(20))
    }

    pub fn spawn_with_timeout(
        interp: &Interpreter,
        name: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Fixture {
        let mut command = Command::new(&interp.python);
        command
            .arg(fixture_path(name))
            .args(args)
            .current_dir(fixture_path(""))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that drop kills its children too.
            .process_group(0);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} with {}: {e}", interp.label));
        let pid = child.id() as i32;
        let stderr = collect_stderr(child.stderr.take().unwrap());
        let (tx, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut fixture = Fixture {
            child,
            pid,
            ready: Value::Null,
            lines,
            stderr,
            label: format!("{name} on {}", interp.label),
        };
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match fixture.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(json) = line.strip_prefix("READY ") {
                        fixture.ready = serde_json::from_str(json).unwrap_or_else(|e| {
                            panic!("{}: bad READY line ({e}): {json}", fixture.label)
                        });
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no READY within {timeout:?}; stderr:\n{}",
                    fixture.label,
                    fixture.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    // Let the stderr reader catch up with the exit.
                    let _ = fixture.child.wait();
                    thread::sleep(Duration::from_millis(100));
                    panic!(
                        "{}: exited before READY; stderr:\n{}",
                        fixture.label,
                        fixture.stderr()
                    )
                }
            }
        }
        assert_eq!(
            fixture.ready["pid"].as_i64(),
            Some(pid as i64),
            "{}: READY names another pid",
            fixture.label
        );
        fixture
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends `signal` and returns the first line the fixture then prints
    /// that starts with `prefix` (the rest of it), bounded in time.
    #[allow(dead_code)]
    pub fn ask(&self, signal: i32, prefix: &str) -> String {
        self.ask_within(signal, prefix, Duration::from_secs(10))
    }

    /// [`Fixture::ask`], for an answer that takes up to `limit` (a debug
    /// build's work on a loaded machine).
    #[allow(dead_code)]
    pub fn ask_within(&self, signal: i32, prefix: &str, limit: Duration) -> String {
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        let rc = unsafe { libc::kill(self.pid, signal) };
        assert_eq!(rc, 0, "{}: kill({signal}) failed", self.label);
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => panic!(
                    "{}: no {prefix} line after signal {signal}; stderr:\n{}",
                    self.label,
                    self.stderr()
                ),
            }
        }
    }

    /// Sends SIGUSR1 and waits for the fixture's PONG: it still runs Python code.
    pub fn ping(&self) {
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        let rc = unsafe { libc::kill(self.pid, libc::SIGUSR1) };
        assert_eq!(rc, 0, "{}: kill(SIGUSR1) failed", self.label);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line == "PONG" => return,
                Ok(_) => continue,
                Err(_) => panic!(
                    "{}: no PONG after SIGUSR1: the target no longer runs Python code; stderr:\n{}",
                    self.label,
                    self.stderr()
                ),
            }
        }
    }

    /// The target survived whatever was done to it: alive, no thread stopped,
    /// and its Python code still runs.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{}: exited ({status}); stderr:\n{}",
                self.label,
                self.stderr()
            );
        }
        assert_not_stopped(self.pid);
        self.ping();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the fixture's own process group.
        unsafe {
            libc::kill(-self.pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A fixture's READY for a test that cannot read its stdout: a program that
/// `pyinspect record -- ...` launches, or that a shell script starts.
/// `fixture_util.ready()` also writes its READY line into the file that
/// the environment variable [`ReadyFile::ENV`] names; give the fixture that
/// variable with [`ReadyFile::env`].
pub struct ReadyFile {
    dir: tempfile::TempDir,
}

impl ReadyFile {
    pub const ENV: &'static str = "PYINSPECT_READY_FILE";

    pub fn new() -> ReadyFile {
        ReadyFile {
            dir: tempfile::tempdir().expect("a directory for the ready file"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("ready")
    }

    /// The variable to set in the fixture's environment.
    pub fn env(&self) -> (&'static str, PathBuf) {
        (Self::ENV, self.path())
    }
}

/// Seconds a launched fixture is READY before its recording's end, at the
/// least, in a run that [`until_ready_before_the_end`] keeps: 25 samples at
/// the default rate.
pub const READY_MARGIN: f64 = 0.25;

/// Runs `attempt(ready_file, seconds)`, a run that ends a fixture it
/// launched after `seconds` (`record -d SECONDS -- python fixture.py`, which
/// then sends SIGINT), until the fixture was READY [`READY_MARGIN`] before
/// the end; returns that run's result and its seconds. Such a test cannot
/// wait for READY before the end comes: a cold interpreter (a debug build's
/// first start, 1 to 4 s on a loaded machine) may still be importing, its
/// handlers not set. The end comes `seconds` after the launch or later, so
/// a READY that the margin's time is left to is sampled as READY says. A
/// fixture that is not ready when the end comes writes no ready file
/// (SIGINT ends it on the way). A run that is not so proves nothing of what
/// the test checks, and runs again with twice the seconds (four times at
/// most).
pub fn until_ready_before_the_end<T>(
    first: f64,
    mut attempt: impl FnMut(&ReadyFile, f64) -> T,
) -> (T, f64) {
    let mut seconds = first;
    for _ in 0..5 {
        let ready = ReadyFile::new();
        let started = std::time::SystemTime::now();
        let result = attempt(&ready, seconds);
        let after = std::fs::metadata(ready.path())
            .and_then(|m| m.modified())
            .ok()
            .map(|at| at.duration_since(started).unwrap_or_default().as_secs_f64());
        match after {
            Some(after) if after + READY_MARGIN <= seconds => return (result, seconds),
            Some(after) => eprintln!(
                "the fixture was READY only {after:.2} s after its launch, for a run of {seconds} s: again, twice as long"
            ),
            None => eprintln!("the fixture was not READY within {seconds} s: again, twice as long"),
        }
        seconds *= 2.0;
    }
    panic!(
        "the fixture was never READY {READY_MARGIN} s before the end of {} s",
        seconds / 2.0
    );
}

/// Waits (bounded) until process `pid` handles `signal` itself (SigCgt in
/// its /proc status): sent before, the signal meets its default action,
/// which ends the process. For signalling pyinspect (its SIGINT handler) or
/// a process whose READY the test cannot read.
pub fn wait_for_handler(pid: i32, signal: i32) {
    let caught = || -> Option<bool> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
        let mask = u64::from_str_radix(mask.trim(), 16).ok()?;
        Some(mask & (1u64 << (signal - 1)) != 0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while caught() != Some(true) {
        assert!(
            Instant::now() < deadline,
            "process {pid} never set a handler for signal {signal}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// The scheduler state letter of thread `tid` of `pid` (R, S, D, T, t, Z…),
/// or None when it is gone: pyinspect's own stat parser.
pub fn stat_state(pid: i32, tid: i32) -> Option<char> {
    pyinspect::procfs::thread_state(pid, tid)
}

/// Fails when any thread of `pid` is stopped (by a signal or by ptrace).
pub fn assert_not_stopped(pid: i32) {
    let state = stat_state(pid, pid);
    assert!(state.is_some(), "process {pid} is gone");
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("cannot list threads of {pid}: {e}"));
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let state = stat_state(pid, tid);
        assert!(
            !matches!(state, Some('t') | Some('T')),
            "thread {} of {pid} left stopped (state {state:?})",
            task.file_name().to_string_lossy()
        );
    }
}

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The command line, for messages.
    pub command: String,
}

impl Output {
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.status, self.stdout, self.stderr
        )
    }

    pub fn assert_success(&self) -> &Self {
        assert!(self.status.success(), "{}", self.describe());
        self
    }

    /// One JSON value per non-empty line of stdout.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{}", self.describe()))
            })
            .collect()
    }
}

/// The pyinspect binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_pyinspect");

/// A JSON value's text, or "" when it is not a string.
pub fn json_str(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

pub fn pyinspect_bin() -> &'static str {
    BIN
}

/// Runs a command to completion with a time limit, capturing its output.
pub fn run_command(mut command: Command, timeout: Duration) -> Output {
    let description = format!("{command:?}");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {description}: {e}"));
    let mut stdout_pipe = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stdout_reader = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout_pipe.read_to_end(&mut bytes);
        bytes
    });
    let stderr_reader = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{description} did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: String::from_utf8_lossy(&stdout_reader.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&stderr_reader.join().unwrap()).into_owned(),
        command: description,
    }
}

/// Runs `pyinspect ARGS`.
pub fn pyinspect(args: &[&str]) -> Output {
    let mut command = Command::new(pyinspect_bin());
    command.args(args);
    run_command(command, Duration::from_secs(60))
}

/// Runs `pyinspect dump --pid PID --json EXTRA...`, requires success and
/// returns one JSON object per process.
pub fn dump_json(pid: i32, extra: &[&str]) -> Vec<Value> {
    let pid = pid.to_string();
    let mut args = vec!["dump", "--pid", pid.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = pyinspect(&args);
    out.assert_success();
    let lines = out.json_lines();
    assert!(!lines.is_empty(), "no JSON output\n{}", out.describe());
    lines
}

/// `dump --no-async` of PID shows no thread with `key` (tasks, greenlets…).
pub fn assert_no_async_reads_no(pid: i32, key: &str) {
    let p = &dump_json(pid, &["--no-async"])[0];
    let threads = p["threads"].as_array().unwrap();
    assert!(
        threads.iter().all(|t| t.get(key).is_none()),
        "{key} with --no-async\n{p:#}"
    );
}

/// `record`'s flags for every waiting task's and suspended greenlet's stack
/// beside the threads', each under a root of its own, in wall time, on
/// `engine`.
pub fn wall_async_all(engine: &str) -> [&str; 8] {
    [
        "--mode",
        "wall",
        "--async",
        "--async-mode",
        "all",
        "--threads",
        "--engine",
        engine,
    ]
}

/// `record --pid PID ARGS --format raw` into a file of its own: the
/// collapsed stacks it wrote (the record must succeed).
pub fn record_raw(pid: i32, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let (pid, out) = (pid.to_string(), path.display().to_string());
    let mut argv = vec!["record", "--pid", pid.as_str()];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--format", "raw", "--output", out.as_str()]);
    pyinspect(&argv).assert_success();
    std::fs::read_to_string(&path).unwrap()
}

/// Checks that stderr is exactly one line `pyinspect: ...` with no panic or
/// backtrace, and returns that line.
pub fn assert_one_clean_error_line(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure\n{}",
        out.describe()
    );
    // 101 is Rust's exit status for a panic; signals mean a crash.
    assert_ne!(out.status.code(), Some(101), "panicked\n{}", out.describe());
    assert!(
        out.status.code().is_some(),
        "killed by a signal\n{}",
        out.describe()
    );
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !out.stderr.contains(bad),
            "stderr contains {bad:?}\n{}",
            out.describe()
        );
    }
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one line on stderr\n{}",
        out.describe()
    );
    assert!(
        lines[0].starts_with("pyinspect: "),
        "the error line must start with `pyinspect: `\n{}",
        out.describe()
    );
    lines[0].to_string()
}

/// A C fixture's source: `python_fixtures/native/<name>`.
pub fn native_source(name: &str) -> String {
    fixture(&format!("native/{name}"))
}

/// This test binary's built C fixtures: a directory under the target's
/// tmp dir, made and filled by `build` once per test binary (the first
/// caller builds, the others wait), and kept for a look after a failure.
pub fn built_fixtures(prefix: &str, build: impl FnOnce(&Path)) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a directory for the built fixtures")
            .keep();
        build(&dir);
        dir
    })
}

/// Run a build tool (gcc, strip, objcopy, ...) for a fixture; a failure
/// fails the test with the tool's own message.
pub fn run_build_tool(cmd: &mut Command) {
    let out = cmd.output().expect("run build tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The directory holding libnames.so (python_fixtures/native/names_fixture.cpp:
/// C++ frames with long demangled names), built once per test binary for
/// python_fixtures/native/names.py. Symbols and DWARF kept; no sibling
/// calls, so that each of its functions keeps its frame.
pub fn names_fixture_lib() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("native-names-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("tempdir")
            .keep();
        run_build_tool(
            Command::new("g++")
                .args([
                    "-O2",
                    "-g",
                    "-fno-optimize-sibling-calls",
                    "-shared",
                    "-fPIC",
                    "-o",
                ])
                .arg(dir.join("libnames.so"))
                .arg(fixture_path("native/names_fixture.cpp")),
        );
        dir
    })
}

/// The function of `lib` (an unstripped build) whose code holds `offset`,
/// by its symbol table (nm): what a stripped build's module+offset frame
/// should be.
pub fn offline_name(lib: &Path, offset: u64) -> String {
    let out = Command::new("nm").arg(lib).output().expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut best: Option<(u64, String)> = None;
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let (Some(a), Some(k), Some(n)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if !matches!(k, "t" | "T") {
            continue;
        }
        let Ok(a) = u64::from_str_radix(a, 16) else {
            continue;
        };
        if a <= offset && best.as_ref().is_none_or(|(b, _)| a > *b) {
            best = Some((a, n.to_string()));
        }
    }
    best.map(|b| b.1).unwrap_or_default()
}

/// A copy of the program `from` at `to`, ready to run. The copy is written
/// by a `cp` child, never by this process: a test thread that forks while
/// this process held the copy open for writing would pass that descriptor
/// to its child until the child's exec, and running the copy in that window
/// fails with ETXTBSY ("Text file busy"), as it did in CI.
#[allow(dead_code)]
pub fn copy_program(from: &Path, to: &Path) {
    let out = run_command(
        {
            let mut c = Command::new("cp");
            c.arg("--").arg(from).arg(to);
            c
        },
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "cp {} {}\n{}",
        from.display(),
        to.display(),
        out.describe()
    );
}

/// `gcore -o DIR/core PID` (gdb's, installed by `.ci/core-deps`): the path
/// of the core it wrote.
#[allow(dead_code)]
pub fn gcore(pid: i32, dir: &Path) -> PathBuf {
    let base = dir.join("core");
    let mut c = Command::new("gcore");
    c.arg("-o").arg(&base).arg(pid.to_string());
    let out = run_command(c, Duration::from_secs(180));
    let path = PathBuf::from(format!("{}.{pid}", base.display()));
    assert!(
        out.status.success() && path.exists(),
        "gcore (gdb, installed by .ci/core-deps) failed\n{}",
        out.describe()
    );
    path
}

/// One HTTP/1.1 GET to a fixture's server on 127.0.0.1, which must answer
/// 200: the answer's body, trimmed.
#[allow(dead_code)]
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "GET {path}: {answer}");
    answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The directories holding `python`'s C headers (Python.h, pyconfig.h), as
/// its sysconfig says (2.7-compatible code), with the one above the first:
/// Debian's pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>.
#[allow(dead_code)]
pub fn c_include_dirs(python: &Path) -> Result<Vec<PathBuf>, String> {
    let code = "import sys, sysconfig\n\
                p = sysconfig.get_paths()\n\
                sys.stdout.write('%s\\n%s\\n' % (p['include'], p['platinclude']))\n";
    let out = Command::new(python)
        .args(["-c", code])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut dirs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    if let Some(parent) = dirs.first().and_then(|d| d.parent()) {
        dirs.push(parent.to_path_buf());
    }
    dirs.dedup();
    Ok(dirs)
}

/// A C probe: `src` written to DIR/NAME.c, compiled against `includes`
/// (warnings off) and run; the `key value` pairs of its output, values as
/// numbers. Err says what failed (the compiler's output with the source).
#[allow(dead_code)]
pub fn run_c_probe(
    dir: &Path,
    name: &str,
    src: &str,
    includes: &[PathBuf],
) -> Result<std::collections::BTreeMap<String, i64>, String> {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let c = dir.join(format!("{name}.c"));
    let exe = dir.join(&name);
    std::fs::write(&c, src).map_err(|e| format!("write {}: {e}", c.display()))?;
    let mut cmd = Command::new("gcc");
    cmd.arg("-O0").arg("-w");
    for i in includes {
        cmd.arg("-I").arg(i);
    }
    let out = cmd
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run gcc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the probe does not compile against {includes:?}:\n{}\n--- probe source ---\n{src}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let out = Command::new(&exe)
        .output()
        .map_err(|e| format!("cannot run the probe: {e}"))?;
    if !out.status.success() {
        return Err(format!("the probe failed: {}", out.status));
    }
    let mut values = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, v)) = line.split_once(' ') {
            let v = v
                .trim()
                .parse::<i64>()
                .map_err(|e| format!("{line:?}: {e}"))?;
            values.insert(k.to_string(), v);
        }
    }
    Ok(values)
}

/// The worker's samples in a collapsed profile: counts by (the worker
/// frame's line, the leaf frame).
fn worker_leaves(collapsed: &str) -> std::collections::HashMap<(String, String), u64> {
    let mut out = std::collections::HashMap::new();
    for line in collapsed.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(at) = stack.split(';').find(|f| f.starts_with("worker (")) else {
            continue;
        };
        let leaf = stack.rsplit(';').next().unwrap_or("").to_string();
        *out.entry((at.to_string(), leaf)).or_default() += count.parse::<u64>().unwrap_or(0);
    }
    out
}

/// `record --mode offcpu` (with `extra` arguments: an engine) of the waits
/// fixture's worker, which waits 70% of its time in `sock.recv` and 30% in
/// `lock.acquire`, each timed by the worker itself: the share of each line
/// (whatever the leaf: a GIL wait on the way out of `recv` is the worker's
/// time in `recv` too) is within `points` of what the worker measured while
/// it was recorded, and each line's main leaf names its wait.
pub fn check_offcpu_shares(interp: &Interpreter, extra: &[&str], points: f64) {
    let mut fx = Fixture::spawn(interp, "waits.py", &["offcpu"]);
    let server = json_str(&fx.ready["server"]).to_string();
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("offcpu.txt");
    // The worker's own account of its waits, before and after: the
    // shares that really happened while it was sampled.
    let spent = |fx: &Fixture| -> (f64, f64) {
        let line = fx.ask(libc::SIGUSR2, "SPENT ");
        let mut it = line.split_whitespace().map(|v| v.parse::<f64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let pid = fx.pid.to_string();
    let mut args = vec![
        "record",
        "--pid",
        &pid,
        "--mode",
        "offcpu",
        "--format",
        "raw",
        "--rate",
        "1000",
        "--duration",
        "10",
        "--output",
    ];
    args.push(out_path.to_str().unwrap());
    args.extend_from_slice(extra);
    let before = spent(&fx);
    let out = pyinspect(&args);
    out.assert_success();
    let after = spent(&fx);
    let (true_socket, true_lock) = (after.0 - before.0, after.1 - before.1);
    let true_share = 100.0 * true_socket / (true_socket + true_lock);
    let text = std::fs::read_to_string(&out_path).unwrap();
    let leaves = worker_leaves(&text);
    // Each wait's line, by its leaf; then everything at that line.
    let socket_leaf = format!("[recv {server}]");
    let line_of = |leaf: &str| {
        leaves
            .iter()
            .filter(|((_, l), _)| l == leaf)
            .max_by_key(|(_, n)| **n)
            .map(|((at, _), _)| at.clone())
            .unwrap_or_else(|| panic!("{}: no {leaf} leaf in {leaves:?}", fx.label))
    };
    let (socket_line, lock_line) = (line_of(&socket_leaf), line_of("[futex]"));
    assert_ne!(socket_line, lock_line, "{}: {leaves:?}", fx.label);
    let at = |line: &str| -> u64 {
        leaves
            .iter()
            .filter(|((a, _), _)| a == line)
            .map(|(_, n)| n)
            .sum()
    };
    let (socket, lock) = (at(&socket_line), at(&lock_line));
    let main = |line: &str, leaf: &str| {
        leaves
            .get(&(line.to_string(), leaf.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let total = socket + lock;
    assert!(total > 500, "{}: too few samples {leaves:?}", fx.label);
    assert!(
        main(&socket_line, &socket_leaf) * 10 >= socket * 9
            && main(&lock_line, "[futex]") * 10 >= lock * 9,
        "{}: the waits' own leaves are under 90% of their lines: {leaves:?}",
        fx.label
    );
    let share = |n: u64| 100.0 * n as f64 / total as f64;
    // The waits are paced at 70/30; what the worker measured is the truth.
    assert!(
        (true_share - 70.0).abs() <= 10.0,
        "{}: the fixture's own waits were {true_share:.1}% socket, far from its 70% pace",
        fx.label
    );
    assert!(
        (share(socket) - true_share).abs() <= points,
        "{} {extra:?}: socket {:.1}%, lock {:.1}% of {total} (the worker measured \
         {true_share:.1}% socket): {leaves:?}",
        fx.label,
        share(socket),
        share(lock)
    );
    eprintln!(
        "{} {extra:?}: socket {:.1}%, lock {:.1}% of {total} worker samples (measured \
         {true_share:.1}% socket)",
        fx.label,
        share(socket),
        share(lock)
    );
    fx.assert_alive();
}

/// Seconds now on the monotonic clock: a fixture's `time.monotonic()`,
/// libev's and Trio's `SystemClock` less its offset.
pub fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
