//! `pyinspect watch`: stalls of known culprit and length (the fixture
//! measures each), each reported once, with the right culprit and a
//! duration within the larger of 20 ms and two sampling periods.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

const RATE: f64 = 250.0;

/// The tests here run one at a time: each times stalls against a clock,
/// and another's fixtures would hold the sampler up on this 2-core machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running `pyinspect watch`, its stderr read line by line.
struct Watcher {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Vec<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Watcher {
    fn start(args: &[&str]) -> Watcher {
        let mut child = Command::new(pyinspect_bin())
            .arg("watch")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pyinspect watch");
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        Watcher {
            child,
            lines,
            stderr: Vec::new(),
            stdout,
        }
    }

    /// Wait (bounded) for a stderr line containing `what`.
    fn wait_for(&mut self, what: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(what);
                    self.stderr.push(l);
                    if hit {
                        return;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "no `{what}` from pyinspect watch within {within:?}; stderr:\n{}",
                        self.stderr.join("\n")
                    )
                }
            }
        }
    }

    /// Wait (bounded) for it to exit; its stdout and whole stderr.
    fn finish(mut self, within: Duration) -> (String, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "pyinspect watch did not end within {within:?}; stderr:\n{}",
                    self.stderr.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.stdout.join().unwrap();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(l);
        }
        let stderr = self.stderr.join("\n");
        assert!(
            status.success(),
            "watch exited with {status}; stderr:\n{stderr}"
        );
        (stdout, stderr)
    }
}

/// Within the larger of 20 ms and two sampling periods, plus the
/// uncertainty the incident states (half the gaps between the samples
/// around its start and end: a loaded machine holds the sampler up for tens
/// of milliseconds now and then, and the fixture's own clock reads then
/// wait for a CPU and the GIL too).
fn close_enough(got_ms: f64, want_s: f64, uncertainty_ms: f64) -> bool {
    let tolerance = 0.020f64.max(2.0 / RATE) + uncertainty_ms / 1000.0;
    (got_ms / 1000.0 - want_s).abs() <= tolerance
}

/// Once `w` watches: the fixture's stalls started (SIGUSR2), and when
/// they are over and the watch has ended with the fixture, the fixture's
/// account of them (its `STALLS` line), the incidents (`--json`) and the
/// watch's stderr.
fn stalls_and_incidents(fixture: &Fixture, mut w: Watcher) -> (Vec<Value>, Vec<Value>, String) {
    w.wait_for("pyinspect: watching", Duration::from_secs(30));
    let stalls: Value =
        serde_json::from_str(&fixture.ask(libc::SIGUSR2, "STALLS ")).expect("STALLS json");
    let (stdout, stderr) = w.finish(Duration::from_secs(30));
    let incidents = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let stalls = stalls.as_array().cloned().unwrap_or_default();
    (stalls, incidents, stderr)
}

#[test]
fn each_stall_is_one_incident_with_its_culprit_and_length() {
    each_stall_is_one_incident("watch stalls", &[]);
}

/// The same stalls, the same judgement, sampled by the eBPF engine: each
/// thread at each tick as the program's samples and scheduler records left
/// it, the GIL's holder and the loops' turns read at the tick.
#[test]
fn the_bpf_engine_sees_each_stall_as_one_incident() {
    each_stall_is_one_incident("watch stalls (bpf engine)", &["--engine", "bpf"]);
}

/// Each stall of watch_stalls.py one incident, with its culprit and
/// length, on every interpreter, watched with `engine` options.
fn each_stall_is_one_incident(what: &str, engine: &[&str]) {
    // One interpreter at a time: the stalls' lengths are measured against
    // the fixture's own clock, and a second fixture's CPU-bound stalls on
    // this 2-core machine hold the sampler up. Set before any thread of
    // this test binary reads it.
    std::env::set_var("PYINSPECT_TEST_JOBS", "1");
    let _one_at_a_time = serial();
    for_each_interpreter(
        what,
        |_| true,
        |interp| {
            let fixture = Fixture::spawn(interp, "watch_stalls.py", &[]);
            let pid = fixture.pid.to_string();
            let mut args = vec![
                "--pid",
                &pid,
                "--rate",
                "250",
                "--json",
                "--loop-threshold",
                "150ms",
                "--gil-threshold",
                "150ms",
                "--stuck-threshold",
                "250ms",
                "--frozen-threshold",
                "150ms",
            ];
            args.extend(engine);
            let w = Watcher::start(&args);
            let (stalls, incidents, stderr) = stalls_and_incidents(&fixture, w);
            let mut problems = Vec::new();
            for s in &stalls {
                let trigger = s["trigger"].as_str().unwrap();
                let function = s["function"].as_str().unwrap();
                let other = &s["other"];
                let found: Vec<&Value> = incidents
                    .iter()
                    .filter(|i| {
                        let f = i["culprit"]["function"].as_str();
                        i["trigger"] == trigger
                            && (f == Some(function) || f == other["function"].as_str())
                    })
                    .collect();
                if found.len() != 1 {
                    problems.push(format!(
                        "{trigger} in {function}: {} incidents",
                        found.len()
                    ));
                    continue;
                }
                let i = found[0];
                let line = i["culprit"]["line"].as_u64();
                let lines: Vec<u64> = match s["lines"].as_array() {
                    Some(l) => l.iter().filter_map(Value::as_u64).collect(),
                    None => vec![s["line"].as_u64().unwrap()],
                };
                let line_ok = match i["culprit"]["function"].as_str() {
                    f if f == other["function"].as_str() => line == other["line"].as_u64(),
                    _ => line.is_some_and(|l| lines.contains(&l)),
                };
                if !line_ok {
                    problems.push(format!(
                        "{trigger} in {function}: culprit line {line:?}, expected {lines:?}"
                    ));
                }
                let want = s["duration"].as_f64().unwrap();
                let got = i["duration_ms"].as_f64().unwrap();
                let uncertainty = i["uncertainty_ms"].as_f64().unwrap();
                if !close_enough(got, want, uncertainty) {
                    problems.push(format!(
                        "{trigger} in {function}: {got:.1} ms (± {uncertainty} ms), the fixture measured {:.1} ms",
                        want * 1000.0
                    ));
                }
                if let (Some(task), true) = (s["task"].as_str(), interp.at_least(3, 8)) {
                    if i["culprit"]["task"].as_str() != Some(task) {
                        problems.push(format!(
                            "{trigger} in {function}: task {:?}, expected {task}",
                            i["culprit"]["task"]
                        ));
                    }
                }
                if i["stack"].as_array().is_none_or(|f| f.is_empty()) || i["threads"].is_null() {
                    problems.push(format!("{trigger} in {function}: no stack or threads"));
                }
            }
            if incidents.len() != stalls.len() {
                problems.push(format!(
                    "{} incidents for {} stalls",
                    incidents.len(),
                    stalls.len()
                ));
            }
            // Times in the failure text count from the first stall's start.
            let t0 = stalls
                .iter()
                .filter_map(|s| s["start"].as_f64())
                .fold(f64::INFINITY, f64::min);
            let t0 = if t0.is_finite() { t0 } else { 0.0 };
            assert!(
                problems.is_empty(),
                "{}:\n  {}\nincidents:\n{}\nstalls (start from the first, duration):\n{}\nstderr:\n{stderr}",
                interp.label,
                problems.join("\n  "),
                incidents
                    .iter()
                    .map(|i| format!(
                        "  {} at {:.3} s for {} ms (± {} ms) {}",
                        i["trigger"],
                        i["start_unix"].as_f64().unwrap_or(0.0) - t0,
                        i["duration_ms"],
                        i["uncertainty_ms"],
                        i["culprit"]
                    ))
                    .collect::<Vec<_>>()
                    .join("\n"),
                stalls
                    .iter()
                    .map(|s| format!(
                        "  {} {} at {:.3} s for {:.1} ms",
                        s["trigger"],
                        s["function"],
                        s["start"].as_f64().unwrap_or(0.0) - t0,
                        s["duration"].as_f64().unwrap_or(0.0) * 1000.0
                    ))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        },
    );
}

/// asyncio's own account (debug mode): each "Executing <Task ...
/// name='Task-5' ...> took 0.251 seconds" as (task name, seconds, when it
/// ended); a callback that is not a task ("<Handle cb(...)") by its name.
fn asyncio_slow_callbacks(stderr: &str) -> Vec<(String, f64, f64)> {
    stderr
        .lines()
        .filter(|l| l.contains("Executing <") && l.contains(" took "))
        .map(|l| {
            let ended = l
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no time in {l}"));
            let name = match l.split("name='").nth(1) {
                Some(r) => r.split('\'').next().unwrap_or("").to_string(),
                None => l
                    .split("<Handle ")
                    .nth(1)
                    .and_then(|r| r.split('(').next())
                    .unwrap_or("")
                    .to_string(),
            };
            let secs = l
                .rsplit(" took ")
                .next()
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no duration in {l}"));
            (name, secs, ended)
        })
        .collect()
}

/// The coroutine of each task asyncio reports slow ("Executing <Task ...
/// coro=<RequestResponseCycle.run_asgi() running at ...> took 0.251
/// seconds"), as (its qualified name, seconds, when it ended).
fn asyncio_slow_coroutines(stderr: &str) -> Vec<(String, f64, f64)> {
    stderr
        .lines()
        .filter(|l| l.contains("Executing <Task") && l.contains(" took "))
        .filter_map(|l| {
            let ended = l.split_whitespace().next()?.parse::<f64>().ok()?;
            let coro = l.split("coro=<").nth(1)?.split('(').next()?.to_string();
            let secs = l
                .rsplit(" took ")
                .next()?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()?;
            Some((coro, secs, ended))
        })
        .collect()
}

/// The service in its interpreter (uvicorn and Starlette: .ci/asyncio-deps).
fn service() -> Fixture {
    let interp = find_interpreter("pyenv 3.12 (with .ci/asyncio-deps)", |i| {
        i.label.starts_with("pyenv 3.12")
    });
    Fixture::spawn(interp, "asyncio_service.py", &[])
}

/// Loop incidents only: the other triggers' thresholds out of reach.
const LOOP_ONLY: &[&str] = &[
    "--rate",
    "250",
    "--json",
    "--loop-threshold",
    "100ms",
    "--gil-threshold",
    "3600",
    "--stuck-threshold",
    "3600",
    "--frozen-threshold",
    "3600",
    "--max-incidents-per-minute",
    "1000",
];

/// Every slow callback asyncio reports has one incident naming its task,
/// within 20 ms of asyncio's own duration, and no incident is not one of
/// them.
fn check_against_asyncio(incidents: &[Value], slow: &[(String, f64, f64)], context: &str) {
    let mut problems = Vec::new();
    // The incident of a slow callback: the same task (or callback), ending
    // within 50 ms of when asyncio logged it.
    let same = |i: &Value, name: &str, ended: f64| {
        let end = i["start_unix"].as_f64().unwrap() + i["duration_ms"].as_f64().unwrap() / 1000.0;
        let named = match i["culprit"]["task"].as_str() {
            Some(t) => t == name,
            None => i["culprit"]["function"]
                .as_str()
                .is_some_and(|f| !name.is_empty() && f.ends_with(name)),
        };
        named && (end - ended).abs() < 0.050
    };
    for (name, secs, ended) in slow {
        let found: Vec<&Value> = incidents.iter().filter(|i| same(i, name, *ended)).collect();
        match found.as_slice() {
            [i] => {
                let got = i["duration_ms"].as_f64().unwrap() / 1000.0;
                let unc = i["uncertainty_ms"].as_f64().unwrap() / 1000.0;
                if (got - secs).abs() > 0.020f64.max(unc + 0.002) {
                    problems.push(format!(
                        "{name}: {:.1} ms (± {:.1}), asyncio says {:.1} ms",
                        got * 1000.0,
                        unc * 1000.0,
                        secs * 1000.0
                    ));
                }
            }
            _ => problems.push(format!("{name}: {} incidents", found.len())),
        }
    }
    for i in incidents {
        if !slow.iter().any(|(n, _, e)| same(i, n, *e)) {
            problems.push(format!("an incident asyncio did not report: {i}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\nasyncio: {slow:?}\n{context}",
        problems.join("\n")
    );
}

#[test]
fn loop_incidents_are_what_asyncio_debug_mode_reports() {
    loop_incidents_as_asyncio_reports(&[]);
}

/// The same judge for the eBPF engine's watch: asyncio's own debug mode.
#[test]
fn the_bpf_engine_reports_the_loop_stalls_asyncio_reports() {
    loop_incidents_as_asyncio_reports(&["--engine", "bpf"]);
}

/// A service's blocking handlers, watched with `engine` options: each one
/// asyncio's debug mode reports is one incident, and nothing else is.
fn loop_incidents_as_asyncio_reports(engine: &[&str]) {
    let _one_at_a_time = serial();
    let fixture = service();
    let port = fixture.ready["port"].as_u64().unwrap() as u16;
    let pid = fixture.pid.to_string();
    let mut args = vec!["--pid", pid.as_str()];
    args.extend_from_slice(LOOP_ONLY);
    args.extend_from_slice(engine);
    let mut w = Watcher::start(&args);
    w.wait_for("pyinspect: watching", Duration::from_secs(30));
    let attached = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Lengths from 150 to 500 ms (a fixed pseudo-random sequence).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let lengths: Vec<u64> = (0..8)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            150 + (x >> 33) % 350
        })
        .collect();
    for ms in &lengths {
        http_get(port, "/fast");
        http_get(port, &format!("/block?ms={ms}"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let stderr = fixture.stderr();
    drop(fixture);
    let (stdout, werr) = w.finish(Duration::from_secs(30));
    let incidents: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // What asyncio reports once watch is attached (the server's own start
    // can be slow on a loaded machine).
    let slow: Vec<(String, f64, f64)> = asyncio_slow_callbacks(&stderr)
        .into_iter()
        .filter(|(_, secs, ended)| ended - secs > attached)
        .collect();
    let handlers = stderr
        .lines()
        .filter(|l| l.contains("run_asgi") && l.contains(" took "))
        .count();
    // Each blocking handler at least (on a loaded machine a fast one can
    // be slow too, and then watch must report it as well).
    assert!(
        handlers >= lengths.len(),
        "asyncio's warnings: {slow:?}\nservice stderr:\n{stderr}"
    );
    check_against_asyncio(&incidents, &slow, &werr);
    for i in &incidents {
        assert_eq!(i["trigger"], "loop_blocked", "{i}");
    }
}

/// Two CPU hogs (shell loops) for as long as it lives.
struct Hogs(Vec<std::process::Child>);

impl Hogs {
    fn start() -> Hogs {
        Hogs(
            (0..2)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("start a CPU hog")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A minute of the service answering requests without blocking, with two
/// CPU hogs loading the machine: no incident but the slow callbacks that
/// asyncio itself reports (a loaded machine can make a fast handler slow,
/// and then watch must report it too, as asyncio does).
#[test]
fn a_service_that_does_not_stall_gives_no_false_incident() {
    no_false_incident(&[]);
}

/// The same minute of a loaded machine, watched by the eBPF engine.
#[test]
fn the_bpf_engine_gives_no_false_incident_either() {
    no_false_incident(&["--engine", "bpf"]);
}

fn no_false_incident(engine: &[&str]) {
    let _one_at_a_time = serial();
    let fixture = service();
    let port = fixture.ready["port"].as_u64().unwrap() as u16;
    let pid = fixture.pid.to_string();
    let _hogs = Hogs::start();
    // The default thresholds, but for the rate limit (every incident counts).
    let mut args = vec![
        "--pid",
        pid.as_str(),
        "--json",
        "--max-incidents-per-minute",
        "1000",
    ];
    args.extend_from_slice(engine);
    let mut w = Watcher::start(&args);
    w.wait_for("pyinspect: watching", Duration::from_secs(30));
    let attached = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let secs = std::env::var("WATCH_QUIET_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60u64);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut requests = 0u64;
    while Instant::now() < end {
        http_get(port, "/fast");
        requests += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let stderr = fixture.stderr();
    drop(fixture);
    let (stdout, werr) = w.finish(Duration::from_secs(30));
    let incidents: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let slow: Vec<(String, f64, f64)> = asyncio_slow_callbacks(&stderr)
        .into_iter()
        .filter(|(_, secs, ended)| ended - secs > attached)
        .collect();
    let slow_coros = asyncio_slow_coroutines(&stderr);
    eprintln!(
        "{requests} requests in {secs} s; asyncio reported {} slow callbacks, watch {} incidents",
        slow.len(),
        incidents.len()
    );
    for i in &incidents {
        assert_eq!(i["trigger"], "loop_blocked", "{i}\n{werr}");
    }
    // Each incident is a slow callback asyncio reported: the same task (or
    // callback), the two spans overlapping, give or take the incident's
    // stated uncertainty and 50 ms. (How close the lengths are is
    // loop_incidents_are_what_asyncio_debug_mode_reports's to judge, on a
    // machine not loaded on purpose.) An incident that names no task (the
    // step was over when the incident's full read came, on a loaded
    // machine) is a slow task's by its coroutine.
    let unreported: Vec<String> = incidents
        .iter()
        .filter(|i| {
            let start = i["start_unix"].as_f64().unwrap();
            let end = start + i["duration_ms"].as_f64().unwrap() / 1000.0;
            let slack = i["uncertainty_ms"].as_f64().unwrap() / 1000.0 + 0.050;
            let by_name = slow.iter().any(|(name, secs, ended)| {
                let named = match i["culprit"]["task"].as_str() {
                    Some(t) => t == name,
                    None => i["culprit"]["function"]
                        .as_str()
                        .is_some_and(|f| !name.is_empty() && f.ends_with(name.as_str())),
                };
                named && start - slack <= *ended && ended - secs <= end + slack
            });
            let by_coroutine = i["culprit"]["task"].is_null()
                && slow_coros.iter().any(|(coro, secs, ended)| {
                    i["culprit"]["function"].as_str() == Some(coro.as_str())
                        && start - slack <= *ended
                        && ended - secs <= end + slack
                });
            !(by_name || by_coroutine)
        })
        .map(|i| {
            format!(
                "{} at {:.3} for {} ms (± {} ms): {}",
                i["trigger"],
                i["start_unix"].as_f64().unwrap_or(0.0) - attached,
                i["duration_ms"],
                i["uncertainty_ms"],
                i["culprit"]
            )
        })
        .collect();
    assert!(
        unreported.is_empty(),
        "incidents asyncio did not report:\n  {}\nasyncio (from attach): {:?}\n{werr}",
        unreported.join("\n  "),
        slow.iter()
            .map(|(n, secs, e)| (n.clone(), *secs, e - attached))
            .collect::<Vec<_>>()
    );
}

/// `-s` on a uvicorn master with two workers: a stall in one worker's
/// handler is one incident of that worker, naming the handler.
#[test]
fn with_subprocesses_a_stalled_worker_is_the_one_named() {
    let _one_at_a_time = serial();
    let interp = find_interpreter("pyenv 3.12 (with .ci/asyncio-deps)", |i| {
        i.label.starts_with("pyenv 3.12")
    });
    let fixture =
        Fixture::spawn_with_timeout(interp, "watch_workers.py", &[], Duration::from_secs(60));
    let port = fixture.ready["port"].as_u64().unwrap() as u16;
    let workers: Vec<u64> = fixture.ready["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(workers.len(), 2, "{}", fixture.ready);
    let pid = fixture.pid.to_string();
    let mut args = vec!["--pid", pid.as_str(), "-s"];
    args.extend_from_slice(LOOP_ONLY);
    let mut w = Watcher::start(&args);
    w.wait_for("pyinspect: watching", Duration::from_secs(30));
    // Both workers followed, and their first reads (symbols, layouts) done,
    // before the stall.
    std::thread::sleep(Duration::from_secs(2));
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let blocked: u64 = http_get(port, "/block?ms=400")
        .trim()
        .parse()
        .expect("a worker's pid");
    assert!(
        workers.contains(&blocked),
        "{blocked} is not one of {workers:?}"
    );
    // Its end seen (a loaded machine can hold the sampler up well past
    // the answer) before the service goes.
    w.wait_for("event loop blocked for", Duration::from_secs(30));
    drop(fixture);
    let (stdout, werr) = w.finish(Duration::from_secs(30));
    let incidents: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The stall's incident: where its time went is `block` (its first
    // sample may land in the step before `block` is called).
    let block = incidents
        .iter()
        .filter(|i| {
            i["stack"][0]["function"] == "block"
                || i["during"][0]["frames"][0]
                    .as_str()
                    .is_some_and(|f| f.starts_with("block ("))
        })
        .collect::<Vec<_>>();
    assert_eq!(block.len(), 1, "{incidents:?}\n{werr}");
    assert_eq!(
        block[0]["pid"].as_u64(),
        Some(blocked),
        "{}\n{werr}",
        block[0]
    );
    assert_eq!(block[0]["trigger"], "loop_blocked", "{}", block[0]);
    let ms = block[0]["duration_ms"].as_f64().unwrap();
    // Within the stated uncertainty: the incident's first full read of a
    // worker (its symbols, asyncio's layout) holds the sampler up.
    let unc = block[0]["uncertainty_ms"].as_f64().unwrap();
    assert!(
        close_enough(ms, 0.4, unc),
        "{ms} ms (± {} ms, {} samples, from {:.3} s after the request) for a 400 ms block\n{werr}",
        block[0]["uncertainty_ms"],
        block[0]["samples"],
        block[0]["start_unix"].as_f64().unwrap_or(0.0) - asked
    );
}

/// Without `--rate`, watch samples at its own default, 50 Hz (half
/// record's: the steady cost of a watchdog that runs for hours), and says
/// so; `--rate` still sets it.
#[test]
fn watch_samples_at_its_own_default_rate_unless_asked() {
    let fixture = Fixture::spawn(pyenv((3, 12)), "longsleep.py", &[]);
    let pid = fixture.pid.to_string();
    for (args, want) in [
        (vec!["--pid", &pid, "-d", "1"], "at 50 Hz"),
        (vec!["--pid", &pid, "-d", "1", "-r", "20"], "at 20 Hz"),
    ] {
        let mut w = Watcher::start(&args);
        w.wait_for("pyinspect: watching", Duration::from_secs(30));
        let (_, stderr) = w.finish(Duration::from_secs(30));
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// uvloop's loop: two steps of one task back to back, with no time in the
/// selector between them, are two incidents (the loop's turn, read from
/// uvloop's own ready deque through the `asyncio.Runner` that runs it),
/// each named after the task and its line, each as long as the fixture
/// measured. Both ways of running the loop: uvloop.run() and
/// uvloop.install() + asyncio.run().
#[test]
fn uvloop_steps_back_to_back_are_two_incidents() {
    let _one_at_a_time = serial();
    let interp = find_interpreter("pyenv 3.12 (with .ci/asyncio-deps)", |i| {
        i.label.starts_with("pyenv ") && i.version == (3, 12)
    });
    for how in [&[][..], &["--runner"][..]] {
        let fixture = Fixture::spawn(interp, "watch_uvloop.py", how);
        let pid = fixture.pid.to_string();
        let mut args = vec!["--pid", &pid];
        args.extend_from_slice(LOOP_ONLY);
        let w = Watcher::start(&args);
        let (stalls, incidents, stderr) = stalls_and_incidents(&fixture, w);
        let context = format!("{how:?}\nincidents: {incidents:#?}\nstalls: {stalls:#?}\n{stderr}");
        assert_eq!(incidents.len(), 2, "{context}");
        for (i, s) in incidents.iter().zip(stalls) {
            assert_eq!(i["trigger"], "loop_blocked", "{context}");
            assert_eq!(i["culprit"]["task"], "steps", "{context}");
            assert_eq!(i["culprit"]["function"], s["function"], "{context}");
            assert_eq!(i["culprit"]["line"], s["line"], "{context}");
            let got = i["duration_ms"].as_f64().unwrap();
            let uncertainty = i["uncertainty_ms"].as_f64().unwrap();
            let want = s["duration"].as_f64().unwrap();
            assert!(close_enough(got, want, uncertainty), "{context}");
        }
    }
}
