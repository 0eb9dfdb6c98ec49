//! `pyinspect dump` against the Python fixtures, on every installed CPython.
//!
//! The fixtures say in their READY line what a correct dump shows (names,
//! idents, native ids, exact stacks, locals' reprs); these tests compare.
//! Checks are made on the JSON; the text output gets lighter checks, since its
//! exact layout may still change.

mod common;

use std::collections::BTreeSet;
use std::thread::sleep;
use std::time::Duration;

use common::{dump_json, for_each_interpreter, pyinspect, Fixture};
use serde_json::Value;

/// A few dumps allow for what is legitimately racy (a thread caught on its
/// way into its parking call, a sleeper woken for an instant).
const ATTEMPTS: usize = 6;

fn str_of(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

fn array_of(v: &Value) -> &Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"))
}

/// Every field of the schema, with its type. `locals` appears with --locals only.
fn check_shape(process: &Value, with_locals: bool) {
    let object = process.as_object().expect("a process is a JSON object");
    for key in [
        "pid",
        "command_line",
        "python_version",
        "executable",
        "threads",
    ] {
        assert!(object.contains_key(key), "process lacks {key:?}: {process}");
    }
    u64_of(&process["pid"]);
    str_of(&process["command_line"]);
    str_of(&process["python_version"]);
    str_of(&process["executable"]);
    for thread in array_of(&process["threads"]) {
        u64_of(&thread["thread_id"]);
        let os_id = &thread["os_thread_id"];
        assert!(os_id.is_null() || os_id.is_u64(), "os_thread_id: {thread}");
        assert!(
            thread.get("os_thread_id").is_some(),
            "os_thread_id missing (null when unknown): {thread}"
        );
        let name = thread
            .get("name")
            .expect("name missing (null when unknown)");
        assert!(name.is_null() || name.is_string(), "name: {thread}");
        u64_of(&thread["interpreter"]);
        let status = str_of(&thread["status"]);
        assert!(
            status == "active" || status == "idle",
            "status {status:?}: {thread}"
        );
        assert!(thread["holds_gil"].is_boolean(), "holds_gil: {thread}");
        for frame in array_of(&thread["frames"]) {
            assert_eq!(frame["kind"], "python", "frame kind: {frame}");
            str_of(&frame["function"]);
            str_of(&frame["file"]);
            u64_of(&frame["line"]);
            match frame.get("locals") {
                Some(locals) if with_locals => {
                    for local in array_of(locals) {
                        str_of(&local["name"]);
                        str_of(&local["repr"]);
                        assert!(local["is_arg"].is_boolean(), "is_arg: {local}");
                    }
                }
                Some(_) => panic!("locals without --locals: {frame}"),
                None if with_locals => panic!("no locals with --locals: {frame}"),
                None => {}
            }
        }
    }
}

/// pid, version, executable and command line against what the fixture said.
fn check_header(process: &Value, ready: &Value, script: &str) {
    assert_eq!(process["pid"], ready["pid"], "pid");
    assert_eq!(
        process["python_version"], ready["version"],
        "python_version"
    );
    let shown = std::fs::canonicalize(str_of(&process["executable"]))
        .unwrap_or_else(|e| panic!("executable {}: {e}", process["executable"]));
    let real = std::fs::canonicalize(str_of(&ready["executable"])).unwrap();
    assert_eq!(shown, real, "executable");
    let command_line = str_of(&process["command_line"]);
    assert!(
        command_line.contains(script),
        "command_line {command_line:?} should name {script}"
    );
}

fn threads_of(process: &Value) -> &Vec<Value> {
    array_of(&process["threads"])
}

fn find_thread(process: &Value, ident: u64, interpreter: u64) -> Option<&Value> {
    threads_of(process)
        .iter()
        .find(|t| t["thread_id"] == ident && t["interpreter"] == interpreter)
}

fn show_frames(frames: &[Value]) -> String {
    frames
        .iter()
        .map(|f| format!("    {} ({}:{})", f["function"], f["file"], f["line"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Function, file and line of each frame, innermost first; Ok when equal.
fn compare_frames(actual: &[Value], expected: &[Value]) -> Result<(), String> {
    let same = |a: &Value, e: &Value| {
        a["function"] == e["function"] && a["file"] == e["file"] && a["line"] == e["line"]
    };
    let first_difference = actual
        .iter()
        .zip(expected)
        .position(|(a, e)| !same(a, e))
        .or((actual.len() != expected.len()).then(|| actual.len().min(expected.len())));
    let Some(at) = first_difference else {
        return Ok(());
    };
    // Deep stacks: show only the neighbourhood of the first difference.
    let window = |frames: &[Value]| {
        let start = at.saturating_sub(3);
        let end = (at + 4).min(frames.len());
        show_frames(frames.get(start..end).unwrap_or(&[]))
    };
    Err(format!(
        "stack differs at frame {at} (expected {} frames, got {})\n  expected from frame {}:\n{}\n  got:\n{}",
        expected.len(),
        actual.len(),
        at.saturating_sub(3),
        window(expected),
        window(actual)
    ))
}

/// The OS thread id must be the one the thread itself saw, where it knew it.
fn check_os_id(thread: &Value, native_id: &Value) -> Result<(), String> {
    if native_id.is_null() || thread["os_thread_id"] == *native_id {
        Ok(())
    } else {
        Err(format!(
            "os_thread_id {} but the thread's native id is {native_id}",
            thread["os_thread_id"]
        ))
    }
}

/// Compares a threads.py dump with its READY; returns every difference.
fn threads_problems(process: &Value, ready: &Value, statuses: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = array_of(&ready["threads"]);
    let want: BTreeSet<u64> = expected.iter().map(|t| u64_of(&t["ident"])).collect();
    let got: BTreeSet<u64> = threads_of(process)
        .iter()
        .map(|t| u64_of(&t["thread_id"]))
        .collect();
    if want != got {
        problems.push(format!(
            "thread ids: missing {:?}, unexpected {:?}",
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        ));
    }
    for e in expected {
        let label = format!("thread {} ({})", e["name"], e["ident"]);
        let Some(thread) = find_thread(process, u64_of(&e["ident"]), 0) else {
            problems.push(format!("{label}: absent from interpreter 0"));
            continue;
        };
        if !name_matches(thread, &e["name"]) {
            problems.push(format!("{label}: name {}", thread["name"]));
        }
        if let Err(p) = check_os_id(thread, &e["native_id"]) {
            problems.push(format!("{label}: {p}"));
        }
        if let Err(p) = compare_frames(array_of(&thread["frames"]), array_of(&e["frames"])) {
            problems.push(format!("{label}: {p}"));
        }
        if statuses && thread["status"] != e["status"] {
            problems.push(format!(
                "{label}: status {} but expected {}",
                thread["status"], e["status"]
            ));
        }
    }
    problems
}

/// Whether the text output has a process header for `pid` ("Process PID:" or
/// "Process PID (child of ...):").
fn shows_process(text: &str, pid: &Value) -> bool {
    let head = format!("Process {pid}");
    text.match_indices(&head).any(|(at, _)| {
        let after = text[at + head.len()..].chars().next();
        after.is_some_and(|c| c == ':' || c == ' ')
    })
}

fn thread_named<'a>(ready: &'a Value, name: &str) -> &'a Value {
    array_of(&ready["threads"])
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("READY has no thread {name:?}"))
}

fn gil_holders(process: &Value) -> Vec<u64> {
    threads_of(process)
        .iter()
        .filter(|t| t["holds_gil"] == true)
        .map(|t| u64_of(&t["thread_id"]))
        .collect()
}

#[test]
fn threads_json_names_stacks_statuses_gil() {
    for_each_interpreter(
        "threads_json",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "threads.py", &[]);
            let ready = fx.ready.clone();
            let busy = u64_of(&thread_named(&ready, "busy")["ident"]);
            let mut matched = false;
            let mut busy_held_gil = false;
            let mut last = Vec::new();
            for _ in 0..ATTEMPTS {
                let dump = dump_json(fx.pid, &[]);
                assert_eq!(dump.len(), 1, "one JSON line per process: {dump:?}");
                let process = &dump[0];
                check_shape(process, false);
                check_header(process, &ready, "threads.py");
                // Tables and `_Py_DebugOffsets` agree everywhere: no warning.
                assert!(
                    process.get("warnings").is_none(),
                    "warnings: {}",
                    process["warnings"]
                );
                let holders = gil_holders(process);
                assert!(holders.len() <= 1, "several GIL holders: {holders:?}");
                busy_held_gil |= holders == [busy];
                last = threads_problems(process, &ready, true);
                matched |= last.is_empty();
                if matched && busy_held_gil {
                    break;
                }
                sleep(Duration::from_millis(100));
            }
            assert!(
                matched,
                "no dump in {ATTEMPTS} matched the fixture; last differences:\n{}",
                last.join("\n")
            );
            assert!(
                busy_held_gil,
                "the busy thread never held the GIL in {ATTEMPTS} dumps"
            );
            fx.assert_alive();
        },
    );
}

#[test]
fn threads_text_output() {
    for_each_interpreter(
        "threads_text",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "threads.py", &[]);
            let ready = fx.ready.clone();
            let pid = fx.pid.to_string();
            // A thread may still be on its way to its parking line just after
            // READY (as the JSON tests allow): retry a few dumps.
            let mut attempt = 0;
            loop {
                attempt += 1;
                let out = pyinspect(&["dump", "--pid", &pid]);
                out.assert_success();
                let text = &out.stdout;
                let mut missing: Vec<String> = Vec::new();
                let mut must = |needle: String| {
                    if !text.contains(&needle) {
                        missing.push(needle);
                    }
                };
                must(format!("Python v{}", str_of(&ready["version"])));
                must("threads.py".to_string());
                for thread in array_of(&ready["threads"]) {
                    if let Some(name) = thread["name"].as_str() {
                        must(format!("\"{name}\""));
                    }
                    let top = &array_of(&thread["frames"])[0];
                    must(str_of(&top["function"]).to_string());
                    must(format!("{}:{}", str_of(&top["file"]), top["line"]));
                }
                for status in ["idle", "active"] {
                    must(status.to_string());
                }
                assert!(
                    shows_process(text, &ready["pid"]),
                    "no process header\n{}",
                    out.describe()
                );
                if missing.is_empty() {
                    break;
                }
                assert!(
                    attempt < 6,
                    "text output lacks {missing:?}\n{}",
                    out.describe()
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            fx.assert_alive();
        },
    );
}

/// Whether `actual` renders the expected value: exactly, or for containers
/// as a preview (same brackets, same first element, possibly shortened).
fn repr_matches(actual: &str, var: &Value) -> bool {
    let mut candidates = vec![str_of(&var["repr"]).to_string()];
    candidates.extend(array_of(&var["alts"]).iter().map(|a| str_of(a).to_string()));
    match str_of(&var["match"]) {
        "object" => {
            // `<Foo at 0x…>` with the object's address, padded or not.
            let expected = str_of(&var["repr"]);
            let address = |s: &str| {
                let hex = s.strip_prefix("<Foo at 0x")?.strip_suffix('>')?;
                u64::from_str_radix(hex, 16).ok()
            };
            address(actual).is_some() && address(actual) == address(expected)
        }
        "container" => candidates.iter().any(|c| {
            if actual == c {
                return true;
            }
            let first_element = c.split(", ").next().unwrap_or(c);
            let first_element = first_element.trim_end_matches([']', ')', '}']);
            actual.starts_with(first_element)
                && actual.chars().last() == c.chars().last()
                && actual.len() <= c.len() + 8
        }),
        _ => candidates.iter().any(|c| actual == c),
    }
}

#[test]
fn locals_reprs() {
    for_each_interpreter(
        "locals",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "threads.py", &[]);
            let ready = fx.ready.clone();
            let dump = dump_json(fx.pid, &["--locals"]);
            let process = &dump[0];
            check_shape(process, true);
            let expected = &ready["locals"];
            let ident = u64_of(&thread_named(&ready, str_of(&expected["thread"]))["ident"]);
            let thread = find_thread(process, ident, 0).expect("the locals thread");
            let frame = &array_of(&thread["frames"])[0];
            assert_eq!(frame["function"], expected["function"], "innermost frame");
            let locals = array_of(&frame["locals"]);
            let want = array_of(&expected["variables"]);
            let names = |list: &[Value]| -> Vec<String> {
                list.iter()
                    .map(|v| str_of(&v["name"]).to_string())
                    .collect()
            };
            assert_eq!(
                names(locals),
                names(want),
                "local names in order, arguments first"
            );
            let mut wrong = Vec::new();
            for (got, var) in locals.iter().zip(want) {
                if got["is_arg"] != var["is_arg"] {
                    wrong.push(format!("{}: is_arg {}", var["name"], got["is_arg"]));
                }
                let shown = str_of(&got["repr"]);
                if !repr_matches(shown, var) {
                    wrong.push(format!(
                        "{}: repr {shown:?}, expected {} (or {})",
                        var["name"], var["repr"], var["alts"]
                    ));
                }
            }
            assert!(wrong.is_empty(), "locals differ:\n{}", wrong.join("\n"));

            // The innermost of the 50 recursive frames has depth == 1, an argument.
            let recurser = u64_of(&thread_named(&ready, "recurser")["ident"]);
            let thread = find_thread(process, recurser, 0).expect("the recurser");
            let depth = array_of(&array_of(&thread["frames"])[0]["locals"])
                .iter()
                .find(|l| l["name"] == "depth")
                .expect("local `depth` in recurse()");
            assert_eq!(depth["repr"], "1");
            assert_eq!(depth["is_arg"], true);

            let pid = fx.pid.to_string();
            let out = pyinspect(&["dump", "--pid", &pid, "--locals"]);
            out.assert_success();
            for needle in [
                "arg_int = 42",
                "neg = -42",
                "nothing = None",
                "obj = <Foo at 0x",
            ] {
                assert!(
                    out.stdout.contains(needle),
                    "text --locals lacks {needle:?}\n{}",
                    out.describe()
                );
            }
            fx.assert_alive();
        },
    );
}

#[test]
fn nonblocking_reads_the_same_stacks() {
    for_each_interpreter(
        "nonblocking",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "threads.py", &[]);
            let ready = fx.ready.clone();
            let busy = u64_of(&thread_named(&ready, "busy")["ident"]);
            let mut last = Vec::new();
            for _ in 0..ATTEMPTS {
                let dump = dump_json(fx.pid, &["--nonblocking"]);
                let process = &dump[0];
                check_shape(process, false);
                check_header(process, &ready, "threads.py");
                // Without a pause the busy thread's stack may be torn; the parked
                // ones must still be exact.
                last = threads_problems(process, &ready, false)
                    .into_iter()
                    .filter(|p| !p.contains(&format!("({busy})")))
                    .collect();
                let busy_thread = find_thread(process, busy, 0).expect("busy thread");
                let top = array_of(&busy_thread["frames"]).first().cloned();
                if top.as_ref().map(|f| &f["function"]) != Some(&Value::from("spin")) {
                    last.push(format!("busy thread's innermost frame: {top:?}"));
                }
                if last.is_empty() {
                    break;
                }
                sleep(Duration::from_millis(100));
            }
            assert!(
                last.is_empty(),
                "no --nonblocking dump matched; last differences:\n{}",
                last.join("\n")
            );
            fx.assert_alive();
        },
    );
}

/// Dumps until `check` finds nothing wrong, else fails with the last
/// differences. The retries forgive only transient states, such as a thread
/// caught between printing READY and entering its parking call.
fn dump_until_right(pid: i32, extra: &[&str], check: impl Fn(&[Value]) -> Vec<String>) {
    let mut last = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let dump = dump_json(pid, extra);
        for process in &dump {
            check_shape(process, extra.contains(&"--locals"));
        }
        last = check(&dump);
        if last.is_empty() {
            if attempt > 1 {
                eprintln!("  (pid {pid}: right at dump {attempt})");
            }
            return;
        }
        sleep(Duration::from_millis(100));
    }
    panic!(
        "no dump in {ATTEMPTS} was right; last differences:\n{}",
        last.join("\n")
    );
}

fn check_top_frame(label: &str, thread: &Value, frame: &Value, wrong: &mut Vec<String>) {
    let top = array_of(&thread["frames"]).first();
    let right = top.is_some_and(|top| {
        top["function"] == frame["function"]
            && top["file"] == frame["file"]
            && top["line"] == frame["line"]
    });
    if !right {
        wrong.push(format!(
            "{label}: innermost frame {top:?}, expected {frame}"
        ));
    }
}

#[test]
fn two_hundred_threads_all_present() {
    for_each_interpreter(
        "many_threads",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn_with_timeout(
                interp,
                "many_threads.py",
                &["200"],
                Duration::from_secs(60),
            );
            let ready = fx.ready.clone();
            dump_until_right(fx.pid, &[], |dump| {
                let process = &dump[0];
                let mut wrong = Vec::new();
                let count = threads_of(process).len();
                if count != 201 {
                    wrong.push(format!(
                        "{count} threads, expected 200 parked and the main thread"
                    ));
                }
                for expected in array_of(&ready["threads"]) {
                    let label = str_of(&expected["name"]);
                    let Some(thread) = find_thread(process, u64_of(&expected["ident"]), 0) else {
                        wrong.push(format!("{label} absent"));
                        continue;
                    };
                    if !name_matches(thread, &expected["name"]) {
                        wrong.push(format!("{label}: name {}", thread["name"]));
                    }
                    check_top_frame(label, thread, &ready["frame"], &mut wrong);
                    if let Err(p) = check_os_id(thread, &expected["native_id"]) {
                        wrong.push(format!("{label}: {p}"));
                    }
                }
                match find_thread(process, u64_of(&ready["main"]["ident"]), 0) {
                    Some(main) => check_top_frame("main", main, &ready["main_frame"], &mut wrong),
                    None => wrong.push("main thread absent".to_string()),
                }
                wrong
            });
            fx.assert_alive();
        },
    );
}

#[test]
fn nine_hundred_frames_all_present() {
    for_each_interpreter(
        "deep_recursion",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "deep.py", &["900"]);
            let ready = fx.ready.clone();
            let depth = u64_of(&ready["depth"]) as usize;
            let mut expected = vec![ready["innermost"].clone()];
            expected.extend(std::iter::repeat_n(
                ready["recursive_call"].clone(),
                depth - 1,
            ));
            expected.extend(array_of(&ready["outer"]).iter().cloned());
            dump_until_right(fx.pid, &[], |dump| {
                let threads = threads_of(&dump[0]);
                if threads.len() != 1 {
                    return vec![format!("{} threads, expected one", threads.len())];
                }
                compare_frames(array_of(&threads[0]["frames"]), &expected)
                    .err()
                    .into_iter()
                    .collect()
            });
            fx.assert_alive();
        },
    );
}

#[test]
fn sub_interpreters_show_every_interpreter() {
    for_each_interpreter(
        "subinterpreters",
        |i| i.at_least(3, 12),
        |interp| {
            let mut fx = Fixture::spawn(interp, "subinterp.py", &[]);
            let ready = fx.ready.clone();
            let sub = &ready["sub_thread"];
            let sub_id = u64_of(&ready["sub_interpreter"]);
            let sub_frames = array_of(&sub["frames"]);
            dump_until_right(fx.pid, &[], |dump| {
                let process = &dump[0];
                let mut wrong = Vec::new();
                for expected in array_of(&ready["main_threads"]) {
                    let label = str_of(&expected["name"]);
                    let Some(thread) = find_thread(process, u64_of(&expected["ident"]), 0) else {
                        wrong.push(format!("{label} absent from interpreter 0"));
                        continue;
                    };
                    if !name_matches(thread, &expected["name"]) {
                        wrong.push(format!("{label}: name {}", thread["name"]));
                    }
                    check_top_frame(label, thread, &expected["frame"], &mut wrong);
                    if let Err(p) = check_os_id(thread, &expected["native_id"]) {
                        wrong.push(format!("{label}: {p}"));
                    }
                }
                // Found by interpreter and stack rather than by ident: on 3.12,
                // run_string() borrows the thread state that create() made on
                // the main thread, so that state carries the main thread's ids
                // while the runner thread executes it. 3.13 gives the runner
                // its own.
                let in_sub: Vec<&Value> = threads_of(process)
                    .iter()
                    .filter(|t| t["interpreter"] == sub_id)
                    .collect();
                let found = in_sub
                    .iter()
                    .find(|t| compare_frames(array_of(&t["frames"]), sub_frames).is_ok());
                match found {
                    None => wrong.push(format!(
                        "no thread of interpreter {sub_id} runs\n{}\n  threads there:\n{}",
                        show_frames(sub_frames),
                        in_sub
                            .iter()
                            .map(|t| format!(
                                "  {}:\n{}",
                                t["thread_id"],
                                show_frames(array_of(&t["frames"]))
                            ))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )),
                    Some(thread) if interp.at_least(3, 13) => {
                        if thread["thread_id"] != sub["ident"] {
                            wrong.push(format!(
                                "sub-interpreter thread: thread_id {} but ident {}",
                                thread["thread_id"], sub["ident"]
                            ));
                        }
                        if let Err(p) = check_os_id(thread, &sub["native_id"]) {
                            wrong.push(format!("sub-interpreter thread: {p}"));
                        }
                    }
                    Some(_) => {}
                }
                wrong
            });

            let pid = fx.pid.to_string();
            let out = pyinspect(&["dump", "--pid", &pid]);
            out.assert_success();
            for needle in ["main_side", "sub_loop", &format!("interpreter {sub_id}")] {
                assert!(
                    out.stdout.contains(needle),
                    "text output lacks {needle:?}\n{}",
                    out.describe()
                );
            }
            fx.assert_alive();
        },
    );
}

#[test]
fn subprocesses_are_dumped() {
    for_each_interpreter(
        "subprocesses",
        |_| true,
        |interp| {
            let mut fx = Fixture::spawn(interp, "parent.py", &[]);
            let ready = fx.ready.clone();
            let children = array_of(&ready["children"]);
            let sleep_pid = &ready["non_python"]["pid"];

            let alone = dump_json(fx.pid, &[]);
            assert_eq!(alone.len(), 1, "without --subprocesses, only the target");

            dump_until_right(fx.pid, &["--subprocesses"], |dump| {
                let mut wrong = Vec::new();
                let pids: BTreeSet<u64> = dump.iter().map(|p| u64_of(&p["pid"])).collect();
                let mut want: BTreeSet<u64> = children.iter().map(|c| u64_of(&c["pid"])).collect();
                want.insert(fx.pid as u64);
                if pids != want {
                    wrong.push(format!(
                    "processes {pids:?}, expected {want:?}: one JSON line per Python process (the `sleep` child {sleep_pid} is not Python)"
                ));
                }
                let mut expected_tops = vec![(&ready["pid"], &ready["main_frame"])];
                expected_tops.extend(children.iter().map(|c| (&c["pid"], &c["frame"])));
                for (pid, frame) in expected_tops {
                    let Some(process) = dump.iter().find(|p| p["pid"] == *pid) else {
                        continue;
                    };
                    if process["python_version"] != ready["version"] {
                        wrong.push(format!(
                            "{pid}: python_version {}",
                            process["python_version"]
                        ));
                    }
                    match threads_of(process).as_slice() {
                        [thread] => {
                            check_top_frame(&format!("process {pid}"), thread, frame, &mut wrong)
                        }
                        threads => {
                            wrong.push(format!("{pid}: {} threads, expected 1", threads.len()))
                        }
                    }
                }
                wrong
            });

            let pid = fx.pid.to_string();
            let out = pyinspect(&["dump", "--pid", &pid, "--subprocesses"]);
            out.assert_success();
            for child in children {
                assert!(
                    shows_process(&out.stdout, &child["pid"]),
                    "lacks process {}\n{}",
                    child["pid"],
                    out.describe()
                );
                let function = str_of(&child["frame"]["function"]);
                assert!(
                    out.stdout.contains(function),
                    "lacks {function}\n{}",
                    out.describe()
                );
            }
            assert!(
                !shows_process(&out.stdout, sleep_pid),
                "shows `sleep`\n{}",
                out.describe()
            );
            for child in children {
                common::assert_not_stopped(u64_of(&child["pid"]) as i32);
            }
            fx.assert_alive();
        },
    );
}

/// The target runs in its own pid namespace, as in a container: the tids it
/// records for itself are not ours, and must be mapped to the host's view.
#[test]
fn container_pid_namespace_maps_thread_ids() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    // One interpreter that records native ids itself, one where they come from glibc.
    for_each_interpreter(
        "container_pid_namespace_maps_thread_ids",
        |i| i.version == (3, 12) || i.version == (3, 9),
        |interp| {
            let mut unshare = Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc"])
                .arg(&interp.python)
                .arg(common::fixture_path("many_threads.py"))
                .arg("5")
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .expect("unshare (util-linux) must be installed");
            let mut line = String::new();
            std::io::BufReader::new(unshare.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert!(line.starts_with("READY"), "fixture said {line:?}");
            // The python is unshare's child; its host pid is what a user passes.
            let python = std::fs::read_to_string(format!(
                "/proc/{}/task/{}/children",
                unshare.id(),
                unshare.id()
            ))
            .unwrap()
            .split_whitespace()
            .next()
            .expect("unshare has a child")
            .parse::<i32>()
            .unwrap();
            let result = std::panic::catch_unwind(|| {
                let process = dump_json(python, &[]).remove(0);
                let host_tids: Vec<u64> = std::fs::read_dir(format!("/proc/{python}/task"))
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
                    .collect();
                let threads = threads_of(&process);
                assert_eq!(threads.len(), 6, "main + 5 parked threads");
                for t in threads {
                    let tid = t["os_thread_id"].as_u64().expect("an os thread id");
                    assert!(
                        host_tids.contains(&tid),
                        "tid {tid} is not a host tid of {python}: {host_tids:?}"
                    );
                    assert!(t["name"].is_string(), "named: {t}");
                }
            });
            let _ = unshare.kill();
            let _ = Command::new("kill").arg(python.to_string()).status();
            let _ = unshare.wait();
            if let Err(p) = result {
                std::panic::resume_unwind(p);
            }
        },
    );
}

/// py-spy's `-ll`: repeating --locals allows longer values.
#[test]
fn repeated_locals_flag_allows_longer_values() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    for_each_interpreter(
        "repeated_locals_flag_allows_longer_values",
        |i| i.version == (3, 12) || i.version == (2, 7),
        |interp| {
            let code = "import sys, time\n\
                        def parked():\n    text = 'x' * 600\n    sys.stdout.write('READY\\n')\n    sys.stdout.flush()\n    time.sleep(60)\n\
                        parked()\n";
            let mut child = Command::new(&interp.python)
                .args(["-c", code])
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let pid = child.id() as i32;
            let repr_len = |flags: &[&str]| -> usize {
                let process = dump_json(pid, flags).remove(0);
                let frames = array_of(&threads_of(&process)[0]["frames"]);
                let local = array_of(&frames[0]["locals"])
                    .iter()
                    .find(|l| str_of(&l["name"]) == "text")
                    .cloned()
                    .expect("the text local");
                str_of(&local["repr"]).chars().count()
            };
            let (one, two) = (repr_len(&["-l"]), repr_len(&["-ll"]));
            let _ = child.kill();
            let _ = child.wait();
            // 80 characters with the `...` (pystack's cut), 160 with -ll.
            assert_eq!(one, 80, "-l gave {one} characters");
            assert_eq!(two, 160, "-ll gave {two} characters");
        },
    );
}

/// `pyinspect dump --pid PID ARGS` with extra environment variables.
fn dump_with_env(pid: i32, args: &[&str], env: &[(&str, &str)]) -> common::Output {
    let mut command = std::process::Command::new(common::pyinspect_bin());
    command.args(["dump", "--pid", &pid.to_string()]).args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    common::run_command(command, Duration::from_secs(60))
}

/// The parked threads of a threads.py dump (the busy one moves), as JSON
/// with the fields a layout decides: names, ids, statuses, frames, locals.
fn parked_threads(process: &Value, ready: &Value) -> Vec<Value> {
    let busy = u64_of(&thread_named(ready, "busy")["ident"]);
    let mut v: Vec<Value> = threads_of(process)
        .iter()
        .filter(|t| t["thread_id"] != busy)
        .map(|t| {
            let mut t = t.clone();
            // Kernel readings, not the layout's: a sleep's time left moves.
            for k in ["holds_gil", "wait"] {
                t.as_object_mut().unwrap().remove(k);
            }
            t
        })
        .collect();
    v.sort_by_key(|t| t["thread_id"].as_u64());
    v
}

/// A version newer than every table is read through its `_Py_DebugOffsets`
/// and the newest table: a 3.15 target read as if pyinspect's newest table
/// were 3.14 gives the same dump (stacks, names, locals) as with its own.
#[test]
fn newest_table_withheld_reads_the_same() {
    for_each_interpreter(
        "newest_table_withheld",
        |i| i.at_least(3, 15),
        |interp| {
            let mut fx = Fixture::spawn(interp, "threads.py", &[]);
            let ready = fx.ready.clone();
            let mut last = Vec::new();
            for _ in 0..ATTEMPTS {
                let own = dump_json(fx.pid, &["--locals"]);
                let out = dump_with_env(
                    fx.pid,
                    &["--json", "--locals"],
                    &[("PYINSPECT_NEWEST_TABLE", "3.14")],
                );
                out.assert_success();
                let withheld = out.json_lines();
                last.clear();
                for (label, dump) in [("own table", &own[0]), ("3.14 table", &withheld[0])] {
                    check_shape(dump, true);
                    if let Some(w) = dump.get("warnings") {
                        last.push(format!("{label}: warnings {w}"));
                    }
                    for p in threads_problems(dump, &ready, false) {
                        last.push(format!("{label}: {p}"));
                    }
                }
                if parked_threads(&own[0], &ready) != parked_threads(&withheld[0], &ready) {
                    last.push(format!(
                        "the dumps differ:\n  own table: {}\n  3.14 table: {}",
                        Value::from(parked_threads(&own[0], &ready)),
                        Value::from(parked_threads(&withheld[0], &ready))
                    ));
                }
                if last.is_empty() {
                    break;
                }
                sleep(Duration::from_millis(100));
            }
            assert!(last.is_empty(), "{}", last.join("\n"));

            // Withhold 3.15's `_Py_DebugOffsets` member list too: its 3.14
            // reading does not validate, and one line says so.
            let out = dump_with_env(
                fx.pid,
                &[],
                &[
                    ("PYINSPECT_NEWEST_TABLE", "3.14"),
                    ("PYINSPECT_NEWEST_DEBUG_OFFSETS", "3.14"),
                ],
            );
            let line = common::assert_one_clean_error_line(&out);
            for needle in [
                interp.full_version.as_str(),
                "newer",
                "3.14",
                "_Py_DebugOffsets",
            ] {
                assert!(line.contains(needle), "{needle:?} missing from {line}");
            }
            fx.assert_alive();
        },
    );
}

/// The `threading` name when the fixture gave one; otherwise the kernel's
/// name, marked as such (a thread `threading` does not know).
fn name_matches(thread: &Value, expected: &Value) -> bool {
    if expected.is_null() {
        thread["name"].is_string() && thread["name_source"] == "os"
    } else {
        thread["name"] == *expected && thread["name_source"] == "threading"
    }
}
