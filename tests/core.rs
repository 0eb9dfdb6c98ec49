//! `dump --core`: a core file reads as the live process read when the core
//! was taken. Each fixture is stopped (SIGSTOP), dumped live, snapshotted
//! with gdb's `gcore`, and dumped again from the core; a fixture that dies
//! of SIGSEGV in a C library is read from the core gdb takes at the fault
//! (and from the kernel's own core where core_pattern lets one be written);
//! a container-like target (sid's interpreter under chroot) is read with
//! --root. Every bad core a user can give is one clean error line.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `gcore -o DIR/core PID`: the path of the core it wrote.
fn gcore(pid: i32, dir: &Path) -> PathBuf {
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

/// gdb 13's gcore loses the top pages of each thread stack of sid's glibc
/// (2.41+), which guards thread stacks with guard regions inside one
/// mapping (MADV_GUARD_INSTALL): reading across a guard page fails, and
/// gcore writes zeros for the pages it could not read. The outermost
/// frames of a thread whose chain runs through those pages are then not in
/// the core: what the core shows must still be the live stack, cut there.
/// (The kernel's own cores have no such holes: the crash test reads sid's.)
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
            if holes {
                assert!(
                    !cf.is_empty() && cf.len() <= lf.len() && lf[..cf.len()] == cf[..],
                    "{what}: running thread {tid}\nlive: {lf:#?}\ncore: {cf:#?}"
                );
            } else {
                assert_eq!(lf, cf, "{what}: running thread {tid}");
            }
            assert_eq!(lt["name"], ct["name"], "{what}: thread {tid}");
            continue;
        }
        if holes {
            // The Python frames, cut short; the innermost native frame
            // (from the core's registers) the same.
            let (lf, cf) = (python(lt, true), python(ct, true));
            assert_eq!(
                lt["frames"][0], ct["frames"][0],
                "{what}: thread {tid}'s innermost frame"
            );
            assert!(
                !cf.is_empty() && cf.len() <= lf.len() && lf[..cf.len()] == cf[..],
                "{what}: thread {tid}'s core frames are not the live ones cut short\nlive: {lf:#?}\ncore: {cf:#?}"
            );
            let mut lt = lt.clone();
            lt["frames"] = Value::Null;
            let mut ct = ct.clone();
            ct["frames"] = Value::Null;
            // Where the core's stack ends early, it says so.
            ct["truncated"] = lt["truncated"].clone();
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
    assert_same(&live[0], &core_json(&core, &extra), "--locals", holes);
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
    std::fs::copy("/bin/sleep", &prog).unwrap();
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
