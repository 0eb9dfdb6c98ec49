//! The native unwinder against real processes: a C fixture library built
//! here with gcc (stripped to its dynamic symbols), a hand-written assembly
//! function without CFI, a fully stripped static program, a library loaded
//! after the unwinder started, and a Python process calling the library
//! through ctypes.

use std::io::{BufRead, BufReader, Write};
mod common;

use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use pyinspect::memory::ProcessMemory;
use pyinspect::native_unwind::{native_entry, NativeFrame, NativeUnwinder, UnwindMethod};
use pyinspect::pause::PauseGuard;

use common::offline_name;
use common::run_build_tool as run;

/// Build the fixtures once per test binary.
fn built() -> &'static Path {
    common::built_fixtures("pyinspect-native-", |dir| {
        let d = |n: &str| dir.join(n);
        let s = |n: &str| common::native_source(n);
        for (name, stripped) in [("libfixture_full.so", false), ("libfixture.so", true)] {
            run(Command::new("gcc").args([
                "-O2",
                "-fomit-frame-pointer",
                "-shared",
                "-fPIC",
                "-o",
                d(name).to_str().unwrap(),
                &s("fixture.c"),
                &s("fixture_asm.s"),
            ]));
            if stripped {
                run(Command::new("strip").args(["--strip-all", d(name).to_str().unwrap()]));
            }
        }
        // A copy under another name, for the dlopen test.
        std::fs::copy(d("libfixture.so"), d("liblate.so")).unwrap();
        run(Command::new("gcc").args([
            "-O2",
            "-o",
            d("fixture_main").to_str().unwrap(),
            &s("fixture_main.c"),
            "-L",
            dir.to_str().unwrap(),
            "-lfixture",
            "-Wl,-rpath,$ORIGIN",
            "-lpthread",
            "-ldl",
        ]));
        run(Command::new("gcc").args([
            "-O2",
            "-static",
            "-o",
            d("nosym_full").to_str().unwrap(),
            &s("nosym.c"),
        ]));
        run(Command::new("strip").args([
            "--strip-all",
            "-o",
            d("nosym").to_str().unwrap(),
            d("nosym_full").to_str().unwrap(),
        ]));
    })
}

/// A child process killed on drop; its stdin stays open until then.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
}

impl Target {
    fn spawn(cmd: &mut Command) -> Target {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn fixture");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        Target { child, stdin, out }
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "fixture exited early");
        l.trim().to_string()
    }
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stop thread `tid` of `pid` through pyinspect's one pauser. The pauser
/// gives up on a thread that does not stop within its budget (this machine
/// may be busy): then ask again, for a few seconds at most.
fn pause(pid: i32, tid: i32) -> PauseGuard {
    let t0 = Instant::now();
    loop {
        let g = PauseGuard::new(pid, &[tid]).expect("pause thread");
        if g.tids().any(|t| t == tid) {
            return g;
        }
        drop(g);
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "thread {tid} of {pid} never stopped within the pauser's budget"
        );
        pyinspect::pause::release_lingering(Duration::from_millis(50));
    }
}

fn unwind_once(u: &mut NativeUnwinder, pid: i32, tid: i32) -> Vec<NativeFrame> {
    let paused = pause(pid, tid);
    let frames = u.unwind(tid, &ProcessMemory::new(pid)).expect("unwind");
    drop(paused);
    frames
}

/// Unwind until `ready` holds (the thread may still be on its way into the
/// call we wait for), at most a few seconds; returns the last stack.
fn unwind_until(
    u: &mut NativeUnwinder,
    pid: i32,
    tid: i32,
    ready: impl Fn(&[NativeFrame]) -> bool,
) -> Vec<NativeFrame> {
    let t0 = Instant::now();
    loop {
        let f = unwind_once(u, pid, tid);
        if ready(&f) || t0.elapsed() > Duration::from_secs(5) {
            return f;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn show(frames: &[NativeFrame]) -> String {
    frames
        .iter()
        .map(|f| format!("  {} [{}] {:?}\n", f.name(), f.module, f.how))
        .collect()
}

fn names(frames: &[NativeFrame]) -> Vec<String> {
    frames.iter().map(NativeFrame::name).collect()
}

fn is_blocked_in(frames: &[NativeFrame], syscall_fn: &str) -> bool {
    frames.first().and_then(|f| f.function.as_deref()) == Some(syscall_fn)
}

fn assert_thread_root(frames: &[NativeFrame]) {
    let n = names(frames);
    let last = n.last().map(String::as_str).unwrap_or("");
    assert!(
        last.ends_with("clone3") || last.ends_with("clone"),
        "stack does not end at the thread's root:\n{}",
        show(frames)
    );
    assert!(n.iter().any(|x| x == "start_thread"), "{}", show(frames));
}

#[test]
fn blocked_thread_unwinds_through_stripped_static_helpers() {
    let dir = built();
    let mut t = Target::spawn(Command::new(dir.join("fixture_main")).arg("threads"));
    let ready = t.line();
    let tids: Vec<i32> = ready
        .split(' ')
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let mut u = NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(
        t.pid(),
    )))
    .unwrap();
    let f = unwind_until(&mut u, t.pid(), tids[0], |f| is_blocked_in(f, "read"));
    let n = names(&f);
    assert_eq!(n[0], "read", "{}", show(&f));
    assert_eq!(f[0].module, "libc.so.6");
    for h in &f[1..3] {
        assert_eq!(h.module, "libfixture.so", "{}", show(&f));
        assert!(h.function.is_none(), "{}", show(&f));
        assert!(h.name().starts_with("libfixture.so+0x"));
    }
    // The offsets name the right static functions in the unstripped build.
    let full = dir.join("libfixture_full.so");
    assert!(offline_name(&full, f[1].offset).starts_with("helper_read"));
    assert!(offline_name(&full, f[2].offset).starts_with("helper_mid"));
    assert_eq!(n[3], "fixture_block");
    assert!(f[3].exported);
    assert_eq!(n[4], "run");
    assert_thread_root(&f);
    assert!(f.iter().all(|x| x.how == UnwindMethod::Cfi), "{}", show(&f));
    assert_eq!(
        native_entry(&f).as_deref(),
        Some("fixture_block (libfixture.so)")
    );
    // libc's own internal frames are named through libc6-dbg (build-id).
    let libc_internal = f
        .iter()
        .filter(|x| x.module == "libc.so.6" && !x.exported)
        .filter_map(|x| x.function.clone())
        .collect::<Vec<_>>();
    assert!(
        libc_internal.iter().any(|x| x == "start_thread"),
        "{libc_internal:?}"
    );
    assert!(u.take_warnings().is_empty());
    // file:line of libc comes from the (compressed) libc6-dbg DWARF, on request.
    assert_eq!(u.add_lines(&f[0])[0].line, None);
    u.set_debug_file_lines(true);
    let lines = u.add_lines(&f[0]);
    let file = lines[0].file.as_deref().unwrap_or("");
    assert!(file.ends_with("read.c"), "{lines:?}");
    assert!(lines[0].line.is_some());

    // A thread in nanosleep.
    let f = unwind_until(&mut u, t.pid(), tids[3], |f| {
        names(f).iter().any(|x| x == "fixture_sleep")
            && f.first().is_some_and(|x| x.module == "libc.so.6")
    });
    let n = names(&f);
    let sleep = n.iter().position(|x| x == "fixture_sleep").unwrap();
    assert!(
        n[..sleep].iter().any(|x| x.contains("nanosleep")),
        "{}",
        show(&f)
    );
    assert!(f[sleep - 1].function.is_none() && f[sleep - 1].module == "libfixture.so");
    assert_eq!(n[sleep + 1], "run");

    // The spinning thread: somewhere inside the library, always under fixture_spin.
    for _ in 0..20 {
        let f = unwind_once(&mut u, t.pid(), tids[1]);
        let n = names(&f);
        let spin = n
            .iter()
            .position(|x| x == "fixture_spin")
            .unwrap_or_else(|| panic!("no fixture_spin:\n{}", show(&f)));
        assert!(f[..spin].iter().all(|x| x.module == "libfixture.so"));
        assert_eq!(n[spin + 1], "run", "{}", show(&f));
        assert_thread_root(&f);
    }
}

#[test]
fn scan_continues_past_assembly_without_cfi() {
    let dir = built();
    let mut t = Target::spawn(Command::new(dir.join("fixture_main")).arg("threads"));
    let ready = t.line();
    let tids: Vec<i32> = ready
        .split(' ')
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let mut u = NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(
        t.pid(),
    )))
    .unwrap();
    let f = unwind_until(&mut u, t.pid(), tids[2], |f| is_blocked_in(f, "read"));
    let n = names(&f);
    let asm = n
        .iter()
        .position(|x| x == "fixture_asm_block")
        .unwrap_or_else(|| panic!("no asm frame:\n{}", show(&f)));
    assert_eq!(n[asm - 1], "fixture_block", "{}", show(&f));
    assert_eq!(f[asm].how, UnwindMethod::Scan, "{}", show(&f));
    // Its caller keeps a frame pointer, which the asm function clobbered:
    // unwinding it needs the rbp recovered from the stack.
    assert_eq!(n[asm + 1], "fixture_asm_entry", "{}", show(&f));
    assert_eq!(n[asm + 2], "run", "{}", show(&f));
    assert_thread_root(&f);
}

#[test]
fn binary_without_any_symbols() {
    let dir = built();
    let mut t = Target::spawn(&mut Command::new(dir.join("nosym")));
    assert_eq!(t.line(), "ready");
    let mut u = NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(
        t.pid(),
    )))
    .unwrap();
    let pid = t.pid();
    let full = dir.join("nosym_full");
    let f = unwind_until(&mut u, pid, pid, |f| {
        f.first()
            .is_some_and(|x| offline_name(&full, x.offset + 1).contains("read"))
    });
    assert!(
        f.iter()
            .all(|x| x.function.is_none() && x.module == "nosym"),
        "{}",
        show(&f)
    );
    // Offsets are the executable's own addresses: symbolizable offline.
    let offline: Vec<String> = f
        .iter()
        .map(|x| offline_name(&full, x.offset - u64::from(x.return_address)))
        .collect();
    let pos = |n: &str| offline.iter().position(|x| x.starts_with(n));
    let (inner, outer, main) = (pos("nosym_inner"), pos("nosym_outer"), pos("main"));
    assert!(
        inner.is_some() && inner < outer && outer < main,
        "{offline:?}\n{}",
        show(&f)
    );
}

#[test]
fn library_loaded_after_the_unwinder_started() {
    let dir = built();
    let late = dir.join("liblate.so");
    let mut t = Target::spawn(
        Command::new(dir.join("fixture_main"))
            .arg("dlopen")
            .arg(&late),
    );
    assert_eq!(t.line(), "ready");
    let mut u = NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(
        t.pid(),
    )))
    .unwrap();
    // Warm the unwinder's caches on the main thread before the dlopen.
    let pid = t.pid();
    let before = unwind_once(&mut u, pid, pid);
    assert!(!before.is_empty());
    t.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    t.stdin.as_mut().unwrap().flush().unwrap();
    let loaded = t.line();
    let tid: i32 = loaded.strip_prefix("loaded ").unwrap().parse().unwrap();
    let f = unwind_until(&mut u, pid, tid, |f| is_blocked_in(f, "read"));
    let n = names(&f);
    let fb = n
        .iter()
        .position(|x| x == "fixture_block")
        .unwrap_or_else(|| panic!("{}", show(&f)));
    assert_eq!(f[fb].module, "liblate.so");
    assert!(n[fb + 1] == "run_late", "{}", show(&f));
}

/// Every interpreter whose eval loop has names here (its own symbol table or
/// a debug file): the library's frames, through libffi and ctypes, into the
/// eval loop and out to the thread's root.
#[test]
fn python_thread_calling_the_library_through_ctypes() {
    let dir = built();
    let lib = dir.join("libfixture.so");
    let lib = lib.to_str().unwrap();
    common::for_each_interpreter(
        "python_thread_calling_the_library_through_ctypes",
        |i| i.symbols,
        |interp| ctypes_check(interp, lib),
    );
}

fn ctypes_check(interp: &common::Interpreter, lib: &str) {
    let fx = common::Fixture::spawn(interp, "native/driver.py", &[lib]);
    let pid = fx.pid;
    let tid_of = |name: &str| {
        fx.ready[name]
            .as_i64()
            .unwrap_or_else(|| panic!("READY has no {name}: {}", fx.ready)) as i32
    };
    // The eval loop's C function: renamed when PEP 523 came (3.6).
    let eval = if interp.at_least(3, 6) {
        "_PyEval_EvalFrameDefault"
    } else {
        "PyEval_EvalFrameEx"
    };
    let mut u =
        NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(pid))).unwrap();
    let f = unwind_until(&mut u, pid, tid_of("blocker"), |f| is_blocked_in(f, "read"));
    let n = names(&f);
    let fb = n
        .iter()
        .position(|x| x == "fixture_block")
        .unwrap_or_else(|| panic!("{}", show(&f)));
    // CFI all the way.
    let rest = &n[fb..];
    assert!(
        rest.iter().any(|x| x.starts_with("ffi_call")),
        "{}",
        show(&f)
    );
    assert!(rest.iter().any(|x| x == eval), "{}", show(&f));
    if interp.label.starts_with("sid ") {
        // Sid's own libc, whose debug file is not on this host: its thread
        // root (start_thread, clone3) has no names, but the walk gets there.
        assert_eq!(
            f.last().map(|x| x.module.as_str()),
            Some("libc.so.6"),
            "{}",
            show(&f)
        );
    } else {
        assert_thread_root(&f);
    }

    // The callback thread: native -> Python -> native, two eval frames.
    let f = unwind_until(&mut u, pid, tid_of("callback"), |f| {
        is_blocked_in(f, "read")
    });
    let n = names(&f);
    let evals = n.iter().filter(|x| *x == eval).count();
    let call = n.iter().position(|x| x == "fixture_call");
    let block = n.iter().position(|x| x == "fixture_block");
    assert!(block < call && call.is_some() && evals >= 2, "{}", show(&f));

    // DWARF lines for an eval-loop frame, where the interpreter's file
    // carries DWARF of its own (pyenv's builds do).
    if interp.own_dwarf {
        let frame = f
            .iter()
            .find(|x| x.function.as_deref() == Some(eval))
            .unwrap();
        let lines = u.add_lines(frame);
        let last = lines.last().unwrap();
        assert!(last.line.is_some(), "{lines:?}");
        // 3.13+ runs the generated cases of Python/generated_cases.c.h.
        let file = last.file.as_deref().unwrap_or("");
        assert!(file.ends_with(".c") || file.ends_with(".c.h"), "{lines:?}");
        assert_eq!(last.function.as_deref(), Some(eval));
    }
}

/// Unwind cost once caches are warm (printed; run with --nocapture).
#[test]
fn warm_unwind_is_fast() {
    let dir = built();
    let mut t = Target::spawn(Command::new(dir.join("fixture_main")).arg("threads"));
    let ready = t.line();
    let tids: Vec<i32> = ready
        .split(' ')
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let t0 = Instant::now();
    let mut u = NativeUnwinder::new(std::rc::Rc::new(pyinspect::target::LiveProcess::new(
        t.pid(),
    )))
    .unwrap();
    let first = unwind_until(&mut u, t.pid(), tids[0], |f| is_blocked_in(f, "read"));
    let cold = t0.elapsed();
    let paused = pause(t.pid(), tids[0]);
    let mem = ProcessMemory::new(t.pid());
    let rounds = 200;
    let t1 = Instant::now();
    for _ in 0..rounds {
        let f = u.unwind(tids[0], &mem).unwrap();
        assert_eq!(f.len(), first.len());
    }
    let warm = t1.elapsed() / rounds;
    drop(paused);
    eprintln!(
        "cold (new + first unwind): {cold:?}; warm unwind of {} frames: {warm:?}",
        first.len()
    );
    // Generous for a debug build on a loaded machine; release is far below.
    assert!(warm < Duration::from_millis(5), "{warm:?}");
}
