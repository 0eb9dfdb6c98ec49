//! Greenlets (gevent): the layout tables against the probe compiled on the
//! release's own headers, and dump's greenlets against the fixture's own
//! in-process view, on every interpreter with a gevent wheel in the tables.

mod common;

use common::*;
use pyinspect::cpython_layouts::greenlet::{gevent_layout, greenlet_layout, greenlet_python};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::Duration;

/// The greenlet release `.ci/gevent-deps` installs for `interp` (the
/// newest with a wheel for it), which the tables hold.
fn release(interp: &Interpreter) -> &'static str {
    if interp.label.starts_with("sid") {
        // sid's own package (python3-greenlet), built for 3.14 and 3.15.
        "3.3.2"
    } else if interp.label.starts_with("debian") {
        // Debian's own package (python3-greenlet).
        "2.0.2"
    } else if interp.at_least(3, 10) {
        "3.5.6"
    } else if interp.at_least(3, 9) {
        "3.2.5"
    } else {
        "3.1.1"
    }
}

/// The matrix interpreters with gevent and greenlet installed by
/// `.ci/gevent-deps`: pyenv 3.7–3.13, Debian's 3.11 (its own
/// python3-gevent) and sid's 3.14 (sid's, from `.ci/sid-gevent-deps`); not
/// the debug builds, which no package serves, nor sid's 3.13 and 3.15,
/// which sid's gevent is not built for.
fn with_gevent(i: &Interpreter) -> bool {
    (i.label.starts_with("pyenv") && i.at_least(3, 7) && !i.at_least(3, 14))
        || (i.label.starts_with("debian") && !i.debug)
        || (i.label.starts_with("sid") && i.version == (3, 14) && !i.debug)
}

/// The interpreters with greenlet: those with gevent, and sid's 3.15
/// (sid builds greenlet, not gevent, for it).
fn with_greenlet(i: &Interpreter) -> bool {
    with_gevent(i) || (i.label.starts_with("sid") && i.version == (3, 15) && !i.debug)
}

#[test]
fn greenlet_tables_match_the_probe() {
    for_each_interpreter("greenlet_tables_match_the_probe", with_greenlet, |interp| {
        let mut c = Command::new(fixture_path("greenlet_layout_probe.sh"));
        c.arg(release(interp)).arg(&interp.python);
        let out = run_command(c, Duration::from_secs(120));
        out.assert_success();
        let p: HashMap<String, u64> = out
            .stdout
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect();
        let n = |k: &str| {
            *p.get(k)
                .unwrap_or_else(|| panic!("{}: probe has no {k}\n{}", interp.label, out.describe()))
        };
        let (major, minor) = (interp.version.0 as u8, interp.version.1 as u8);
        let g = greenlet_layout(release(interp), major, minor)
            .unwrap_or_else(|| panic!("no greenlet {} table for {major}.{minor}", release(interp)));
        let py = greenlet_python(major, minor).expect("no Python facts");
        let ctx = &interp.label;
        for (name, table, probe) in [
            ("pimpl", g.pimpl, "pygreenlet_pimpl"),
            ("exc_info", g.exc_info, "greenlet_exc_info"),
            ("stack_start", g.stack_start, "greenlet_stack_start"),
            ("stack_stop", g.stack_stop, "greenlet_stack_stop"),
            ("top_frame", g.top_frame, "greenlet_top_frame"),
            (
                "user_main_greenlet",
                g.user_main_greenlet,
                "user_main_greenlet",
            ),
            (
                "user_run_callable",
                g.user_run_callable,
                "user_run_callable",
            ),
            ("user_parent", g.user_parent, "user_parent"),
            (
                "main_thread_state",
                g.main_thread_state,
                "main_thread_state",
            ),
            (
                "thread_state_current",
                g.thread_state_current,
                "thread_state_current",
            ),
            ("gc_in_runtime", py.gc_in_runtime as u64, "gc_in_runtime"),
            ("gc_generations", py.gc_generations, "interp_gc_generations"),
            (
                "gc_generation_count",
                py.gc_generation_count,
                "gc_generations",
            ),
            (
                "gc_generation_size",
                py.gc_generation_size,
                "gc_generation_size",
            ),
            ("gc_permanent", py.gc_permanent, "interp_gc_permanent"),
            ("gc_head_size", py.gc_head_size, "gc_head_size"),
            ("tstate_exc_state", py.tstate_exc_state, "tstate_exc_state"),
            (
                "err_stackitem_previous",
                py.err_stackitem_previous,
                "err_stackitem_previous",
            ),
            ("func_qualname", py.func_qualname, "func_qualname"),
            ("method_func", py.method_func, "method_func"),
            ("method_self", py.method_self, "method_self"),
            ("cfunction_self", py.cfunction_self, "cfunction_self"),
            ("tp_base", py.tp_base, "tp_base"),
        ] {
            assert_eq!(table, n(probe), "{ctx}: {name}");
        }
        assert_eq!(
            py.frameobject_f_frame,
            p.get("frameobject_f_frame").copied(),
            "{ctx}: frameobject_f_frame"
        );
    });
}

fn frames_of(v: &Value) -> Vec<(String, u64)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    (
                        f["function"].as_str().unwrap_or("?").to_string(),
                        f["line"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// dump's greenlets against the fixture's own view (`args`: the fixture's).
fn check_against_the_fixture(interp: &Interpreter, args: &[&str]) {
    let fx = Fixture::spawn(interp, "gevent_greenlets.py", args);
    let ctx = &interp.label;
    let oracle = fx.ready["greenlets"].as_array().expect("greenlets").clone();
    let main_id = fx.ready["main"].as_u64().unwrap();
    let hub_id = fx.ready["hub"].as_u64();
    let park = (
        fx.ready["park"]["function"].as_str().unwrap().to_string(),
        fx.ready["park"]["line"].as_u64().unwrap(),
    );
    // READY is written from the main greenlet before it parks: dump until
    // it has parked (its stack holds park()'s line).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let parked = |p: &Value| {
        p["threads"].as_array().into_iter().flatten().any(|t| {
            t["greenlets"].as_array().into_iter().flatten().any(|g| {
                g["id"].as_u64() == Some(main_id) && frames_of(&g["frames"]).contains(&park)
            })
        })
    };
    let p = &loop {
        let p = dump_json(fx.pid, &[]).swap_remove(0);
        if parked(&p) || std::time::Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let threads = p["threads"].as_array().unwrap();
    let with: Vec<&Value> = threads
        .iter()
        .filter(|t| t["greenlets"].as_array().is_some_and(|g| !g.is_empty()))
        .collect();
    assert_eq!(with.len(), 1, "{ctx}: one thread runs greenlets\n{p:#}");
    let shown = with[0]["greenlets"].as_array().unwrap();
    let by_id: HashMap<u64, &Value> = shown
        .iter()
        .map(|g| (g["id"].as_u64().unwrap(), g))
        .collect();
    assert_eq!(
        shown.len(),
        oracle.len(),
        "{ctx}: as many greenlets as gc.get_objects() sees\n{shown:#?}\n{oracle:#?}"
    );
    for o in &oracle {
        let id = o["id"].as_u64().unwrap();
        let g = by_id
            .get(&id)
            .unwrap_or_else(|| panic!("{ctx}: greenlet {o} not in dump\n{shown:#?}"));
        let what = format!("{ctx}: greenlet {o}\ndump: {g}");
        let parent = o["parent"].as_u64();
        assert_eq!(g["parent"].as_u64(), parent, "{what}");
        let ty = o["type"].as_str().unwrap();
        let type_name = g["type_name"].as_str().unwrap();
        assert!(
            type_name == ty || type_name.ends_with(&format!(".{ty}")),
            "{what}"
        );
        if id == main_id {
            // Main ran on after the view was taken: it parks in park(),
            // switched away to the hub (gevent), or running (--raw).
            let state = if hub_id.is_some() {
                "suspended"
            } else {
                "running"
            };
            assert_eq!(g["state"], state, "{what}");
            assert_eq!(g["main"], true, "{what}");
            assert_eq!(g["name"], "main", "{what}");
            let f = frames_of(&g["frames"]);
            assert!(f.contains(&park), "{what}: main parks at {park:?}");
            assert_eq!(f.last().map(|f| f.0.as_str()), Some("<module>"), "{what}");
            continue;
        }
        if Some(id) == hub_id {
            // The hub runs its loop while every other greenlet waits.
            assert_eq!(g["state"], "running", "{what}");
            assert_eq!(g["hub"], true, "{what}");
            continue;
        }
        assert_eq!(g["state"], o["state"], "{what}");
        assert!(g.get("hub").is_none(), "{what}");
        if let Some(name) = o["name"].as_str() {
            assert_eq!(g["name"], name, "{what}");
        }
        assert_eq!(frames_of(&g["frames"]), frames_of(&o["frames"]), "{what}");
        check_wait(&o["wait"], &g["wait"], &what);
    }
    // Waiting longest first: the suspended greenlets (main aside) whose
    // wait's start is told, each after those that began earlier; the others
    // after them.
    let waits: Vec<Option<f64>> = shown
        .iter()
        .filter(|g| g["state"] == "suspended" && g["main"] != true)
        .map(waited)
        .collect();
    let told: Vec<f64> = waits.iter().map_while(|w| *w).collect();
    assert!(
        waits[told.len()..].iter().all(Option::is_none),
        "{ctx}: a wait whose start is told after one whose is not: {waits:?}"
    );
    assert!(
        told.windows(2).all(|w| w[0] >= w[1] - 0.01),
        "{ctx}: not waiting longest first: {told:?}"
    );
    let least = match (hub_id, args.contains(&"--eventlet")) {
        // The sleeper, the two other sleeps, the TCP reader.
        (Some(_), false) => 4,
        (Some(_), true) => 1,
        (None, _) => 0,
    };
    assert!(told.len() >= least, "{ctx}: {waits:?}");
    // The oracle covers what the test relies on.
    let names: Vec<&str> = oracle.iter().filter_map(|o| o["name"].as_str()).collect();
    let eventlet = args.contains(&"--eventlet");
    let wanted: &[&str] = if eventlet {
        // eventlet's GreenThreads carry no names: each is shown by the
        // function it was spawned with (the one not started too, from the
        // hub's timer that will start it).
        &[
            "sleeper",
            "event_waiter",
            "reader",
            "getter",
            "waiting_unnamed",
        ]
    } else if hub_id.is_some() {
        &[
            "sleeper",
            "event-waiter",
            "reader",
            "tcp-reader",
            "joiner",
            "getter",
            "locker",
            "waiting_unnamed",
            "not-started",
            "finished",
        ]
    } else {
        // The one not started (a started greenlet hides its run).
        &["raw_run"]
    };
    for want in wanted {
        assert!(
            names.contains(want),
            "{ctx}: fixture has no {want}: {names:?}"
        );
    }
    if hub_id.is_none() {
        return;
    }
    // Every kind of wait the fixture sets up was met.
    let kinds: Vec<&str> = oracle
        .iter()
        .filter_map(|o| o["wait"]["kind"].as_str())
        .collect();
    let set_up: &[&str] = if eventlet {
        &["socket", "timer", "event", "queue"]
    } else {
        &["socket", "timer", "event", "queue", "lock", "greenlet"]
    };
    for kind in set_up {
        assert!(kinds.contains(kind), "{ctx}: no {kind} wait: {kinds:?}");
    }
    if eventlet {
        // Text: a GreenThread by its function.
        let out = pyinspect(&["dump", "--pid", &fx.pid.to_string()]);
        out.assert_success();
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains("Greenlet \"sleeper\""))
            .unwrap_or_else(|| panic!("{ctx}\n{}", out.stdout));
        assert!(line.contains("(GreenThread, suspended)"), "{ctx}: {line}");
        return;
    }
    // gevent's generated name.
    assert!(
        names.iter().any(|n| n.starts_with("Greenlet-")),
        "{ctx}: the fixture asked gevent for a Greenlet-N name: {names:?}"
    );
    // Text: the hub marked, a suspended greenlet's stack under it.
    let pid = fx.pid.to_string();
    let out = pyinspect(&["dump", "--pid", &pid]);
    out.assert_success();
    assert!(
        out.stdout.contains("hub, running)"),
        "{ctx}\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("Greenlet \"sleeper\""),
        "{ctx}\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("    deeper_sleep ("),
        "{ctx}\n{}",
        out.stdout
    );
    for said in ["\"sleeper\"", "\"tcp-reader\"", "\"getter\""] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(said))
            .unwrap_or_else(|| panic!("{ctx}: no {said}\n{}", out.stdout));
        let want: &[&str] = match said {
            "\"sleeper\"" => &["s on a timer, ", "s left"],
            "\"tcp-reader\"" => &["waiting on fd ", "(ESTABLISHED, no data for "],
            _ => &["waiting on ", "Queue 0x"],
        };
        for w in want {
            assert!(line.contains(w), "{ctx}: {w:?} not in {line}");
        }
        // "waiting N.Ns on a timer": how long the sleep has run.
        if said == "\"sleeper\"" {
            let after = line.split(": waiting ").nth(1).unwrap_or_default();
            let secs = after.split("s on a timer").next().unwrap_or_default();
            assert!(secs.parse::<f64>().is_ok(), "{ctx}: {line}");
        }
    }
}

/// How long a greenlet of dump's JSON has waited, where told: a timer's
/// time since it was set, a TCP socket's since its last data.
fn waited(g: &Value) -> Option<f64> {
    let w = &g["wait"];
    w["waited_s"]
        .as_f64()
        .or_else(|| w["fd"]["quiet_s"].as_f64())
}

/// A greenlet's wait in dump's JSON against the fixture's own (`o`).
fn check_wait(o: &Value, g: &Value, what: &str) {
    if o.is_null() {
        assert!(g.is_null(), "{what}: no wait known, dump says one");
        return;
    }
    let kind = o["kind"].as_str().unwrap();
    assert_eq!(g["kind"], kind, "{what}");
    match kind {
        "socket" => {
            let fd = &g["fd"];
            assert_eq!(fd["fd"], o["fd"], "{what}");
            if let Some(remote) = o["remote"].as_str() {
                assert_eq!(fd["kind"], "tcp", "{what}");
                assert_eq!(fd["remote"], remote, "{what}");
                assert_eq!(fd["local"], o["local"], "{what}");
                assert_eq!(fd["state"], "ESTABLISHED", "{what}");
                // No data since it was connected, as the kernel says.
                let quiet = fd["quiet_s"].as_f64().expect("quiet_s");
                let want = monotonic() - o["quiet_since"].as_f64().unwrap();
                assert!(
                    quiet <= want + 0.05 && quiet > want - 1.0,
                    "{what}: quiet {quiet}s, connected {want}s ago"
                );
            } else {
                assert_eq!(fd["kind"], "unix", "{what}");
            }
        }
        "timer" => {
            let now = monotonic();
            let left = g["seconds_left"].as_f64().expect("seconds_left");
            let want = o["at"].as_f64().unwrap() - now;
            assert!(
                (left - want).abs() < 1.0,
                "{what}: {left}s left, the fixture's timer says {want}s"
            );
            // How long it has slept, against when the fixture called sleep.
            if let Some(began) = o["began"].as_f64() {
                let waited = g["waited_s"].as_f64().expect("waited_s");
                let want = now - began;
                assert!(
                    waited <= want + 0.05 && waited > want - 1.0,
                    "{what}: waited {waited}s, the fixture slept {want}s ago"
                );
            }
        }
        _ => assert_eq!(g["object"], o["object"], "{what}"),
    }
}

#[test]
fn gevent_tables_match_the_probe() {
    for_each_interpreter("gevent_tables_match_the_probe", with_gevent, |interp| {
        let mut c = Command::new(&interp.python);
        c.arg(fixture_path("gevent_layout_probe.py"));
        let out = run_command(c, Duration::from_secs(60));
        out.assert_success();
        let p: HashMap<&str, &str> = out
            .stdout
            .lines()
            .filter_map(|l| l.split_once(' '))
            .collect();
        let ctx = format!("{}\n{}", interp.label, out.describe());
        let release = p.get("gevent").unwrap_or_else(|| panic!("{ctx}"));
        let g = gevent_layout(release)
            .unwrap_or_else(|| panic!("gevent {release} is not in the tables: {ctx}"));
        assert_eq!(p.get("loop"), Some(&"gevent.libev.corecext"), "{ctx}");
        assert_eq!(
            p.get("greenlet_ident_from_base"),
            Some(&g.greenlet_ident_from_base.to_string().as_str()),
            "{ctx}"
        );
        assert_eq!(
            p.get("timer_at_from_end"),
            Some(&g.timer_at_from_end.to_string().as_str()),
            "{ctx}"
        );
    });
}

#[test]
fn dump_shows_the_greenlets_the_process_sees() {
    for_each_interpreter(
        "dump_shows_the_greenlets_the_process_sees",
        with_gevent,
        |interp| check_against_the_fixture(interp, &[]),
    );
}

/// eventlet's GreenThreads (its hub a plain greenlet, told as the
/// GreenThreads' parent) and what they wait on, where the waits are a few
/// frames out (eventlet's hub switches in Python): pyenv 3.12, with the
/// eventlet `.ci/gevent-deps` installs there.
#[test]
fn eventlet_greenlets_and_their_waits() {
    for_each_interpreter(
        "eventlet_greenlets_and_their_waits",
        |i| std::ptr::eq(i, pyenv((3, 12))),
        |interp| check_against_the_fixture(interp, &["--eventlet"]),
    );
}

/// greenlet alone, its main greenlet running (told from the one thread no
/// other main greenlet claims): pyenv 3.12, and sid's 3.15, for which sid
/// builds greenlet but not gevent.
#[test]
fn plain_greenlets_without_gevent() {
    for_each_interpreter(
        "plain_greenlets_without_gevent",
        |i| with_greenlet(i) && (i.version == (3, 12) || !with_gevent(i)),
        |interp| check_against_the_fixture(interp, &["--raw"]),
    );
}

#[test]
fn greenlets_are_bounded_by_the_async_limit() {
    let interp = pyenv((3, 12));
    let fx = Fixture::spawn(interp, "gevent_greenlets.py", &["--many", "300"]);
    let p = &dump_json(fx.pid, &["--async-limit", "20"])[0];
    let t = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["greenlets"].is_array())
        .expect("a thread with greenlets");
    let shown = t["greenlets"].as_array().unwrap();
    assert_eq!(shown.len(), 20);
    // 300 sleeping, the fixture's 12, main and the hub.
    assert_eq!(
        shown.len() as u64 + t["greenlets_left_out"].as_u64().unwrap(),
        314
    );
    assert_eq!(shown[0]["state"], "running", "the running one first");
    // The sleeping greenlets shown are those that began their sleep first
    // (the last spawned), whatever order the collector keeps them in.
    let began: HashMap<u64, (String, f64)> = fx.ready["greenlets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["name"].as_str().is_some_and(|n| n.starts_with("many-")))
        .map(|o| {
            let id = o["id"].as_u64().unwrap();
            let name = o["name"].as_str().unwrap().to_string();
            (id, (name, o["wait"]["began"].as_f64().expect("began")))
        })
        .collect();
    assert_eq!(began.len(), 300);
    let ids: HashSet<u64> = shown.iter().filter_map(|g| g["id"].as_u64()).collect();
    let (mut shown_many, mut hidden): (Vec<_>, Vec<_>) =
        began.iter().partition(|(id, _)| ids.contains(id));
    shown_many.sort_by(|a, b| a.1 .1.total_cmp(&b.1 .1));
    hidden.sort_by(|a, b| a.1 .1.total_cmp(&b.1 .1));
    let names: Vec<&str> = shown_many.iter().map(|(_, (n, _))| n.as_str()).collect();
    assert!(!shown_many.is_empty(), "no many-N shown");
    let (last_shown, first_hidden) = (shown_many.last().unwrap().1 .1, hidden[0].1 .1);
    // Within a few loop turns: gevent dates a timer by its loop's clock.
    assert!(
        last_shown <= first_hidden + 0.05,
        "shown {names:?}, the last began {last_shown}; {} began {first_hidden}",
        hidden[0].1 .0
    );
    eprintln!("greenlets_are_bounded_by_the_async_limit: shown {names:?}");
    eprintln!(
        "greenlets_are_bounded_by_the_async_limit: covered {}",
        interp.label
    );
    assert_no_async_reads_no(fx.pid, "greenlets");
}

/// `record --async --async-mode all` on a gevent service with two kinds of
/// request: each handler's share of the greenlets' samples against the
/// fixture's own timing of its handlers over the same period; each waiting
/// greenlet under a root of its own with `--threads`. Both engines, one
/// after the other, each over a period of its own.
#[test]
fn record_async_all_shares_greenlet_time_by_handler() {
    for_each_interpreter(
        "record_async_all_shares_greenlet_time_by_handler",
        with_gevent,
        |interp| {
            let fx = Fixture::spawn(interp, "gevent_service.py", &[]);
            for engine in ["ptrace", "bpf"] {
                shares_by_handler(&fx, interp, engine);
            }
        },
    );
}

/// One engine's recording of `fx` (gevent_service.py), checked as
/// `record_async_all_shares_greenlet_time_by_handler` says.
fn shares_by_handler(fx: &Fixture, interp: &Interpreter, engine: &str) {
    // A period of the fixture's own timing starts here.
    fx.ask(libc::SIGUSR2, "SPENT ");
    // Some 9,000 samples: a share's sampling error about half a point,
    // well within the two asked (3,500 were about one). The rate is no
    // multiple of the workers' periods (5 ms, 30 ms).
    let mut args = vec!["--duration", "8", "--rate", "347"];
    args.extend(wall_async_all(engine));
    let text = record_raw(fx.pid, &args);
    let spent: Value = serde_json::from_str(&fx.ask(libc::SIGUSR2, "SPENT ")).unwrap();
    let ctx = format!("{} ({engine} engine): fixture {spent}", interp.label);
    let (mut upstream, mut compute) = (0u64, 0u64);
    let mut roots = Vec::new();
    for l in text.lines() {
        let (stack, n) = l.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if stack.contains("handle_upstream") {
            upstream += n;
        } else if stack.contains("handle_compute") {
            compute += n;
        }
        roots.push(stack.split(';').next().unwrap().to_string());
    }
    assert!(
        upstream + compute > 2000,
        "{ctx}: {upstream} + {compute} samples"
    );
    let share = upstream as f64 / (upstream + compute) as f64;
    let (u, c) = (
        spent["handle_upstream"].as_f64().unwrap(),
        spent["handle_compute"].as_f64().unwrap(),
    );
    let want = u / (u + c);
    eprintln!(
        "{} ({engine} engine): handle_upstream {:.2}% of {} samples, {:.2}% of the fixture's time",
        interp.label,
        share * 100.0,
        upstream + compute,
        want * 100.0
    );
    // The default engine reads the thread and its greenlets at one moment;
    // the eBPF engine takes the thread's stacks from its programs and reads
    // the greenlets between them, at moments a loaded machine delays (its
    // shares drifted up to 2.6 points with two busy loops on this 2-CPU
    // machine): 2 points for the default engine (the issue's), 3 for it.
    let within = if engine == "ptrace" { 0.02 } else { 0.03 };
    assert!(
        (share - want).abs() < within,
        "{ctx}: handle_upstream has {:.1}% of the samples, {:.1}% of the time",
        share * 100.0,
        want * 100.0
    );
    // The thread keeps its own name: a greenlet's stack is not taken for
    // the thread's.
    assert!(
        roots.iter().any(|r| r.ends_with("\"MainThread\"")),
        "{ctx}: the thread's root lost its name: {roots:?}"
    );
    for w in ["upstream-0", "compute-1"] {
        let root = format!("\"greenlet {w}\"");
        assert!(
            roots.iter().any(|r| r.ends_with(&root)),
            "{ctx}: no root {root}: {roots:?}"
        );
    }
}

/// Each worker's in-flight handler greenlets in `dump -s --json` of a
/// gunicorn master: (kind, worker pid) -> count, for those whose stack has
/// the handler at its wait line and whose wait is the one the handler's
/// kind waits on (the upstream's socket, a timer).
fn in_flight_shown(procs: &[Value], fx: &Fixture) -> HashMap<(String, String), u64> {
    let upstream = fx.ready["upstream"].as_str().unwrap();
    let marks = &fx.ready["marks"];
    let mut shown = HashMap::new();
    for p in procs {
        let pid = p["pid"].to_string();
        for t in p["threads"].as_array().into_iter().flatten() {
            for g in t["greenlets"].as_array().into_iter().flatten() {
                let frames = frames_of(&g["frames"]);
                let w = &g["wait"];
                for (kind, func) in [("upstream", "handle_upstream"), ("sleep", "handle_sleep")] {
                    let at = (func.to_string(), marks[kind].as_u64().unwrap());
                    let waits = match kind {
                        "upstream" => {
                            w["kind"] == "socket"
                                && w["fd"]["kind"] == "tcp"
                                && w["fd"]["remote"] == upstream
                                && w["fd"]["state"] == "ESTABLISHED"
                        }
                        _ => w["kind"] == "timer" && w["seconds_left"].as_f64().is_some(),
                    };
                    if frames.contains(&at) && waits && g["state"] == "suspended" {
                        *shown.entry((kind.to_string(), pid.clone())).or_default() += 1;
                    }
                }
            }
        }
    }
    shown
}

/// A real gunicorn service with gevent workers: `dump -s` of its master
/// shows, under each worker, every in-flight request's greenlet with its
/// handler's stack and what it waits on (the upstream's TCP socket, or the
/// sleep's timer), as many per worker as the app logged.
#[test]
fn gunicorn_gevent_workers_show_every_in_flight_request() {
    for_each_interpreter(
        "gunicorn_gevent_workers_show_every_in_flight_request",
        |i| i.label.starts_with("pyenv") && (i.version == (3, 9) || i.version == (3, 12)),
        |interp| {
            let fx = Fixture::spawn_with_timeout(
                interp,
                "gevent_gunicorn.py",
                &[],
                Duration::from_secs(90),
            );
            let mut want = HashMap::new();
            for (kind, per) in fx.ready["in_flight"].as_object().unwrap() {
                for (pid, n) in per.as_object().unwrap() {
                    want.insert((kind.clone(), pid.clone()), n.as_u64().unwrap());
                }
            }
            assert_eq!(
                want.values().sum::<u64>(),
                6,
                "{}: {}",
                interp.label,
                fx.ready
            );
            let master = fx.ready["master"].as_i64().unwrap() as i32;
            // A handler logs just before it waits: give it a moment to.
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            let (procs, shown) = loop {
                let procs = dump_json(master, &["-s"]);
                let shown = in_flight_shown(&procs, &fx);
                if shown == want || std::time::Instant::now() > deadline {
                    break (procs, shown);
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            assert_eq!(
                shown, want,
                "{}: in-flight requests shown against the app's log\n{procs:#?}",
                interp.label
            );
            // Text: the socket a request waits on, with the upstream's address.
            let out = pyinspect(&["dump", "--pid", &master.to_string(), "-s"]);
            out.assert_success();
            let upstream = fx.ready["upstream"].as_str().unwrap();
            let waiting = out
                .stdout
                .lines()
                .filter(|l| l.contains("waiting on fd ") && l.contains(&format!("→ {upstream}")))
                .count();
            assert_eq!(waiting, 3, "{}\n{}", interp.label, out.stdout);
        },
    );
}
