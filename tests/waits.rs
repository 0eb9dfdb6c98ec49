//! What each thread waits for, on every interpreter of the matrix: fixtures
//! that block in known ways (python_fixtures/waits.py), read through the
//! real binary, checked against what the fixture and the test know (ports,
//! fds, addresses, paths, tids) and against /proc read by the test itself.

mod common;

use common::{dump_json, for_each_interpreter, json_str as s, monotonic, pyinspect, Fixture};
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The syscall number the kernel shows for a thread, read by the test.
fn proc_syscall_nr(pid: i32, tid: i64) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The x86-64 numbers of the calls the fixtures block in (from the kernel's
/// syscall_64.tbl), independent of pyinspect's own table.
fn expected_names(nr: i64) -> &'static str {
    match nr {
        0 => "read",
        7 => "poll",
        23 => "select",
        35 => "nanosleep",
        45 => "recvfrom",
        61 => "wait4",
        202 => "futex",
        230 => "clock_nanosleep",
        270 => "pselect6",
        271 => "ppoll",
        _ => "?",
    }
}

fn threads_by_tid(process: &Value) -> HashMap<i64, Value> {
    process["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["os_thread_id"].as_i64()?, t.clone())))
        .collect()
}

/// Retries (bounded) until `check` finds nothing missing: a thread may still
/// be on its way into the call when READY is printed.
fn until_ok(what: &str, check: impl FnMut() -> Vec<String>) {
    if let Err(problems) = within(Duration::from_secs(15), check) {
        panic!("{what}:\n  {}", problems.join("\n  "));
    }
}

/// `check` retried every 200 ms until it finds nothing missing, for at
/// most `limit`; the last problems found when it never did.
fn within(limit: Duration, mut check: impl FnMut() -> Vec<String>) -> Result<(), Vec<String>> {
    let start = Instant::now();
    loop {
        let problems = check();
        if problems.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= limit {
            return Err(problems);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dump_names_each_wait() {
    for_each_interpreter(
        "dump_names_each_wait",
        |_| true,
        |interp| {
            let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = server.local_addr().unwrap().port();
            let dir = tempfile::tempdir().unwrap();
            // The recv thread's connection carries no data: it is quiet
            // since it was made, between these two moments.
            let spawned = monotonic();
            let mut fx = Fixture::spawn(
                interp,
                "waits.py",
                &["blocked", &port.to_string(), dir.path().to_str().unwrap()],
            );
            let ready = monotonic();
            let (_conn, _) = server.accept().unwrap();
            let r = fx.ready.clone();
            let tid = |n: &str| r["tids"][n].as_i64().unwrap_or(-1);
            let pid = fx.pid;
            until_ok(&format!("{}: JSON waits", fx.label), || {
                let d = dump_json(pid, &[]);
                let by_tid = threads_by_tid(&d[0]);
                let mut p = Vec::new();
                let mut wait = |name: &str| -> Value {
                    let w = by_tid
                        .get(&tid(name))
                        .map(|t| t["wait"].clone())
                        .unwrap_or(Value::Null);
                    if w.is_null() {
                        p.push(format!("{name}: no wait in {}", d[0]));
                    }
                    w
                };
                let recv = wait("recv");
                let select = wait("select");
                let lock = wait("lock");
                let sleep = wait("sleep");
                let waitpid = wait("waitpid");
                let fifo = wait("fifo");
                let unix = wait("unix");
                let mut want = |ok: bool, what: String| {
                    if !ok {
                        p.push(what);
                    }
                };
                want(
                    s(&recv["syscall"]) == "recvfrom"
                        && s(&recv["fd"]["kind"]) == "tcp"
                        && recv["fd"]["remote"] == r["server"]
                        && recv["fd"]["local"] == r["client_local"]
                        && s(&recv["fd"]["state"]) == "ESTABLISHED",
                    format!("recv: {recv}"),
                );
                // How long it has carried no data, as the kernel says.
                let now = monotonic();
                let quiet = recv["fd"]["quiet_s"].as_f64().unwrap_or(-1.0);
                want(
                    quiet >= now - ready - 1.0 && quiet <= now - spawned + 0.05,
                    format!(
                        "recv: quiet {quiet}s, connected {:.3}-{:.3}s ago",
                        now - ready,
                        now - spawned
                    ),
                );
                let fds = &select["fds"];
                want(
                    matches!(s(&select["syscall"]), "select" | "pselect6")
                        && fds[0]["fd"] == r["pipe_read"]
                        && s(&fds[0]["kind"]) == "pipe"
                        && s(&fds[0]["target"]) == format!("pipe:[{}]", r["pipe_inode"])
                        && fds[0]["peers"].as_array().is_some_and(|v| {
                            v.iter().any(|x| {
                                s(x).contains(&format!(" fd {} (write end)", r["pipe_write"]))
                            })
                        })
                        && select["timeout"]["kind"] == "none",
                    format!("select: {select}"),
                );
                want(
                    s(&lock["syscall"]) == "futex"
                        && s(&lock["lock"]["name"]) == "lock"
                        && lock["lock"]["address"] == r["lock"]
                        && s(&lock["lock"]["kind"]) == "threading.Lock"
                        && s(&lock["lock"]["function"]) == "do_lock",
                    format!("lock: {lock}"),
                );
                let t = &sleep["timeout"];
                let timeout_ok = match s(&t["kind"]) {
                    "relative" => t["seconds"].as_f64() == Some(3600.0),
                    "deadline" => t["seconds_left"]
                        .as_f64()
                        .is_some_and(|v| v > 3000.0 && v <= 3600.0),
                    _ => false,
                };
                want(
                    matches!(
                        s(&sleep["syscall"]),
                        "clock_nanosleep" | "nanosleep" | "select" | "pselect6"
                    ) && timeout_ok,
                    format!("sleep: {sleep}"),
                );
                want(
                    s(&waitpid["syscall"]) == "wait4" && waitpid["child"] == r["child"],
                    format!("waitpid: {waitpid}"),
                );
                want(
                    s(&fifo["syscall"]) == "read"
                        && fifo["fd"]["fd"] == r["fifo_fd"]
                        && s(&fifo["fd"]["kind"]) == "fifo"
                        && fifo["fd"]["target"] == r["fifo"],
                    format!("fifo: {fifo}"),
                );
                // The other end of the socketpair, from the kernel's sock_diag.
                want(
                    matches!(s(&unix["syscall"]), "recvfrom")
                        && unix["fd"]["fd"] == r["unix_fd"]
                        && s(&unix["fd"]["kind"]) == "unix"
                        && s(&unix["fd"]["state"]) == "stream"
                        && unix["fd"]["peers"].as_array().is_some_and(|v| {
                            v.iter().any(|x| {
                                s(x).starts_with(&format!("pid {pid} "))
                                    && s(x).contains(&format!(" fd {} ", r["unix_peer_fd"]))
                            })
                        }),
                    format!("unix: {unix}"),
                );
                // The syscall numbers as the test reads them from /proc.
                for (name, w) in [
                    ("recv", &recv),
                    ("select", &select),
                    ("lock", &lock),
                    ("sleep", &sleep),
                    ("waitpid", &waitpid),
                    ("fifo", &fifo),
                ] {
                    let nr = proc_syscall_nr(pid, tid(name));
                    want(
                        nr.is_some()
                            && w["syscall_nr"].as_i64() == nr
                            && s(&w["syscall"]) == expected_names(nr.unwrap_or(-1))
                            && s(&w["state"]) == "S",
                        format!("{name}: /proc says {nr:?}, dump says {w}"),
                    );
                }
                p
            });

            // The text: each wait named exactly in its thread's header.
            until_ok(&format!("{}: text waits", fx.label), || {
                let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
                out.assert_success();
                let header = |name: &str| {
                    let start = format!("Thread {} \"{name}\" (idle, S): ", tid(name));
                    out.stdout
                        .lines()
                        .find(|l| l.starts_with(&start))
                        .map(|l| l[start.len()..].to_string())
                        .unwrap_or_default()
                };
                let mut p = Vec::new();
                let mut want = |name: &str, needle: String| {
                    let h = header(name);
                    if !h.contains(&needle) {
                        p.push(format!("{name}: {h:?} lacks {needle:?}\n{}", out.stdout));
                    }
                };
                want(
                    "recv",
                    format!(
                        "TCP {} → {} (ESTABLISHED, no data for ",
                        s(&r["client_local"]),
                        s(&r["server"])
                    ),
                );
                want(
                    "select",
                    format!(
                        "fd {}: pipe:[{}] (other end: pid {pid} ",
                        r["pipe_read"], r["pipe_inode"]
                    ),
                );
                want(
                    "lock",
                    format!("waiting for threading.Lock 'lock' at {}", s(&r["lock"])),
                );
                want("waitpid", format!("wait4(child {})", r["child"]));
                want(
                    "fifo",
                    format!("read(fd {}: FIFO {}", r["fifo_fd"], s(&r["fifo"])),
                );
                p
            });
            fx.assert_alive();
        },
    );
}

/// Connections in the many-fds fixture: past the 30 sockets of the issue.
const MANY: usize = 32;

#[test]
fn a_large_fd_set_is_summarised_in_text_and_whole_in_json() {
    for_each_interpreter(
        "a_large_fd_set_is_summarised_in_text_and_whole_in_json",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "waits.py", &["manyfds", &MANY.to_string()]);
            let r = fx.ready.clone();
            let pid = fx.pid;
            let tid = |n: &str| r["tids"][n].as_i64().unwrap_or(-1);
            let mut want_fds: Vec<i64> = r["fds"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_i64)
                .collect();
            want_fds.sort_unstable();
            assert_eq!(want_fds.len(), MANY + 2, "{}: {r}", fx.label);
            let listen = s(&r["listen"]).to_string();
            let mut peers: Vec<String> = r["peers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| s(p).to_string())
                .collect();
            peers.sort();
            until_ok(&format!("{}: JSON lists every fd", fx.label), || {
                let d = dump_json(pid, &[]);
                let by_tid = threads_by_tid(&d[0]);
                let mut p = Vec::new();
                for name in ["epoll", "select", "poll"] {
                    let w = by_tid
                        .get(&tid(name))
                        .map(|t| t["wait"].clone())
                        .unwrap_or(Value::Null);
                    let fds = w["fds"].as_array().cloned().unwrap_or_default();
                    let mut got: Vec<i64> = fds.iter().filter_map(|f| f["fd"].as_i64()).collect();
                    got.sort_unstable();
                    let listening = fds
                        .iter()
                        .filter(|f| s(&f["state"]) == "LISTEN" && s(&f["local"]) == listen)
                        .count();
                    let mut remotes: Vec<String> = fds
                        .iter()
                        .filter(|f| s(&f["state"]) == "ESTABLISHED")
                        .map(|f| s(&f["remote"]).to_string())
                        .collect();
                    remotes.sort();
                    if got != want_fds || listening != 1 || remotes != peers {
                        p.push(format!("{name}: fds {got:?}, want {want_fds:?}: {w}"));
                    }
                    if name == "epoll"
                        && (w["fd"]["fd"] != r["epoll_fd"] || s(&w["fd"]["kind"]) != "epoll")
                    {
                        p.push(format!("epoll: fd {}, want {}", w["fd"], r["epoll_fd"]));
                    }
                }
                p
            });
            until_ok(&format!("{}: text headers summarised", fx.label), || {
                let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
                out.assert_success();
                let mut p = Vec::new();
                for line in out.stdout.lines().filter(|l| l.starts_with("Thread ")) {
                    let n = line.chars().count();
                    if n > 200 {
                        p.push(format!("a header of {n} characters: {line}"));
                    }
                }
                let total = MANY + 2;
                for (name, set) in [
                    ("epoll", format!("watching {total} fds {{")),
                    ("select", format!("({{{total} fds: ")),
                    ("poll", format!("({{{total} fds: ")),
                ] {
                    let start = format!("Thread {} \"{name}\" (idle, S): ", tid(name));
                    let header = out
                        .stdout
                        .lines()
                        .find(|l| l.starts_with(&start))
                        .unwrap_or_default();
                    for needle in [
                        set,
                        format!("1 listening TCP {listen}; {MANY} TCP to "),
                        " more; 1 pipe}".to_string(),
                    ] {
                        if !header.contains(&needle) {
                            p.push(format!("{name}: {header:?} lacks {needle:?}"));
                        }
                    }
                }
                if !p.is_empty() {
                    p.push(out.stdout.clone());
                }
                p
            });
            fx.assert_alive();
        },
    );
}

#[test]
fn dump_names_the_gil_holder() {
    for_each_interpreter(
        "dump_names_the_gil_holder",
        |_| true,
        |interp| {
            let fx = Fixture::spawn(interp, "waits.py", &["gil"]);
            let r = fx.ready.clone();
            let spinner = r["tids"]["spinner"].as_i64().unwrap();
            let main = r["tids"]["main"].as_i64().unwrap();
            let pid = fx.pid;
            until_ok(&format!("{}: GIL wait", fx.label), || {
                let d = dump_json(pid, &[]);
                let by_tid = threads_by_tid(&d[0]);
                let w = by_tid
                    .get(&spinner)
                    .map(|t| t["wait"].clone())
                    .unwrap_or_default();
                let holder = by_tid.get(&main).cloned().unwrap_or_default();
                let mut p = Vec::new();
                // The spinner wakes every 5 ms to ask for a switch: it may
                // be seen running; the retry catches it asleep.
                if !(s(&w["syscall"]) == "futex"
                    && w["gil"]["holder"].as_i64() == Some(main)
                    && s(&w["gil"]["holder_name"]) == "MainThread"
                    && holder["holds_gil"] == true)
                {
                    p.push(format!("spinner {w}, main {holder}"));
                }
                p
            });
            until_ok(&format!("{}: GIL text", fx.label), || {
                let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
                out.assert_success();
                let mut p = Vec::new();
                for needle in [
                    format!("Thread {spinner} \"spinner\" (idle, S): futex(0x"),
                    format!("waiting for the GIL (held by thread {main} \"MainThread\")"),
                    format!("Summary: 1 thread waits for the GIL held by {main} 'MainThread'"),
                ] {
                    if !out.stdout.contains(&needle) {
                        p.push(format!("lacks {needle:?}\n{}", out.stdout));
                    }
                }
                p
            });
            // The main thread holds the GIL asleep in C: it cannot answer a
            // ping, but nothing may be left stopped.
            common::assert_not_stopped(pid);
        },
    );
}

#[test]
fn dump_shows_d_state_with_wchan_and_kernel_stack() {
    // os.posix_spawn (3.8+) parks its thread in the kernel's vfork wait.
    for_each_interpreter(
        "dump_shows_d_state_with_wchan_and_kernel_stack",
        |i| i.at_least(3, 8),
        |interp| {
            let dir = tempfile::tempdir().unwrap();
            let fx = Fixture::spawn(interp, "waits.py", &["vfork", dir.path().to_str().unwrap()]);
            let spawner = fx.ready["tids"]["spawner"].as_i64().unwrap();
            let pid = fx.pid;
            until_ok(&format!("{}: D state", fx.label), || {
                let wchan = std::fs::read_to_string(format!("/proc/{pid}/task/{spawner}/wchan"))
                    .unwrap_or_default();
                let d = dump_json(pid, &[]);
                let by_tid = threads_by_tid(&d[0]);
                let w = by_tid
                    .get(&spawner)
                    .map(|t| t["wait"].clone())
                    .unwrap_or_default();
                let nr = proc_syscall_nr(pid, spawner);
                let mut p = Vec::new();
                if !(s(&w["state"]) == "D"
                    && !wchan.trim().is_empty()
                    && s(&w["wchan"]) == wchan.trim()
                    && w["syscall_nr"].as_i64() == nr
                    && matches!(s(&w["syscall"]), "clone" | "clone3" | "vfork")
                    // Root reads the kernel stack; its innermost frame is the wchan's.
                    && w["kernel_stack"][0] == w["wchan"])
                {
                    p.push(format!(
                        "spawner: {w}; /proc wchan {wchan:?}, syscall {nr:?}"
                    ));
                }
                if p.is_empty() {
                    let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
                    out.assert_success();
                    for needle in [
                        format!(
                            "Thread {spawner} \"spawner\" (active, gil, D): {}(), uninterruptible in {}",
                            s(&w["syscall"]),
                            wchan.trim()
                        ),
                        format!("    kernel: {} ← ", wchan.trim()),
                        format!("Summary: 1 thread in D state ({})", wchan.trim()),
                    ] {
                        if !out.stdout.contains(&needle) {
                            p.push(format!("lacks {needle:?}\n{}", out.stdout));
                        }
                    }
                }
                p
            });
            common::assert_not_stopped(pid);
        },
    );
}

/// A stop (ours: `dump --native` stops every thread) makes the kernel resume
/// a timed sleep through `restart_syscall`, and /proc then shows that call
/// (219) in its place. The wait is still named as the call it resumes, as
/// the test read it from /proc before the stop.
#[test]
fn a_call_resumed_after_a_stop_keeps_its_name() {
    for_each_interpreter(
        "a_call_resumed_after_a_stop_keeps_its_name",
        |_| true,
        |interp| {
            // Each thread in its call first, as the kernel says. A thread
            // the kernel already shows resuming (219) was stopped or
            // signalled by something else before the test began, so its
            // first call cannot be known: such a fixture is replaced (at
            // most twice), and the test proper never retried.
            let mut attempt = 0;
            let (fx, tids, first) = loop {
                attempt += 1;
                let fx = Fixture::spawn(interp, "waits.py", &["resumed"]);
                let pid = fx.pid;
                let tids: Vec<(String, i64)> = fx.ready["tids"]
                    .as_object()
                    .expect("tids")
                    .iter()
                    .map(|(n, t)| (n.clone(), t.as_i64().expect("tid")))
                    .collect();
                let mut first: HashMap<i64, i64> = HashMap::new();
                let settled = within(Duration::from_secs(15), || {
                    let mut p = Vec::new();
                    for (name, tid) in &tids {
                        match proc_syscall_nr(pid, *tid) {
                            Some(nr) if nr >= 0 && nr != 219 => {
                                first.insert(*tid, nr);
                            }
                            other => p.push(format!("{name}: {other:?}")),
                        }
                    }
                    p
                });
                match settled {
                    Ok(()) => break (fx, tids, first),
                    Err(p) if attempt < 3 => eprintln!(
                        "{}: threads not in their first calls ({}); a new fixture",
                        fx.label,
                        p.join(", ")
                    ),
                    Err(p) => panic!(
                        "{}: threads in their calls:\n  {}",
                        fx.label,
                        p.join("\n  ")
                    ),
                }
            };
            let pid = fx.pid;
            pyinspect(&["dump", "--native", "--pid", &pid.to_string()]).assert_success();
            let resumed: Vec<&String> = tids
                .iter()
                .filter(|(_, t)| proc_syscall_nr(pid, *t) == Some(219))
                .map(|(n, _)| n)
                .collect();
            assert!(
                resumed.iter().any(|n| n.as_str() == "clock_nanosleep"),
                "{}: the stop resumed no sleep through restart_syscall ({resumed:?}): \
                 the test does not test what it is for",
                fx.label
            );
            let d = dump_json(pid, &[]);
            let by_tid = threads_by_tid(&d[0]);
            for (name, tid) in &tids {
                let w = by_tid
                    .get(tid)
                    .map(|t| t["wait"].clone())
                    .unwrap_or_default();
                let want = expected_names(first[tid]);
                assert!(
                    s(&w["syscall"]) == want && w["syscall_nr"].as_i64() == Some(first[tid]),
                    "{}: {name} (in {want} before the stop, {:?} now): {w}",
                    fx.label,
                    proc_syscall_nr(pid, *tid)
                );
            }
            let out = pyinspect(&["dump", "--pid", &pid.to_string()]);
            out.assert_success();
            assert!(
                !out.stdout.contains("syscall_219") && !out.stdout.contains("restart_syscall"),
                "{}: {}",
                fx.label,
                out.stdout
            );
            common::assert_not_stopped(pid);
        },
    );
}

#[test]
fn offcpu_record_gives_the_shares_of_each_wait() {
    for_each_interpreter(
        "offcpu_record_gives_the_shares_of_each_wait",
        |_| true,
        |interp| common::check_offcpu_shares(interp, &[], 3.0),
    );
}

#[test]
fn record_mode_flags() {
    // --idle and --gil are py-spy's flags, beside --mode (wall and gil): not both.
    for args in [
        &["record", "--mode", "wall", "--idle", "--pid", "1"][..],
        &["record", "--mode", "cpu", "--gil", "--pid", "1"][..],
        &["record", "--mode", "sideways", "--pid", "1"][..],
    ] {
        let out = pyinspect(args);
        let line = common::assert_one_clean_error_line(&out);
        assert!(
            line.contains("--mode") || line.contains("sideways"),
            "{args:?}: {line}"
        );
    }
}
