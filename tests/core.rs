//! `dump --core`: a core file reads as the live process read when the core
//! was taken. Each fixture is stopped (SIGSTOP), dumped live, snapshotted
//! with gdb's `gcore`, and dumped again from the core; a fixture that dies
//! of SIGSEGV in a C library is read from the core gdb takes at the fault
//! (and from the kernel's own core where core_pattern lets one be written);
//! a container-like target (sid's interpreter under chroot) is read with
//! --root. Every bad core a user can give is one clean error line.

mod common;

use common::json_str as s;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn stop(pid: i32) {
    // SAFETY: kill(2) on the test's own fixture.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Stopped once every thread is: /proc/PID/stat says T.
    for _ in 0..200 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{pid} did not stop");
}

fn dump_core(core: &Path, extra: &[&str]) -> Output {
    let core = core.to_str().unwrap();
    let mut args = vec!["dump", "--core", core];
    args.extend_from_slice(extra);
    pyinspect(&args)
}

fn core_json(core: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = dump_core(core, &args);
    out.assert_success();
    let lines = out.json_lines();
    assert_eq!(lines.len(), 1, "one process\n{}", out.describe());
    lines.into_iter().next().unwrap()
}

/// Each thread by its OS id: what a core records as the live process had
/// it (not its kernel state or wait, which only /proc knows; not a name
/// only the kernel gave it, which a core does not keep).
fn threads(dump: &Value) -> BTreeMap<u64, Value> {
    dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| {
            let python_name = t["name_source"].as_str() != Some("os");
            (
                t["os_thread_id"].as_u64().expect("os_thread_id"),
                serde_json::json!({
                    "thread_id": t["thread_id"],
                    "name": if python_name { t["name"].clone() } else { Value::Null },
                    "interpreter": t["interpreter"],
                    "holds_gil": t["holds_gil"],
                    "frames": t["frames"],
                    "truncated": t["truncated"],
                    "status": t["status"],
                }),
            )
        })
        .collect()
}

/// gdb 13's gcore records none of the thread stacks of sid's glibc (2.41+),
/// which guards thread stacks with guard regions inside one mapping
/// (MADV_GUARD_INSTALL): its first read of that mapping meets a guard page
/// and fails, and gcore gives up on the whole mapping ("Memory read failed
/// for corefile section"), leaving it unwritten (read as not recorded). A
/// thread's Python frames are not there (they are on its data stack, 3.11+,
/// or the heap) but the links between them that run through entry frames on the C
/// stack (3.12+) are: the reader goes on along the data stack, so the
/// Python stacks are still whole. The native frames are not: only the
/// innermost (from the core's registers) can be had, and the core says its
/// native stack is incomplete. (The kernel's own cores have no such holes:
/// the crash test reads sid's.)
fn gcore_holes(interp: &Interpreter) -> bool {
    interp.label.starts_with("sid ")
}

fn assert_same(live: &Value, core: &Value, what: &str, holes: bool) {
    for key in ["pid", "command_line", "python_version", "executable"] {
        assert_eq!(live[key], core[key], "{what}: {key} differs");
    }
    let (l, c) = (threads(live), threads(core));
    assert_eq!(
        l.keys().collect::<Vec<_>>(),
        c.keys().collect::<Vec<_>>(),
        "{what}: other threads"
    );
    let python = |t: &Value, locals: bool| -> Vec<Value> {
        t["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "python")
            .map(|f| {
                let mut f = f.clone();
                if !locals {
                    f["locals"] = Value::Null;
                }
                f
            })
            .collect()
    };
    for (tid, lt) in &l {
        let ct = &c[tid];
        // gdb sends SIGCONT to a stopped process it attaches to, so a
        // thread on the CPU may move on before the core is written: its
        // Python frames stay (the fixture spins on one line), its native
        // frames and the counter it spins on may not.
        if lt["status"] == "active" {
            let (lf, cf) = (python(lt, false), python(ct, false));
            assert_eq!(lf, cf, "{what}: running thread {tid}");
            assert_eq!(lt["name"], ct["name"], "{what}: thread {tid}");
            continue;
        }
        if holes {
            // The Python frames whole; the innermost native frame (from the
            // core's registers) the same, the others not recorded.
            let (lf, cf) = (python(lt, true), python(ct, true));
            assert_eq!(
                lt["frames"][0], ct["frames"][0],
                "{what}: thread {tid}'s innermost frame"
            );
            assert_eq!(lf, cf, "{what}: thread {tid}'s Python frames");
            let mut lt = lt.clone();
            lt["frames"] = Value::Null;
            let mut ct = ct.clone();
            ct["frames"] = Value::Null;
            // Where the core's native stack ends early, it says so.
            if ct["truncated"] != Value::Null {
                ct["truncated"] = lt["truncated"].clone();
            }
            assert_eq!(lt, ct, "{what}: thread {tid} differs");
            continue;
        }
        assert_eq!(
            lt, ct,
            "{what}: thread {tid} differs\nlive: {lt:#}\ncore: {ct:#}"
        );
    }
    // A name the kernel gave: the core may not know it, but never another.
    for t in core["threads"].as_array().unwrap() {
        if t["name_source"].as_str() == Some("os") {
            let tid = t["os_thread_id"].as_u64().unwrap();
            let lt = live["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["os_thread_id"].as_u64() == Some(tid))
                .unwrap();
            assert_eq!(lt["name"], t["name"], "{what}: thread {tid}'s OS name");
        }
    }
}

/// Each worker's Python stack in the core is the one the fixture read of
/// itself before READY (`sys._current_frames()`, every worker parked at its
/// mark), frame for frame, down to `Thread._bootstrap` for those that
/// `threading` started. (The main thread, which wakes every half second,
/// is compared with the live dump only.)
fn whole_stacks(ready: &Value, core: &Value) {
    let key = |f: &Value| (f["function"].clone(), f["file"].clone(), f["line"].clone());
    for expected in ready["threads"].as_array().expect("READY threads") {
        if expected["name"] == "MainThread" {
            continue;
        }
        let ident = expected["ident"].as_u64().expect("ident");
        let thread = core["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["thread_id"].as_u64() == Some(ident))
            .unwrap_or_else(|| panic!("the core lacks thread {expected}"));
        let got: Vec<_> = thread["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "python")
            .map(key)
            .collect();
        let want: Vec<_> = expected["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(key)
            .collect();
        assert_eq!(
            got, want,
            "thread {} in the core: not the stack it had",
            expected["name"]
        );
        if !expected["name"].is_null() {
            let outermost = want.last().and_then(|k| k.0.as_str()).unwrap_or("");
            assert!(
                outermost.ends_with("_bootstrap"),
                "thread {} was started by threading, yet its stack ends in {outermost}",
                expected["name"]
            );
        }
    }
}

/// Stop the fixture, dump it live, take a core, dump the core: the same
/// Python stacks, names, locals, and (with --native) native frames.
fn live_and_core_agree(fx: &Fixture, core_extra: &[&str], holes: bool) {
    stop(fx.pid);
    let dir = tempfile::tempdir().unwrap();
    let live = dump_json(fx.pid, &["--locals"]);
    let live_native = dump_json(fx.pid, &["--native"]);
    let core = gcore(fx.pid, dir.path());
    let mut extra = vec!["--locals"];
    extra.extend_from_slice(core_extra);
    let core_locals = core_json(&core, &extra);
    assert_same(&live[0], &core_locals, "--locals", holes);
    whole_stacks(&fx.ready, &core_locals);
    let mut extra = vec!["--native"];
    extra.extend_from_slice(core_extra);
    assert_same(
        &live_native[0],
        &core_json(&core, &extra),
        "--native",
        holes,
    );
    // The text rendering of the same stacks.
    let text = dump_core(&core, core_extra);
    text.assert_success();
    assert!(
        text.stdout.starts_with(&format!(
            "Process {}: {}",
            fx.pid,
            live[0]["command_line"].as_str().unwrap()
        )),
        "{}",
        text.describe()
    );
    assert!(text.stdout.contains("\"sleeper\""), "{}", text.describe());
}

#[test]
fn a_gcore_reads_as_the_live_process() {
    for_each_interpreter(
        "core: gcore vs live",
        |_| true,
        |interp| {
            let fx = Fixture::spawn(interp, "threads.py", &[]);
            live_and_core_agree(&fx, &[], gcore_holes(interp));
        },
    );
}

/// Debian sid's interpreter run under chroot, as a container runs it: its
/// files exist on this host only under the root. A gcore taken from the
/// host records host paths; the kernel's core, written by the process
/// itself, records the paths it saw (/usr/bin/python3.14): read with
/// --root, and without it one line that says to pass the executable.
#[test]
fn a_chroot_target_reads_with_root() {
    let root = sid_root();
    let sid = find_interpreter("sid's 3.14", |i| {
        i.label.starts_with("sid ") && i.version == (3, 14) && !i.debug
    });
    let work = tempfile::tempdir().unwrap();
    let wrapper = work.path().join("chroot-python3.14");
    let inside = "/tmp/pyinspect-core-test";
    let r = root.display();
    // The kernel writes "core" into the working directory (core_pattern
    // "core"), which chroot(1) makes the root's /.
    let kernel_core = root.join("core");
    let _ = std::fs::remove_file(&kernel_core);
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nset -e\nmkdir -p {r}{inside}\n\
             cp \"$(dirname \"$1\")\"/*.py {r}{inside}/\n\
             ulimit -c unlimited\n\
             exec chroot {r} /usr/bin/python3.14 {inside}/$(basename \"$1\")\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut chrooted = sid.clone();
    chrooted.python = wrapper;
    chrooted.label = "sid 3.14 under chroot".into();
    let mut fx = Fixture::spawn(&chrooted, "threads.py", &[]);
    let root_arg = root.to_str().unwrap().to_string();
    live_and_core_agree(&fx, &["--root", &root_arg], gcore_holes(sid));

    // The kernel's core: abort the stopped process.
    let live = dump_json(fx.pid, &[]);
    // SAFETY: kill(2) on the test's own fixture.
    unsafe {
        libc::kill(fx.pid, libc::SIGABRT);
        libc::kill(fx.pid, libc::SIGCONT);
    }
    let _ = fx.child.wait();
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    assert!(
        kernel_core.exists(),
        "the kernel wrote no core into the working directory (core_pattern {:?}): \
         this test needs core_pattern \"core\"",
        pattern.trim()
    );
    let line = assert_one_clean_error_line(&dump_core(&kernel_core, &[]));
    assert!(
        line.contains("/usr/bin/python3.14") && line.contains("--executable"),
        "{line}"
    );
    let core = core_json(&kernel_core, &["--root", &root_arg]);
    assert_eq!(core["warnings"], Value::Null, "{core:#}");
    assert_eq!(core["python_version"], live[0]["python_version"]);
    // The threads that sleep did not move between the dump and the abort.
    let (l, c) = (threads(&live[0]), threads(&core));
    assert_eq!(l.keys().collect::<Vec<_>>(), c.keys().collect::<Vec<_>>());
    for (tid, lt) in &l {
        if ["sleeper", "worker", "recurser", "locals"].contains(&lt["name"].as_str().unwrap_or(""))
        {
            assert_eq!(lt, &c[tid], "the kernel's core: thread {tid}");
        }
    }
    // --executable stands in for the executable the root does not hold.
    let exe = root.join("usr/bin/python3.14");
    let core2 = core_json(
        &kernel_core,
        &["--root", &root_arg, "--executable", exe.to_str().unwrap()],
    );
    assert_eq!(threads(&core2), c);
    let _ = std::fs::remove_file(&kernel_core);
    eprintln!(
        "chroot target: {}; kernel core read with --root",
        chrooted.label
    );
}

/// libcrash.so, built from python_fixtures/native/crash.c.
fn libcrash(dir: &Path) -> PathBuf {
    let so = dir.join("libcrash.so");
    run_build_tool(
        Command::new("gcc")
            .args(["-O1", "-g", "-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(fixture_path("native/crash.c")),
    );
    so
}

fn crash_line(interp: &Interpreter) -> u64 {
    let src = std::fs::read_to_string(fixture_path("core_crash.py")).unwrap();
    let _ = interp;
    src.lines()
        .position(|l| l.contains("# MARK:crash"))
        .unwrap() as u64
        + 1
}

fn check_crash(core: &Path, interp: &Interpreter, how: &str) {
    let text = dump_core(core, &["--native"]);
    text.assert_success();
    let first_thread = text
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Thread "))
        .take(2)
        .collect::<Vec<_>>();
    let line = crash_line(interp);
    let want = "crashed with SIGSEGV at 0x10 in libcrash.so+0x";
    assert!(
        first_thread.len() == 2 && first_thread[1].trim_start().starts_with(want),
        "{how}: the crashed thread first, with its signal\n{}",
        text.describe()
    );
    assert!(
        first_thread[1].ends_with(&format!(
            ", called from forward ({}:{line})",
            fixture_path("core_crash.py").display()
        )),
        "{how}\n{}",
        text.describe()
    );
    let json = core_json(core, &["--native"]);
    let t0 = &json["threads"][0];
    assert_eq!(json["crash"]["signal"], "SIGSEGV", "{how}");
    assert_eq!(json["crash"]["address"], "0x10", "{how}");
    assert_eq!(json["crash"]["thread"], t0["os_thread_id"], "{how}");
    assert_eq!(t0["frames"][0]["function"], "crash_read", "{how}: {t0:#}");
    assert!(
        t0["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["function"] == "forward" && f["line"] == line),
        "{how}: {t0:#}"
    );
    assert_eq!(json["threads"].as_array().unwrap().len(), 2, "{how}");
}

/// gdb runs the fixture to its fault and takes the core there; where the
/// kernel writes cores into the working directory (core_pattern "core"),
/// its own core of the same crash is read too.
#[test]
fn a_crash_in_a_c_library_comes_first_with_its_signal() {
    let kernel_cores = std::fs::read_to_string("/proc/sys/kernel/core_pattern")
        .is_ok_and(|p| !p.starts_with('|') && !p.contains('/'));
    for_each_interpreter(
        "core: crash in C",
        |_| true,
        |interp| {
            let dir = tempfile::tempdir().unwrap();
            let so = libcrash(dir.path());
            let core = dir.path().join("gdb.core");
            let mut gdb = Command::new("gdb");
            gdb.args(["-nx", "-batch", "-ex", "run", "-ex"])
                .arg(format!("gcore {}", core.display()))
                .arg("--args")
                .arg(&interp.python)
                .arg(fixture_path("core_crash.py"))
                .arg(&so)
                .current_dir(dir.path());
            let out = run_command(gdb, Duration::from_secs(180));
            assert!(core.exists(), "gdb took no core\n{}", out.describe());
            check_crash(&core, interp, "gdb's core at the fault");
            // The library rebuilt differently: its build-id is not the one
            // the core recorded, and one warning line says so.
            run_build_tool(
                Command::new("gcc")
                    .args(["-O0", "-shared", "-fPIC", "-o"])
                    .arg(&so)
                    .arg(fixture_path("native/crash.c")),
            );
            let text = dump_core(&core, &[]);
            text.assert_success();
            let warned: Vec<&str> = text
                .stdout
                .lines()
                .filter(|l| l.starts_with("warning: ") && l.contains("libcrash.so"))
                .collect();
            assert!(
                warned.len() == 1
                    && warned[0].contains("is not the file the core was taken with")
                    && warned[0].contains("build-id"),
                "{}",
                text.describe()
            );
            // The library gone: one line names it.
            std::fs::remove_file(&so).unwrap();
            let text = dump_core(&core, &[]);
            text.assert_success();
            assert!(
                text.stdout
                    .lines()
                    .any(|l| l.starts_with("warning: ") && l.contains("libcrash.so was not found")),
                "{}",
                text.describe()
            );
            let so = libcrash(dir.path());
            std::fs::remove_file(&core).unwrap();

            if kernel_cores {
                let mut py = Command::new("sh");
                py.arg("-c")
                    .arg("ulimit -c unlimited; exec \"$0\" \"$@\"")
                    .arg(&interp.python)
                    .arg(fixture_path("core_crash.py"))
                    .arg(&so)
                    .current_dir(dir.path());
                let out = run_command(py, Duration::from_secs(60));
                assert!(!out.status.success());
                let written = std::fs::read_dir(dir.path())
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .find(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n == "core" || n.starts_with("core."))
                    });
                match written {
                    Some(k) => {
                        check_crash(&k, interp, "the kernel's core");
                        eprintln!("[{}] kernel core read", interp.label);
                    }
                    None => eprintln!(
                        "[{}] the kernel wrote no core here (a container's limit); gdb's was read",
                        interp.label
                    ),
                }
            }
        },
    );
}

#[test]
fn bad_cores_are_one_clean_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let check = |core: &Path, extra: &[&str], want: &[&str]| {
        let line = assert_one_clean_error_line(&dump_core(core, extra));
        for w in want {
            assert!(line.contains(w), "{:?} does not say {w:?}", line);
        }
        eprintln!("{line}");
    };

    // The core's flags without a core.
    for extra in [["--executable", "/bin/sleep"], ["--root", "/"]] {
        let mut args = vec!["dump", "--pid", "1"];
        args.extend_from_slice(&extra);
        let line = assert_one_clean_error_line(&pyinspect(&args));
        assert!(line.contains("--core CORE"), "{line}");
    }

    // Not a core file: text, and an ELF executable.
    let text = d.join("notes.txt");
    std::fs::write(&text, "not a core\n").unwrap();
    check(&text, &[], &["not an ELF file"]);
    check(Path::new(pyinspect_bin()), &[], &["not a core file"]);
    check(&d.join("absent"), &[], &["cannot open"]);

    // A core of another architecture: an aarch64 ELF core header.
    let mut arm = vec![0u8; 64];
    arm[..4].copy_from_slice(b"\x7fELF");
    arm[4] = 2;
    arm[5] = 1;
    arm[6] = 1;
    arm[16..18].copy_from_slice(&4u16.to_le_bytes());
    arm[18..20].copy_from_slice(&183u16.to_le_bytes());
    let arm_core = d.join("arm.core");
    std::fs::write(&arm_core, &arm).unwrap();
    check(&arm_core, &[], &["aarch64", "x86-64"]);

    // A copy of a program that is gone by the time the core is read.
    let prog = d.join("sleeper-prog");
    copy_program(Path::new("/bin/sleep"), &prog);
    let mut child = Command::new(&prog).arg("60").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let core = gcore(child.id() as i32, d);
    let _ = child.kill();
    let _ = child.wait();
    // A core of a program that is not Python.
    check(&core, &[], &["not a Python process"]);
    std::fs::remove_file(&prog).unwrap();
    check(
        &core,
        &[],
        &[prog.to_str().unwrap(), "was not found", "--executable"],
    );
    // ... and with --executable pointing at it again, not Python.
    check(
        &core,
        &["--executable", "/bin/sleep"],
        &["not a Python process"],
    );
    std::fs::remove_file(&core).unwrap();

    // A truncated core of a Python process.
    let interp = find_interpreter("pyenv's 3.12", |i| i.label.starts_with("pyenv 3.12"));
    let fx = Fixture::spawn(interp, "threads.py", &[]);
    stop(fx.pid);
    let core = gcore(fx.pid, d);
    drop(fx);
    let len = std::fs::metadata(&core).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&core).unwrap();
    f.set_len(len / 2).unwrap();
    check(&core, &[], &["truncated"]);
}

fn cont(pid: i32) {
    // SAFETY: kill(2) on the test's own fixture.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

fn thread_by_tid(dump: &Value, tid: i64) -> Value {
    dump["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["os_thread_id"].as_i64() == Some(tid))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The fd numbers of a wait (its fd and its set), and whether each of the
/// core's is marked as not recorded while the live one is described.
fn fd_numbers(w: &Value) -> Vec<Value> {
    let mut v = vec![w["fd"]["fd"].clone()];
    v.extend(
        w["fds"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| f["fd"].clone()),
    );
    v
}

/// What the live dump of the stopped fixture and the dump of its core say
/// about thread `tid`'s wait, where they differ (nothing when they agree):
/// the call, its number, its timeout (a deadline's seconds left within a
/// minute: the core counts from when it was written), the futex, the GIL
/// holder, the lock and the Python local naming it, the child, the fd
/// numbers; the live fds described, the core's "unrecorded"; the live
/// state T (the test stopped it), the core's S (asleep in the call) or
/// none; the same status.
fn wait_differences(name: &str, live: &Value, core: &Value, tid: i64) -> Vec<String> {
    let (lt, ct) = (thread_by_tid(live, tid), thread_by_tid(core, tid));
    let (lw, cw) = (&lt["wait"], &ct["wait"]);
    let mut p = Vec::new();
    if lw["syscall"].is_null() {
        p.push(format!("{name}: the live dump names no call: {lt}"));
        return p;
    }
    for key in ["syscall", "syscall_nr", "futex", "gil", "lock", "child"] {
        if lw[key] != cw[key] {
            p.push(format!("{name}: {key} live {} core {}", lw[key], cw[key]));
        }
    }
    let (lto, cto) = (&lw["timeout"], &cw["timeout"]);
    let timeout_same = lto["kind"] == cto["kind"]
        && lto["seconds"] == cto["seconds"]
        && match (lto["seconds_left"].as_f64(), cto["seconds_left"].as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() < 60.0,
            (a, b) => a == b,
        };
    if !timeout_same {
        p.push(format!("{name}: timeout live {lto} core {cto}"));
    }
    if fd_numbers(lw) != fd_numbers(cw) {
        p.push(format!("{name}: fds live {lw} core {cw}"));
    }
    let kinds = |w: &Value| -> Vec<String> {
        std::iter::once(&w["fd"])
            .chain(w["fds"].as_array().into_iter().flatten())
            .filter(|f| !f.is_null())
            .map(|f| f["kind"].as_str().unwrap_or("").to_string())
            .collect()
    };
    if kinds(lw).iter().any(|k| k == "unrecorded" || k.is_empty())
        || kinds(cw).iter().any(|k| k != "unrecorded")
    {
        p.push(format!("{name}: fd kinds live {lw} core {cw}"));
    }
    // S: asleep in the call; none: stopped on its way out of it (woken
    // just before the stop), which the live /proc shows as in it too.
    let core_state_ok = cw["state"] == "S" || cw["state"].is_null();
    if lw["state"] != "T" || !core_state_ok || lt["status"] != ct["status"] {
        p.push(format!(
            "{name}: state live {} ({}) core {} ({})",
            lw["state"], lt["status"], cw["state"], ct["status"]
        ));
    }
    p
}

/// How a test takes its core of a stopped fixture.
#[derive(Clone, Copy, PartialEq)]
enum Taker {
    /// `gcore`: the process goes on afterwards.
    Gdb,
    /// The kernel's own core, of the process aborted where it stands: for
    /// sid's interpreters, whose thread stacks gcore records with holes
    /// ([`gcore_holes`]), and a call's arguments on the stack with them.
    /// The fixture runs in the dump's directory with cores allowed.
    Kernel,
}

impl Taker {
    fn for_interpreter(interp: &Interpreter) -> Taker {
        if gcore_holes(interp) {
            Taker::Kernel
        } else {
            Taker::Gdb
        }
    }

    /// The interpreter to start the fixture with: for the kernel's core,
    /// a wrapper that lets it write one into `dir`.
    fn interpreter(self, interp: &Interpreter, dir: &Path) -> Interpreter {
        let mut i = interp.clone();
        if self == Taker::Kernel {
            let wrapper = dir.join("python-with-cores");
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\ncd {}\nulimit -c unlimited\nexec {} \"$@\"\n",
                    dir.display(),
                    interp.python.display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
            i.python = wrapper;
        }
        i
    }
}

/// Stop the fixture, dump it live, take its core, dump the core. While the
/// threads in `tids` are not all seen in their calls by both, the fixture
/// is let go and it is tried again: a thread may be on its way into its
/// call, and gdb lets a stopped process run for a moment as it attaches.
/// (The kernel's core ends the process: taken once.) Returns the live dump
/// and the core's, JSON and text.
fn stopped_live_and_core(
    fx: &mut Fixture,
    dir: &Path,
    tids: &[(&str, i64)],
    taker: Taker,
    settled: &dyn Fn(&Value) -> bool,
) -> Result<(Value, Value, String), String> {
    let mut problems = Vec::new();
    for _ in 0..5 {
        stop(fx.pid);
        let live = dump_json(fx.pid, &["--locals"]).remove(0);
        problems = tids
            .iter()
            .filter(|(_, t)| thread_by_tid(&live, *t)["wait"]["syscall"].is_null())
            .map(|(n, _)| format!("{n}: not in a call live"))
            .collect::<Vec<_>>();
        if !settled(&live) {
            problems.push(format!("not yet where the test wants it: {live}"));
        }
        if problems.is_empty() {
            let core = match taker {
                Taker::Gdb => gcore(fx.pid, dir),
                Taker::Kernel => {
                    // SAFETY: kill(2) on the test's own fixture.
                    unsafe { libc::kill(fx.pid, libc::SIGABRT) };
                    cont(fx.pid);
                    let _ = fx.child.wait();
                    let core = dir.join("core");
                    assert!(
                        core.exists(),
                        "{}: the kernel wrote no core into {} (core_pattern {:?}): \
                         this test needs core_pattern \"core\"",
                        fx.label,
                        dir.display(),
                        std::fs::read_to_string("/proc/sys/kernel/core_pattern")
                            .unwrap_or_default()
                    );
                    core
                }
            };
            let cj = core_json(&core, &["--locals"]);
            let text = dump_core(&core, &[]);
            text.assert_success();
            std::fs::remove_file(&core).unwrap();
            problems = tids
                .iter()
                .flat_map(|(n, t)| wait_differences(n, &live, &cj, *t))
                .collect();
            if problems.is_empty() {
                if taker == Taker::Gdb {
                    cont(fx.pid);
                }
                return Ok((live, cj, text.stdout));
            }
            if taker == Taker::Kernel {
                break;
            }
        }
        cont(fx.pid);
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(format!(
        "{}: live and core waits differ\n  {}",
        fx.label,
        problems.join("\n  ")
    ))
}

/// Start `args` (the fixture's arguments for try `n`) under `run`, and
/// [`stopped_live_and_core`] the threads its READY names `names`: the
/// kernel's core ends its fixture, so a try that a race spoils (a thread
/// let run by the SIGCONT before the dump's SIGKILL reaches it) starts a
/// new fixture, three at most. `on_spawn` runs after each start; a live
/// dump that READY and the dump do not find `settled` is taken again.
/// Returns READY, the live dump, the core's JSON and text.
fn fixture_live_and_core(
    run: &Interpreter,
    args: &dyn Fn(usize) -> Vec<String>,
    dir: &Path,
    names: &[&str],
    taker: Taker,
    on_spawn: &mut dyn FnMut(),
    settled: &dyn Fn(&Value, &Value) -> bool,
) -> (Value, Value, Value, String) {
    let tries = if taker == Taker::Kernel { 3 } else { 1 };
    let mut why = String::new();
    for n in 0..tries {
        let args = args(n);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut fx = Fixture::spawn(run, "waits.py", &args);
        on_spawn();
        let r = fx.ready.clone();
        let tids: Vec<(&str, i64)> = names
            .iter()
            .map(|n| (*n, r["tids"][n].as_i64().expect("tid")))
            .collect();
        match stopped_live_and_core(&mut fx, dir, &tids, taker, &|live| settled(&r, live)) {
            Ok((live, core, text)) => return (r, live, core, text),
            Err(e) => why = e,
        }
    }
    panic!("{why}");
}

/// A core names each wait as the live dump of the stopped process did: the
/// call, its timeout, the fd numbers (described live, "not recorded" in the
/// core), the child waited for, the lock a Python local names, the GIL's
/// holder; the summary line too, and one line (and JSON field) saying what
/// a core does not record.
#[test]
fn a_core_names_the_waits_the_live_dump_names() {
    for_each_interpreter(
        "core: waits",
        |_| true,
        |interp| {
            let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = server.local_addr().unwrap().port();
            let dir = tempfile::tempdir().unwrap();
            let fifo_dir = dir.path().join("fifo");
            std::fs::create_dir(&fifo_dir).unwrap();
            let taker = Taker::for_interpreter(interp);
            let run = taker.interpreter(interp, dir.path());
            let names = [
                "recv", "select", "unix", "holder", "sleep", "waitpid", "fifo", "lock",
            ];
            let mut conns = Vec::new();
            let (r, live, core, text) = fixture_live_and_core(
                &run,
                &|n| {
                    // Each fixture makes its FIFO afresh.
                    let fifo_dir = fifo_dir.join(n.to_string());
                    std::fs::create_dir(&fifo_dir).unwrap();
                    let fifo_dir = fifo_dir.to_str().unwrap().to_string();
                    vec!["blocked".into(), port.to_string(), fifo_dir]
                },
                dir.path(),
                &names,
                taker,
                &mut || conns.push(server.accept().unwrap()),
                // A thread caught on its way into its call (waiting for the
                // GIL after saying it is about to block: seen on a loaded
                // machine) has not settled yet; nor has the main thread
                // while it still writes READY (CI run AG: caught in that
                // write live, it went on once gdb sent SIGCONT, and the
                // core had it running).
                &|r, live| {
                    let main = thread_by_tid(live, r["pid"].as_i64().unwrap_or(0));
                    let innermost = main["frames"]
                        .as_array()
                        .and_then(|f| f.iter().find(|f| f["kind"] == "python"))
                        .map(|f| f["function"].clone());
                    innermost == Some(Value::from("blocked"))
                        && names.iter().all(|n| {
                            let t = r["tids"][n].as_i64().unwrap_or(0);
                            thread_by_tid(live, t)["wait"]["gil"].is_null()
                        })
                },
            );
            let tids: Vec<(&str, i64)> = names
                .iter()
                .map(|n| (*n, r["tids"][n].as_i64().unwrap()))
                .collect();
            let tid = |n: &str| tids.iter().find(|t| t.0 == n).unwrap().1;
            let cw = |n: &str| thread_by_tid(&core, tid(n))["wait"].clone();
            // What the core's waits are, not only that they equal the live ones.
            let live_recv = &thread_by_tid(&live, tid("recv"))["wait"]["fd"];
            assert!(
                live_recv["kind"] == "tcp" && live_recv["remote"] == r["server"],
                "{live:#}"
            );
            assert_eq!(cw("recv")["fd"]["fd"], live_recv["fd"], "{core:#}");
            assert_eq!(cw("lock")["lock"]["name"], "lock", "{core:#}");
            assert_eq!(cw("lock")["lock"]["address"], r["lock"], "{core:#}");
            assert_eq!(cw("waitpid")["child"], r["child"], "{core:#}");
            assert_eq!(cw("fifo")["fd"]["fd"], r["fifo_fd"], "{core:#}");
            assert_eq!(cw("select")["fds"][0]["fd"], r["pipe_read"], "{core:#}");
            assert_eq!(core["not_recorded"][0], "fd descriptions", "{core:#}");
            assert_eq!(live["not_recorded"], Value::Null);
            // S for the lock thread even where the core caught it as the
            // kernel set its futex up to be restarted after the SIGCONT.
            for needle in [
                format!("Thread {} \"lock\" (idle, S): futex(", tid("lock")),
                format!("waiting for threading.Lock 'lock' at {}", s(&r["lock"])),
                format!("read(fd {}: not recorded in a core)", r["fifo_fd"]),
                format!("wait4(child {})", r["child"]),
                "Not recorded in a core: fd descriptions, scheduler states".to_string(),
            ] {
                assert!(text.contains(&needle), "lacks {needle:?}\n{text}");
            }
            assert_same(
                &live,
                &core,
                "waits",
                taker == Taker::Gdb && gcore_holes(interp),
            );

            // A thread waiting for the GIL that the main thread holds in C.
            let (r, _, core, text) = fixture_live_and_core(
                &run,
                &|_| vec!["gil".into()],
                dir.path(),
                &["spinner", "main"],
                taker,
                &mut || {},
                // The main thread past READY, asleep in C with the GIL.
                &|r, live| {
                    let main = r["tids"]["main"].as_i64();
                    let spinner = r["tids"]["spinner"].as_i64().unwrap_or(-1);
                    main.is_some()
                        && thread_by_tid(live, spinner)["wait"]["gil"]["holder"].as_i64() == main
                },
            );
            let spinner = r["tids"]["spinner"].as_i64().unwrap();
            let main = r["tids"]["main"].as_i64().unwrap();
            let w = thread_by_tid(&core, spinner)["wait"].clone();
            assert_eq!(w["gil"]["holder"].as_i64(), Some(main), "{core:#}");
            assert_eq!(w["gil"]["holder_name"], "MainThread", "{core:#}");
            for needle in [
                format!("waiting for the GIL (held by thread {main} \"MainThread\")"),
                format!("Summary: 1 thread waits for the GIL held by {main} 'MainThread'"),
            ] {
                assert!(text.contains(&needle), "lacks {needle:?}\n{text}");
            }
        },
    );
}

/// A core's event-loop deadlines count from when the core was written, not
/// from when it is read: read 3 s after its gcore, a loop's next timer is
/// as far off as it was when the core was taken.
#[test]
fn a_cores_loop_deadlines_count_from_when_it_was_written() {
    for_each_interpreter(
        "core: loop deadlines",
        |i| i.at_least(3, 7),
        |interp| {
            let dir = tempfile::tempdir().unwrap();
            let fx = Fixture::spawn(interp, "asyncio_queues.py", &[]);
            let ready_at = std::time::Instant::now();
            let next_in = fx.ready["next_timer_in"].as_f64().expect("next_timer_in");
            stop(fx.pid);
            let core = gcore(fx.pid, dir.path());
            let taken = ready_at.elapsed().as_secs_f64();
            cont(fx.pid);
            std::thread::sleep(Duration::from_secs(3));
            let cj = core_json(&core, &[]);
            let tid = fx.ready["thread_id"].as_u64().expect("thread_id");
            let thread = cj["threads"]
                .as_array()
                .expect("threads")
                .iter()
                .find(|t| t["thread_id"].as_u64() == Some(tid))
                .unwrap_or_else(|| panic!("{}: no loop thread in {cj}", fx.label))
                .clone();
            let got = thread["event_loops"][0]["next_timer_seconds"]
                .as_f64()
                .unwrap_or_else(|| panic!("{}: no next timer in {thread}", fx.label));
            // The core's moment is its file's modification time, a wall
            // clock time, and the loop's clock is monotonic: a step of the
            // wall clock between the gcore and the dump moves it (once
            // seen here: 0.5 s). Reading the core's age as 0 would be 3 s
            // off and more.
            assert!(
                got <= next_in + 1.0 && got >= next_in - taken - 1.0,
                "{}: next timer in {got} s from the core; READY said {next_in} s, \
                 and the core was written within {taken:.2} s of READY",
                fx.label
            );
        },
    );
}
