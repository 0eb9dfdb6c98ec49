//! gdb as the oracle for `--native`: each workload runs, is stopped with
//! SIGSTOP (three times, at three moments of its loop), and gdb's `thread
//! apply all bt` and `pyinspect dump --native-all --json` read the same
//! stopped process (which pyinspect must leave stopped). For every thread
//! the two native stacks are aligned frame by frame (module + function,
//! compiler suffixes and argument lists stripped; each run of Python frames
//! stands for the eval-loop C frame it replaces), and an agreement table is
//! printed. Then 100 dumps per workload check that the Python frames are
//! merged where they belong.
//!
//! Required over all workloads: at least 98% of gdb's frames present and
//! named alike, no frame that gdb does not have (gdb's frames past the
//! thread's start excepted), merges right in at least 99% of the dumps.
//!
//! The wheels (numpy, scipy, tokenizers, onnx, onnxruntime, jax) come from
//! `.ci/native-workloads`; torch (in a venv of pyenv's 3.12) from
//! `.ci/torch-workload`; Debian sid's interpreters from `.ci/sid-pythons`.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{dump_json, Fixture, Interpreter};
use serde_json::Value;

const SID: &str = "/opt/pyinspect-sid/root";
/// Dumps per workload for the merge check ($PYINSPECT_ORACLE_REPEATS
/// while working on it).
fn repeats() -> usize {
    std::env::var("PYINSPECT_ORACLE_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

use common::run_build_tool as run;

/// The workload libraries, built once: the segment-gap library (code
/// segment starting mid-page), the deadlock (stripped, with MiniDebugInfo)
/// and the C++ fixture.
fn built() -> &'static Path {
    common::built_fixtures("native-gdb-", |dir| {
        let d = |n: &str| dir.join(n).to_str().unwrap().to_string();
        let s = |n: &str| common::native_source(n);
        run(Command::new("gcc").args([
            "-O1",
            "-g",
            "-shared",
            "-fPIC",
            "-fno-omit-frame-pointer",
            &format!("-Wl,-T,{}", s("segment_gap.ld")),
            "-o",
            &d("libgap.so"),
            &s("segment_gap.c"),
        ]));
        run(Command::new("gcc").args([
            "-O2",
            "-g",
            "-shared",
            "-fPIC",
            "-o",
            &d("libdeadlock_full.so"),
            &s("deadlock.c"),
            "-lpthread",
        ]));
        minidebuginfo(&d("libdeadlock_full.so"), &d("libdeadlock.so"), dir);
        run(Command::new("g++").args([
            "-O2",
            "-g",
            "-shared",
            "-fPIC",
            "-o",
            &d("libcxx.so"),
            &s("cxx_fixture.cpp"),
        ]));
    })
}

/// `out`: `full` stripped of everything, with MiniDebugInfo as Fedora
/// builds it: the function symbols (static `take_second` among them) in an
/// xz-compressed ELF file in `.gnu_debugdata`. Only that section names the
/// static functions, for gdb and for pyinspect alike.
fn minidebuginfo(full: &str, out: &str, dir: &Path) {
    let tmp = |n: &str| dir.join(n).to_str().unwrap().to_string();
    run(Command::new("objcopy").args(["--only-keep-debug", full, &tmp("dbg")]));
    let nm = Command::new("nm")
        .args(["--format=posix", "--defined-only", &tmp("dbg")])
        .output()
        .expect("nm");
    let funcs: String = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            matches!(it.next()?, "T" | "t").then(|| format!("{name}\n"))
        })
        .collect();
    std::fs::write(tmp("funcs"), funcs).unwrap();
    run(Command::new("objcopy").args([
        "-S",
        "--remove-section",
        ".comment",
        &format!("--keep-symbols={}", tmp("funcs")),
        &tmp("dbg"),
        &tmp("mini"),
    ]));
    run(Command::new("xz").args(["-f", &tmp("mini")]));
    run(Command::new("strip").args(["--strip-all", "-o", out, full]));
    run(Command::new("objcopy").args([
        &format!("--add-section=.gnu_debugdata={}", tmp("mini.xz")),
        out,
    ]));
}

/// An interpreter of the shared matrix (tests/common), by what it is.
fn matrix(what: &str, version: (u32, u32), kind: &str) -> Interpreter {
    common::find_interpreter(what, |i| {
        i.version == version && i.label.starts_with(kind) && !i.debug
    })
    .clone()
}

// ------------------------------------------------------------ gdb side

#[derive(Debug, Clone)]
struct Frame {
    /// Normalised function name; None for `??` / module+offset.
    name: Option<String>,
    module: Option<String>,
    /// Stands for one eval-loop C frame (pyinspect: a run of Python frames;
    /// gdb: a frame of `_PyEval_EvalFrameDefault` or an unnamed frame).
    python: bool,
    /// A physical (not inlined) frame's file offset of its pc, when known:
    /// two aliases of one function (`pthread_cond_timedwait` and glibc's
    /// DWARF name `___pthread_cond_timedwait64`) are the same frame.
    at: Option<u64>,
    /// gdb's TAILCALL_FRAME: a caller that jumped to its callee (a tail
    /// call) has no frame on the stack any more; gdb rebuilds it from the
    /// DWARF call-site records (DW_TAG_call_site, DW_AT_call_tail_call).
    /// pyinspect rebuilds them the same way (its `tail_call` frames); they
    /// are gdb's frames to match like any other, and the table says how
    /// many of them pyinspect missed.
    tail_call: bool,
    /// gdb unwound it from a junk frame (see [`gdb_stacks`]): a guess.
    guessed: bool,
}

/// Names as both tools print them, made comparable: no argument list, no
/// compiler suffix (`.isra.0`, `.constprop.0`, `.lto_priv.0`, `.part.0`,
/// `.cold`), no symbol version, no glibc-internal prefix or leading
/// underscores (`__GI___clock_nanosleep` is `clock_nanosleep`).
fn normalise(name: &str) -> String {
    // gdb prints Rust v0 crate disambiguators (`std[c29fa2d9dbea2b0e]`).
    let mut owned = String::with_capacity(name.len());
    let mut rest = name.trim();
    while let Some(i) = rest.find('[') {
        let close = rest[i..].find(']').map(|j| i + j);
        match close {
            Some(j) if j > i + 1 && rest[i + 1..j].bytes().all(|b| b.is_ascii_hexdigit()) => {
                owned.push_str(&rest[..i]);
                rest = &rest[j + 1..];
            }
            _ => {
                owned.push_str(&rest[..=i]);
                rest = &rest[i + 1..];
            }
        }
    }
    owned.push_str(rest);
    let mut n = owned.as_str();
    // Compiler suffixes wherever the name ends.
    loop {
        let before = n;
        for suffix in [".cold", ".localalias"] {
            n = n.strip_suffix(suffix).unwrap_or(n);
        }
        for marker in [".llvm.", ".constprop.", ".isra.", ".part.", ".lto_priv."] {
            if let Some(i) = n.rfind(marker) {
                if n[i + marker.len()..].bytes().all(|b| b.is_ascii_digit()) {
                    n = &n[..i];
                }
            }
        }
        if n == before {
            break;
        }
    }
    if let Some(i) = n.find("@@").or_else(|| n.find('@')) {
        n = &n[..i];
    }
    if let Some(i) = argument_list(n, false) {
        n = &n[..i];
    }
    if let Some(i) = n.find('.').filter(|&i| i > 0 && !n.contains("::")) {
        n = &n[..i];
    }
    // A return type that the demangler kept (`void f<T>()`).
    if let Some((a, b)) = n.split_once(' ') {
        if !a.contains(['<', '(', ':']) && b.contains("::") {
            n = b;
        }
    }
    // glibc's internal names of one function: __GI___clock_nanosleep,
    // __libc_write, __libc_start_main_impl.
    let n = n.trim_start_matches("__GI_").trim_start_matches('_');
    let n = n.strip_prefix("libc_").unwrap_or(n);
    let n = n
        .strip_suffix("_impl")
        .filter(|_| n.starts_with("start_main"))
        .unwrap_or(n);
    n.trim().to_string()
}

/// Where a function's argument list starts in `name` (with `spaced`, only
/// a `(` after a space, as gdb prints `NAME (ARGS) from LIB`): the first
/// `(` outside template arguments and braces, so that `f<void (int)>(…)`,
/// Rust's `<RawVec<(u32, String)>>::grow_one` and `operator()` keep what
/// they hold.
fn argument_list(name: &str, spaced: bool) -> Option<usize> {
    let b = name.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        // (Bytes: a name may hold `…`.)
        let after_operator = b[..i].ends_with(b"operator");
        match b[i] {
            b'<' if after_operator || b[..i].ends_with(b"operator<") => {}
            b'>' if after_operator || b[..i].ends_with(b"-") => {}
            b'(' if after_operator && b[i..].starts_with(b"()") => i += 1,
            b'<' | b'{' => depth += 1,
            b'>' | b'}' => depth = depth.saturating_sub(1),
            b'(' if depth == 0 && (!spaced || (i > 0 && b[i - 1] == b' ')) => {
                return Some(if spaced { i - 1 } else { i });
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A library's name without its version (`libffi.so.8` and
/// `libffi.so.8.1.2` are one file through its symlink).
fn module_name(path: &str) -> String {
    let b = basename(path);
    match b.find(".so.") {
        Some(i) => b[..i + 3].to_string(),
        None => b,
    }
}

fn is_eval(name: &str) -> bool {
    matches!(name, "PyEval_EvalFrameDefault" | "PyEval_EvalFrameEx")
}

fn is_start(name: &str) -> bool {
    matches!(name, "start" | "clone" | "clone3" | "start_thread")
}

fn basename(p: &str) -> String {
    p.rsplit('/').next().unwrap_or(p).to_string()
}

/// Executable mappings of `pid` (start, end, file offset).
fn code_ranges(pid: i32) -> Vec<(u64, u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?;
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let (a, b) = range.split_once('-')?;
            perms.contains('x').then(|| {
                (
                    u64::from_str_radix(a, 16).unwrap_or(0),
                    u64::from_str_radix(b, 16).unwrap_or(0),
                    offset,
                )
            })
        })
        .collect()
}

/// A gdb Python script printing `TAILCALL tid level` for each frame of
/// each thread that gdb synthesised for a tail call (its TAILCALL_FRAME):
/// levels are `bt`'s frame numbers.
fn tail_call_script() -> PathBuf {
    let path = built().join("tail_calls.py");
    std::fs::write(
        &path,
        "import gdb\n\
         for inf in gdb.inferiors():\n\
         \x20   for th in inf.threads():\n\
         \x20       th.switch()\n\
         \x20       f, level = gdb.newest_frame(), 0\n\
         \x20       while f is not None and level < 10000:\n\
         \x20           if f.type() == gdb.TAILCALL_FRAME:\n\
         \x20               print('TAILCALL %d %d' % (th.ptid[1], level))\n\
         \x20           try:\n\
         \x20               f = f.older()\n\
         \x20           except gdb.error:\n\
         \x20               break\n\
         \x20           level += 1\n",
    )
    .unwrap();
    path
}

/// `thread apply all bt` of a stopped process: frames per kernel tid, and
/// how many frames were junk: a pc outside all code, left out. gdb's
/// heuristic unwinder produces those after a frame without CFI: it takes
/// `rbp` for a frame pointer, and MKL's hand-written sgemm kernels (say)
/// keep something else there. Every frame gdb prints after one is unwound
/// from the junk frame's registers: some are back on the live chain, some
/// are stale return addresses left lower on the stack
/// (`mkl_blas_def_sgemm_getbufs_bdz`, whose call returned long before) or
/// unnamed words that happen to point into code. They are marked
/// `guessed`: matched, they count; unmatched, they are not frames
/// pyinspect missed (see [`compare_stopped`]). The calls inlined into an
/// eval-loop frame are kept: pyinspect shows them with --native-all, inner
/// to the Python frames. Frames past the thread's start are gdb's junk.
fn gdb_stacks(pid: i32) -> (HashMap<i32, Vec<Frame>>, usize) {
    let code = code_ranges(pid);
    let mut junk = 0;
    let mut lost: std::collections::HashSet<i32> = std::collections::HashSet::new();
    let mut gdb = Command::new("gdb");
    // A target in another root (chroot, container): gdb must read its
    // files, and its debug files, from there.
    let root = format!("/proc/{pid}/root");
    if std::fs::read_link(&root).is_ok_and(|r| r != Path::new("/")) {
        gdb.args(["-iex", &format!("set sysroot {root}")])
            .args([
                "-iex",
                &format!("set debug-file-directory {root}/usr/lib/debug"),
            ])
            .arg(format!("/proc/{pid}/exe"));
    }
    let out = gdb
        .args(["-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "set print frame-arguments none"])
        .args(["-ex", "thread apply all bt"])
        .args(["-x", tail_call_script().to_str().unwrap()])
        .output()
        .expect("run gdb");
    let text = String::from_utf8_lossy(&out.stdout);
    // "TAILCALL tid level" from the script: which of bt's frames gdb made up.
    let tail_calls: std::collections::HashSet<(i32, usize)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.strip_prefix("TAILCALL ")?.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let mut stacks: HashMap<i32, Vec<Vec<(Frame, bool)>>> = HashMap::new();
    let mut tid = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread ") {
            tid = rest
                .split("(LWP ")
                .nth(1)
                .map(|s| {
                    s.chars()
                        .take_while(char::is_ascii_digit)
                        .collect::<String>()
                })
                .and_then(|s| s.parse::<i32>().ok());
            if let Some(t) = tid {
                stacks.insert(t, Vec::new());
            }
            continue;
        }
        let Some(t) = tid else { continue };
        let Some(rest) = line.strip_prefix('#') else {
            continue;
        };
        let level: usize = rest
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(usize::MAX);
        let tail_call = tail_calls.contains(&(t, level));
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
        let (physical, body) = match rest.split_once(" in ") {
            Some((a, b)) if a.starts_with("0x") => (true, b),
            _ => (false, rest),
        };
        let mut at = None;
        if physical {
            let pc = rest
                .split_whitespace()
                .next()
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                .unwrap_or(0);
            // A return address points just past a call, inside code.
            let mapping = code
                .iter()
                .find(|&&(a, b, _)| pc.wrapping_sub(1) >= a && pc.wrapping_sub(1) < b);
            match mapping {
                Some(&(a, _, off)) => at = Some(pc - a + off),
                None => {
                    junk += 1;
                    lost.insert(t);
                    continue;
                }
            }
        }
        let func = body[..argument_list(body, true).unwrap_or(body.len())].trim();
        let module = body
            .rsplit_once(" from ")
            .map(|(_, m)| module_name(m.trim()));
        let name = (func != "??").then(|| normalise(func));
        let python = name.as_deref().is_some_and(is_eval);
        let f = Frame {
            name,
            module,
            python,
            at,
            tail_call,
            guessed: lost.contains(&t),
        };
        let groups = stacks.get_mut(&t).unwrap();
        // A frame with an address starts a physical frame; those without
        // one are callers inlined into it (gdb prints them after it).
        if physical || groups.is_empty() {
            groups.push(vec![(f, physical)]);
        } else {
            // The pc belongs to the physical function, the group's last.
            let g = groups.last_mut().unwrap();
            let mut f = f;
            if let Some(last) = g.last_mut() {
                f.at = last.0.at.take();
            }
            g.push((f, physical));
        }
    }
    let stacks = stacks
        .into_iter()
        .map(|(t, groups)| {
            let mut frames = Vec::new();
            'outer: for g in groups {
                for (f, _) in g {
                    let start = f.name.as_deref().is_some_and(is_start);
                    frames.push(f);
                    if start {
                        break 'outer;
                    }
                }
            }
            (t, frames)
        })
        .collect();
    (stacks, junk)
}

// ------------------------------------------------------- pyinspect side

/// A dump's native stacks per kernel tid, each run of Python frames as one
/// `python` frame; and whether the thread was marked incomplete.
fn pyinspect_stacks(dump: &Value) -> HashMap<i32, (Vec<Frame>, Option<String>)> {
    let mut out = HashMap::new();
    for t in dump["threads"].as_array().into_iter().flatten() {
        let Some(tid) = t["os_thread_id"].as_i64() else {
            continue;
        };
        let mut frames: Vec<Frame> = Vec::new();
        for f in t["frames"].as_array().into_iter().flatten() {
            if f["kind"] == "native" {
                // gdb prints whole signatures: compared with pyinspect's.
                let func = f["signature"]
                    .as_str()
                    .or(f["function"].as_str())
                    .unwrap_or("");
                let raw = f["module"].as_str().unwrap_or("");
                let unnamed = func.starts_with(&format!("{raw}+0x"));
                let name = (!unnamed).then(|| normalise(func));
                let start = name.as_deref().is_some_and(is_start);
                let at = (f["inlined"] == false)
                    .then(|| f["offset"].as_str())
                    .flatten()
                    .and_then(|o| u64::from_str_radix(o.trim_start_matches("0x"), 16).ok());
                frames.push(Frame {
                    name,
                    module: Some(module_name(raw)),
                    python: false,
                    at,
                    tail_call: f["tail_call"] == true,
                    guessed: false,
                });
                // As for gdb: nothing past the thread's start.
                if start {
                    break;
                }
            } else if !frames.last().is_some_and(|f| f.python) {
                frames.push(Frame {
                    name: None,
                    module: None,
                    python: true,
                    at: None,
                    tail_call: false,
                    guessed: false,
                });
            }
        }
        let truncated = t["truncated"].as_str().map(str::to_string);
        out.insert(tid as i32, (frames, truncated));
    }
    out
}

fn same(g: &Frame, p: &Frame) -> bool {
    if g.python || p.python {
        // The eval loop: named by gdb, or unnamed in a stripped build.
        return p.python && (g.python || g.name.is_none());
    }
    let module_ok = match (&g.module, &p.module) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    // gdb qualifies inlined functions by their namespace, DWARF's name
    // alone may not.
    let qualified = |a: &str, b: &str| a.ends_with(&format!("::{b}"));
    // One pc in one module is one frame, whatever alias names it (where
    // the file offset is the module's address, as in every library here).
    if module_ok && g.at.is_some() && g.at == p.at && g.name.is_some() && p.name.is_some() {
        return true;
    }
    module_ok
        && match (&g.name, &p.name) {
            (Some(a), Some(b)) => {
                a == b
                    || string_alias(a, b)
                    || qualified(a, b)
                    || qualified(b, a)
                    || (a.contains("::") && without_generics(a) == without_generics(b))
                    || (a.contains("::")
                        && b.contains("::")
                        && demangler_neutral(a) == demangler_neutral(b))
            }
            (None, None) => true,
            _ => false,
        }
}

/// Two names glibc gives one entry point: each `memcpy` variant of the
/// x86-64 string functions is an alias of the `memmove` one with the same
/// suffix (`__memcpy_avx512_unaligned_erms` is `__memmove_avx512_unaligned_erms`).
/// gdb prints no address for an innermost frame at the start of a line, so
/// the pc match above cannot tell them one frame there.
fn string_alias(a: &str, b: &str) -> bool {
    let suffix = |n: &str| {
        n.strip_prefix("memcpy")
            .or_else(|| n.strip_prefix("memmove"))
            .map(str::to_string)
    };
    matches!((suffix(a), suffix(b)), (Some(x), Some(y)) if x == y && !x.is_empty())
}

/// A Rust (or C++) name without its generic arguments: the linker folds
/// identical instantiations into one function (identical code folding), and
/// gdb and pyinspect may then name the same code by different instances
/// (`split<CharDelimiterSplit ...>` and `split<BertPreTokenizer ...>`).
fn without_generics(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A C++ name as both demanglers reduce it, where libiberty (gdb) and
/// cpp_demangle (pyinspect) print one symbol differently: without its
/// generic arguments; without the return type libiberty keeps before a
/// template function (`ns::State ns::Base<…>::combine<…>`); and, for a
/// piece of a longer name that the argument-list cut left (an inlined
/// lambda's `T const&)::{lambda(…)#1}`), from its first `)::` on.
fn demangler_neutral(name: &str) -> String {
    let g = without_generics(name);
    let mut n = g.as_str();
    let mut depth = 0i32;
    for (i, c) in n.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                if n[i..].starts_with(")::") {
                    n = &n[i + 1..];
                }
                break;
            }
            ')' => depth -= 1,
            _ => {}
        }
    }
    let mut depth = 0i32;
    let mut last = None;
    for (i, c) in n.char_indices() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ' ' if depth == 0 && !n[..i].ends_with("operator") => last = Some(i),
            _ => {}
        }
    }
    match last {
        Some(i) if n[i + 1..].contains("::") => n[i + 1..].to_string(),
        _ => n.to_string(),
    }
}

/// Longest common subsequence under [`same`]: for each of gdb's frames,
/// the index of pyinspect's it matched.
fn aligned(g: &[Frame], p: &[Frame]) -> Vec<Option<usize>> {
    let mut t = vec![vec![0usize; p.len() + 1]; g.len() + 1];
    for i in (0..g.len()).rev() {
        for j in (0..p.len()).rev() {
            t[i][j] = if same(&g[i], &p[j]) {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let mut matched = vec![None; g.len()];
    let (mut i, mut j) = (0, 0);
    while i < g.len() && j < p.len() {
        if same(&g[i], &p[j]) && t[i][j] == t[i + 1][j + 1] + 1 {
            matched[i] = Some(j);
            i += 1;
            j += 1;
        } else if t[i + 1][j] >= t[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    matched
}

fn show(f: &[Frame]) -> String {
    f.iter()
        .map(|f| {
            if f.python {
                "<python>".to_string()
            } else {
                format!(
                    "{}({}){}",
                    f.name.as_deref().unwrap_or("??"),
                    f.module.as_deref().unwrap_or(""),
                    if f.tail_call { "[tail call]" } else { "" }
                )
            }
        })
        .collect::<Vec<_>>()
        .join(" <- ")
}

fn thread_states(pid: i32) -> Vec<char> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let Ok(e) = e else { continue };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if let Some(s) = pyinspect::procfs::parse_stat_state(&stat) {
            v.push(s);
        }
    }
    v
}

fn wait_stopped(pid: i32) {
    assert!(
        stopped_within(pid, Duration::from_secs(10)),
        "process {pid} did not stop"
    );
}

/// Whether every thread of `pid` is stopped (T) within `limit`.
fn stopped_within(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !thread_states(pid).iter().all(|&s| s == 'T') {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[derive(Default, Debug, Clone)]
struct Row {
    label: String,
    threads: usize,
    gdb_frames: usize,
    matched: usize,
    extra: usize,
    /// Frames pyinspect shows outer to where gdb gave up (gdb's stack
    /// matched whole but ended before the thread's start, e.g. inside a
    /// hand-written BLAS kernel without CFI): gdb cannot vouch for them,
    /// nor deny them.
    past_gdb: usize,
    merges_ok: usize,
    merges: usize,
    /// gdb frames left out: pc outside all code.
    gdb_junk: usize,
    /// gdb's synthesised tail-call frames, and how many pyinspect missed.
    tail_calls: usize,
    tail_calls_missed: usize,
    detail: String,
}

/// Whether each Python run of a dump sits where an eval-loop frame was:
/// the merge did not fall back, and no eval-loop frame is left next to
/// Python frames.
fn merged_right(dump: &Value) -> (usize, usize) {
    let (mut ok, mut all) = (0, 0);
    for t in dump["threads"].as_array().into_iter().flatten() {
        let frames = t["frames"].as_array().cloned().unwrap_or_default();
        if !frames.iter().any(|f| f["kind"] != "native") {
            continue;
        }
        all += 1;
        let fell_back = t["truncated"]
            .as_str()
            .is_some_and(|s| s.contains("could not be matched"));
        let eval_left = frames.iter().any(|f| {
            f["kind"] == "native" && is_eval(&normalise(f["function"].as_str().unwrap_or("")))
        });
        if !fell_back && !eval_left {
            ok += 1;
        }
    }
    (ok, all)
}

/// Stops of each workload compared with gdb (each a moment of its own:
/// the process runs on between them).
const STOPS: usize = 3;

/// Run one workload on one interpreter: the gdb comparison on the process
/// stopped [`STOPS`] times, then the repeated dumps.
fn oracle(label: &str, fixture: &Fixture, repeats: usize) -> Row {
    let mut row = Row {
        label: format!("{label} ({STOPS} stops)"),
        ..Default::default()
    };
    for stop in 0..STOPS {
        if stop > 0 {
            // Let it run on to another moment of its loop.
            std::thread::sleep(Duration::from_millis(300));
        }
        compare_stopped(label, fixture.pid, &mut row);
    }
    merge_checks(label, fixture.pid, repeats, &mut row);
    row
}

/// Stop the process, read it with pyinspect and then gdb, let it go, and
/// add the comparison to `row`.
fn compare_stopped(label: &str, pid: i32, row: &mut Row) {
    // SAFETY: plain kill(2) on a child we started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_stopped(pid);
    let dump = dump_json(pid, &["--native-all", "--native-debug-info"]).remove(0);
    // A thread let go by its tracer while its group stop is in effect is
    // woken to stop again, and shows as running until it has: on a loaded
    // machine that can take a while. One that pyinspect resumed never
    // stops again.
    assert!(
        stopped_within(pid, Duration::from_secs(5)),
        "{label}: pyinspect did not leave the process stopped"
    );
    // (gdb does not always leave a stopped process stopped on detach; that
    // is gdb's business, and it runs after pyinspect.)
    let (gdb, junk) = gdb_stacks(pid);
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let ours = pyinspect_stacks(&dump);
    row.gdb_junk += junk;
    for (tid, g) in &gdb {
        let Some((p, _)) = ours.get(tid) else {
            row.gdb_frames += g.len();
            let _ = writeln!(row.detail, "  thread {tid}: missing from pyinspect");
            continue;
        };
        row.threads += 1;
        let matched = aligned(g, p);
        let m = matched.iter().filter(|x| x.is_some()).count();
        for (f, ok) in g.iter().zip(&matched) {
            if f.tail_call {
                row.tail_calls += 1;
                row.tail_calls_missed += usize::from(ok.is_none());
            }
        }
        let gdb_whole = g
            .last()
            .and_then(|f| f.name.as_deref())
            .is_some_and(is_start);
        let c = classify(g, p, &matched, gdb_whole);
        row.gdb_frames += g.len() - c.guesses;
        row.gdb_junk += c.guesses;
        row.matched += m;
        row.past_gdb += c.past;
        row.extra += c.extra;
        if m < g.len() || m < p.len() {
            let _ = writeln!(
                row.detail,
                "  thread {tid}:\n    gdb:       {}\n    pyinspect: {}",
                show(g),
                show(p)
            );
        }
    }
}

/// What the frames the alignment left unmatched are, for one thread.
#[derive(Debug, Default, PartialEq)]
struct Unmatched {
    /// gdb's guesses (frames unwound from a junk frame) pyinspect does not
    /// have: not counted as missed.
    guesses: usize,
    /// pyinspect's frames gdb cannot vouch for, nor deny: where gdb's own
    /// frames are guesses, or past where gdb gave up.
    past: usize,
    /// pyinspect's frames gdb denies.
    extra: usize,
}

/// Sort the unmatched frames between each two matched ones (and after the
/// last). Where gdb's frames are guessed (the stretch ends at a guessed
/// frame gdb got back on the chain with, or it is the tail and has
/// guesses), gdb's unmatched guesses are no misses and pyinspect's
/// unmatched frames are past gdb's knowledge. The tail is too when gdb
/// stopped short of the thread's start having matched all it showed.
fn classify(g: &[Frame], p: &[Frame], matched: &[Option<usize>], gdb_whole: bool) -> Unmatched {
    let mut u = Unmatched::default();
    let (mut gi, mut pj) = (0usize, 0usize);
    let mut stretch = |g_from: usize, g_to: usize, p_from: usize, p_to: usize, vouched: bool| {
        let gaps = &g[g_from..g_to];
        let guesses = gaps.iter().filter(|f| f.guessed).count();
        u.guesses += guesses;
        let ours = p_to - p_from;
        if vouched {
            u.extra += ours;
        } else {
            u.past += ours;
        }
    };
    for (i, j) in matched.iter().enumerate() {
        let Some(j) = *j else { continue };
        stretch(gi, i, pj, j, !g[i].guessed);
        gi = i + 1;
        pj = j + 1;
    }
    let tail = &g[gi..];
    let tail_guessed = tail.iter().any(|f| f.guessed);
    let tail_missed = tail.iter().any(|f| !f.guessed);
    let vouched = !tail_guessed && (gdb_whole || tail_missed);
    stretch(gi, g.len(), pj, p.len(), vouched);
    u
}

/// gdb's guesses after a junk frame are not misses, and what pyinspect has
/// in their place is not extra; without the junk, the same gap is both.
#[test]
fn frames_after_gdb_junk_are_guesses() {
    let f = |n: &str, guessed: bool| Frame {
        name: Some(n.to_string()),
        module: Some("libx".to_string()),
        python: false,
        at: None,
        tail_call: false,
        guessed,
    };
    let ours = [
        f("kernel", false),
        f("xsgemm", false),
        f("start_thread", false),
    ];
    // kernel <- (junk) <- getbufs <- start_thread: getbufs a stale word.
    let gdb = [
        f("kernel", false),
        f("getbufs", true),
        f("start_thread", true),
    ];
    let m = aligned(&gdb, &ours);
    assert_eq!(m, vec![Some(0), None, Some(2)]);
    let u = classify(&gdb, &ours, &m, true);
    assert_eq!(
        u,
        Unmatched {
            guesses: 1,
            past: 1,
            extra: 0
        }
    );
    // The same without junk: a frame missed, one extra.
    let gdb = [
        f("kernel", false),
        f("getbufs", false),
        f("start_thread", false),
    ];
    let u = classify(&gdb, &ours, &aligned(&gdb, &ours), true);
    assert_eq!(
        u,
        Unmatched {
            guesses: 0,
            past: 0,
            extra: 1
        }
    );
    // gdb gave up after junk: what pyinspect shows past it is not extra.
    let gdb = [f("kernel", false), f("getbufs", true)];
    let u = classify(&gdb, &ours, &aligned(&gdb, &ours), false);
    assert_eq!(
        u,
        Unmatched {
            guesses: 1,
            past: 2,
            extra: 0
        }
    );
}

/// `repeats` dumps of the running process: no pseudo-frames, and the
/// Python frames merged where they belong.
fn merge_checks(label: &str, pid: i32, repeats: usize, row: &mut Row) {
    for _ in 0..repeats {
        let d = dump_json(pid, &["--native"]).remove(0);
        let pseudo: Vec<String> = d["threads"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["frames"].as_array().cloned().unwrap_or_default())
            .filter(|f| {
                let m = f["module"].as_str().unwrap_or("");
                ["[stack]", "[heap]", "[unknown]"].contains(&m)
            })
            .map(|f| f["function"].as_str().unwrap_or("").to_string())
            .collect();
        assert!(pseudo.is_empty(), "{label}: pseudo-frames {pseudo:?}");
        let (ok, all) = merged_right(&d);
        row.merges_ok += ok;
        row.merges += all;
    }
}

fn print_table(rows: &[Row]) -> (f64, usize, f64) {
    let mut s = String::from(
        "\ngdb oracle: workload/interpreter          threads  gdb frames  agree  extra  merged right  gdb junk  tail calls missed/gdb's  past gdb's end\n",
    );
    let (mut g, mut m, mut x, mut mo, mut ma, mut tc, mut tm) = (0, 0, 0, 0, 0, 0, 0);
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<40} {:>5} {:>10} {:>6.1}% {:>6} {:>6}/{:<6} {:>4} {:>9}/{:<6} {:>6}",
            r.label,
            r.threads,
            r.gdb_frames,
            100.0 * r.matched as f64 / r.gdb_frames.max(1) as f64,
            r.extra,
            r.merges_ok,
            r.merges,
            r.gdb_junk,
            r.tail_calls_missed,
            r.tail_calls,
            r.past_gdb
        );
        g += r.gdb_frames;
        m += r.matched;
        x += r.extra;
        mo += r.merges_ok;
        ma += r.merges;
        tc += r.tail_calls;
        tm += r.tail_calls_missed;
    }
    let agree = 100.0 * m as f64 / g.max(1) as f64;
    let merged = 100.0 * mo as f64 / ma.max(1) as f64;
    let _ = writeln!(
        s,
        "  {:<40} {:>5} {:>10} {:>6.1}% {:>6} {:>5.1}%",
        "all", "", g, agree, x, merged
    );
    // How many of gdb's tail-call frames (rebuilt from call-site records,
    // see Frame::tail_call) pyinspect rebuilt too, and the figure without
    // them.
    let _ = writeln!(
        s,
        "  {} of {} gdb frames missed are its synthesised tail-call frames ({} of {} tail-call frames shown); \
         without them {:.1}% agree",
        tm,
        g - m,
        tc - tm,
        tc,
        100.0 * (m - (tc - tm)) as f64 / (g - tc).max(1) as f64
    );
    for r in rows.iter().filter(|r| !r.detail.is_empty()) {
        let _ = write!(s, "{}:\n{}", r.label, r.detail);
    }
    eprintln!("{s}");
    (agree, x, merged)
}

fn check(rows: &[Row]) {
    let (agree, extra, merged) = print_table(rows);
    assert!(agree >= 98.0, "only {agree:.1}% of gdb's frames agree");
    assert_eq!(extra, 0, "pyinspect shows frames gdb does not have");
    assert!(merged >= 99.0, "merged right in only {merged:.1}% of dumps");
}

/// Debian sid's stock interpreter run inside its root with chroot, the
/// way a container runs it: its -dbg files are under /proc/PID/root only.
/// A wrapper copies the fixture and the libraries into the root first.
fn sid_chroot(version: &str) -> Interpreter {
    let python = format!("{SID}/usr/bin/python{version}");
    assert!(Path::new(&python).exists(), "{python} is missing");
    let wrapper = built().join(format!("chroot-python{version}"));
    let script = format!(
        "#!/bin/sh\n\
         # fixture.py MODE LIBDIR, run under {SID}'s python{version}\n\
         set -e\n\
         d=/tmp/pyinspect-oracle\n\
         mkdir -p {SID}$d/native {SID}$d/libs\n\
         cp \"$(dirname \"$1\")/../fixture_util.py\" {SID}$d/\n\
         cp \"$1\" {SID}$d/native/\n\
         cp \"$3\"/*.so {SID}$d/libs/\n\
         exec chroot {SID} /usr/bin/python{version} $d/native/$(basename \"$1\") \"$2\" $d/libs\n"
    );
    std::fs::write(&wrapper, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v: Vec<u32> = version.split('.').map(|x| x.parse().unwrap()).collect();
    // The same sid build as the matrix's, run as a container-like target
    // whose -dbg files exist only under its root.
    let mut i = matrix("sid's build", (v[0], v[1]), "sid");
    i.label = format!("sid {version} chroot (-dbg files)");
    i.python = wrapper;
    i.symbols = true;
    i
}

/// Debian's static 3.11 as a host without python3.11-dbg sees it: a copy of
/// the matrix's binary whose build-id (flipped) names no installed debug
/// file and whose `.gnu_debuglink` names no file next to the copy, so
/// neither gdb nor pyinspect finds `python3.11-dbg`'s file; only `.dynsym`
/// names its functions. (CI installs python3.11-dbg, so without the copy
/// the oracle would never see this build bare.)
fn debian_without_dbg() -> Interpreter {
    use object::Object;
    let mut i = matrix("Debian's static 3.11", (3, 11), "debian");
    let mut bytes = std::fs::read(&i.python).unwrap();
    let id = object::File::parse(&bytes[..])
        .ok()
        .and_then(|o| o.build_id().ok().flatten().map(<[u8]>::to_vec))
        .expect("Debian's python3.11 has a build-id");
    let at = bytes
        .windows(id.len())
        .position(|w| w == id)
        .expect("build-id bytes in the file");
    for b in &mut bytes[at..at + id.len()] {
        *b ^= 0xff;
    }
    let hex: String = bytes[at..at + id.len()]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    assert!(!Path::new(&debug).exists(), "{debug} exists");
    let copy = built().join("python3.11-without-dbg");
    std::fs::write(&copy, &bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    i.label = "debian 3.11 without its -dbg file".to_string();
    i.python = copy.clone();
    i.interpreter_file = copy;
    i.symbols = false;
    i.own_dwarf = false;
    i
}

fn spawn(interp: &Interpreter, mode: &str) -> Fixture {
    let dir = built().to_str().unwrap().to_string();
    // Importing torch and running the model once takes a while on a
    // loaded machine.
    let ready = if mode == "torch" { 300 } else { 90 };
    Fixture::spawn_with_timeout(
        interp,
        "native/gdb_workloads.py",
        &[mode, &dir],
        Duration::from_secs(ready),
    )
}

/// The C workloads (segment-gap library, deadlock, C++ with inlining and
/// exceptions) under pyenv's, Debian's static (with and without its -dbg
/// file) and Debian sid's stripped interpreters (on the host, without their
/// -dbg files; in a chroot, with them).
#[test]
fn ctypes_workloads_agree_with_gdb() {
    let interps = [
        matrix("pyenv's 3.11", (3, 11), "pyenv"),
        matrix("pyenv's 3.12", (3, 12), "pyenv"),
        matrix("Debian's static 3.11", (3, 11), "debian"),
        debian_without_dbg(),
        matrix("sid's stripped LTO 3.13", (3, 13), "sid"),
        matrix("sid's stripped tail-calling 3.14", (3, 14), "sid"),
        sid_chroot("3.13"),
        sid_chroot("3.14"),
    ];
    let rows: Vec<Row> = interps
        .iter()
        .map(|i| {
            oracle(
                &format!("ctypes on {}", i.label),
                &spawn(i, "ctypes"),
                repeats(),
            )
        })
        .collect();
    check(&rows);
}

/// Wheels with threaded native code (numpy's and scipy's OpenBLAS,
/// tokenizers' rayon, onnxruntime's pool, XLA's TSL/Eigen pool under JAX)
/// on pyenv's 3.11, the interpreter all of them publish wheels for.
#[test]
fn wheel_workloads_agree_with_gdb() {
    let i = matrix("pyenv's 3.11", (3, 11), "pyenv");
    // ($PYINSPECT_ORACLE_ONLY=jax,onnx runs only those, while working on them.)
    let only = std::env::var("PYINSPECT_ORACLE_ONLY").unwrap_or_default();
    let rows: Vec<Row> = ["matmul", "svd", "tokenizers", "onnx", "jax"]
        .iter()
        .filter(|m| only.is_empty() || only.split(',').any(|o| o == **m))
        .map(|m| oracle(&format!("{m} on {}", i.label), &spawn(&i, m), repeats()))
        .collect();
    check(&rows);
}

/// PyTorch at inference scale (issue 20) on pyenv's 3.12, from
/// `.ci/torch-workload`'s venv: python_fixtures/torch_worker.py's worker in
/// libtorch_cpu (448 MB, some 450,000 C++ function symbols, named through
/// the lean symbol index), its OpenMP worker and XNNPACK's pthreadpool
/// threads, with libtorch_cuda and the nvidia libraries mapped.
#[test]
fn torch_worker_agrees_with_gdb() {
    let mut i = matrix("pyenv's 3.12", (3, 12), "pyenv");
    let venv = std::env::var("PYINSPECT_TORCH_VENV")
        .unwrap_or_else(|_| "/opt/pyinspect-torch/venv".to_string());
    let python = Path::new(&venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run .ci/torch-workload",
        python.display()
    );
    i.python = python;
    i.label = "pyenv's 3.12 (torch venv)".to_string();
    let fixture = spawn(&i, "torch");
    let rows = vec![oracle(
        &format!("torch on {}", i.label),
        &fixture,
        repeats(),
    )];
    // The pool threads, which all carry the process's name, named by their
    // worker loop.
    let dump = dump_json(fixture.pid, &["--native-all"]).remove(0);
    let pools: Vec<String> = dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["name_source"] == "stack")
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(
        pools.iter().any(|n| n == "OpenMP worker (libgomp)"),
        "pool threads named {pools:?}"
    );
    let shown = pool_wait_shown(fixture.pid, "OpenMP worker (libgomp)");
    eprintln!("torch's OpenMP worker: {shown}");
    // The CUDA wheel's libraries are mapped (libcudart, cuBLAS, cuDNN,
    // NCCL), and with no GPU no thread is said to wait for one.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", fixture.pid)).unwrap();
    assert!(maps.contains("/libcudart.so"), "libcudart is not mapped");
    for t in dump["threads"].as_array().expect("threads") {
        let entry = t["native_entry"].as_str().unwrap_or("");
        assert!(
            !entry.contains("Synchronize"),
            "a GPU wait without a GPU: {t}"
        );
    }
    check(&rows);
}

/// Dumps (`--native-all`, text) of a running workload until a thread of
/// `pool` (named from its stack) is seen asleep, then requires that its
/// header says what it waits in and on: the pool's wait function and the
/// futex it sleeps on (`in gomp_barrier_wait_end (libgomp.so.1):
/// futex(0x…, no timeout)`), as a Python thread's header does. Returns
/// that header. A pool busy at every try fails the test.
fn pool_wait_shown(pid: i32, pool: &str) -> String {
    let quoted = format!("\"{pool}\"");
    let mut seen = Vec::new();
    for _ in 0..60 {
        let pid = pid.to_string();
        let out = common::pyinspect(&["dump", "--pid", &pid, "--native-all"]);
        out.assert_success();
        let heads: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("Thread ") && l.contains(&quoted))
            .collect();
        assert!(
            !heads.is_empty(),
            "no thread named {quoted}:\n{}",
            out.stdout
        );
        for h in &heads {
            if !h.contains(", S, not a Python thread)") {
                continue;
            }
            assert!(
                h.contains(") in ") && h.contains(": futex(0x"),
                "{pool} asleep, its header without its wait: {h}"
            );
            return h.to_string();
        }
        seen.extend(heads.iter().map(|h| h.to_string()));
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{pool} never seen asleep:\n{}", seen.join("\n"));
}

/// Pool threads Python does not know show what they wait on, as Python
/// threads do: tokenizers' rayon pool, onnxruntime's pool and XLA's pool
/// under JAX, each workload pausing between steps so that its pool sleeps
/// (torch's OpenMP pool: in `torch_worker_agrees_with_gdb`). onnxruntime's
/// wheel strips its module, so its pool's threads are named by the library
/// their worker loop is in.
#[test]
fn pool_threads_show_their_waits() {
    let i = matrix("pyenv's 3.11", (3, 11), "pyenv");
    let dir = built().to_str().unwrap().to_string();
    for (mode, pool) in [
        ("tokenizers", "rayon worker"),
        ("onnx", "onnxruntime pool worker"),
        ("jax", "XLA (TSL) pool worker"),
    ] {
        let fixture = Fixture::spawn_with_timeout(
            &i,
            "native/gdb_workloads.py",
            &[mode, &dir, "0.2"],
            Duration::from_secs(90),
        );
        let shown = pool_wait_shown(fixture.pid, pool);
        eprintln!("{mode} on {}: {shown}", i.label);
    }
}

/// XLA's kernels under JAX run from an anonymous mapping, announced
/// through gdb's JIT interface: a thread caught in one shows the kernel's
/// name (module `[jit]`), as gdb's backtrace does, never a bare `??`.
#[test]
fn jit_kernels_are_named_from_the_jit_interface() {
    let i = matrix("pyenv's 3.11", (3, 11), "pyenv");
    let dir = built().to_str().unwrap().to_string();
    let fixture = Fixture::spawn_with_timeout(
        &i,
        "native/gdb_workloads.py",
        &["jax-kernel", &dir],
        Duration::from_secs(90),
    );
    let mut named = Vec::new();
    let mut dumps = 0;
    for _ in 0..60 {
        dumps += 1;
        let dump = dump_json(fixture.pid, &["--native-all"]).remove(0);
        for t in dump["threads"].as_array().into_iter().flatten() {
            for f in t["frames"].as_array().into_iter().flatten() {
                let module = f["module"].as_str().unwrap_or("");
                if module == "[anon]" {
                    panic!("a frame in anonymous code is left unnamed: {f}");
                }
                if module == "[jit]" {
                    named.push(f["function"].as_str().unwrap_or("").to_string());
                }
            }
        }
        if !named.is_empty() {
            break;
        }
    }
    eprintln!(
        "JIT frames seen on {} after {dumps} dumps: {named:?}",
        i.label
    );
    assert!(
        !named.is_empty(),
        "60 dumps never caught the JAX worker in its XLA kernel"
    );
    assert!(named.iter().all(|n| !n.is_empty()), "{named:?}");
}

/// Names as gdb and pyinspect spell them reduce alike, argument lists
/// inside template arguments kept (the JAX and tokenizers workloads' C++
/// and Rust names).
#[test]
fn names_reduce_alike() {
    let gdb = "slinky::function_ref<void (void**, long, long const*)>::get_impl<F> (...) from /x/libjax_common.so";
    let at = argument_list(gdb, true).unwrap();
    assert_eq!(
        &gdb[..at],
        "slinky::function_ref<void (void**, long, long const*)>::get_impl<F>"
    );
    assert_eq!(
        normalise("<alloc::raw_vec::RawVec<(u32, alloc::string::String)>>::grow_one"),
        "<alloc::raw_vec::RawVec<(u32, alloc::string::String)>>::grow_one"
    );
    assert_eq!(
        normalise("Foo::operator()(int) const"),
        normalise("Foo::operator()")
    );
    assert_eq!(normalise("operator<<(std::ostream&, int)"), "operator<<");
    // glibc's memcpy entry points are its memmove ones, by another name.
    let (a, b) = (
        normalise("__memcpy_avx512_unaligned_erms"),
        normalise("__memmove_avx512_unaligned_erms"),
    );
    assert!(string_alias(&a, &b) && !string_alias(&a, &normalise("__memmove_avx_unaligned")));
    assert_eq!(normalise("a::b<4ul>(int)"), "a::b<4ul>");
    // JAX's absl and slinky frames as gdb (libiberty) and pyinspect
    // (cpp_demangle) print them.
    assert_eq!(
        demangler_neutral("ns::State ns::Base<ns::State>::combine<x::T, std::vector<long> >"),
        demangler_neutral("ns::Base<ns::State>::combine<x::T, std::vector<long> >")
    );
    assert_eq!(
        demangler_neutral("const&)::{lambda(void**, long, long const*)#1}>"),
        demangler_neutral("slinky::raw_buffer)::{lambda(void**, long, long const*)#1}>")
    );
    assert_ne!(demangler_neutral("a::f"), demangler_neutral("a::g"));
    assert_eq!(normalise("<a<…> as b<…>>::c"), "<a<…> as b<…>>::c");
    assert_eq!(
        without_generics("slinky::internal::for_each_element_impl<4ul>"),
        without_generics(&normalise(
            "slinky::internal::for_each_element_impl<(unsigned long)4>(long*)"
        ))
    );
    let plain = "clock_nanosleep (...) at ../sysdeps/unix/clock_nanosleep.c:48";
    assert_eq!(
        &plain[..argument_list(plain, true).unwrap()],
        "clock_nanosleep"
    );
}
