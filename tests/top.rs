//! `pyinspect top` on a real terminal: tmux gives it a 160x50 pseudo-terminal,
//! `capture-pane` reads the screen back, `send-keys` types.
//!
//! The fixture (`python_fixtures/top_hot.py`) has one thread busy in
//! `hot_loop` and one asleep. Checked per interpreter: `hot_loop` leads the
//! function table (by function) with over 50% own time and no percentage
//! exceeds 100; the threads panel shows the busy thread above 50% CPU; `q`
//! ends pyinspect and gives the terminal back in canonical mode.
//!
//! The screen tests share the machine's cores with a busy fixture each, so
//! they take turns (a lock), or the busy threads would starve each other.

mod common;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{fixture, pyenv, Fixture, BIN};

/// pyenv's 2.7, 3.9, 3.12, 3.13, and sid's 3.14 and 3.15 release builds.
const VERSIONS: &[(u32, u32)] = &[(2, 7), (3, 9), (3, 12), (3, 13), (3, 14), (3, 15)];
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn require_tmux() {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "tmux is needed to give `pyinspect top` a terminal in these tests: \
         install it (apt-get install -y tmux)"
    );
}

/// A tmux server of our own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Start `shell_command` in a detached 160x50 session.
    fn start(name: &str, shell_command: &str) -> Tmux {
        require_tmux();
        let t = Tmux {
            socket: format!("pyinspect-test-{}-{name}", std::process::id()),
        };
        let st = t
            .cmd()
            .args(["new-session", "-d", "-x", "160", "-y", "50", "-s", "t"])
            .arg(shell_command)
            .status()
            .expect("run tmux");
        assert!(st.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        self.cmd()
            .args(["send-keys", "-t", "t", keys])
            .status()
            .expect("tmux send-keys");
    }

    /// Poll the screen until `done` holds; the last screen either way.
    fn wait_for(&self, limit: Duration, done: impl Fn(&str) -> bool) -> (bool, String) {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if done(&s) {
                return (true, s);
            }
            if start.elapsed() > limit {
                return (false, s);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// (%Own, %Total, function column) of each function-table row.
fn function_rows(screen: &str) -> Vec<(f64, f64, String)> {
    screen
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let own = it.next()?.strip_suffix('%')?.parse().ok()?;
            let total = it.next()?.strip_suffix('%')?.parse().ok()?;
            let (_, _) = (it.next()?, it.next()?);
            Some((own, total, it.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// CPU% of the threads-panel row named `name`.
fn thread_cpu(screen: &str, name: &str) -> Option<f64> {
    screen.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first().map(|n| n.trim_start_matches('*')) != Some(name) {
            return None;
        }
        f.get(3)?.parse().ok()
    })
}

/// TID column of the threads-panel row named `name`.
fn thread_tid(screen: &str, name: &str) -> Option<u32> {
    screen.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first().map(|n| n.trim_start_matches('*')) != Some(name) {
            return None;
        }
        f.get(1)?.parse().ok()
    })
}

/// CPU use of kernel thread `tid` over `span`, in percent of one core.
fn kernel_cpu_pct(tid: u32, span: Duration) -> Option<f64> {
    let ticks = || -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
        // utime + stime.
        Some(pyinspect::procfs::stat_field(&s, 14)? + pyinspect::procfs::stat_field(&s, 15)?)
    };
    let (a, t0) = (ticks()?, Instant::now());
    std::thread::sleep(span);
    let (b, secs) = (ticks()?, t0.elapsed().as_secs_f64());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(100.0 * (b - a) as f64 / hz / secs)
}

fn hot_loop_own(screen: &str) -> Option<f64> {
    function_rows(screen)
        .into_iter()
        .find(|r| r.2.starts_with("hot_loop "))
        .map(|r| r.0)
}

/// Everything one interpreter must show; the problems found, if any.
fn check_screen(version: &str, pyinspect_cmd: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let tmux = Tmux::start(
        &version.replace('.', "_"),
        &format!("{pyinspect_cmd}; echo \"EXITED rc=$?\"; stty -a; sleep 60"),
    );
    let (ok, screen) = tmux.wait_for(Duration::from_secs(20), |s| s.contains("hot_loop"));
    if !ok {
        return vec![format!("{version}: hot_loop never appeared:\n{screen}")];
    }
    // On a machine busy with other work the busy thread gets less than a
    // core; then pyinspect must show at least half of what the kernel
    // gives it, measured here over two seconds.
    let cpu_floor = thread_tid(&screen, "busy")
        .and_then(|tid| kernel_cpu_pct(tid, Duration::from_secs(2)))
        .map_or(50.0, |measured| (measured / 2.0).min(50.0));
    // By function, so hot_loop's lines add up; then a few refreshes.
    tmux.keys("l");
    let (ok, screen) = tmux.wait_for(Duration::from_secs(15), |s| {
        s.contains("Function (file)")
            && hot_loop_own(s).is_some_and(|p| p > 50.0)
            && thread_cpu(s, "busy").is_some_and(|c| c > cpu_floor)
    });
    if !ok {
        problems.push(format!(
            "{version}: expected hot_loop above 50% own and the busy thread above \
             {cpu_floor:.0}% CPU:\n{screen}"
        ));
    }
    let rows = function_rows(&screen);
    if rows.first().is_some_and(|r| !r.2.starts_with("hot_loop ")) {
        problems.push(format!("{version}: hot_loop is not the top row:\n{screen}"));
    }
    if rows.iter().any(|r| r.0 > 100.0 || r.1 > 100.0) {
        problems.push(format!("{version}: a percentage over 100:\n{screen}"));
    }
    if !screen.contains(&format!("Python {version}.")) {
        problems.push(format!(
            "{version}: the header lacks the version:\n{screen}"
        ));
    }
    tmux.keys("q");
    // Until `stty -a` has printed too (its output follows EXITED).
    let (ok, screen) = tmux.wait_for(Duration::from_secs(10), |s| {
        s.contains("EXITED rc=") && s.contains("icanon")
    });
    if !ok || !screen.contains("EXITED rc=0") {
        problems.push(format!(
            "{version}: q did not end pyinspect cleanly:\n{screen}"
        ));
    }
    // Raw mode off again: the shell's terminal is canonical with echo.
    if !screen.contains(" icanon") || !screen.contains(" echo ") || screen.contains("%Own") {
        problems.push(format!(
            "{version}: the terminal was not restored:\n{screen}"
        ));
    }
    problems
}

#[test]
fn top_shows_the_hot_function_and_busy_thread() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut problems = Vec::new();
    for &(major, minor) in VERSIONS {
        let interp = common::find_interpreter(&format!("{major}.{minor} (release build)"), |i| {
            i.version == (major, minor) && !i.debug && !i.label.starts_with("debian")
        });
        let fixture = Fixture::spawn(interp, "top_hot.py", &["120"]);
        let cmd = format!("{BIN} top --pid {}", fixture.pid);
        problems.extend(check_screen(&format!("{major}.{minor}"), &cmd));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `--engine bpf`: the same screen from samples taken in the kernel.
#[test]
fn top_with_the_bpf_engine() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let interp = pyenv((3, 12));
    let fixture = Fixture::spawn(interp, "top_hot.py", &["120"]);
    let cmd = format!("{BIN} top --engine bpf --pid {}", fixture.pid);
    let problems = check_screen("3.12", &cmd);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn top_launches_a_program_and_ends_it_on_quit() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let py = &pyenv((3, 12)).python;
    // A marker argument finds the launched program afterwards.
    let marker = format!("{}", 900_000 + std::process::id() % 90_000);
    let cmd = format!(
        "{BIN} top -- {} {} {marker}",
        py.display(),
        fixture("top_hot.py")
    );
    let problems = check_screen("3.12", &cmd);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    let left = Command::new("pgrep")
        .args(["-f", &format!("top_hot.py {marker}")])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "the launched program outlived pyinspect: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn top_refuses_a_stdout_that_is_not_a_terminal() {
    let out = Command::new(BIN)
        .args(["top", "--pid", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("run pyinspect");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pyinspect: top needs a terminal (stdout is not a tty)"),
        "{err}"
    );
}

#[test]
fn top_on_a_small_terminal_says_so() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = Fixture::spawn(pyenv((3, 12)), "top_hot.py", &["120"]);
    let tmux = Tmux::start("small", &format!("{BIN} top --pid {}", fixture.pid));
    tmux.cmd()
        .args(["resize-window", "-t", "t", "-x", "40", "-y", "8"])
        .status()
        .expect("tmux resize-window");
    let (ok, screen) = tmux.wait_for(Duration::from_secs(15), |s| s.contains("too small"));
    assert!(ok, "no 'too small' message on a 40x8 terminal:\n{screen}");
    tmux.keys("q");
}

/// The threads panel's wait column: what each blocked thread of
/// `python_fixtures/waits.py blocked` waits for, in the short form.
#[test]
fn top_shows_what_each_thread_waits_for() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut problems = Vec::new();
    for (v, version) in [("2.7", (2, 7)), ("3.13", (3, 13))] {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        // Its connection waits in the listener's backlog until accepted.
        let fx = Fixture::spawn(
            pyenv(version),
            "waits.py",
            &["blocked", &port.to_string(), dir.path().to_str().unwrap()],
        );
        let _conn = server.accept().unwrap();
        let ready = &fx.ready;
        let tmux = Tmux::start(
            &format!("waits{}", v.replace('.', "_")),
            &format!("{BIN} top --pid {}; sleep 60", fx.pid),
        );
        let expect = [
            ("recv", format!("recv 127.0.0.1:{port}")),
            // The short form reads registers only: no fd sets.
            ("select", "select".to_string()),
            // time.sleep is select() up to 3.10, clock_nanosleep after.
            (
                "sleep",
                if v == "2.7" { "select" } else { "sleep" }.to_string(),
            ),
            ("lock", "futex".to_string()),
            ("waitpid", format!("wait4 {}", ready["child"])),
            ("fifo", "read /".to_string()),
        ];
        let row_has = |s: &str, name: &str, want: &str| {
            s.lines().any(|l| {
                let t = l.trim_start();
                t.starts_with(&format!("{name} ")) && l.contains(&format!(" {want}"))
            })
        };
        let (ok, screen) = tmux.wait_for(Duration::from_secs(20), |s| {
            expect.iter().all(|(n, w)| row_has(s, n, w))
        });
        if !ok {
            problems.push(format!(
                "{v}: expected {expect:?} in the threads panel:\n{screen}"
            ));
        }
        tmux.keys("q");
        // Killed with its process group (its forked child too).
        drop(fx);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Native frames by their short names (python_fixtures/native/names.py: a
/// thread parked in C++ whose demangled names run to hundreds of
/// characters); with --full-names, by their signatures.
#[test]
fn top_names_native_frames_short() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let interp = common::find_interpreter("pyenv's 3.12", |i| {
        i.version == (3, 12) && i.label.starts_with("pyenv ")
    });
    let lib = common::names_fixture_lib().to_str().unwrap().to_string();
    let fixture = common::Fixture::spawn(interp, "native/names.py", &[&lib]);
    let mut problems = Vec::new();
    for (session, extra) in [("names", ""), ("fullnames", " --full-names")] {
        let tmux = Tmux::start(
            session,
            &format!(
                "{BIN} top --native --idle{extra} --pid {}; sleep 60",
                fixture.pid
            ),
        );
        let (ok, screen) = tmux.wait_for(Duration::from_secs(30), |s| {
            s.contains("addmm_impl_cpu_") && s.contains("names_block")
        });
        let row = |name: &str| screen.lines().find(|l| l.contains(name)).unwrap_or("");
        let addmm = row("addmm_impl_cpu_");
        let lambda = row("names_block::{lambda");
        let good = if extra.is_empty() {
            addmm.contains("pyinspect_fixture::(anonymous namespace)::addmm_impl_cpu_ (")
                && lambda.contains("names_block::{lambda#1}::operator() (")
                && !screen.contains("std::allocator")
        } else {
            addmm.contains("addmm_impl_cpu_(std::vector<double, std::allocator<double> >&")
        };
        if !ok || !good {
            problems.push(format!("top{extra}:\n{screen}"));
        }
        tmux.keys("q");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `top --all`: every Python process on the host, the fixture's hot
/// function among them, under a header that says so; q ends it cleanly.
#[test]
fn top_all_shows_every_python_process() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = Fixture::spawn(pyenv((3, 12)), "top_hot.py", &["120"]);
    let tmux = Tmux::start(
        "all",
        &format!("{BIN} top --all; echo \"EXITED rc=$?\"; sleep 60"),
    );
    // (A PID column appears once there are two processes.)
    let (ok, screen) = tmux.wait_for(Duration::from_secs(20), |s| {
        s.contains("every Python process on the host") && s.contains("hot_loop")
    });
    assert!(
        ok,
        "top --all: no hot_loop or header (fixture {}):\n{screen}",
        fixture.pid
    );
    tmux.keys("q");
    let (ok, screen) = tmux.wait_for(Duration::from_secs(10), |s| s.contains("EXITED rc="));
    assert!(ok && screen.contains("EXITED rc=0"), "{screen}");
}
