//! asyncio tasks: the offset table against the probe, task trees in dump on
//! every 3.7+ interpreter, CPython 3.14's own reader as the oracle, bounds,
//! `record --async` stitching, and a real uvicorn/Starlette server.

mod common;

use common::*;
use pyinspect::cpython_layouts::asyncio::{for_version, GenFrame, StackTop};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

/// Runs `check` on every 3.7+ interpreter of the matrix.
fn each_asyncio_interpreter(test: &str, check: impl Fn(&Interpreter) + Sync) {
    for_each_interpreter(test, |i| i.at_least(3, 7), check);
}

fn pyenv_312() -> &'static Interpreter {
    common::pyenv((3, 12))
}

/// Debian sid's 3.14 release build (uvicorn and uvloop from sid's packages).
fn sid_314() -> &'static Interpreter {
    find_interpreter("sid 3.14 (release)", |i| {
        i.version == (3, 14) && i.label.starts_with("sid") && !i.debug
    })
}

fn run_python(interp: &Interpreter, args: &[&str]) -> Output {
    let mut c = Command::new(&interp.python);
    c.args(args).current_dir(fixture_path(""));
    run_command(c, Duration::from_secs(60))
}

#[test]
fn offset_table_matches_the_probe() {
    let check = |interp: &Interpreter| {
        let out = run_python(interp, &["asyncio_probe.py"]);
        out.assert_success();
        let p: Value = serde_json::from_str(out.stdout.trim()).expect("probe JSON");
        let (major, minor) = (interp.version.0 as u8, interp.version.1 as u8);
        let l = for_version(major, minor).unwrap_or_else(|| panic!("no table for {major}.{minor}"));
        let n = |k: &str| {
            p[k].as_u64()
                .unwrap_or_else(|| panic!("{}: probe has no {k}", interp.label))
        };
        let flag = |k: &str| (n_at(&p, k, 0), n_at(&p, k, 1) as u8);
        let ctx = &interp.label;
        assert_eq!(l.task_size, n("task_size"), "{ctx} task_size");
        assert_eq!(l.fut_loop, n("fut_loop"), "{ctx} fut_loop");
        assert_eq!(l.fut_callback0, n("fut_callback0"), "{ctx}");
        assert_eq!(l.fut_callbacks, n("fut_callbacks"), "{ctx}");
        assert_eq!(l.fut_state, n("fut_state"), "{ctx}");
        assert_eq!(
            (l.fut_log_tb.offset, l.fut_log_tb.mask),
            flag("fut_log_tb"),
            "{ctx}"
        );
        assert_eq!(l.task_fut_waiter, n("task_fut_waiter"), "{ctx}");
        assert_eq!(l.task_coro, n("task_coro"), "{ctx}");
        assert_eq!(l.task_name, p["task_name"].as_u64(), "{ctx} task_name");
        assert_eq!(
            (l.task_must_cancel.offset, l.task_must_cancel.mask),
            flag("task_must_cancel"),
            "{ctx}"
        );
        assert_eq!(
            l.task_num_cancels_requested,
            p["task_num_cancels_requested"].as_u64(),
            "{ctx}"
        );
        for (v, k) in [
            (l.wakeup_task, "wakeup_task"),
            (l.step_task, "step_task"),
            (l.method_self, "method_self"),
            (l.func_closure, "func_closure"),
            (l.func_name, "func_name"),
            (l.partial_fn, "partial_fn"),
            (l.partial_args, "partial_args"),
            (l.weakref_object, "weakref_object"),
            (l.deque_leftblock, "deque_leftblock"),
            (l.deque_leftindex, "deque_leftindex"),
            (l.asend_gen, "asend_gen"),
            (l.futureiter_future, "futureiter_future"),
            (l.type_dict, "type_dict"),
            (l.type_mro, "type_mro"),
            (l.member_descr_def, "member_descr_def"),
        ] {
            assert_eq!(v, n(k), "{ctx} {k}");
        }
        // The frame: the coroutine's first local slot (its argument), and
        // where the top of its value stack (the awaited coroutine) is kept.
        let first_local = n("frame_first_local_at");
        let frame_base = match l.gen_frame {
            GenFrame::Pointer(o) => {
                assert_eq!(o, n("gen_frame"), "{ctx} gen_frame");
                0
            }
            GenFrame::Embedded(o) => {
                // localsplus: the interpreter table's, or 3.14's from its headers.
                let localsplus = pyinspect::cpython_layouts::for_version(major, minor)
                    .map(|c| c.frame.localsplus)
                    .unwrap_or(80);
                assert_eq!(o + localsplus, first_local, "{ctx} gen_iframe");
                o
            }
        };
        if let Some(st) = l.gen_frame_state {
            let at = |k: &str| hex(p[k].as_str().unwrap())[st.offset as usize] as i8;
            assert!(
                at("gen_state_fresh") < st.finished_from,
                "{ctx}: gi_frame_state (created)"
            );
            assert!(
                at("gen_state_suspended") < st.finished_from,
                "{ctx}: gi_frame_state (suspended)"
            );
            assert!(
                at("gen_state_done") >= st.finished_from,
                "{ctx}: gi_frame_state (finished)"
            );
        } else {
            assert!(
                p.get("gen_state_done").is_none(),
                "{ctx}: the table lacks gi_frame_state"
            );
        }
        let has = |k: &str, v: Value| {
            assert!(
                p[k].as_array().is_some_and(|a| a.contains(&v)),
                "{ctx}: {k} = {} lacks {v}",
                p[k]
            )
        };
        match l.stack_top {
            StackTop::Pointer { at, below } => has(
                "stack_pointer_at",
                serde_json::json!([frame_base + at, below]),
            ),
            StackTop::BaseDepth { base, depth } => {
                has("stack_base_depth_at", serde_json::json!([base, depth]))
            }
            StackTop::LocalsIndex(o) => has("stack_index_at", (frame_base + o).into()),
        }
        if let Some(ms) = l.module_state {
            for (v, k) in [
                (ms.md_state, "md_state"),
                (ms.future_type, "state_future_type"),
                (ms.task_type, "state_task_type"),
                (ms.tasks, "state_tasks"),
                (ms.eager_tasks, "state_eager_tasks"),
            ] {
                assert_eq!(v, n(k), "{ctx} {k}");
            }
        } else {
            assert!(
                p.get("md_state").is_none(),
                "{ctx}: the table lacks _asyncio's module state"
            );
        }
        if let Some(ab) = l.awaited_by {
            let raw = hex(p["awaited_by_raw"].as_str().expect("awaited_by_raw"));
            let word = u64::from_le_bytes(
                raw[ab.awaited_by as usize..ab.awaited_by as usize + 8]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(word, n("awaited_by_is"), "{ctx} task_awaited_by");
            assert_eq!(raw[ab.is_set as usize], 0, "{ctx} one awaiter is no set");
            assert_eq!(raw[ab.is_task as usize], 1, "{ctx} task_is_task");
        } else {
            assert!(
                p.get("awaited_by_raw").is_none(),
                "{ctx}: a table lacks awaited_by"
            );
        }
    };
    each_asyncio_interpreter("asyncio offsets", check);
}

fn n_at(p: &Value, k: &str, i: usize) -> u64 {
    p[k][i]
        .as_u64()
        .unwrap_or_else(|| panic!("probe has no {k}[{i}]"))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The thread of `ready["thread_id"]` in a dump, and its tasks by name
/// (3.7's tasks have none: READY's `names` gives the fixture's, by id).
fn loop_tasks(dump: &Value, ready: &Value) -> (Value, BTreeMap<String, Value>) {
    let thread = dump["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["thread_id"] == ready["thread_id"])
        .unwrap_or_else(|| panic!("no loop thread in {dump}"))
        .clone();
    let tasks = thread["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks on the loop thread: {thread}"))
        .iter()
        .map(|t| {
            let given = ready["names"]
                .get(t["id"].as_u64().unwrap().to_string())
                .and_then(|n| n.as_str());
            let name = given.unwrap_or_else(|| t["name"].as_str().unwrap());
            (name.to_string(), t.clone())
        })
        .collect();
    (thread, tasks)
}

fn names_of(ids: &Value, by_id: &BTreeMap<u64, String>) -> BTreeSet<String> {
    ids.as_array()
        .unwrap()
        .iter()
        .map(|i| {
            by_id
                .get(&i.as_u64().unwrap())
                .cloned()
                .unwrap_or_else(|| i.to_string())
        })
        .collect()
}

/// Every expected task of asyncio_tree.py: its awaiters, innermost frame
/// and what it waits on.
fn check_tree(fx: &Fixture, extra: &[&str], uvloop: bool, pytasks: bool) {
    let dump = &dump_json(fx.pid, extra)[0];
    let (_, tasks) = loop_tasks(dump, &fx.ready);
    let by_id: BTreeMap<u64, String> = tasks
        .iter()
        .map(|(n, t)| (t["id"].as_u64().unwrap(), n.clone()))
        .collect();
    // The process's own asyncio.all_tasks(): the same unfinished tasks.
    if let Some(all) = fx.ready["all_task_ids"].as_array() {
        let theirs: BTreeSet<u64> = all.iter().map(|v| v.as_u64().unwrap()).collect();
        let ours: BTreeSet<u64> = tasks
            .values()
            .filter(|t| {
                !["done", "cancelled", "done-not-retrieved"].contains(&t["state"].as_str().unwrap())
            })
            .map(|t| t["id"].as_u64().unwrap())
            .collect();
        let named = |ids: &BTreeSet<u64>| -> Vec<String> {
            ids.iter()
                .map(|i| by_id.get(i).cloned().unwrap_or_else(|| format!("0x{i:x}")))
                .collect()
        };
        assert_eq!(
            named(&ours),
            named(&theirs),
            "{}: pyinspect's unfinished tasks (left) vs the process's asyncio.all_tasks() (right)",
            fx.label
        );
    }
    let expected = fx.ready["tasks"].as_object().unwrap();
    for (name, e) in expected {
        let t = tasks
            .get(name)
            .unwrap_or_else(|| panic!("{}: no task {name} in {:?}", fx.label, tasks.keys()));
        let ctx = format!("{}: task {name}: {t}", fx.label);
        assert_eq!(t["state"], e["state"], "{ctx}");
        let want: BTreeSet<String> = e["parents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(names_of(&t["awaited_by"], &by_id), want, "{ctx}");
        // Innermost frame: the expected function; with a line, the first
        // frame of the fixture itself (library frames may come before it).
        let mut frames = &t["frames"].as_array().unwrap()[..];
        let kind = t["awaiting"]["kind"].as_str().unwrap_or("none");
        if e["innermost"].is_null() {
            assert!(frames.is_empty(), "{ctx}: a finished task has no frames");
            assert_eq!(kind, e["awaiting"], "{ctx}");
            continue;
        }
        // A Python-level Future is awaited through its own __await__ generator.
        if pytasks
            && frames[0]["function"]
                .as_str()
                .unwrap()
                .ends_with("__await__")
        {
            frames = &frames[1..];
        }
        let inner = &e["innermost"];
        let f = if inner["line"].is_null() {
            &frames[0]
        } else {
            frames
                .iter()
                .find(|f| f["file"] == inner["file"])
                .unwrap_or_else(|| panic!("{ctx}: no fixture frame"))
        };
        assert_eq!(f["function"], inner["function"], "{ctx}");
        if !inner["line"].is_null() {
            assert_eq!(f["line"], inner["line"], "{ctx}");
        }
        let want_kind = e["awaiting"].as_str().unwrap();
        // uvloop's timers are Cython objects: a sleep shows as its future.
        let ok = kind == want_kind || (uvloop && want_kind == "sleep" && kind == "future");
        assert!(ok, "{ctx}: awaiting {kind}, expected {want_kind}");
        if kind == "sleep" {
            let s = t["awaiting"]["seconds"].as_f64().unwrap();
            assert!(s > 900.0 && s <= 1000.0, "{ctx}: sleep ends in {s} s");
        }
        if kind == "task" {
            let other = t["awaiting"]["task"].as_u64().unwrap();
            assert!(by_id.contains_key(&other), "{ctx}: awaits an unknown task");
        }
    }
}

#[test]
fn dump_shows_task_trees() {
    each_asyncio_interpreter("asyncio trees", |interp| {
        let fx = Fixture::spawn(interp, "asyncio_tree.py", &[]);
        check_tree(&fx, &[], false, false);
        // The text form: the forest, the cycle cut, the waits.
        let out = pyinspect(&["dump", "--pid", &fx.pid.to_string()]);
        out.assert_success();
        // 3.7's tasks have no name.
        let named = if interp.at_least(3, 8) {
            "Task \"gg-parent\""
        } else {
            "Task \"Task-0x"
        };
        for needle in [
            "asyncio tasks (",
            named,
            "awaiting queue",
            "awaiting lock",
            "awaiting gather",
            "s left)",
            "(awaits a task above: cycle)",
        ] {
            assert!(
                out.stdout.contains(needle),
                "{}: no {needle:?}\n{}",
                fx.label,
                out.stdout
            );
        }
        // --no-async leaves them out.
        let plain = &dump_json(fx.pid, &["--no-async"])[0];
        assert!(
            plain["threads"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t.get("tasks").is_none()),
            "{}: tasks despite --no-async",
            fx.label
        );
        fx.assert_not_stopped_and_alive();
    });
}

trait Alive {
    fn assert_not_stopped_and_alive(self);
}

impl Alive for Fixture {
    fn assert_not_stopped_and_alive(mut self) {
        self.assert_alive();
    }
}

/// asyncio's pure-Python Task and Future, on every 3.7+ interpreter:
/// with the C accelerator blocked (`--no-c-asyncio`: tasks in
/// `asyncio.tasks._scheduled_tasks`), swapped in beside it (`--pytasks`,
/// up to 3.13: 3.14's C `current_task()` no longer sees them), and as a
/// third-party Task implementation that registers through asyncio's public
/// hooks (`--third-party`: from 3.14 in `_asyncio`'s module state), mixed
/// with one C task. Attributes come from `__dict__` and class defaults
/// instead of C structs. CPython's own reader (3.14+) sees only the C task
/// of the mixed process: it must agree on that one; the process's own
/// `asyncio.all_tasks()` sees them all, and so must pyinspect.
#[test]
fn python_level_tasks_are_read() {
    each_asyncio_interpreter("asyncio python tasks", |interp| {
        let mut modes = vec!["--no-c-asyncio", "--third-party"];
        if !interp.at_least(3, 14) {
            modes.push("--pytasks");
        }
        for mode in modes {
            let fx = Fixture::spawn(interp, "asyncio_tree.py", &[mode]);
            check_tree(&fx, &[], false, true);
            // Every task was found: nothing to warn about (with the C
            // accelerator blocked there is no AsyncioDebug section to miss).
            let dump = &dump_json(fx.pid, &[])[0];
            let warnings = dump["warnings"].as_array().cloned().unwrap_or_default();
            assert!(
                warnings
                    .iter()
                    .all(|w| !w.as_str().unwrap().to_lowercase().contains("asyncio")),
                "{} {mode}: {warnings:?}",
                fx.label
            );
            if mode == "--third-party" && interp.at_least(3, 14) {
                let (ours, theirs) = ours_and_cpythons(interp, &fx);
                assert_eq!(
                    theirs.len(),
                    1,
                    "{}: CPython's reader saw {theirs:?}",
                    fx.label
                );
                for (id, row) in &theirs {
                    assert_eq!(
                        ours.get(id),
                        Some(row),
                        "{}: pyinspect (left) vs CPython's asyncio ps (right)",
                        fx.label
                    );
                }
                assert!(ours.len() > theirs.len() + 20, "{}: {ours:?}", fx.label);
            }
        }
    });
}

/// Two threads, each running its own loop: each loop's tasks under its thread.
#[test]
fn each_loop_under_its_own_thread() {
    each_asyncio_interpreter("asyncio two loops", |interp| {
        let fx = Fixture::spawn(interp, "asyncio_tree.py", &["--two-loops"]);
        let dump = &dump_json(fx.pid, &[])[0];
        let (_, first) = loop_tasks(dump, &fx.ready);
        let mut second_ready = fx.ready.clone();
        second_ready["thread_id"] = fx.ready["second_thread_id"].clone();
        let (_, second) = loop_tasks(dump, &second_ready);
        let names: BTreeSet<&str> = second.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            BTreeSet::from(["t2-main", "t2-sleeper"]),
            "{}",
            fx.label
        );
        assert!(
            first.contains_key("main") && !first.contains_key("t2-sleeper"),
            "{}",
            fx.label
        );
    });
}

/// uvloop's loop on pyenv 3.12 (pip's) and sid's 3.14 (sid's own).
#[test]
fn uvloop_tasks_are_read() {
    let sid = sid_314();
    for_each_interpreter(
        "asyncio uvloop",
        |i| std::ptr::eq(i, pyenv_312()) || std::ptr::eq(i, sid),
        |interp| {
            let fx = Fixture::spawn(interp, "asyncio_tree.py", &["--uvloop"]);
            check_tree(&fx, &[], true, false);
            // uvloop keeps its queues in a Cython object's C fields: no
            // queue line for its loop (README says so), rather than a wrong one.
            let dump = &dump_json(fx.pid, &[])[0];
            assert!(
                dump["threads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|t| t.get("event_loops").is_none()),
                "{}: {dump}",
                fx.label
            );
        },
    );
}

/// CPython 3.14+'s own reader (`python -m asyncio ps`'s data) on the same
/// process: the same tasks, names, awaiters and coroutine stacks.
#[test]
fn agrees_with_cpythons_own_reader() {
    for_each_interpreter(
        "asyncio vs CPython",
        |i| i.at_least(3, 14),
        agrees_with_cpython,
    );
}

fn agrees_with_cpython(interp: &Interpreter) {
    let fx = Fixture::spawn(interp, "asyncio_tree.py", &[]);
    let (ours, theirs) = ours_and_cpythons(interp, &fx);
    assert_eq!(
        ours, theirs,
        "pyinspect (left) vs CPython's asyncio ps (right)"
    );
}

/// Per task: (name, coroutine stack, awaiters), from pyinspect's dump and
/// from CPython's own reader, on the same process.
type TaskRows = BTreeMap<u64, (String, String, BTreeSet<u64>)>;

fn ours_and_cpythons(interp: &Interpreter, fx: &Fixture) -> (TaskRows, TaskRows) {
    let oracle = run_python(interp, &["pstree_oracle.py", &fx.pid.to_string()]);
    oracle.assert_success();
    let rows: Vec<Value> = serde_json::from_str(oracle.stdout.trim()).expect("oracle JSON");
    let dump = &dump_json(fx.pid, &[])[0];
    let (_, tasks) = loop_tasks(dump, &fx.ready);
    let mut theirs: TaskRows = BTreeMap::new();
    for r in &rows {
        let e = theirs.entry(r["id"].as_u64().unwrap()).or_insert_with(|| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["stack"].as_str().unwrap().to_string(),
                BTreeSet::new(),
            )
        });
        let a = r["awaiter"].as_u64().unwrap();
        if a != 0 {
            e.2.insert(a);
        }
    }
    let ours: TaskRows = tasks
        .values()
        .map(|t| {
            let stack: Vec<&str> = t["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["function"].as_str().unwrap())
                .collect();
            let ab = t["awaited_by"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            (
                t["id"].as_u64().unwrap(),
                (
                    t["name"].as_str().unwrap().to_string(),
                    stack.join(" -> "),
                    ab,
                ),
            )
        })
        .collect();
    (ours, theirs)
}

#[test]
fn ten_thousand_sleeping_tasks_are_bounded() {
    let interp = pyenv_312();
    let fx = Fixture::spawn_with_timeout(
        interp,
        "asyncio_tree.py",
        &["--many", "10000"],
        Duration::from_secs(60),
    );
    let total = 10_000 + fx.ready["tasks"].as_object().unwrap().len() as u64;
    let dump = &dump_json(fx.pid, &[])[0];
    let (thread, tasks) = loop_tasks(dump, &fx.ready);
    assert_eq!(tasks.len(), 100, "default limit");
    assert_eq!(thread["tasks_left_out"].as_u64(), Some(total - 100));
    let dump = &dump_json(fx.pid, &["--async-limit", "20000"])[0];
    let (thread, tasks) = loop_tasks(dump, &fx.ready);
    assert_eq!(tasks.len() as u64, total);
    assert!(thread.get("tasks_left_out").is_none());
    let many = tasks.keys().filter(|n| n.starts_with("many-")).count();
    assert_eq!(many, 10_000);
    let out = pyinspect(&["dump", "--pid", &fx.pid.to_string()]);
    assert!(
        out.stdout.contains(&format!(
            "asyncio tasks ({total}, {} not shown)",
            total - 100
        )),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_async_flags_are_refused() {
    for args in [
        &["dump", "--pid", "1", "--async", "--no-async"][..],
        &["dump", "--pid", "1", "--async-limit", "0"],
        &["dump", "--pid", "1", "--async-limit", "x"],
        &["record", "--pid", "1", "--async-mode", "all"],
        &[
            "record",
            "--pid",
            "1",
            "--async",
            "--async-mode",
            "sometimes",
        ],
        &["top", "--pid", "1", "--async-mode", "all"],
    ] {
        let out = pyinspect(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}\n{}", out.describe());
        assert_one_clean_error_line(&out);
    }
}

/// Collapsed stacks of `record --async` on PID: (stack, count).
fn record_async(pid: i32, extra: &[&str]) -> Vec<(String, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.txt");
    let mut args = vec![
        "record".to_string(),
        "--pid".into(),
        pid.to_string(),
        "--duration".into(),
        "2".into(),
        "--format".into(),
        "raw".into(),
        "--output".into(),
        path.display().to_string(),
        "--async".into(),
    ];
    if !extra.contains(&"--rate") {
        args.extend(["--rate".into(), "50".into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    pyinspect(&argv).assert_success();
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (s, n) = l.rsplit_once(' ')?;
            Some((s.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// Function names of a collapsed stack, root first.
fn functions(stack: &str) -> Vec<&str> {
    stack
        .split(';')
        .map(|f| f.split(" (").next().unwrap_or(f))
        .collect()
}

#[test]
fn record_async_stitches_tasks_under_their_awaiters() {
    each_asyncio_interpreter("record --async", |interp| {
        let fx = Fixture::spawn(interp, "asyncio_tree.py", &["--busy"]);
        // The running task, its stack from the thread, and its awaiters
        // (READY comes just before call-model enters its loop: retry a while).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let tasks = loop {
            let dump = &dump_json(fx.pid, &[])[0];
            let (_, tasks) = loop_tasks(dump, &fx.ready);
            let first = &tasks["call-model"]["frames"][0]["function"];
            if first == "tokenize" || std::time::Instant::now() > deadline {
                break tasks;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let cm = &tasks["call-model"];
        assert_eq!(cm["state"], "running", "{}: {cm}", fx.label);
        assert_eq!(
            cm["frames"][0]["function"], "tokenize",
            "{}: {cm}",
            fx.label
        );
        assert_eq!(
            tasks["handle-request"]["awaiting"]["task"], cm["id"],
            "{}",
            fx.label
        );
        assert_eq!(
            tasks["main"]["awaiting"]["task"], tasks["handle-request"]["id"],
            "{}",
            fx.label
        );
        let stacks = record_async(fx.pid, &[]);
        let stitched = ["busy", "handle_request", "call_model", "tokenize"];
        let hits: u64 = stacks
            .iter()
            .filter(|(s, _)| functions(s) == stitched)
            .map(|(_, n)| n)
            .sum();
        assert!(hits > 0, "{}: no stitched stack in {stacks:?}", fx.label);
        // Nothing of the event loop's machinery is left below the tasks.
        assert!(
            stacks.iter().all(|(s, _)| !s.contains("run_forever")),
            "{}: {stacks:?}",
            fx.label
        );
        // --async-mode all adds the waiting sleeper, on either engine: about
        // as many samples as the running task's in wall time (it waits all
        // the time the busy task runs, and the loop's thread never waits).
        // The ptrace engine reads both at each tick. The eBPF engine
        // samples the running thread on each CPU's clock (whether it is on
        // its CPU then is chance: at 50 Hz, with two CPU hogs beside it, it
        // counted 43 to 51 such samples of 50 expected, and 88 in all
        // against the waiting task's 102 in a CI run) and adds the spans it
        // was preempted, which it measures: at 1 kHz that chance is within
        // 3% (1,969 to 2,028 against 2,017 to 2,034 with the same hogs).
        for (engine, rate) in [("ptrace", "50"), ("bpf", "1000")] {
            let args = [
                "--async-mode",
                "all",
                "--mode",
                "wall",
                "--engine",
                engine,
                "--rate",
                rate,
            ];
            let all = record_async(fx.pid, &args);
            let sum = |pick: &dyn Fn(&str) -> bool| -> u64 {
                all.iter().filter(|(s, _)| pick(s)).map(|(_, n)| n).sum()
            };
            let waiting = sum(&|s| functions(s).starts_with(&["sleeper"]));
            let running = sum(&|s| functions(s) == stitched);
            let ctx = format!("{} ({engine} engine): {all:?}", fx.label);
            eprintln!(
                "{} ({engine} engine): waiting task {waiting} samples, running task {running}",
                fx.label
            );
            assert!(running > 50, "{ctx}");
            assert!(
                waiting.abs_diff(running) * 10 <= running,
                "{ctx}: {waiting} samples of the waiting task, {running} of the running one"
            );
        }
    });
}

/// Eager tasks (3.12+) still in their first step run inside their
/// creator's step: main creates handle-request eagerly, which creates
/// call-model eagerly, which never yields. Each task's stack is its own
/// part of the thread's stack (3.12 and 3.13 name such tasks only after
/// their first step: they are told apart by their outermost frame), the
/// outer ones are found in the eager registries (on 3.14 a third-party
/// one in `_asyncio`'s state), and `record --async` keeps the whole nest.
#[test]
fn eager_tasks_run_inside_their_creators() {
    for_each_interpreter(
        "asyncio eager nest",
        |i| i.at_least(3, 12),
        |interp| {
            for mode in [None, Some("--third-party")] {
                let mut args = vec!["--busy", "--eager"];
                args.extend(mode);
                let fx = Fixture::spawn(interp, "asyncio_tree.py", &args);
                let ctx = format!("{} {mode:?}", fx.label);
                let outermost = |t: &Value| {
                    t["frames"]
                        .as_array()
                        .and_then(|f| f.last())
                        .map(|f| f["function"].as_str().unwrap().to_string())
                        .unwrap_or_default()
                };
                let functions_of = |t: &Value| -> Vec<String> {
                    t["frames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f["function"].as_str().unwrap().to_string())
                        .collect()
                };
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                let by_outer = loop {
                    let dump = &dump_json(fx.pid, &[])[0];
                    let (_, tasks) = loop_tasks(dump, &fx.ready);
                    let by_outer: BTreeMap<String, Value> =
                        tasks.values().map(|t| (outermost(t), t.clone())).collect();
                    let inner = by_outer.get("call_model").map(&functions_of);
                    if inner.as_deref() == Some(&["tokenize".to_string(), "call_model".into()][..])
                        || std::time::Instant::now() > deadline
                    {
                        break by_outer;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                for (outer, not_in) in [
                    ("call_model", "busy"),
                    ("handle_request", "call_model"),
                    ("busy", "handle_request"),
                ] {
                    let t = by_outer
                        .get(outer)
                        .unwrap_or_else(|| panic!("{ctx}: no task running {outer}: {by_outer:?}"));
                    assert_eq!(t["state"], "running", "{ctx}: {t}");
                    let fs = functions_of(t);
                    assert!(
                        !fs.iter().any(|f| f == not_in || f == "tokenize") || outer == "call_model",
                        "{ctx}: {outer}'s task shows another task's frames: {fs:?}"
                    );
                }
                assert_eq!(
                    functions_of(&by_outer["call_model"]),
                    ["tokenize", "call_model"],
                    "{ctx}"
                );
                let stacks = record_async(fx.pid, &[]);
                let nested = stacks.iter().any(|(s, _)| {
                    let f = functions(s);
                    let at = |n: &str| f.iter().position(|x| *x == n);
                    f.first() == Some(&"busy")
                        && f.last() == Some(&"tokenize")
                        && matches!((at("handle_request"), at("call_model")), (Some(h), Some(c)) if h < c)
                });
                assert!(
                    nested,
                    "{ctx}: no busy → handle_request → call_model → tokenize in {stacks:?}"
                );
                assert!(
                    stacks.iter().all(|(s, _)| !s.contains("run_forever")),
                    "{ctx}: {stacks:?}"
                );
            }
        },
    );
}

/// uvicorn + Starlette under a loopback load loop: the stuck requests'
/// tasks and where they wait; record --async crosses task boundaries. On
/// pyenv 3.12 (pip's uvicorn, .ci/asyncio-deps) and sid's 3.14 (sid's own
/// packages and uvloop, .ci/sid-asyncio-deps), whose tasks come from the
/// per-thread lists instead of the registries.
#[test]
fn uvicorn_server_stuck_requests_and_task_profile() {
    let sid_314 = sid_314();
    for_each_interpreter(
        "asyncio uvicorn server",
        |i| std::ptr::eq(i, pyenv_312()) || std::ptr::eq(i, sid_314),
        uvicorn_server,
    );
}

fn uvicorn_server(interp: &Interpreter) {
    let fx = Fixture::spawn_with_timeout(interp, "asyncio_server.py", &[], Duration::from_secs(60));
    let stuck = fx.ready["stuck"].as_u64().unwrap() as usize;
    let dump = &dump_json(fx.pid, &[])[0];
    let (_, tasks) = loop_tasks(dump, &fx.ready);
    let mark = fixture_markers("asyncio_server.py");
    let file = fixture_path("asyncio_server.py").display().to_string();
    for (func, line, inner) in [
        ("stuck_sleep", mark["sleep"], "sleep"),
        (
            "stuck_downstream",
            mark["downstream"],
            "StreamReader._wait_for_data",
        ),
    ] {
        let found: Vec<&Value> = tasks
            .values()
            .filter(|t| {
                t["frames"].as_array().unwrap().iter().any(|f| {
                    f["function"] == func && f["line"] == line && f["file"] == file.as_str()
                })
            })
            .collect();
        assert_eq!(found.len(), stuck, "{}: {func}: {found:?}", fx.label);
        for t in found {
            assert_eq!(t["state"], "pending", "{}: {t}", fx.label);
            assert_eq!(t["frames"][0]["function"], inner, "{}: {t}", fx.label);
            assert!(t["awaiting"].is_object(), "{}: {t}", fx.label);
        }
    }
    let stacks = record_async(fx.pid, &[]);
    let crossing = stacks.iter().any(|(s, _)| {
        let f = functions(s);
        let h = f.iter().position(|x| *x == "handle_request");
        let c = f.iter().position(|x| *x == "call_model");
        matches!((h, c), (Some(h), Some(c)) if h < c) && f.contains(&"tokenize")
    });
    assert!(
        crossing,
        "{}: no handle_request → call_model → tokenize stack in {stacks:?}",
        fx.label
    );
}

/// `# MARK:name` lines of a fixture.
fn fixture_markers(name: &str) -> BTreeMap<String, u64> {
    std::fs::read_to_string(fixture_path(name))
        .unwrap()
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let m = l.split("# MARK:").nth(1)?;
            Some((m.split_whitespace().next()?.to_string(), i as u64 + 1))
        })
        .collect()
}

/// `top --async` in a real terminal (tmux): the function table holds the
/// awaiters' frames (busy, handle_request) and none of the loop's own.
#[test]
fn top_async_shows_the_awaiters() {
    let fx = Fixture::spawn(pyenv_312(), "asyncio_tree.py", &["--busy"]);
    let socket = format!("pyinspect-asyncio-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux (apt-get install tmux)")
    };
    let cmd = format!("{} top --async --pid {}", pyinspect_bin(), fx.pid);
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "160",
        "-y",
        "40",
        "-s",
        "t",
        &cmd,
    ]);
    assert!(started.status.success(), "tmux new-session failed");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut screen;
    loop {
        screen =
            String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned();
        let rows = |f: &str| {
            screen
                .lines()
                .any(|l| l.contains(&format!("{f} (asyncio_tree.py")))
        };
        if rows("busy") && rows("handle_request") && rows("tokenize") {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = tmux(&["kill-server"]);
            panic!("top --async never showed the awaiters:\n{screen}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = tmux(&["send-keys", "-t", "t", "q"]);
    let _ = tmux(&["kill-server"]);
    assert!(!screen.contains("run_forever"), "{screen}");
}

/// Tasks that no registry lists (`asyncio.tasks._unregister_task`, which
/// on 3.14+ also takes a C task off its thread's list) but that a handle
/// in their loop's queues will run: a sleeper, reached through its sleep's
/// timer, and a task whose first step waits in `loop._ready`. Each loop's
/// counts equal the fixture's own `len(loop._ready)` and
/// `len(loop._scheduled)`; the next deadline is the fixture's, less the time
/// since READY. C tasks and pure-Python ones (the C accelerator blocked).
#[test]
fn loop_queues_show_unlisted_tasks() {
    each_asyncio_interpreter("asyncio loop queues", |interp| {
        for mode in [None, Some("--no-c-asyncio")] {
            let args: Vec<&str> = mode.into_iter().collect();
            let fx = Fixture::spawn(interp, "asyncio_queues.py", &args);
            let since_ready = std::time::Instant::now();
            let ctx = format!("{} {}", fx.label, mode.unwrap_or("C tasks"));
            let dump = &dump_json(fx.pid, &[])[0];
            let elapsed = since_ready.elapsed().as_secs_f64();
            let r = &fx.ready;
            let thread = dump["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["thread_id"] == r["thread_id"])
                .unwrap_or_else(|| panic!("{ctx}: no loop thread in {dump}"));
            let by_id: BTreeMap<u64, &Value> = thread["tasks"]
                .as_array()
                .unwrap_or_else(|| panic!("{ctx}: no tasks: {thread}"))
                .iter()
                .map(|t| (t["id"].as_u64().unwrap(), t))
                .collect();
            let task = |name: &str| {
                let id = r["tasks"][name].as_u64().unwrap();
                *by_id
                    .get(&id)
                    .unwrap_or_else(|| panic!("{ctx}: no {name} in {thread}"))
            };
            // The registries no longer list the hidden ones.
            let listed: BTreeSet<u64> = r["listed_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            for (name, via) in [
                ("hidden-sleeper", Value::from("timers")),
                ("hidden-ready", Value::from("ready")),
                ("listed-sleeper", Value::Null),
                ("main", Value::Null),
            ] {
                let t = task(name);
                let id = r["tasks"][name].as_u64().unwrap();
                assert_eq!(listed.contains(&id), via.is_null(), "{ctx}: {name} listed?");
                assert_eq!(
                    t.get("found_in").cloned().unwrap_or(Value::Null),
                    via,
                    "{ctx}: {name}: {t}"
                );
                assert_ne!(t["state"], "done", "{ctx}: {name}");
            }
            let hs = task("hidden-sleeper");
            assert_eq!(hs["state"], "pending", "{ctx}: {hs}");
            assert_eq!(hs["awaiting"]["kind"], "sleep", "{ctx}: {hs}");
            let left = hs["awaiting"]["seconds"].as_f64().unwrap();
            assert!(
                left > 400.0 && left <= 500.0,
                "{ctx}: sleep ends in {left} s"
            );
            assert!(
                hs["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["function"] == "sleeper" && f["line"] == r["sleep_line"]),
                "{ctx}: {hs}"
            );
            assert!(
                task("hidden-ready")["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["function"] == "first_step"),
                "{ctx}"
            );
            // The loop's queues as the fixture counted them.
            let loops = thread["event_loops"]
                .as_array()
                .unwrap_or_else(|| panic!("{ctx}: no event_loops: {thread}"));
            assert_eq!(loops.len(), 1, "{ctx}: {loops:?}");
            let lp = &loops[0];
            assert_eq!(lp["id"], r["loop_id"], "{ctx}");
            assert_eq!(lp["ready"], r["ready_len"], "{ctx}: ready");
            assert_eq!(lp["timers"], r["timers_len"], "{ctx}: timers");
            assert!(
                lp["type"].as_str().unwrap().ends_with("EventLoop"),
                "{ctx}: {lp}"
            );
            let next = lp["next_timer_seconds"].as_f64().unwrap();
            let theirs = r["next_timer_in"].as_f64().unwrap();
            assert!(
                next <= theirs + 0.01 && next >= theirs - elapsed - 5.0,
                "{ctx}: next timer in {next} s, the fixture said {theirs} s {elapsed:.3} s before"
            );
            // The text form.
            let out = pyinspect(&["dump", "--pid", &fx.pid.to_string()]);
            out.assert_success();
            for needle in [
                "1 ready callback, 2 timers, next in 4",
                "[in no registry: found in the loop's ready queue]",
                "[in no registry: found through the loop's timers] awaiting sleep",
            ] {
                assert!(
                    out.stdout.contains(needle),
                    "{ctx}: no {needle:?}\n{}",
                    out.stdout
                );
            }
            // --no-async: no queues either.
            let plain = &dump_json(fx.pid, &["--no-async"])[0];
            assert!(
                plain["threads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|t| t.get("event_loops").is_none()),
                "{ctx}: queues despite --no-async"
            );
            fx.assert_not_stopped_and_alive();
        }
    });
}

/// A loop whose queues lie (as a racing or hostile target's may): a ready
/// deque claiming 2**31 items whose only block links to itself, a timer
/// list claiming 2**40. The dump stays bounded: the deque's length is
/// shown and the task its real handle runs still found, the timer list is
/// named implausible and not read, and the target runs on.
#[test]
fn corrupt_loop_queues_stay_bounded() {
    each_asyncio_interpreter("asyncio corrupt queues", |interp| {
        let fx = Fixture::spawn(interp, "asyncio_queues.py", &["--corrupt"]);
        let ctx = &fx.label;
        let dump = &dump_json(fx.pid, &[])[0];
        let r = &fx.ready;
        let thread = dump["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["thread_id"] == r["thread_id"])
            .unwrap_or_else(|| panic!("{ctx}: no loop thread in {dump}"));
        let lp = &thread["event_loops"][0];
        assert_eq!(lp["ready"], r["ready_len"], "{ctx}: {lp}");
        assert_eq!(lp["ready"], 1u64 << 31, "{ctx}: {lp}");
        assert!(lp["timers"].is_null(), "{ctx}: {lp}");
        assert!(lp.get("next_timer_seconds").is_none(), "{ctx}: {lp}");
        let ready_id = r["tasks"]["hidden-ready"].as_u64().unwrap();
        assert!(
            thread["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["id"] == ready_id && t["found_in"] == "ready"),
            "{ctx}: {thread}"
        );
        let warnings = dump["warnings"].as_array().cloned().unwrap_or_default();
        assert!(
            warnings.iter().any(|w| w
                .as_str()
                .unwrap()
                .contains("timer list's length is implausible")),
            "{ctx}: {warnings:?}"
        );
        fx.assert_not_stopped_and_alive();
    });
}
