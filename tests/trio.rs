//! Trio: dump's task tree against Trio's own view (`trio.lowlevel`), of a
//! `trio.run` and of a guest run on asyncio's loop, on
//! every interpreter Trio is installed into: pyenv 3.9-3.13
//! (`.ci/gevent-deps`) and sid's 3.13-3.15, release and debug builds
//! (sid's python3-trio, `.ci/sid-trio-deps`).

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashMap;

/// pyenv 3.9-3.13 and sid's interpreters: those Trio is installed into.
fn with_trio(i: &Interpreter) -> bool {
    (i.label.starts_with("pyenv") && i.at_least(3, 9)) || i.label.starts_with("sid")
}

fn frames_of(v: &Value) -> Vec<(String, u64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("?").to_string(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn dump_shows_trio_tasks_by_nursery() {
    for_each_interpreter("dump_shows_trio_tasks_by_nursery", with_trio, |interp| {
        check_dump(interp, false)
    });
}

/// A guest run (`trio.lowlevel.start_guest_run` on asyncio's loop): no
/// `trio.run` frame; the same tree, under the host loop's thread.
#[test]
fn dump_shows_trio_guest_run_tasks() {
    for_each_interpreter("dump_shows_trio_guest_run_tasks", with_trio, |interp| {
        check_dump(interp, true)
    });
}

/// The threads of a dump that show Trio tasks.
fn trio_threads(p: &Value) -> Vec<&Value> {
    p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["trio_tasks"].is_array())
        .collect()
}

/// A guest run between two ticks, its host loop stuck in a callback: the
/// next tick waits in the loop's ready queue and no thread's stack holds
/// the run. One look finds it there, with every task.
#[test]
fn dump_finds_a_guest_run_between_its_ticks() {
    for_each_interpreter(
        "dump_finds_a_guest_run_between_its_ticks",
        with_trio,
        |interp| {
            let fx = Fixture::spawn(interp, "trio_tasks.py", &["--guest", "--stuck-host"]);
            let ctx = &interp.label;
            let mut want: Vec<u64> = fx.ready["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .filter_map(|t| t["id"].as_u64())
                .collect();
            want.sort_unstable();
            // The host blocks once READY is out; the ticker's wake-up is
            // queued within 20 ms of that.
            let host = fx.ready["host"].clone();
            let stuck = |p: &Value| {
                p["threads"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| t["thread_id"] == host)
                    .flat_map(|t| t["frames"].as_array().into_iter().flatten())
                    .any(|f| f["function"] == "stuck")
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !stuck(&dump_json(fx.pid, &[])[0]) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{ctx}: the host loop never got stuck"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
            let p = dump_json(fx.pid, &[]).swap_remove(0);
            let with = trio_threads(&p);
            assert_eq!(with.len(), 1, "{ctx}: one thread shows the run\n{p:#}");
            assert_eq!(with[0]["thread_id"], host, "{ctx}: under the host\n{p:#}");
            let mut ids: Vec<u64> = with[0]["trio_tasks"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t["id"].as_u64())
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, want, "{ctx}: the run's tasks\n{p:#}");
        },
    );
}

/// dump's Trio tasks of `trio_tasks.py` (`--guest`: its guest run)
/// against the fixture's view.
fn check_dump(interp: &Interpreter, guest: bool) {
    let args: &[&str] = if guest { &["--guest"] } else { &[] };
    let fx = Fixture::spawn(interp, "trio_tasks.py", args);
    let ctx = &format!("{}{}", interp.label, if guest { " (guest)" } else { "" });
    let oracle = fx.ready["tasks"].as_array().expect("tasks").clone();
    let main_id = fx.ready["main"].as_u64().unwrap();
    let park = (
        fx.ready["park"]["function"].as_str().unwrap().to_string(),
        fx.ready["park"]["line"].as_u64().unwrap(),
    );
    // READY is written from the main task before it parks: wait for it
    // to park.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let shown = loop {
        let p = &dump_json(fx.pid, &[])[0];
        let with = trio_threads(p);
        let late = std::time::Instant::now() > deadline;
        // A look that races the guest's hand-over from one thread to the
        // other may find it nowhere: a later look finds it.
        if guest && with.is_empty() && !late {
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        assert_eq!(with.len(), 1, "{ctx}: one thread runs Trio\n{p:#}");
        if guest {
            // The host loop's thread, where the guest's tasks run.
            assert_eq!(with[0]["thread_id"], fx.ready["host"], "{ctx}\n{p:#}");
        }
        let shown = with[0]["trio_tasks"].as_array().unwrap().clone();
        let main_parked = shown.iter().any(|t| {
            t["id"].as_u64() == Some(main_id)
                && t["state"] == "pending"
                && frames_of(&t["frames"]).contains(&park)
        });
        if main_parked || late {
            break shown;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        shown.len(),
        oracle.len(),
        "{ctx}: as many tasks as Trio's own view\n{shown:#?}\n{oracle:#?}"
    );
    let by_id: HashMap<u64, &Value> = shown
        .iter()
        .map(|t| (t["id"].as_u64().unwrap(), t))
        .collect();
    for o in &oracle {
        let id = o["id"].as_u64().unwrap();
        let t = by_id
            .get(&id)
            .unwrap_or_else(|| panic!("{ctx}: task {o} not in dump\n{shown:#?}"));
        let what = format!("{ctx}: task {o}\ndump: {t}");
        assert_eq!(t["name"], o["name"], "{what}");
        let parent: Vec<u64> = o["parent"].as_u64().into_iter().collect();
        let awaited_by: Vec<u64> = t["awaited_by"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_u64())
            .collect();
        assert_eq!(awaited_by, parent, "{what}");
        assert_eq!(t["state"], "pending", "{what}");
        if id == main_id {
            // It ran on after the view: it parks in park(), a sleep.
            assert!(frames_of(&t["frames"]).contains(&park), "{what}");
            assert_eq!(t["wait"]["kind"], "timer", "{what}");
            assert!(t["wait"]["seconds_left"].as_f64().is_some(), "{what}");
            continue;
        }
        assert_eq!(frames_of(&t["frames"]), frames_of(&o["frames"]), "{what}");
        let who = format!("{ctx}: {}", o["name"].as_str().unwrap_or("?"));
        check_wait(&o["wait"], &t["wait"], &who, &what);
    }
    // Every kind of wait the fixture sets up was met.
    let kinds: Vec<&str> = oracle
        .iter()
        .filter_map(|o| o["wait"]["kind"].as_str())
        .collect();
    for kind in ["socket", "event", "lock", "queue", "timer"] {
        assert!(kinds.contains(&kind), "{ctx}: no {kind} wait: {kinds:?}");
    }
    // The fixture's tree: supervisor's two workers under it.
    let supervisor = oracle
        .iter()
        .find(|o| {
            o["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("supervisor"))
        })
        .expect("supervisor");
    let workers = oracle
        .iter()
        .filter(|o| o["parent"] == supervisor["id"])
        .count();
    assert_eq!(workers, 2, "{ctx}: {oracle:#?}");
    // Text: a tree by nursery, each task's stack under it.
    let out = pyinspect(&["dump", "--pid", &fx.pid.to_string()]);
    out.assert_success();
    let text = &out.stdout;
    assert!(text.contains("    trio tasks ("), "{ctx}\n{text}");
    // A guest's host runs one asyncio task of its own: the one that
    // started the run, which waits for it to end.
    let asyncio_tasks = if guest {
        "asyncio tasks (1)"
    } else {
        "asyncio tasks"
    };
    assert_eq!(
        text.contains(asyncio_tasks),
        guest,
        "{ctx}: asyncio tasks\n{text}"
    );
    let sup = text
        .lines()
        .find(|l| l.contains("Task \"__main__.supervisor\""))
        .unwrap_or_else(|| panic!("{ctx}\n{text}"));
    let worker = text
        .lines()
        .find(|l| l.contains("Task \"__main__.worker\""))
        .unwrap_or_else(|| panic!("{ctx}\n{text}"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    assert!(
        indent(worker) > indent(sup),
        "{ctx}: workers under supervisor\n{text}"
    );
    assert!(
        worker.contains(") waiting ")
            && worker.contains("s on a timer, ")
            && worker.ends_with("s left"),
        "{ctx}: a sleep's time run and left\n{text}"
    );
}

/// A task's wait in dump's JSON against the fixture's (`o`): none known
/// (null) is not checked; `{kind: null}`: no wait shown.
fn check_wait(o: &Value, t: &Value, who: &str, what: &str) {
    if o.is_null() {
        return;
    }
    match o["kind"].as_str() {
        None => assert!(t.is_null(), "{what}: dump names a wait"),
        Some("timer") => {
            // A sleep: the seconds left to its deadline, as Trio counted
            // them when the fixture read them, less the time since.
            assert_eq!(t["kind"], "timer", "{what}");
            assert_eq!(t["local"], "deadline", "{what}");
            let left = t["seconds_left"].as_f64().expect("seconds_left");
            let then = o["seconds_left"].as_f64().unwrap();
            let want = then - (monotonic() - o["at"].as_f64().unwrap());
            eprintln!(
                "{who}: {left:.3}s left, Trio's {want:.3}s ({:+.3}s)",
                left - want
            );
            assert!(
                (left - want).abs() < 1.0,
                "{what}: {left}s left, Trio's clock says {want}s"
            );
            // The fixture's sleeps are trio.sleep(1000): the time slept and
            // the time left make up its length.
            let waited = t["waited_s"].as_f64().expect("waited_s");
            assert!(
                (waited + left - 1000.0).abs() < 0.01,
                "{what}: slept {waited}s, {left}s left, of 1000s"
            );
        }
        Some("socket") => {
            assert_eq!(t["kind"], "socket", "{what}");
            assert_eq!(t["fd"]["fd"], o["fd"], "{what}");
            assert_eq!(t["fd"]["kind"], "unix", "{what}");
        }
        Some(kind) => {
            assert_eq!(t["kind"], kind, "{what}");
            assert_eq!(t["object"], o["object"], "{what}");
        }
    }
}

#[test]
fn trio_tasks_are_bounded_by_the_async_limit() {
    let interp = pyenv((3, 12));
    let fx = Fixture::spawn(interp, "trio_tasks.py", &[]);
    let p = &dump_json(fx.pid, &["--async-limit", "3"])[0];
    let t = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["trio_tasks"].is_array())
        .expect("a thread with Trio tasks");
    let shown = t["trio_tasks"].as_array().unwrap().len() as u64;
    assert_eq!(shown, 3);
    let all = fx.ready["tasks"].as_array().unwrap().len() as u64;
    assert_eq!(shown + t["trio_tasks_left_out"].as_u64().unwrap(), all);
    eprintln!(
        "trio_tasks_are_bounded_by_the_async_limit: covered {}",
        interp.label
    );
    assert_no_async_reads_no(fx.pid, "trio_tasks");
}

/// `record --async --async-mode all`: each waiting Trio task's own stack
/// under a root of its own (`task NAME`, with --threads), at every sample;
/// the thread keeps its own root. The same for a guest run, once it has
/// gone idle (its host's thread is the one counted). The eBPF engine too:
/// its thread's samples come from the scheduler's events and its tasks'
/// from reads between them, each counted by the time it stands for, so
/// the two agree within a few samples rather than exactly.
#[test]
fn record_async_all_adds_waiting_trio_tasks() {
    for_each_interpreter(
        "record_async_all_adds_waiting_trio_tasks",
        |i| std::ptr::eq(i, pyenv((3, 12))) || i.label == "sid 3.15.2 (static, no symbols)",
        |interp| {
            for guest in [false, true] {
                for engine in ["ptrace", "bpf"] {
                    record_trio(interp, guest, engine);
                }
            }
        },
    );
}

fn record_trio(interp: &Interpreter, guest: bool, engine: &str) {
    let args: &[&str] = if guest { &["--guest"] } else { &[] };
    let fx = Fixture::spawn(interp, "trio_tasks.py", args);
    if guest {
        // Parked: every task waits, the guest on its I/O thread.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dump_json(fx.pid, &[])[0]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["trio_tasks"].as_array())
            .flatten()
            .any(|t| frames_of(&t["frames"]).iter().any(|(f, _)| f == "park"))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let mut args = vec!["--duration", "1", "--rate", "50"];
    args.extend(wall_async_all(engine));
    let text = record_raw(fx.pid, &args);
    let ctx = format!("{} (guest: {guest}, {engine} engine)\n{text}", interp.label);
    let count = |root: &str, leaf: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(s, _)| {
                s.split(';').next().is_some_and(|r| r.ends_with(root)) && s.contains(leaf)
            })
            .map(|(_, n)| n.parse::<u64>().unwrap())
            .sum()
    };
    let thread = count("\"MainThread\"", "run (");
    assert!(thread > 20, "{ctx}");
    // Every sample of the thread has each waiting task beside it.
    for (task, at) in [
        ("\"task __main__.sleeper\"", "deeper_sleep ("),
        ("\"task __main__.reader\"", "reader ("),
        ("\"task __main__.worker\"", "worker ("),
    ] {
        let n = count(task, at);
        let per = if task.contains("worker") { 2 } else { 1 };
        if engine == "ptrace" {
            assert_eq!(n, thread * per, "{ctx}: {task}");
        } else {
            let off = n.abs_diff(thread * per);
            assert!(
                off <= 2 * per,
                "{ctx}: {task}: {n} against {thread} × {per}"
            );
        }
    }
}
