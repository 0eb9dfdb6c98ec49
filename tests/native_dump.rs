//! `pyinspect dump --native` through the real binary, on every installed
//! CPython: whole merged stacks (native frames innermost, each eval-loop C
//! frame replaced by the Python frames it runs), native -> Python -> native
//! callbacks, numpy's OpenBLAS kernels (no unwind information), a library
//! loaded late, a library with no symbols, a deleted library, code in a file
//! that is not ELF, threads in syscalls, `--native-all` threads started from
//! C, and `--native` refused with `--nonblocking`.
//!
//! The fixtures are python_fixtures/native/native_dump.py (the C fixture
//! library through ctypes) and matmul.py (numpy). The C code is built here
//! with gcc the way the issue describes it: -O2 -fomit-frame-pointer,
//! stripped to its dynamic symbols.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{
    assert_one_clean_error_line, dump_json, for_each_interpreter, offline_name, pyinspect, Fixture,
    Interpreter,
};
use serde_json::Value;

/// Dumps per check before giving up: a thread may still be on its way from
/// announcing itself into the call it parks in.
const ATTEMPTS: usize = 6;

/// blob.bin: `long f(long (*read)(int, void *, size_t), int fd, void *buf)`
/// returning `read(fd, buf, 1)`, as raw x86-64 code with no ELF around it.
const BLOB: &[u8] = &[
    0x53, // push rbx (keeps the stack aligned for the call)
    0x48, 0x89, 0xf8, // mov rax, rdi
    0x89, 0xf7, // mov edi, esi
    0x48, 0x89, 0xd6, // mov rsi, rdx
    0xba, 0x01, 0x00, 0x00, 0x00, // mov edx, 1
    0xff, 0xd0, // call rax   (returns to offset 0x10)
    0x5b, // pop rbx
    0xc3, // ret
];

use common::run_build_tool as run;

/// Build the C fixtures once per test binary.
fn built() -> &'static Path {
    common::built_fixtures("native-dump-", |dir| {
        let d = |n: &str| dir.join(n).to_str().unwrap().to_string();
        let s = |n: &str| common::native_source(n);
        let gcc = |out: &str, extra: &[&str], sources: &[&str]| {
            let mut c = Command::new("gcc");
            c.args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o"])
                .arg(d(out))
                .args(extra);
            for src in sources {
                c.arg(s(src));
            }
            run(&mut c);
        };
        gcc(
            "libfixture_full.so",
            &[],
            &["fixture.c", "fixture_asm.s", "fixture_threads.c"],
        );
        // With DWARF (its call-site records): helpers ending in jumps.
        gcc("libtailcall.so", &["-g"], &["tailcall.c"]);
        gcc(
            "libnosym_full.so",
            &["-fvisibility=hidden"],
            &["nosym_lib.c"],
        );
        for (full, stripped) in [
            ("libfixture_full.so", "libfixture.so"),
            ("libnosym_full.so", "libnosym.so"),
        ] {
            run(Command::new("strip").args(["--strip-all", "-o", &d(stripped), &d(full)]));
        }
        // Loaded only when the test says so: a copy under another name.
        std::fs::copy(d("libfixture.so"), d("liblate.so")).unwrap();
        std::fs::write(d("blob.bin"), BLOB).unwrap();
    })
}

// ---------------------------------------------------------------- frames

fn is_native(f: &Value) -> bool {
    f["kind"] == "native"
}

fn name(f: &Value) -> &str {
    f["function"].as_str().unwrap_or("")
}

fn module(f: &Value) -> &str {
    f["module"].as_str().unwrap_or("")
}

/// The module-relative offset of a native frame.
fn offset(f: &Value) -> u64 {
    let o = f["offset"].as_str().unwrap_or("");
    u64::from_str_radix(o.trim_start_matches("0x"), 16).unwrap_or(u64::MAX)
}

fn is_interpreter(f: &Value) -> bool {
    let m = module(f);
    m.starts_with("libpython") || (m.starts_with("python") && !m.contains(".so"))
}

/// A frame with no symbol: its name is module+0xSTART, START the start of
/// the CFI range holding the frame's offset (or the offset itself).
fn unnamed(f: &Value) -> bool {
    name(f)
        .strip_prefix(&format!("{}+0x", module(f)))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .is_some_and(|start| start <= offset(f))
}

fn show(frames: &[Value]) -> String {
    frames
        .iter()
        .map(|f| {
            if is_native(f) {
                format!(
                    "    {} [{} {}] {}:{}{}",
                    name(f),
                    module(f),
                    f["offset"].as_str().unwrap_or("?"),
                    f["file"].as_str().unwrap_or("-"),
                    f["line"],
                    if f["inlined"] == true {
                        " (inlined)"
                    } else {
                        ""
                    }
                )
            } else {
                format!("    py {} ({}:{})", name(f), f["file"], f["line"])
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every field of the JSON schema for a native frame. Returns a problem.
fn native_shape(f: &Value) -> Option<String> {
    let ok = f["function"].is_string()
        && !name(f).starts_with("0x")
        && !module(f).is_empty()
        && f["offset"].as_str().is_some_and(|o| o.starts_with("0x"))
        && offset(f) != u64::MAX
        && f["inlined"].is_boolean()
        && f["tail_call"].is_boolean()
        && f.get("tag").is_some_and(Value::is_null)
        && f.get("file").is_some_and(|v| v.is_null() || v.is_string())
        && f.get("line").is_some_and(|v| v.is_null() || v.is_u64());
    (!ok).then(|| format!("malformed native frame {f}"))
}

/// Frames that `--native` must never show: eval loops (replaced by Python
/// frames) and interpreter call machinery.
fn plumbing(f: &Value) -> bool {
    let n = name(f);
    let n = n.split('.').next().unwrap_or(n);
    n.starts_with("_PyEval_EvalFrame")
        || n == "PyEval_EvalFrameEx"
        || n.contains("ectorcall")
        || n.starts_with("_PyObject_")
        || n.starts_with("_PyFunction_")
        || [
            "function_call",
            "instancemethod_call",
            "ext_do_call",
            "object_vacall",
            "call_function",
            "fast_function",
            "thread_run",
            "t_bootstrap",
            "pythread_wrapper",
            "start_thread",
            "clone3",
            "clone",
        ]
        .contains(&n)
}

fn py_key(f: &Value) -> (String, String, u64) {
    (
        name(f).to_string(),
        f["file"].as_str().unwrap_or("").to_string(),
        f["line"].as_u64().unwrap_or(0),
    )
}

fn threads(process: &Value) -> &Vec<Value> {
    process["threads"].as_array().expect("threads array")
}

fn thread_named<'a>(process: &'a Value, n: &str) -> Option<&'a Value> {
    threads(process).iter().find(|t| t["name"] == n)
}

fn frames_of(thread: &Value) -> &[Value] {
    thread["frames"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Problems common to every Python thread of a `--native` dump: its Python
/// frames are exactly those of a plain dump, no native frame lies outside the
/// outermost Python frame, no plumbing is shown, the stack is complete.
fn common_problems(thread: &Value, plain: &Value) -> Vec<String> {
    let mut p = Vec::new();
    let frames = frames_of(thread);
    let py: Vec<_> = frames
        .iter()
        .filter(|f| !is_native(f))
        .map(py_key)
        .collect();
    let want: Vec<_> = frames_of(plain).iter().map(py_key).collect();
    if py != want {
        p.push(format!("Python frames {py:?}, plain dump has {want:?}"));
    }
    if let Some(last_py) = frames.iter().rposition(|f| !is_native(f)) {
        if last_py + 1 != frames.len() {
            p.push("native frames outside the outermost Python frame".into());
        }
    }
    p.extend(
        frames
            .iter()
            .filter(|f| is_native(f))
            .filter_map(native_shape),
    );
    if let Some(f) = frames.iter().find(|f| is_native(f) && plumbing(f)) {
        p.push(format!("interpreter plumbing shown: {}", name(f)));
    }
    if let Some(t) = thread.get("truncated") {
        p.push(format!("truncated: {t}"));
    }
    p
}

/// Native frames inner to the first Python frame, that frame's index.
fn inner_natives(frames: &[Value]) -> (&[Value], usize) {
    let first_py = frames
        .iter()
        .position(|f| !is_native(f))
        .unwrap_or(frames.len());
    (&frames[..first_py], first_py)
}

/// The innermost frames without the unnamed libc frames that lead to a
/// named libc function: sid's glibc enters blocking calls through internal
/// helpers that only its debug file names (not on this host for sid's
/// -hosted interpreters, as gdb would not name them either).
fn past_unnamed_libc(inner: &[Value]) -> &[Value] {
    let n = inner
        .iter()
        .take_while(|f| module(f) == "libc.so.6" && unnamed(f))
        .count();
    match inner.get(n) {
        Some(f) if n > 0 && module(f) == "libc.so.6" && !unnamed(f) => &inner[n..],
        _ => inner,
    }
}

fn expect_py(f: Option<&Value>, function: &str, file: &str, line: u64) -> Option<String> {
    let ok = f.is_some_and(|f| {
        !is_native(f) && name(f) == function && f["file"] == file && f["line"] == line
    });
    (!ok).then(|| format!("expected Python frame {function} at line {line}, got {f:?}"))
}

// ----------------------------------------------------- native_dump.py

struct Expect<'a> {
    ready: &'a Value,
    file: &'a str,
    dir: &'a Path,
    /// The interpreter's static functions have no names here (no symbol table).
    no_symbols: bool,
    /// ... and its DWARF is in the binary itself (not only in a separate
    /// debug file, whose lines `dump` does not read): file:line expected.
    own_dwarf: bool,
}

impl Expect<'_> {
    fn line(&self, mark: &str) -> u64 {
        self.ready["marks"][mark].as_u64().expect("mark")
    }
}

/// read() in libc, then `helpers` unnamed frames of `lib` whose offsets name
/// the static functions of the unstripped build, then `entry` (or no named
/// frame of `lib` at all when `entry` is None), then nothing more of `lib`.
fn library_chain(
    inner: &[Value],
    lib: &str,
    full: &Path,
    helpers: &[&str],
    entry: Option<&str>,
) -> Option<String> {
    if inner.first().map(|f| (name(f), module(f))) != Some(("read", "libc.so.6")) {
        return Some("innermost frame is not libc's read".into());
    }
    for (i, h) in helpers.iter().enumerate() {
        let Some(f) = inner.get(1 + i) else {
            return Some(format!("no frame {} for {h}", 1 + i));
        };
        if module(f) != lib || !unnamed(f) {
            return Some(format!("frame {} should be an unnamed {lib} frame", 1 + i));
        }
        let found = offline_name(full, offset(f).saturating_sub(1));
        if !found.starts_with(h) {
            return Some(format!(
                "frame {} is at {lib}+0x{:x}, which is {found} in the unstripped build, not {h}",
                1 + i,
                offset(f)
            ));
        }
    }
    let mut rest = &inner[(1 + helpers.len()).min(inner.len())..];
    if let Some(e) = entry {
        match rest.first() {
            Some(f) if name(f) == e && module(f) == lib => rest = &rest[1..],
            _ => return Some(format!("{e} ({lib}) does not follow the helpers")),
        }
    }
    if rest.iter().any(|f| module(f) == lib) {
        return Some(format!("more {lib} frames further out"));
    }
    None
}

/// What each Python thread of native_dump.py must look like; empty when fine.
fn thread_problems(x: &Expect, name_: &str, thread: &Value, plain: &Value) -> Vec<String> {
    let mut p = common_problems(thread, plain);
    let frames = frames_of(thread);
    let (inner, first_py) = inner_natives(frames);
    let inner = past_unnamed_libc(inner);
    let fixture = x.dir.join("libfixture_full.so");
    let caller = |function: &str, mark: &str| {
        expect_py(frames.get(first_py), function, x.file, x.line(mark))
    };
    let mut check = |c: Option<String>| p.extend(c);
    match name_ {
        "blocker" => {
            check(library_chain(
                inner,
                "libfixture.so",
                &fixture,
                &["helper_read", "helper_mid"],
                Some("fixture_block"),
            ));
            // libffi and ctypes lie between the library and Python.
            if !inner.iter().any(|f| module(f).starts_with("_ctypes")) {
                check(Some("no _ctypes frame".into()));
            }
            check(caller("blocker", "blocker"));
            if thread["native_entry"] != "fixture_block (libfixture.so)" {
                check(Some(format!("native_entry {}", thread["native_entry"])));
            }
        }
        "spinner" => {
            // Anywhere in the spin: unnamed frames of the library, then fixture_spin.
            match inner.iter().position(|f| name(f) == "fixture_spin") {
                Some(at)
                    if inner[..at]
                        .iter()
                        .all(|f| module(f) == "libfixture.so" && unnamed(f))
                        && inner[at + 1..].iter().all(|f| module(f) != "libfixture.so") => {}
                _ => check(Some("no fixture_spin above libfixture.so frames".into())),
            }
            check(caller("spinner", "spinner"));
            if thread["native_entry"] != "fixture_spin (libfixture.so)" {
                check(Some(format!("native_entry {}", thread["native_entry"])));
            }
        }
        "sleeper" => {
            let sleep = inner.iter().position(|f| name(f) == "fixture_sleep");
            let ok = sleep.is_some_and(|s| {
                s >= 2
                    && inner[..s - 1]
                        .iter()
                        .all(|f| module(f) == "libc.so.6" && name(f).contains("nanosleep"))
                    && module(&inner[s - 1]) == "libfixture.so"
                    && unnamed(&inner[s - 1])
                    && offline_name(&fixture, offset(&inner[s - 1]).saturating_sub(1))
                        .starts_with("helper_sleep")
            });
            if !ok {
                check(Some(
                    "not nanosleep <- helper_sleep <- fixture_sleep".into(),
                ));
            }
            check(caller("sleeper", "sleeper"));
        }
        "nosym" => {
            check(library_chain(
                inner,
                "libnosym.so",
                &x.dir.join("libnosym_full.so"),
                &["nosym_lib_inner", "nosym_lib_outer", "nosym_lib_entry"],
                None,
            ));
            check(caller("nosym", "nosym"));
        }
        "gone" => {
            // Deleted after loading: read back through /proc/PID/map_files,
            // so even its exported symbol is named.
            let lib = format!("libgone-{}.so", x.ready["pid"]);
            check(library_chain(
                inner,
                &lib,
                &fixture,
                &["helper_read", "helper_mid"],
                Some("fixture_block"),
            ));
            check(caller("gone_thread", "gone"));
        }
        "blob" => {
            let ok = inner.len() >= 3
                && name(&inner[0]) == "read"
                && name(&inner[1]) == "blob.bin+0x10"
                && module(&inner[1]) == "blob.bin";
            if !ok {
                check(Some("not read <- blob.bin+0x10 <- ...".into()));
            }
            check(caller("blob_thread", "blob"));
        }
        "reader" | "selector" => {
            let want = if name_ == "reader" { "read" } else { "select" };
            let ok = inner.first().is_some_and(|f| name(f) == want)
                && inner[1..].iter().all(|f| {
                    is_interpreter(f) || (want == "select" && module(f).starts_with("select"))
                });
            if !ok {
                check(Some(format!(
                    "not libc's {want} under interpreter/select frames"
                )));
            }
            check(caller(name_, name_));
        }
        "callback" => {
            // fixture_call -> ctypes callback in_callback -> fixture_block.
            check(library_chain(
                inner,
                "libfixture.so",
                &fixture,
                &["helper_read", "helper_mid"],
                Some("fixture_block"),
            ));
            check(caller("in_callback", "in_callback"));
            let outer = frames[first_py + 1..]
                .iter()
                .position(|f| !is_native(f))
                .map(|i| first_py + 1 + i);
            match outer {
                Some(o) => {
                    let between = &frames[first_py + 1..o];
                    let ok = between
                        .iter()
                        .any(|f| name(f) == "fixture_call" && module(f) == "libfixture.so")
                        && between.iter().all(|f| {
                            ["libfixture.so", "_ctypes", "libffi"]
                                .iter()
                                .any(|m| module(f).starts_with(m))
                                || is_interpreter(f)
                        });
                    if !ok {
                        let why = "between in_callback and callback: not ctypes and libffi \
                                   frames around fixture_call";
                        check(Some(why.into()));
                    }
                    check(expect_py(
                        frames.get(o),
                        "callback",
                        x.file,
                        x.line("callback"),
                    ));
                }
                None => check(Some("no Python frame outside in_callback".into())),
            }
        }
        "sorter" => {
            // sorted(key=sort_key) -> sort_key -> fixture_block.
            check(library_chain(
                inner,
                "libfixture.so",
                &fixture,
                &["helper_read", "helper_mid"],
                Some("fixture_block"),
            ));
            check(caller("sort_key", "sort_key"));
            let between: Vec<&Value> = frames[first_py + 1..]
                .iter()
                .take_while(|f| is_native(f))
                .collect();
            let o = first_py + 1 + between.len();
            let names: Vec<&str> = between.iter().map(|f| name(f)).collect();
            let sort = names
                .iter()
                .position(|n| n.starts_with("list_sort") || n.starts_with("listsort"));
            let sorted = names.iter().position(|n| n.starts_with("builtin_sorted"));
            // A stripped interpreter without its debug file cannot name its
            // static functions; one with DWARF of its own (pyenv's) gives
            // file and line too.
            let lines_ok = sorted.is_some_and(|i| {
                between[i]["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("bltinmodule.c"))
                    && between[i]["line"].is_u64()
            });
            let named_ok =
                x.no_symbols || (sort.is_some() && sort < sorted && (lines_ok || !x.own_dwarf));
            if between.is_empty() || !between.iter().all(|f| is_interpreter(f)) || !named_ok {
                check(Some(format!(
                    "between sort_key and sorter: {names:?}, expected list_sort <- builtin_sorted"
                )));
            }
            check(expect_py(frames.get(o), "sorter", x.file, x.line("sorter")));
        }
        "late" => {
            // Before the trigger: a sleep loop, without liblate.so anywhere.
            if frames.iter().any(|f| module(f) == "liblate.so") {
                check(Some("liblate.so before it was loaded".into()));
            }
            check(caller("late", "late_wait"));
        }
        _ => {}
    }
    p
}

const PY_THREADS: &[&str] = &[
    "MainThread",
    "blocker",
    "spinner",
    "sleeper",
    "callback",
    "sorter",
    "nosym",
    "gone",
    "blob",
    "reader",
    "selector",
    "late",
];

/// Problems of one `--native` dump of native_dump.py.
fn dump_problems(x: &Expect, process: &Value, plain: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for n in PY_THREADS {
        let (Some(t), Some(pt)) = (thread_named(process, n), thread_named(plain, n)) else {
            problems.push(format!("thread {n}: missing"));
            continue;
        };
        let want_tid = &x.ready["threads"][n]["native_id"];
        if *n != "MainThread" && t["os_thread_id"] != *want_tid {
            problems.push(format!("thread {n}: os_thread_id {}", t["os_thread_id"]));
        }
        let p = thread_problems(x, n, t, pt);
        if !p.is_empty() {
            problems.push(format!(
                "thread {n}:\n  {}\n{}",
                p.join("\n  "),
                show(frames_of(t))
            ));
        }
    }
    // The C thread is not Python's: only --native-all shows it.
    let c_tid = &x.ready["c_thread"];
    if threads(process).iter().any(|t| t["os_thread_id"] == *c_tid) {
        problems.push("the C thread is shown without --native-all".into());
    }
    // The one module that cannot be parsed warns, once.
    let warnings: Vec<&str> = process["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if warnings.len() != 1 || !warnings[0].contains("blob.bin") {
        problems.push(format!(
            "expected one warning, about blob.bin: {warnings:?}"
        ));
    }
    problems
}

/// One process's dump, with `extra` flags.
fn dump_one(pid: i32, extra: &[&str]) -> Value {
    let mut d = dump_json(pid, extra);
    assert_eq!(d.len(), 1, "one process expected: {d:?}");
    d.remove(0)
}

/// A plain dump, then one with `flag`, until `problems(native, plain)` finds
/// none (at most ATTEMPTS); fails with the last problems. The plain dump is
/// taken afresh each time: threads that loop (MainThread) move between lines.
fn dump_until(pid: i32, flag: &str, what: &str, problems: impl Fn(&Value, &Value) -> Vec<String>) {
    let mut last = Vec::new();
    for _ in 0..ATTEMPTS {
        let plain = dump_one(pid, &[]);
        let d = dump_one(pid, &[flag]);
        last = problems(&d, &plain);
        if last.is_empty() {
            return;
        }
        sleep(Duration::from_millis(150));
    }
    panic!(
        "{what}: no dump in {ATTEMPTS} was right; last problems:\n{}",
        last.join("\n")
    );
}

fn late_problems(x: &Expect, process: &Value) -> Vec<String> {
    let Some(t) = thread_named(process, "late") else {
        return vec!["no late thread".into()];
    };
    let frames = frames_of(t);
    let (inner, first_py) = inner_natives(frames);
    let mut p: Vec<String> = library_chain(
        past_unnamed_libc(inner),
        "liblate.so",
        &x.dir.join("libfixture_full.so"),
        &["helper_read", "helper_mid"],
        Some("fixture_block"),
    )
    .into_iter()
    .collect();
    p.extend(expect_py(
        frames.get(first_py),
        "late",
        x.file,
        x.line("late"),
    ));
    if !p.is_empty() {
        p.push(show(frames));
    }
    p
}

fn foreign_problems(x: &Expect, pid: i32, process: &Value) -> Vec<String> {
    let mut p = Vec::new();
    let tasks: BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let shown: BTreeSet<u64> = threads(process)
        .iter()
        .filter_map(|t| t["os_thread_id"].as_u64())
        .collect();
    if tasks != shown {
        p.push(format!("threads {shown:?}, the kernel lists {tasks:?}"));
    }
    let c_tid = &x.ready["c_thread"];
    let Some(t) = threads(process)
        .iter()
        .find(|t| t["os_thread_id"] == *c_tid)
    else {
        p.push("the C thread is missing".into());
        return p;
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{c_tid}/comm")).unwrap();
    if t["name"] != comm.trim() || comm.trim() != "c-worker" {
        p.push(format!("C thread named {}, comm is {comm:?}", t["name"]));
    }
    let all = frames_of(t);
    if all.iter().any(|f| !is_native(f)) {
        p.push("Python frames in the C thread".into());
    }
    p.extend(all.iter().filter_map(native_shape));
    let frames = past_unnamed_libc(all);
    // read <- helper_read <- helper_mid <- fixture_block <- c_thread
    // <- start_thread <- clone3: --native-all keeps the thread's root.
    let full = x.dir.join("libfixture_full.so");
    p.extend(library_chain(
        frames.get(..4).unwrap_or(frames),
        "libfixture.so",
        &full,
        &["helper_read", "helper_mid"],
        Some("fixture_block"),
    ));
    let names: Vec<&str> = frames.iter().map(name).collect();
    let thread_fn = frames
        .get(4)
        .filter(|f| module(f) == "libfixture.so" && unnamed(f))
        .map(|f| offline_name(&full, offset(f).saturating_sub(1)))
        .unwrap_or_default();
    // A libc without symbols (sid's, its debug file not on this host)
    // cannot name its thread start: two libc frames, as gdb shows them.
    let root_named = names.get(5..) == Some(&["start_thread", "clone3"][..]);
    let root_unnamed = frames.len() == 7
        && frames[5..]
            .iter()
            .all(|f| module(f) == "libc.so.6" && unnamed(f));
    if thread_fn != "c_thread" || !(root_named || root_unnamed) {
        p.push(
            "the C thread does not go fixture_block <- c_thread <- start_thread <- clone3".into(),
        );
    }
    if !p.is_empty() {
        p.push(show(frames));
    }
    p
}

#[test]
fn native_stacks_on_every_interpreter() {
    let dir = built();
    for_each_interpreter(
        "native_stacks",
        |_| true,
        |interp| {
            let fx = Fixture::spawn(interp, "native/native_dump.py", &[dir.to_str().unwrap()]);
            let pid = fx.pid;
            let ready = fx.ready.clone();
            let file = ready["file"].as_str().unwrap().to_string();
            let x = Expect {
                ready: &ready,
                file: &file,
                dir,
                no_symbols: !interp.symbols,
                own_dwarf: interp.own_dwarf,
            };

            // 5: --native with --nonblocking is refused, with one line.
            for flag in ["--native", "--native-all", "--native-debug-info"] {
                let p = pid.to_string();
                let out = pyinspect(&["dump", "--pid", &p, flag, "--nonblocking"]);
                let line = assert_one_clean_error_line(&out);
                assert!(line.contains("--nonblocking"), "{line}");
            }

            // 1, 2, 4, 5: every thread's whole merged stack.
            dump_until(pid, "--native", "native stacks", |d, plain| {
                dump_problems(&x, d, plain)
            });
            // The spinner anywhere in its loop: a few more samples.
            let plain = dump_one(pid, &[]);
            let plain_spinner = thread_named(&plain, "spinner").expect("spinner");
            for _ in 0..3 {
                let d = dump_one(pid, &["--native"]);
                let t = thread_named(&d, "spinner").expect("spinner");
                let p = thread_problems(&x, "spinner", t, plain_spinner);
                assert!(
                    p.is_empty(),
                    "spinner:\n{}\n{}",
                    p.join("\n"),
                    show(frames_of(t))
                );
            }

            // The text output: the entry point in the header, module+offset names.
            let p = pid.to_string();
            let out = pyinspect(&["dump", "--pid", &p, "--native"]);
            out.assert_success();
            let tid = &ready["threads"]["blocker"]["native_id"];
            for needle in [
                format!("Thread {tid} \"blocker\""),
                "in fixture_block (libfixture.so)".to_string(),
                "    libfixture.so+0x".to_string(),
                "    read (libc.so.6)".to_string(),
                "    blob.bin+0x10\n".to_string(),
                format!("    blocker ({file}:{})", x.line("blocker")),
            ] {
                assert!(
                    out.stdout.contains(&needle),
                    "text lacks {needle:?}\n{}",
                    out.describe()
                );
            }

            // 6: --native-all adds the C thread, named from /proc.
            dump_until(pid, "--native-all", "--native-all", |d, _| {
                foreign_problems(&x, pid, d)
            });

            // 4: a library loaded after a first dump.
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            assert!(!maps.contains("liblate.so"), "liblate.so loaded too early");
            std::fs::write(dir.join(format!("trigger-{pid}")), b"").unwrap();
            let t0 = Instant::now();
            loop {
                let d = dump_one(pid, &["--native"]);
                let p = late_problems(&x, &d);
                if p.is_empty() {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "late library:\n{}",
                    p.join("\n")
                );
                sleep(Duration::from_millis(100));
            }
            let _ = std::fs::remove_file(dir.join(format!("trigger-{pid}")));
        },
    );
}

// ------------------------------------------------------------ tailcall.py

/// What is wrong with the tail-call fixture's threads in one dump: the
/// unique chain's functions shown as tail-call frames between the leaf and
/// the entry point, nothing between them where the chain is ambiguous or
/// unknowable.
fn tail_call_problems(ready: &Value, dump: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (thread, expect) in [
        ("chain", &["tc_leaf", "tc_mid2", "tc_mid1", "tc_chain"][..]),
        ("fork", &["tc_leaf2", "tc_fork"][..]),
        ("indirect", &["tc_leaf", "tc_indirect"][..]),
    ] {
        let tid = ready["threads"][thread]["native_id"].as_u64();
        let Some(t) = threads(dump)
            .iter()
            .find(|t| t["os_thread_id"].as_u64() == tid)
        else {
            out.push(format!("{thread}: no thread {tid:?}"));
            continue;
        };
        let frames = frames_of(t);
        if let Some(p) = frames
            .iter()
            .filter(|f| is_native(f))
            .find_map(native_shape)
        {
            out.push(format!("{thread}: {p}"));
        }
        // The library's frames, past the leaf's inlined helper.
        let ours: Vec<&Value> = frames
            .iter()
            .filter(|f| module(f) == "libtailcall.so" && f["inlined"] == false)
            .collect();
        let names: Vec<&str> = ours.iter().map(|f| name(f)).collect();
        let tails: Vec<bool> = ours.iter().map(|f| f["tail_call"] == true).collect();
        let want_tails: Vec<bool> = (0..expect.len())
            .map(|i| i > 0 && i + 1 < expect.len())
            .collect();
        if names != expect || tails != want_tails {
            out.push(format!(
                "{thread}: {names:?} (tail calls {tails:?}), want {expect:?} ({want_tails:?})\n{}",
                show(frames)
            ));
            continue;
        }
        for f in ours.iter().filter(|f| f["tail_call"] == true) {
            let at = f["file"].as_str().unwrap_or("");
            if !at.ends_with("tailcall.c") || !f["line"].is_u64() {
                out.push(format!("{thread}: tail-call frame without file:line: {f}"));
            }
        }
    }
    out
}

/// Functions that ended in a jump to their callee (gcc -O2 tail calls) are
/// shown between the callee and the caller, as gdb shows them, where the
/// library's DWARF call-site records allow exactly one chain; nowhere else.
#[test]
fn tail_call_frames_on_every_interpreter() {
    let dir = built();
    for_each_interpreter(
        "tail_call_frames",
        |_| true,
        |interp| {
            let fx = Fixture::spawn(interp, "native/tailcall.py", &[dir.to_str().unwrap()]);
            let ready = fx.ready.clone();
            let pid = fx.pid;
            let mut last = Vec::new();
            for _ in 0..ATTEMPTS {
                let d = dump_one(pid, &["--native"]);
                last = tail_call_problems(&ready, &d);
                if last.is_empty() {
                    break;
                }
                sleep(Duration::from_millis(100));
            }
            assert!(last.is_empty(), "{}", last.join("\n"));
            // The text output marks them.
            let p = pid.to_string();
            let out = pyinspect(&["dump", "--pid", &p, "--native"]);
            out.assert_success();
            let marked = out
                .stdout
                .lines()
                .filter(|l| l.trim_start().starts_with("tc_mid") && l.ends_with(" (tail call)"))
                .count();
            assert_eq!(marked, 2, "{}", out.describe());
            assert!(!out.stdout.contains("tc_left"), "{}", out.describe());
        },
    );
}

// ------------------------------------------------------------ matmul.py

/// The interpreters the numpy test runs on: one before 3.11 (an eval-loop C
/// frame per Python frame) and one after.
const NUMPY_ON: &[(u32, u32)] = &[(3, 9), (3, 12)];
const MATMUL_SAMPLES: usize = 10;

/// numpy (with its bundled OpenBLAS) in `interp`, installed with pip when
/// missing (.ci/run installs it into 3.12 beforehand).
fn ensure_numpy(interp: &Interpreter) {
    let has = |py: &Path| {
        Command::new(py)
            .args(["-c", "import numpy"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has(&interp.python) {
        return;
    }
    let out = Command::new(&interp.python)
        .args(["-m", "pip", "install", "-q", "numpy"])
        .output()
        .expect("run pip");
    assert!(
        out.status.success() && has(&interp.python),
        "cannot install numpy into {} (`{} -m pip install numpy`), which the OpenBLAS test needs:\n{}{}",
        interp.label,
        interp.python.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_openblas(f: &Value) -> bool {
    module(f).contains("openblas")
}

/// One sample of the matmul thread: Python frames intact, and when it is in
/// OpenBLAS, the chain down from the kernel through numpy's C functions to
/// the interpreter's `@` and the Python caller.
fn matmul_problems(thread: &Value, plain: &Value, file: &str, line: u64) -> Vec<String> {
    let mut p = common_problems(thread, plain);
    let frames = frames_of(thread);
    let (inner, first_py) = inner_natives(frames);
    let inner = past_unnamed_libc(inner);
    p.extend(expect_py(frames.get(first_py), "matmul", file, line));
    if inner.is_empty() {
        p.push("no native frames".into());
    }
    // Between two products the thread may be elsewhere (freeing the last
    // result from the eval loop, say): only a thread in OpenBLAS has a
    // chain to check.
    if inner.first().is_some_and(is_openblas) {
        if inner.last().is_some_and(|f| !is_interpreter(f)) {
            p.push("the frame next to the Python caller is not the interpreter's".into());
        }
        let blas_end = inner.iter().position(|f| !is_openblas(f)).unwrap_or(0);
        let names: Vec<&str> = inner.iter().map(name).collect();
        let numpy_end = inner[blas_end..]
            .iter()
            .position(is_interpreter)
            .map_or(inner.len(), |i| blas_end + i);
        let numpy = &inner[blas_end..numpy_end];
        let ok = names[..blas_end].iter().any(|n| n.contains("dgemm"))
            && !numpy.is_empty()
            && numpy
                .iter()
                .all(|f| module(f).starts_with("_multiarray_umath"))
            && numpy.iter().any(|f| name(f).starts_with("DOUBLE_matmul"))
            && numpy.iter().any(|f| name(f).contains("ufunc"));
        if !ok {
            p.push("not OpenBLAS dgemm <- numpy DOUBLE_matmul ... ufunc <- interpreter".into());
        }
    }
    if !p.is_empty() {
        p.push(show(frames));
    }
    p
}

#[test]
fn numpy_matmul_through_openblas() {
    for_each_interpreter(
        "numpy_openblas",
        |i| i.label.starts_with("pyenv") && NUMPY_ON.contains(&i.version),
        |interp| {
            ensure_numpy(interp);
            let fx = Fixture::spawn_with_timeout(
                interp,
                "native/matmul.py",
                &[],
                Duration::from_secs(60),
            );
            let pid = fx.pid;
            let file = fx.ready["file"].as_str().unwrap().to_string();
            let line = fx.ready["line"].as_u64().unwrap();
            let tid = fx.ready["native_id"].clone();
            let plain = dump_one(pid, &[]);
            let find = |d: &Value| -> Value {
                threads(d)
                    .iter()
                    .find(|t| t["os_thread_id"] == tid)
                    .cloned()
                    .unwrap_or_else(|| panic!("no matmul thread in {d}"))
            };
            let plain_thread = find(&plain);
            let mut kernels = 0;
            for i in 0..MATMUL_SAMPLES {
                let d = dump_one(pid, &["--native"]);
                let t = find(&d);
                let p = matmul_problems(&t, &plain_thread, &file, line);
                assert!(p.is_empty(), "sample {i}:\n{}", p.join("\n"));
                kernels += usize::from(
                    frames_of(&t)
                        .iter()
                        .any(|f| is_openblas(f) && name(f).contains("kernel")),
                );
            }
            eprintln!(
                "numpy_openblas [{}]: numpy {}, {kernels}/{MATMUL_SAMPLES} samples in a GEMM kernel",
                interp.label, fx.ready["numpy"]
            );
            assert!(kernels > 0, "no sample caught a GEMM kernel");

            // --native-all: OpenBLAS's worker, named from /proc (or, where
            // that is only the process's name, from its worker loop), in
            // OpenBLAS.
            let d = dump_one(pid, &["--native-all"]);
            let python: BTreeSet<u64> = threads(&plain)
                .iter()
                .filter_map(|t| t["os_thread_id"].as_u64())
                .collect();
            let foreign: Vec<&Value> = threads(&d)
                .iter()
                .filter(|t| {
                    !t["os_thread_id"]
                        .as_u64()
                        .is_some_and(|x| python.contains(&x))
                })
                .collect();
            assert!(!foreign.is_empty(), "no OpenBLAS worker thread shown");
            for t in &foreign {
                let comm =
                    std::fs::read_to_string(format!("/proc/{pid}/task/{}/comm", t["os_thread_id"]))
                        .unwrap_or_default();
                if t["name_source"] == "stack" {
                    assert_eq!(t["name"], "OpenBLAS worker", "named from its stack: {t}");
                } else {
                    assert_eq!(t["name"], comm.trim(), "thread named from comm: {t}");
                }
            }
            assert!(
                foreign.iter().any(|t| frames_of(t).iter().any(is_openblas)),
                "no worker thread in OpenBLAS:\n{}",
                foreign
                    .iter()
                    .map(|t| show(frames_of(t)))
                    .collect::<Vec<_>>()
                    .join("\n\n")
            );
        },
    );
}

/// The functions of the blocker thread's native stack, as `dump --native`
/// names them with `env` set (HOME and DEBUGINFOD_CACHE_PATH only).
fn blocker_names(pid: i32, env: &[(&str, &Path)]) -> Vec<String> {
    let mut c = Command::new(common::pyinspect_bin());
    c.args(["dump", "--pid", &pid.to_string(), "--json", "--native"])
        .env_remove("DEBUGINFOD_CACHE_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = common::run_command(c, Duration::from_secs(60));
    out.assert_success();
    let d = out.json_lines().remove(0);
    let t = thread_named(&d, "blocker").expect("blocker thread");
    frames_of(t)
        .iter()
        .filter(|f| is_native(f) && module(f) == "libfixture.so")
        .map(|f| name(f).to_string())
        .collect()
}

/// Names from a debuginfod client's cache: the stripped library's static
/// helpers are named once the cache holds its debug file under its real
/// build-id, as `$DEBUGINFOD_CACHE_PATH/BUILDID/debuginfo` or
/// `~/.cache/debuginfod_client/BUILDID/debuginfo` (where `debuginfod-find`
/// and gdb put what they fetch); a file there whose build-id differs is not
/// used. One interpreter: the lookup is the library's, not Python's.
#[test]
fn debuginfod_cache_names_stripped_functions() {
    use object::Object;
    let dir = built();
    let interp = common::find_interpreter("pyenv's 3.12", |i| {
        i.version == (3, 12) && i.label.starts_with("pyenv") && !i.debug
    });
    let fx = Fixture::spawn(interp, "native/native_dump.py", &[dir.to_str().unwrap()]);
    let lib = std::fs::read(dir.join("libfixture.so")).unwrap();
    let id: String = object::File::parse(&lib[..])
        .unwrap()
        .build_id()
        .unwrap()
        .expect("gcc gives the library a build-id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let empty_home = tmp.path().join("empty-home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let put = |cache: &Path, from: &Path| {
        std::fs::create_dir_all(cache.join(&id)).unwrap();
        run(Command::new("objcopy").args([
            "--only-keep-debug",
            from.to_str().unwrap(),
            cache.join(&id).join("debuginfo").to_str().unwrap(),
        ]));
    };
    let cache = tmp.path().join("cache");
    put(&cache, &dir.join("libfixture_full.so"));
    let home = tmp.path().join("home");
    put(
        &home.join(".cache/debuginfod_client"),
        &dir.join("libfixture_full.so"),
    );
    // The same library linked with another build-id (so the same names at
    // the same addresses), filed under this build's id: not to be used.
    let other = tmp.path().join("libfixture_other.so");
    let mut c = Command::new("gcc");
    c.args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC"])
        .arg(format!("-Wl,--build-id=0x{}", "ab".repeat(20)))
        .arg("-o")
        .arg(&other);
    for src in ["fixture.c", "fixture_asm.s", "fixture_threads.c"] {
        c.arg(common::native_source(src));
    }
    run(&mut c);
    let wrong = tmp.path().join("wrong");
    put(&wrong, &other);

    let named = |n: &[String]| {
        ["helper_read", "helper_mid"]
            .iter()
            .all(|h| n.iter().any(|x| x == h))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let bare = loop {
        let n = blocker_names(fx.pid, &[("HOME", &empty_home)]);
        if n.iter().any(|x| x == "fixture_block") || Instant::now() > deadline {
            break n;
        }
        sleep(Duration::from_millis(100));
    };
    assert!(bare.iter().any(|x| x == "fixture_block"), "{bare:?}");
    assert!(!named(&bare), "named without a debug file: {bare:?}");
    let n = blocker_names(
        fx.pid,
        &[("HOME", &empty_home), ("DEBUGINFOD_CACHE_PATH", &cache)],
    );
    assert!(named(&n), "$DEBUGINFOD_CACHE_PATH: {n:?}");
    let n = blocker_names(fx.pid, &[("HOME", &home)]);
    assert!(named(&n), "~/.cache/debuginfod_client: {n:?}");
    let n = blocker_names(
        fx.pid,
        &[("HOME", &empty_home), ("DEBUGINFOD_CACHE_PATH", &wrong)],
    );
    assert!(!named(&n), "another build's debug file was used: {n:?}");
    eprintln!("debuginfod cache: covered {} (build-id {id})", interp.label);
}
