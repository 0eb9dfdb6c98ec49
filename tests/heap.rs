//! `pyinspect heap` against the interpreters' own census, on every CPython
//! of the matrix that has the feature (3.8+), and its one-line error on the
//! older ones.
//!
//! The oracle (`python_fixtures/heap_census.py`) computes, inside the
//! target, the census with the semantics README documents
//! (`gc.get_objects()` plus what the built-in containers among them hold,
//! once per `id`, `sys.getsizeof` bytes), puts it in its READY line and
//! then holds still; the test reads the same process from outside and
//! compares the 20 largest types, count and bytes, within 1%. The
//! collector tables (src/cpython_layouts/gc.rs) are proven against each
//! interpreter's headers with a compiled probe, like tests/layouts.rs does
//! for the main tables.

mod common;

use common::{
    assert_not_stopped, assert_one_clean_error_line, c_include_dirs, dump_json,
    for_each_interpreter, gcore, http_get, pyinspect, run_c_probe, Fixture, Interpreter,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURE: &str = "heap_census.py";
/// Types compared, largest (by the oracle's bytes) first.
const TOP: usize = 20;
/// Relative tolerance of each compared count and byte total.
const TOLERANCE: f64 = 0.01;

/// type → (count, bytes)
type Census = BTreeMap<String, (u64, u64)>;

fn oracle(ready: &Value) -> Census {
    ready["types"]
        .as_array()
        .expect("READY has the oracle's types")
        .iter()
        .map(|t| {
            (
                t[0].as_str().unwrap().to_string(),
                (t[1].as_u64().unwrap(), t[2].as_u64().unwrap()),
            )
        })
        .collect()
}

fn ours(snapshot: &Value) -> Census {
    snapshot["types"]
        .as_array()
        .expect("the snapshot has types")
        .iter()
        .map(|t| {
            (
                t["type"].as_str().unwrap().to_string(),
                (t["count"].as_u64().unwrap(), t["bytes"].as_u64().unwrap()),
            )
        })
        .collect()
}

fn heap_json(args: &[&str]) -> Value {
    let mut all = vec!["heap", "--json"];
    all.extend_from_slice(args);
    let out = pyinspect(&all);
    out.assert_success();
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "heap --json is not one JSON object ({e})\n{}",
            out.describe()
        )
    })
}

/// Wait until the census fixture's main thread sleeps on its parking line:
/// READY is written from inside `fu.ready(...)`, whose payload (the
/// oracle's own census, a list per type) is freed only after it.
fn wait_parked(fx: &Fixture) {
    let line = &fx.ready["park"];
    for _ in 0..100 {
        let dumps = dump_json(fx.pid, &[]);
        let parked = dumps.iter().any(|d| {
            d["threads"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["frames"][0]["line"] == *line)
        });
        if parked {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{}: the fixture never parked on line {line}", fx.label);
}

fn close(a: u64, b: u64) -> bool {
    (a as f64 - b as f64).abs() <= TOLERANCE * a.max(b) as f64
}

/// The oracle's `TOP` largest types, each within `TOLERANCE` in ours.
fn compare(label: &str, oracle: &Census, ours: &Census) {
    let mut largest: Vec<(&String, &(u64, u64))> = oracle.iter().collect();
    largest.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let mut bad = Vec::new();
    for (name, &(count, bytes)) in largest.iter().take(TOP) {
        let (c, b) = ours.get(*name).copied().unwrap_or((0, 0));
        if !close(count, c) || !close(bytes, b) {
            bad.push(format!(
                "{name}: the interpreter counts {count} objects, {bytes} bytes; pyinspect {c}, {b}"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{label}: {} of the {TOP} largest types differ by more than {}%:\n{}",
        bad.len(),
        TOLERANCE * 100.0,
        bad.join("\n")
    );
}

fn has_heap(i: &Interpreter) -> bool {
    i.at_least(3, 8)
}

#[test]
fn census_agrees_with_the_interpreters_own() {
    for_each_interpreter("heap: census vs gc.get_objects", has_heap, |interp| {
        let fx = Fixture::spawn(interp, FIXTURE, &[]);
        wait_parked(&fx);
        let pid = fx.pid.to_string();
        let snap = heap_json(&["--pid", &pid]);
        assert_not_stopped(fx.pid);
        assert_eq!(
            snap["partial"],
            Value::Array(vec![]),
            "{}: partial",
            fx.label
        );
        assert!(
            snap["paused_ms"].as_f64().is_some_and(|ms| ms > 0.0),
            "{}: the pause is reported: {}",
            fx.label,
            snap["paused_ms"]
        );
        assert_eq!(snap["nonblocking"], false);
        // tracemalloc is off: said so, or why its state cannot be read.
        assert!(
            snap["tracemalloc"]["tracing"] == false || snap["tracemalloc_unread"].is_string(),
            "{}: {} {}",
            fx.label,
            snap["tracemalloc"],
            snap["tracemalloc_unread"]
        );
        compare(&fx.label, &oracle(&fx.ready), &ours(&snap));
        // The text table: the header line, then the largest type first.
        let text = pyinspect(&["heap", "--pid", &pid, "--top", "3"]);
        text.assert_success();
        let first_type = ours(&snap)
            .into_iter()
            .max_by_key(|(_, (_, b))| *b)
            .map(|(n, _)| n)
            .unwrap();
        let lines: Vec<&str> = text.stdout.lines().collect();
        assert!(
            lines[0].starts_with(&format!("Process {pid} (Python ")) && lines[0].contains("paused"),
            "{}",
            text.describe()
        );
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("COUNT"))
            .unwrap_or_else(|| panic!("no table header\n{}", text.describe()));
        assert!(
            lines[header + 1].ends_with(&first_type),
            "{}",
            text.describe()
        );
        assert!(
            lines.iter().any(|l| l.ends_with(" total")),
            "{}",
            text.describe()
        );
        assert!(
            text.stdout.contains("\nLargest containers:\n"),
            "{}",
            text.describe()
        );
        // Without a pause the same heap (it holds still) reads the same,
        // and says it was not paused.
        let racy = heap_json(&["--pid", &pid, "--nonblocking"]);
        assert_eq!(racy["nonblocking"], true);
        assert_eq!(racy["paused_ms"].as_f64(), Some(0.0));
        compare(
            &format!("{} --nonblocking", fx.label),
            &oracle(&fx.ready),
            &ours(&racy),
        );
    });
}

/// numpy arrays count as `sys.getsizeof` counts them: the data an array
/// owns with it (numpy 1.24 on 3.8 and Debian's 3.11, 2.x elsewhere, whose
/// dtype layout differs), a view without; and the census as a whole
/// still agrees with the oracle's.
#[test]
fn numpy_arrays_count_the_data_they_own() {
    for_each_interpreter("heap: numpy arrays", has_heap, |interp| {
        let fx = Fixture::spawn(interp, FIXTURE, &["numpy"]);
        wait_parked(&fx);
        let snap = heap_json(&["--pid", &fx.pid.to_string()]);
        let theirs = oracle(&fx.ready);
        let ours = ours(&snap);
        assert_eq!(
            ours.get("numpy.ndarray"),
            theirs.get("numpy.ndarray"),
            "{}: numpy.ndarray (count, bytes)",
            fx.label
        );
        assert_eq!(
            ours.get("bytearray"),
            theirs.get("bytearray"),
            "{}",
            fx.label
        );
        compare(&fx.label, &theirs, &ours);
    });
}

#[test]
fn older_versions_get_one_clear_error() {
    for_each_interpreter(
        "heap: before 3.8",
        |i| !has_heap(i),
        |interp| {
            let fx = Fixture::spawn(interp, FIXTURE, &[]);
            let out = pyinspect(&["heap", "--pid", &fx.pid.to_string()]);
            let line = assert_one_clean_error_line(&out);
            assert!(
                line.contains("pyinspect heap reads Python 3.8 to")
                    && line.contains(&format!("runs Python {}", interp.full_version)),
                "{line}"
            );
            assert_not_stopped(fx.pid);
        },
    );
}

/// A leak, named: two snapshots around growth, then --diff puts the
/// leaking class first (by bytes) with the exact number of new objects.
#[test]
fn diff_names_the_growing_type() {
    for_each_interpreter("heap: --diff", has_heap, |interp| {
        let fx = Fixture::spawn(interp, FIXTURE, &["grow"]);
        let dir = tempfile::tempdir().unwrap();
        let snapshot = |name: &str| -> PathBuf {
            let path = dir.path().join(name);
            let out = pyinspect(&[
                "heap",
                "--pid",
                &fx.pid.to_string(),
                "--json",
                "-o",
                path.to_str().unwrap(),
            ]);
            out.assert_success();
            assert!(out.stdout.is_empty(), "{}", out.describe());
            path
        };
        let before = snapshot("before.json");
        assert_eq!(fx.ask(libc::SIGUSR2, "GREW "), "5000");
        let after = snapshot("after.json");
        let (b, a) = (before.to_str().unwrap(), after.to_str().unwrap());
        let out = pyinspect(&["heap", "--diff", b, a, "--json"]);
        out.assert_success();
        let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let grown = report["types"].as_array().expect("a list of grown types");
        let names: Vec<&str> = grown.iter().map(|g| g["type"].as_str().unwrap()).collect();
        // The 1 kB strings outweigh their holders; each Leak is one
        // object of its class and (3.10 and older) one __dict__.
        let leak = grown
            .iter()
            .find(|g| g["type"] == "__main__.Leak")
            .unwrap_or_else(|| panic!("{}: no __main__.Leak in {names:?}", fx.label));
        assert_eq!(
            leak["count_after"].as_u64().unwrap() - leak["count_before"].as_u64().unwrap(),
            5000,
            "{}: {leak}",
            fx.label
        );
        assert!(
            names.iter().position(|n| *n == "__main__.Leak") < Some(4),
            "{}: the leaking class among the first types: {names:?}",
            fx.label
        );
        // The global holding them, named first among those that grew.
        assert_eq!(
            report["globals"][0]["holders"],
            serde_json::json!(["__main__.LEAKED"]),
            "{}: {}",
            fx.label,
            report["globals"]
        );
        assert_eq!(
            report["globals"][0]["length_after"].as_u64().unwrap()
                - report["globals"][0]["length_before"].as_u64().unwrap(),
            5000
        );
        let text = pyinspect(&["heap", "--diff", b, a]);
        text.assert_success();
        assert!(text.stdout.contains("__main__.Leak"), "{}", text.describe());
        assert!(
            text.stdout.contains("Module globals that grew:")
                && text.stdout.contains("__main__.LEAKED (list, "),
            "{}",
            text.describe()
        );
    });
}

/// `--every` on a live process: a baseline, then a report each interval;
/// the one after the fixture grew names its growing types first and the
/// global holding them; Ctrl-C ends it cleanly, and so does the target's exit.
#[test]
fn every_reports_what_grew_since_the_last_census() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    for_each_interpreter("heap: --every", has_heap, |interp| {
        let fx = Fixture::spawn(interp, FIXTURE, &["grow"]);
        let mut child = Command::new(common::pyinspect_bin())
            .args([
                "heap",
                "--pid",
                &fx.pid.to_string(),
                "--every",
                "2s",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = || -> Value {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("{}: --every ended early", fx.label))
                .unwrap();
            serde_json::from_str(&line).unwrap()
        };
        let baseline = next();
        assert!(
            baseline["baseline"]["objects"].as_u64().unwrap() > 0,
            "{baseline}"
        );
        assert_eq!(fx.ask(libc::SIGUSR2, "GREW "), "5000");
        // The report that saw the growth (one may have come in between).
        let mut report = Value::Null;
        for _ in 0..4 {
            let r = next();
            if r["report"]["globals"]
                .as_array()
                .is_some_and(|g| !g.is_empty())
            {
                report = r["report"].clone();
                break;
            }
        }
        let types: Vec<&str> = report["types"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no report saw the growth", fx.label))
            .iter()
            .map(|t| t["type"].as_str().unwrap())
            .collect();
        // 5000 Leak objects, each with its 1 kB str.
        assert!(
            types[0] == "str" || types[0] == "__main__.Leak",
            "{}: {types:?}",
            fx.label
        );
        assert!(
            types.iter().take(4).any(|t| *t == "__main__.Leak"),
            "{}: {types:?}",
            fx.label
        );
        assert_eq!(
            report["globals"][0]["holders"],
            serde_json::json!(["__main__.LEAKED"]),
            "{}: {}",
            fx.label,
            report["globals"]
        );
        // The target's exit ends it, cleanly.
        drop(fx);
        let status = wait_with_timeout(&mut child, 30);
        assert_eq!(status.code(), Some(0));
    });
    // Ctrl-C ends it too, after the text's first line.
    let fx = Fixture::spawn(common::pyenv((3, 12)), FIXTURE, &[]);
    let mut child = Command::new(common::pyinspect_bin())
        .args(["heap", "--pid", &fx.pid.to_string(), "--every", "500ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("a census every"), "{first}");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(wait_with_timeout(&mut child, 30).code(), Some(0));
    assert_not_stopped(fx.pid);
}

fn wait_with_timeout(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("pyinspect heap --every did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The rows of the memory split, as JSON numbers (absent: None).
fn rows(snapshot: &Value) -> BTreeMap<&'static str, Option<u64>> {
    let m = &snapshot["memory"];
    [
        "rss",
        "python_allocator",
        "malloc_heap",
        "anonymous",
        "thread_stacks",
        "files",
        "other",
    ]
    .into_iter()
    .map(|k| (k, m[k].as_u64()))
    .collect()
}

/// The memory split puts growth where it is: 200 MB of bytes data in
/// malloc's row, 200 MB of small bytes objects in the object allocator's,
/// each within 10% of what the fixture added (for the objects, what the
/// allocator's own blocks in use grew by), the other row growing by less
/// than 10% of it; the rows add up to the RSS; the allocator's arena
/// count is the one `sys._debugmallocstats()` gives.
#[test]
fn memory_split_puts_growth_in_its_row() {
    for_each_interpreter("heap: memory split", has_heap, |interp| {
        for kind in ["bytes", "objects"] {
            let fx = Fixture::spawn(interp, "heap_memory.py", &[kind]);
            let label = format!("{} {kind}", fx.label);
            let pid = fx.pid.to_string();
            let before = heap_json(&["--pid", &pid]);
            let grew = fx.ask_within(libc::SIGUSR2, "GREW ", std::time::Duration::from_secs(60));
            let (added, arenas) = grew.split_once(' ').unwrap();
            let (added, arenas): (i64, i64) = (added.parse().unwrap(), arenas.parse().unwrap());
            let after = heap_json(&["--pid", &pid]);
            let memory = &after["memory"];
            let (b, a) = (rows(&before), rows(&after));
            for (s, r) in [(&before, &b), (&after, &a)] {
                let parts: u64 = r
                    .iter()
                    .filter(|(k, _)| **k != "rss")
                    .map(|(_, v)| v.unwrap_or(0))
                    .sum();
                assert_eq!(
                    Some(parts),
                    r["rss"],
                    "{label}: rows add up: {}",
                    s["memory"]
                );
            }
            let unread = memory["allocator_unread"].as_str();
            if let Some(why) = unread {
                // Before 3.12 the table is in statics: a build without its
                // symbol table cannot be read, and says so.
                assert!(
                    !interp.at_least(3, 12) && why.contains("symbol table"),
                    "{label}: {why}"
                );
                if kind == "objects" {
                    continue;
                }
            } else {
                assert_eq!(
                    memory["allocator"]["arenas"]
                        .as_i64()
                        .map(|n| (n - arenas).abs() <= 1),
                    Some(true),
                    "{label}: the allocator has {arenas} arenas: {memory}"
                );
            }
            let delta = |k: &str| a[k].unwrap_or(0) as i64 - b[k].unwrap_or(0) as i64;
            let (right, wrong) = if kind == "bytes" {
                ("malloc_heap", "python_allocator")
            } else {
                ("python_allocator", "malloc_heap")
            };
            let tenth = added / 10;
            assert!(
                (delta(right) - added).abs() <= tenth && delta(wrong).abs() <= tenth,
                "{label}: {added} bytes added: {right} grew {}, {wrong} {}\nbefore {}\nafter {}",
                delta(right),
                delta(wrong),
                before["memory"],
                memory
            );
        }
        // The text: the split's table.
        let fx = Fixture::spawn(interp, "heap_memory.py", &["bytes"]);
        let text = pyinspect(&["heap", "--pid", &fx.pid.to_string(), "--top", "1"]);
        text.assert_success();
        for row in [
            "Memory: ",
            "  Python objects (obmalloc",
            "  malloc heap",
            "  thread stacks",
            "  files and libraries",
        ] {
            assert!(
                text.stdout.contains(row),
                "{}: no {row:?}\n{}",
                fx.label,
                text.describe()
            );
        }
    });
}

/// A real service that leaks (Starlette under uvicorn, .ci/asyncio-deps),
/// driven with requests between two snapshots: --diff names the leaking
/// class first and the module global holding it.
#[test]
fn diff_of_a_leaking_service_names_the_type_and_the_global() {
    let interp = common::find_interpreter("pyenv 3.12 (with .ci/asyncio-deps)", |i| {
        i.label.starts_with("pyenv 3.12")
    });
    let fx = Fixture::spawn(interp, "heap_leaky_service.py", &[]);
    let port = fx.ready["port"].as_u64().unwrap() as u16;
    // What the first requests set up once (routing, the protocol's
    // objects) is not the leak.
    for _ in 0..5 {
        http_get(port, "/ok");
        http_get(port, "/leak?n=0");
    }
    let dir = tempfile::tempdir().unwrap();
    let snapshot = |name: &str| -> String {
        let path = dir.path().join(name);
        let path = path.to_str().unwrap().to_string();
        pyinspect(&["heap", "--pid", &fx.pid.to_string(), "--json", "-o", &path]).assert_success();
        path
    };
    let before = snapshot("before.json");
    for i in 0..40 {
        http_get(port, &format!("/leak?n=100&user=u{i}"));
        http_get(port, "/ok");
    }
    assert_eq!(http_get(port, "/leak?n=0"), "4000");
    let after = snapshot("after.json");
    let out = pyinspect(&["heap", "--diff", &before, &after, "--json"]);
    out.assert_success();
    let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let types = &report["types"];
    assert_eq!(types[0]["type"], "__main__.Session", "{}", report);
    assert_eq!(
        types[0]["count_after"].as_u64().unwrap() - types[0]["count_before"].as_u64().unwrap(),
        4000,
        "{report}"
    );
    assert_eq!(
        report["globals"][0]["holders"],
        serde_json::json!(["__main__.SESSIONS"]),
        "{report}"
    );
    let text = pyinspect(&["heap", "--diff", &before, &after]);
    text.assert_success();
    let lines: Vec<&str> = text.stdout.lines().collect();
    let header = lines.iter().position(|l| l.contains("+COUNT")).unwrap();
    assert!(
        lines[header + 1].ends_with("  __main__.Session"),
        "{}",
        text.describe()
    );
    let globals = lines.iter().position(|l| l.contains("GLOBAL")).unwrap();
    assert!(
        lines[globals + 1].contains("  __main__.SESSIONS (list, 4000 items"),
        "{}",
        text.describe()
    );
}

/// A core file reads as the live process it was taken from.
#[test]
fn a_gcore_reads_as_the_live_process() {
    for_each_interpreter("heap: gcore vs live", has_heap, |interp| {
        let fx = Fixture::spawn(interp, FIXTURE, &[]);
        wait_parked(&fx);
        let live = heap_json(&["--pid", &fx.pid.to_string()]);
        let dir = tempfile::tempdir().unwrap();
        let core = gcore(fx.pid, dir.path());
        let from_core = heap_json(&["--core", core.to_str().unwrap()]);
        assert_eq!(from_core["partial"], Value::Array(vec![]), "{}", fx.label);
        assert_eq!(from_core["paused_ms"].as_f64(), Some(0.0));
        assert_eq!(
            ours(&live),
            ours(&from_core),
            "{}: live and core differ",
            fx.label
        );
    });
}

/// Bad input to --diff: one clean line each.
#[test]
fn diff_of_what_is_not_a_snapshot_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"not\": \"a snapshot\"}").unwrap();
    let j = junk.to_str().unwrap();
    let line = assert_one_clean_error_line(&pyinspect(&["heap", "--diff", j, j]));
    assert!(
        line.contains("is not a `pyinspect heap --json` snapshot"),
        "{line}"
    );
    let missing = dir.path().join("missing.json");
    let m = missing.to_str().unwrap();
    let line = assert_one_clean_error_line(&pyinspect(&["heap", "--diff", m, j]));
    assert!(line.contains("cannot read"), "{line}");
}

// The collector table, proven against each interpreter's headers.

/// (field, C expression) pairs the probe prints.
const PROBE: &[(&str, &str)] = &[
    (
        "gen0",
        "offsetof(struct _gc_runtime_state, generations[0].head)",
    ),
    (
        "gen1",
        "offsetof(struct _gc_runtime_state, generations[1].head)",
    ),
    (
        "gen2",
        "offsetof(struct _gc_runtime_state, generations[2].head)",
    ),
    (
        "permanent",
        "offsetof(struct _gc_runtime_state, permanent_generation.head)",
    ),
    (
        "collecting",
        "offsetof(struct _gc_runtime_state, collecting)",
    ),
    ("gc_head_size", "sizeof(PyGC_Head)"),
    ("tp_dict", "offsetof(PyTypeObject, tp_dict)"),
    ("tp_itemsize", "offsetof(PyTypeObject, tp_itemsize)"),
    ("type_size", "sizeof(PyTypeObject)"),
    ("heap_type_size", "sizeof(PyHeapTypeObject)"),
    (
        "ht_cached_keys",
        "offsetof(PyHeapTypeObject, ht_cached_keys)",
    ),
    ("list_allocated", "offsetof(PyListObject, allocated)"),
    ("set_smalltable", "offsetof(PySetObject, smalltable)"),
    (
        "utf8_length",
        "offsetof(PyCompactUnicodeObject, utf8_length)",
    ),
    ("utf8", "offsetof(PyCompactUnicodeObject, utf8)"),
];

fn probe(interp: &Interpreter, dir: &Path) -> BTreeMap<String, u64> {
    let internal = if interp.at_least(3, 9) {
        "internal/pycore_interp.h"
    } else {
        "internal/pycore_pystate.h"
    };
    let mut src = format!(
        "#define Py_BUILD_CORE 1\n#define NDEBUG 1\n#include <Python.h>\n#include <{internal}>\n\
         #include <stddef.h>\n#include <stdio.h>\nint main(void) {{\n"
    );
    for (k, expr) in PROBE {
        src += &format!("    printf(\"{k} %lld\\n\", (long long)({expr}));\n");
    }
    src += "    return 0;\n}\n";
    let includes =
        c_include_dirs(&interp.python).unwrap_or_else(|e| panic!("{}: {e}", interp.label));
    run_c_probe(dir, &interp.label, &src, &includes)
        .unwrap_or_else(|e| panic!("{}: {e}", interp.label))
        .into_iter()
        .map(|(k, v)| (k, v as u64))
        .collect()
}

#[test]
fn collector_table_matches_interpreter_headers() {
    let dir = tempfile::tempdir().unwrap();
    for_each_interpreter("heap: collector table vs headers", has_heap, |interp| {
        let h = probe(interp, dir.path());
        let (major, minor) = interp.version;
        let t = pyinspect::cpython_layouts::gc::for_version(major as u8, minor as u8)
            .unwrap_or_else(|| panic!("{}: no collector table", interp.label));
        let lists = [h["gen0"], h["gen1"], h["gen2"], h["permanent"]];
        assert!(
            t.lists.iter().any(|c| *c == lists),
            "{}: the headers' lists {lists:?} are not among the table's {:?}",
            interp.label,
            t.lists
        );
        let table = [
            ("collecting", t.collecting),
            ("gc_head_size", t.gc_head_size),
            ("tp_dict", t.tp_dict),
            ("tp_itemsize", t.tp_itemsize),
            ("type_size", t.type_size),
            ("heap_type_size", t.heap_type_size),
            ("ht_cached_keys", t.ht_cached_keys),
            ("list_allocated", t.list_allocated),
            ("set_smalltable", t.set_smalltable),
            ("utf8_length", t.utf8_length),
            ("utf8", t.utf8),
        ];
        let bad: Vec<String> = table
            .iter()
            .filter(|(k, v)| h[*k] != *v)
            .map(|(k, v)| format!("{k}: table {v}, headers {}", h[*k]))
            .collect();
        assert!(bad.is_empty(), "{}:\n{}", interp.label, bad.join("\n"));
    });
}

/// What each of `exprs` (an `offsetof`, a `sizeof`, a macro) is in
/// `interp`'s own headers: a C probe built as the core is (`Py_BUILD_CORE`)
/// after `includes`, run once.
fn header_values(
    interp: &Interpreter,
    dir: &Path,
    name: &str,
    includes: &str,
    exprs: &[&str],
) -> Vec<u64> {
    let mut src = format!(
        "#define Py_BUILD_CORE 1\n{includes}#include <stddef.h>\n#include <stdio.h>\n\
         int main(void) {{\n"
    );
    for (k, expr) in exprs.iter().enumerate() {
        src += &format!("    printf(\"f{k} %lld\\n\", (long long)({expr}));\n");
    }
    src += "    return 0;\n}\n";
    let dirs = c_include_dirs(&interp.python).unwrap_or_else(|e| panic!("{}: {e}", interp.label));
    let values = run_c_probe(dir, &format!("{name}_{}", interp.label), &src, &dirs)
        .unwrap_or_else(|e| panic!("{}: {e}", interp.label));
    (0..exprs.len())
        .map(|k| values[&format!("f{k}")] as u64)
        .collect()
}

/// The object allocator's table (src/cpython_layouts/obmalloc.rs) against
/// the headers of each 3.12+ interpreter (3.8–3.11 keep it in statics of
/// obmalloc.c, which no header describes: the memory split test proves
/// those against `sys._debugmallocstats()`).
#[test]
fn obmalloc_table_matches_interpreter_headers() {
    use pyinspect::cpython_layouts::obmalloc::{for_version, ArenaTable};
    let dir = tempfile::tempdir().unwrap();
    for_each_interpreter(
        "heap: obmalloc table vs headers",
        |i| i.at_least(3, 12),
        |interp| {
            let fields = [
                "offsetof(PyInterpreterState, obmalloc)",
                "offsetof(struct _obmalloc_state, mgmt)",
                "offsetof(struct _obmalloc_mgmt, arenas)",
                "offsetof(struct _obmalloc_mgmt, maxarenas)",
                "offsetof(struct _obmalloc_mgmt, narenas_currently_allocated)",
                "ARENA_SIZE",
                "POOL_SIZE",
                "sizeof(struct arena_object)",
                "offsetof(struct arena_object, nfreepools)",
                "offsetof(struct arena_object, ntotalpools)",
            ];
            let h = header_values(
                interp,
                dir.path(),
                "ob",
                "#define NDEBUG 1\n#include <Python.h>\n#include <internal/pycore_interp.h>\n\
                 #include <internal/pycore_obmalloc.h>\n",
                &fields,
            );
            let (major, minor) = interp.version;
            let t = for_version(major as u8, minor as u8).expect("an obmalloc table");
            let offsets = match t.table {
                ArenaTable::InInterp(o) | ArenaTable::InterpPointer(o) => o,
                ArenaTable::Statics => panic!("{}: statics on 3.12+", interp.label),
            };
            assert!(
                offsets.contains(&h[0]),
                "{}: obmalloc at {} not in {offsets:?}",
                interp.label,
                h[0]
            );
            assert_eq!(
                &h[1..],
                &[
                    t.mgmt,
                    t.mgmt_arenas,
                    t.mgmt_maxarenas,
                    t.mgmt_narenas,
                    t.arena_size,
                    t.pool_size,
                    t.arena_object_size,
                    t.ao_nfreepools,
                    t.ao_ntotalpools
                ],
                "{}",
                interp.label
            );
        },
    );
}

/// tracemalloc's allocation sites (`python_fixtures/heap_tracemalloc.py`):
/// the 20 largest of `statistics("lineno")`, taken by the fixture at its
/// READY, are ours exactly (file, line, bytes, blocks), in the same order,
/// and each one's largest traceback (3 frames kept) is ours; the text lists
/// them. A core file of one reads the same. 3.8 (another hash table) and a
/// build whose symbol table is gone (3.9–3.11 keep the tables in statics)
/// say why not, in the snapshot and the text.
#[test]
fn tracemalloc_sites_are_its_own_statistics() {
    let dir = tempfile::tempdir().unwrap();
    for_each_interpreter("heap: tracemalloc sites", has_heap, |interp| {
        let label = &interp.label;
        let fx = Fixture::spawn(interp, "heap_tracemalloc.py", &["3"]);
        let pid = fx.pid.to_string();
        let snapshot = heap_json(&["--pid", &pid]);
        let unread = snapshot["tracemalloc_unread"].as_str();
        let why_not = if !interp.at_least(3, 9) {
            Some("3.9 to 3.15 are")
        } else if !interp.at_least(3, 12)
            && !own_symbol(&interp.interpreter_file, "tracemalloc_traces")
        {
            // Only a separate debug file (Debian's) would name them.
            Some("no symbol table")
        } else {
            None
        };
        if let Some(why) = why_not {
            assert!(
                unread.is_some_and(|u| u.contains(why)),
                "{label}: {:?}",
                unread
            );
            let out = pyinspect(&["heap", "--pid", &pid]);
            out.assert_success();
            assert!(
                out.stdout
                    .contains("tracemalloc's allocation sites: not read ("),
                "{label}: {}",
                out.stdout
            );
            return;
        }
        let t = &snapshot["tracemalloc"];
        assert_eq!(t["tracing"], true, "{label}: {snapshot}");
        assert_eq!(t["max_nframe"], 3, "{label}");
        assert_eq!(t["partial"], Value::Array(vec![]), "{label}");
        let site = |s: &Value| {
            (
                s["filename"].as_str().unwrap().to_string(),
                s["lineno"].as_u64().unwrap(),
                s["size"].as_u64().unwrap(),
                s["count"].as_u64().unwrap(),
            )
        };
        let theirs: Vec<_> = fx.ready["sites"].as_array().unwrap()[..20]
            .iter()
            .map(site)
            .collect();
        let ours: Vec<_> = t["sites"].as_array().unwrap()[..20]
            .iter()
            .map(site)
            .collect();
        assert_eq!(ours, theirs, "{label}: pyinspect vs statistics(\"lineno\")");
        for (o, r) in t["sites"].as_array().unwrap()[..20]
            .iter()
            .zip(&fx.ready["sites"].as_array().unwrap()[..20])
        {
            let ours: Vec<(&str, u64)> = o["traceback"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["filename"].as_str().unwrap(),
                        f["lineno"].as_u64().unwrap(),
                    )
                })
                .collect();
            let theirs: Vec<(&str, u64)> = r["traceback"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f[0].as_str().unwrap(), f[1].as_u64().unwrap()))
                .collect();
            assert_eq!(ours, theirs, "{label}: the traceback of {o}");
        }
        // The fixture's 24 lines are its largest sites.
        let marks = &fx.ready["marks"];
        let top = &t["sites"][0];
        assert_eq!(top["lineno"], marks["site24"], "{label}");
        let out = pyinspect(&["heap", "--pid", &pid, "--top", "3"]);
        out.assert_success();
        let file = top["filename"].as_str().unwrap();
        for want in [
            "Allocation sites (tracemalloc, 3 frames kept): ".to_string(),
            format!("  {file}:{}\n", marks["site24"]),
            format!("called from {file}:"),
        ] {
            assert!(
                out.stdout.contains(&want),
                "{label}: {want:?} in\n{}",
                out.stdout
            );
        }
        if label.starts_with("pyenv 3.12") {
            let core = gcore(fx.pid, dir.path());
            let from_core = heap_json(&["--core", core.to_str().unwrap()]);
            assert_eq!(
                from_core["tracemalloc"], *t,
                "{label}: core and live differ"
            );
        }
    });
}

/// Whether `file`'s own symbol table (`nm`; not a separate debug file's)
/// names `symbol`.
fn own_symbol(file: &Path, symbol: &str) -> bool {
    let out = Command::new("nm").arg(file).output().expect("nm runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().last() == Some(symbol))
}

/// The tracemalloc table (src/cpython_layouts/tracemalloc.rs) against the
/// headers of each 3.9+ interpreter: the hash table and config (every
/// version), the runtime state, traceback and frame (3.12+; before, the
/// `.c` file defines them, and the sites test proves them). `trace_t` is
/// the `.c` file's own on every version.
#[test]
fn tracemalloc_table_matches_interpreter_headers() {
    use pyinspect::cpython_layouts::tracemalloc::{for_version, TracemallocState};
    let dir = tempfile::tempdir().unwrap();
    for_each_interpreter(
        "heap: tracemalloc table vs headers",
        |i| i.at_least(3, 9),
        |interp| {
            let (major, minor) = interp.version;
            let t = for_version(major as u8, minor as u8).expect("a tracemalloc table");
            let mut fields: Vec<(&str, u64)> = vec![
                ("offsetof(_Py_hashtable_t, nentries)", t.ht_nentries),
                ("offsetof(_Py_hashtable_t, nbuckets)", t.ht_nbuckets),
                ("offsetof(_Py_hashtable_t, buckets)", t.ht_buckets),
                ("offsetof(_Py_hashtable_entry_t, key)", t.entry_key),
                ("offsetof(_Py_hashtable_entry_t, value)", t.entry_value),
                (
                    "offsetof(struct _PyTraceMalloc_Config, tracing)",
                    t.config_tracing,
                ),
                (
                    "offsetof(struct _PyTraceMalloc_Config, max_nframe)",
                    t.config_max_nframe,
                ),
            ];
            let runtime = match t.state {
                TracemallocState::Globals => {
                    assert!(
                        !interp.at_least(3, 12),
                        "{}: globals on 3.12+",
                        interp.label
                    );
                    None
                }
                TracemallocState::InRuntime(offsets) => {
                    fields.extend([
                        ("offsetof(struct _tracemalloc_runtime_state, config)", 0),
                        (
                            "offsetof(struct _tracemalloc_runtime_state, traced_memory)",
                            t.state_traced_memory,
                        ),
                        (
                            "offsetof(struct _tracemalloc_runtime_state, peak_traced_memory)",
                            t.state_traced_memory + 8,
                        ),
                        (
                            "offsetof(struct _tracemalloc_runtime_state, traces)",
                            t.state_traces,
                        ),
                        (
                            "offsetof(struct _tracemalloc_runtime_state, domains)",
                            t.state_domains,
                        ),
                        (
                            "offsetof(struct tracemalloc_traceback, nframe)",
                            t.tb_nframe,
                        ),
                        (
                            "offsetof(struct tracemalloc_traceback, total_nframe)",
                            t.tb_total_nframe,
                        ),
                        (
                            "offsetof(struct tracemalloc_traceback, frames)",
                            t.tb_frames,
                        ),
                        ("sizeof(struct tracemalloc_frame)", t.frame_size),
                        ("offsetof(struct tracemalloc_frame, lineno)", t.frame_lineno),
                    ]);
                    Some(offsets)
                }
            };
            let mut exprs: Vec<&str> = fields.iter().map(|(e, _)| *e).collect();
            if runtime.is_some() {
                exprs.push("offsetof(_PyRuntimeState, tracemalloc)");
            }
            let values = header_values(
                interp,
                dir.path(),
                "tm",
                "#include <Python.h>\n#include <internal/pycore_runtime.h>\n\
                 #include <internal/pycore_hashtable.h>\n#if PY_VERSION_HEX < 0x030C0000\n\
                 #include <internal/pycore_pymem.h>\n#endif\n",
                &exprs,
            );
            let bad: Vec<String> = fields
                .iter()
                .zip(&values)
                .filter(|((_, v), h)| *h != v)
                .map(|((expr, v), h)| format!("{expr}: table {v}, headers {h}"))
                .collect();
            assert!(bad.is_empty(), "{}:\n{}", interp.label, bad.join("\n"));
            if let Some(offsets) = runtime {
                let at = values[fields.len()];
                assert!(
                    offsets.contains(&at),
                    "{}: _PyRuntime.tracemalloc at {at}, not in {offsets:?}",
                    interp.label
                );
            }
            // 3.15 interns file names as C strings, not `str` objects.
            let c_string = interp.at_least(3, 15);
            assert_eq!(
                t.filename == pyinspect::cpython_layouts::tracemalloc::FilenameKind::CString,
                c_string,
                "{}",
                interp.label
            );
        },
    );
}

/// The holders of the largest containers beside module globals: a class
/// attribute (`module.Class.name`) and the locals of live frames on any
/// thread (`local NAME in FUNCTION (FILE:LINE)`), a container two frames
/// hold named by both (`python_fixtures/heap_holders.py`).
#[test]
fn class_attributes_and_frame_locals_hold_containers() {
    for_each_interpreter("heap: holders", has_heap, |interp| {
        let label = &interp.label;
        let fx = Fixture::spawn(interp, "heap_holders.py", &[]);
        let pid = fx.pid.to_string();
        let marks = &fx.ready["marks"];
        // READY is written from inside `fu.ready(...)`: read again until
        // the main thread has gone on to its parking line (the worker
        // parked before READY).
        let parked = format!("heap_holders.py:{})", marks["park"]);
        let mut snap = heap_json(&["--pid", &pid]);
        for _ in 0..50 {
            if snap["containers"].to_string().contains(&parked) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            snap = heap_json(&["--pid", &pid]);
        }
        let holders = |ty: &str, length: u64| -> Vec<String> {
            snap["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == ty && c["length"] == length)
                .unwrap_or_else(|| panic!("{label}: no {ty} of {length} in {}", snap["containers"]))
                ["holders"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            holders("dict", 60000),
            ["__main__.Registry.entries"],
            "{label}"
        );
        assert_eq!(
            holders("list", 90000),
            [format!(
                "local batch in park (heap_holders.py:{})",
                marks["park"]
            )],
            "{label}"
        );
        assert_eq!(
            holders("set", 40000),
            [
                format!("local items in hold (heap_holders.py:{})", marks["hold"]),
                format!(
                    "local pending in worker (heap_holders.py:{})",
                    marks["worker"]
                ),
            ],
            "{label}"
        );
        let text = pyinspect(&["heap", "--pid", &pid]);
        text.assert_success();
        assert!(
            text.stdout
                .contains("dict (60000 items)  held by __main__.Registry.entries"),
            "{label}: {}",
            text.stdout
        );
        assert_not_stopped(fx.pid);
    });
}
