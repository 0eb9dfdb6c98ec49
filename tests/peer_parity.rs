//! What py-spy's and pystack's own test suites check, from our own fixtures:
//! launch modes (`record -d` ends the program, `-s` with a root that is not
//! Python, a launched program that is not Python), shell completions,
//! `--locals` renderings, thread names from the OS, positions and the GC
//! state. Each runs against every interpreter of the matrix where it applies.

mod common;

use common::{
    fixture, fixture_path, for_each_interpreter, pyinspect, pyinspect_bin, run_command,
    until_ready_before_the_end, Fixture, Interpreter, ReadyFile,
};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// `pyinspect record -f raw -o <tmp> ARGS`: the output, the profile's text, the time it took.
fn record_raw(args: &[&str]) -> (common::Output, String, Duration) {
    record_as_telling("raw", args, None)
}

/// [`record_raw`], the launched fixture told to write its READY to `ready`.
fn record_raw_telling(
    args: &[&str],
    ready: Option<&ReadyFile>,
) -> (common::Output, String, Duration) {
    record_as_telling("raw", args, ready)
}

/// `pyinspect record -f FORMAT -o <tmp> ARGS`: the output, the profile, the time it took.
fn record_as(format: &str, args: &[&str]) -> (common::Output, String, Duration) {
    record_as_telling(format, args, None)
}

/// [`record_as`], a launched fixture told to write its READY to `ready`.
fn record_as_telling(
    format: &str,
    args: &[&str],
    ready: Option<&ReadyFile>,
) -> (common::Output, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile");
    let mut cmd = Command::new(pyinspect_bin());
    cmd.args(["record", "-f", format, "-o", path.to_str().unwrap()])
        .args(args)
        .current_dir(fixture_path(""));
    if let Some(ready) = ready {
        let (name, value) = ready.env();
        cmd.env(name, value);
    }
    let started = Instant::now();
    let out = run_command(cmd, Duration::from_secs(60));
    let took = started.elapsed();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    (out, text, took)
}

fn py(i: &Interpreter) -> &str {
    i.python.to_str().unwrap()
}

#[test]
fn record_duration_ends_a_launched_program_with_sigint() {
    let script = fixture("launched.py");
    for_each_interpreter(
        "record -d ends the program",
        |_| true,
        |i| {
            // The SIGINT at the end finds the fixture READY (else, again).
            let ((out, text, took), d) = until_ready_before_the_end(1.0, |ready, d| {
                let d = d.to_string();
                record_raw_telling(&["-d", &d, "-i", "--", py(i), &script, "wait"], Some(ready))
            });
            out.assert_success();
            assert!(
                took < Duration::from_secs_f64(d + 7.0),
                "took {took:?}\n{}",
                out.describe()
            );
            assert!(text.contains("waiting"), "{text}\n{}", out.describe());
            assert!(
                out.stderr.contains("sent SIGINT to the program")
                    && !out.stderr.contains("SIGTERM"),
                "{}",
                out.describe()
            );
            assert!(
                out.stderr.contains("wrote collapsed stacks"),
                "{}",
                out.describe()
            );
        },
    );
}

#[test]
fn record_duration_terms_a_program_that_ignores_sigint() {
    let script = fixture("launched.py");
    for_each_interpreter(
        "record -d, SIGINT ignored",
        |_| true,
        |i| {
            // The SIGINT at the end finds SIGINT ignored (else, again).
            let ((out, text, took), d) = until_ready_before_the_end(1.0, |ready, d| {
                let d = d.to_string();
                let args = ["-d", &d, "-i", "--", py(i), &script, "ignore-int"];
                record_raw_telling(&args, Some(ready))
            });
            out.assert_success();
            // d s of recording, 2 s of grace after SIGINT, then SIGTERM ends it.
            assert!(
                took < Duration::from_secs_f64(d + 9.0),
                "took {took:?}\n{}",
                out.describe()
            );
            assert!(text.contains("waiting"), "{text}\n{}", out.describe());
            assert!(
                out.stderr
                    .contains("sent SIGINT, then SIGTERM to the program")
                    && out.stderr.contains("ended by SIGTERM (exit status 143)"),
                "{}",
                out.describe()
            );
        },
    );
}

#[test]
fn a_program_that_exits_before_the_duration_passes_its_status_on() {
    let script = fixture("launched.py");
    for_each_interpreter(
        "record -d, program exits first",
        |_| true,
        |i| {
            let (out, text, _) = record_raw(&["-d", "30", "--", py(i), &script, "hot", "0.5", "3"]);
            assert_eq!(out.status.code(), Some(3), "{}", out.describe());
            assert!(text.contains("hot_loop"), "{text}\n{}", out.describe());
            assert!(!out.stderr.contains("sent SIG"), "{}", out.describe());
        },
    );
}

#[test]
fn a_duration_too_short_for_a_sample_still_writes_a_profile() {
    let script = fixture("launched.py");
    for_each_interpreter(
        "record -d 1e-9",
        |_| true,
        |i| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("p.svg");
            let out = pyinspect(&[
                "record",
                "-d",
                "1e-9",
                "-o",
                path.to_str().unwrap(),
                "--",
                py(i),
                &script,
                "wait",
            ]);
            out.assert_success();
            let svg = std::fs::read_to_string(&path).unwrap();
            let opts = roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            };
            roxmltree::Document::parse_with_options(&svg, opts)
                .unwrap_or_else(|e| panic!("{e}: {svg}"));
        },
    );
}

#[test]
fn launching_a_program_that_is_not_python_stops_it_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt");
    let started = Instant::now();
    let out = pyinspect(&["record", "-o", path.to_str().unwrap(), "--", "sleep", "30"]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", out.describe());
    assert!(
        took < Duration::from_secs(8),
        "took {took:?}\n{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("is not a Python process"),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("sent SIGINT to the program")
            && out.stderr.contains("ended by SIGINT (exit status 130)"),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("record -s"), "{}", out.describe());
    assert!(!path.exists(), "a profile was left behind");
}

/// A shell script that starts the fixture, as deployments often do.
fn shell_script(dir: &std::path::Path, i: &Interpreter, pre: &str) -> String {
    let path = dir.join("start.sh");
    std::fs::write(
        &path,
        format!(
            "{pre}\n'{}' '{}' hot 1.5\necho started-python-exited\n",
            py(i),
            fixture("launched.py")
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn record_s_follows_the_python_a_launched_shell_script_starts() {
    for_each_interpreter(
        "record -s -- bash script",
        |_| true,
        |i| {
            let dir = tempfile::tempdir().unwrap();
            // The shell runs on well past the 2 s in which a launched program
            // must show Python, so the script's own process is not Python.
            let script = shell_script(dir.path(), i, "sleep 2.5");
            let (out, text, took) = record_raw(&["-s", "--", "bash", &script]);
            out.assert_success();
            assert!(took < Duration::from_secs(20), "took {took:?}");
            assert!(text.contains("hot_loop"), "{text}\n{}", out.describe());
            assert!(
                out.stderr
                    .contains("is not Python: following the Python processes it starts"),
                "{}",
                out.describe()
            );
        },
    );
}

#[test]
fn record_s_accepts_a_shell_pid_that_starts_python_later() {
    for_each_interpreter(
        "record -s --pid shell",
        |_| true,
        |i| {
            let dir = tempfile::tempdir().unwrap();
            // The shell waits for a line before it starts Python: the handshake
            // that the recording is already following it.
            let script = shell_script(dir.path(), i, "read go");
            let mut shell = Command::new("bash")
                .arg(&script)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let pid = shell.id().to_string();
            let out_path = dir.path().join("p.txt");
            let mut rec = Command::new(pyinspect_bin())
                .args(["record", "-s", "-f", "raw", "-o"])
                .arg(&out_path)
                .args(["--pid", &pid])
                .stdin(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let (tx, rx) = channel();
            let stderr = rec.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(l) if l.contains("is not Python: following") => break,
                    Ok(l) => seen.push(l),
                    Err(_) => {
                        let _ = shell.kill();
                        let _ = rec.kill();
                        panic!("record did not accept the shell: {seen:?}");
                    }
                }
            }
            writeln!(shell.stdin.as_mut().unwrap(), "go").unwrap();
            assert!(shell.wait().unwrap().success());
            // The shell is gone, and so is its Python: the recording ends.
            let deadline = Instant::now() + Duration::from_secs(20);
            let status = loop {
                if let Some(s) = rec.try_wait().unwrap() {
                    break s;
                }
                if Instant::now() > deadline {
                    let _ = rec.kill();
                    panic!("record did not end after the shell exited");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            seen.extend(rx.try_iter());
            assert!(status.success(), "{status}: {seen:?}");
            let text = std::fs::read_to_string(&out_path).unwrap();
            assert!(text.contains("hot_loop"), "{text}\n{seen:?}");
        },
    );
}

#[test]
fn without_s_a_shell_pid_is_refused() {
    let mut shell = Command::new("sleep").arg("30").spawn().unwrap();
    let out = pyinspect(&[
        "record",
        "-o",
        "/dev/null",
        "--pid",
        &shell.id().to_string(),
    ]);
    let _ = shell.kill();
    let _ = shell.wait();
    let line = common::assert_one_clean_error_line(&out);
    assert!(line.contains("is not a Python process"), "{line}");
}

fn completion_script(shell: &str) -> tempfile::NamedTempFile {
    let out = pyinspect(&["completions", shell]);
    out.assert_success();
    assert!(out.stderr.is_empty(), "{}", out.describe());
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(out.stdout.as_bytes()).unwrap();
    f
}

fn shell_says(shell: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(shell);
    cmd.args(args);
    let out = run_command(cmd, Duration::from_secs(30));
    out.assert_success();
    out.stdout
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    // bash: the function it registers completes verbs and flags.
    let bash = completion_script("bash");
    let path = bash.path().to_str().unwrap();
    let probe = format!(
        "source '{path}' && complete -p pyinspect >/dev/null && \
         COMP_WORDS=(pyinspect rec); COMP_CWORD=1; _pyinspect pyinspect rec pyinspect; \
         echo \"verbs: ${{COMPREPLY[*]}}\"; \
         COMP_WORDS=(pyinspect record --dur); COMP_CWORD=2; _pyinspect pyinspect --dur record; \
         echo \"flags: ${{COMPREPLY[*]}}\""
    );
    let said = shell_says("bash", &["-c", &probe]);
    assert!(said.contains("verbs: record"), "{said}");
    assert!(said.contains("flags: --duration"), "{said}");

    // fish: asks its own completion engine.
    let fish = completion_script("fish");
    let path = fish.path().to_str().unwrap();
    let said = shell_says(
        "fish",
        &[
            "-c",
            &format!(
                "source '{path}'; complete -C 'pyinspect rec'; complete -C 'pyinspect dump --loc'"
            ),
        ],
    );
    assert!(said.lines().any(|l| l.starts_with("record\t")), "{said}");
    assert!(said.lines().any(|l| l.starts_with("--locals\t")), "{said}");

    // zsh: a valid completion function for the command (zsh -n parses it).
    let zsh = completion_script("zsh");
    let path = zsh.path().to_str().unwrap();
    shell_says("zsh", &["-n", path]);
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.starts_with("#compdef pyinspect"), "{text}");
    for word in ["record", "dump", "top", "--duration", "--subprocesses"] {
        assert!(text.contains(word), "{word} missing from the zsh script");
    }
}

#[test]
fn completions_for_an_unknown_shell_is_one_clear_line() {
    let out = pyinspect(&["completions", "tcsh"]);
    let line = common::assert_one_clean_error_line(&out);
    assert!(line.contains("tcsh") && line.contains("bash"), "{line}");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn threads_threading_does_not_name_get_their_os_name() {
    for_each_interpreter(
        "OS thread names",
        |_| true,
        |i| {
            let f = Fixture::spawn(i, "os_names.py", &[]);
            let process = &common::dump_json(f.pid, &[])[0];
            let threads = process["threads"].as_array().unwrap();
            let mut wrong = Vec::new();
            for e in f.ready["threads"].as_array().unwrap() {
                let Some(t) = threads.iter().find(|t| t["os_thread_id"] == e["tid"]) else {
                    wrong.push(format!("{e}: absent"));
                    continue;
                };
                if t["name"] != e["name"] || t["name_source"] != e["source"] {
                    wrong.push(format!("{e}: got {} from {}", t["name"], t["name_source"]));
                }
            }
            assert!(wrong.is_empty(), "{wrong:?}\n{process}");
            let out = pyinspect(&["dump", "--pid", &f.pid.to_string()]);
            out.assert_success();
            for needle in [
                "\"c-idle\" (OS name)",
                "\"py-unnamed\" (OS name)",
                "\"named\" (",
            ] {
                assert!(out.stdout.contains(needle), "{needle}\n{}", out.stdout);
            }
        },
    );
}

/// A raw profile's stacks with their counts, the most frequent first.
fn raw_stacks(raw: &str) -> Vec<(String, u64)> {
    let mut stacks: Vec<(String, u64)> = raw
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack.to_string(), n.parse().ok()?))
        })
        .collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.1));
    stacks
}

/// py-spy's longsleep case: with py-spy's `--idle`, a sleeping thread's
/// samples are its two Python frames (py-spy's test: at least 95% of them
/// one stack, `<module>` then `longsleep`); `--mode wall` keeps the same
/// stack and ends it in a leaf naming the wait.
#[test]
fn record_idle_gives_a_sleeping_thread_its_python_stack_alone() {
    for_each_interpreter(
        "record --idle, a sleeping thread",
        |_| true,
        |i| {
            let mut f = Fixture::spawn(i, "longsleep.py", &[]);
            let pid = f.pid.to_string();
            let want = format!(
                "<module> (longsleep.py:{});longsleep (longsleep.py:{})",
                f.ready["module_line"], f.ready["sleep_line"]
            );
            let (out, raw, _) = record_raw(&["-d", "1", "-i", "--pid", &pid]);
            out.assert_success();
            let stacks = raw_stacks(&raw);
            let total: u64 = stacks.iter().map(|s| s.1).sum();
            assert!(
                total >= 20 && stacks[0].0 == want && stacks[0].1 * 100 >= total * 95,
                "{}: want {want} in 95% of {total}:\n{raw}",
                i.label
            );

            let (out, raw, _) = record_raw(&["-d", "1", "-m", "wall", "--pid", &pid]);
            out.assert_success();
            let stacks = raw_stacks(&raw);
            let total: u64 = stacks.iter().map(|s| s.1).sum();
            let (top, n) = &stacks[0];
            let leaf = top.strip_prefix(&format!("{want};")).unwrap_or("");
            assert!(
                leaf.starts_with('[') && leaf.ends_with(']') && n * 100 >= total * 95,
                "{}: want {want};[wait] in 95% of {total}:\n{raw}",
                i.label
            );
            f.assert_alive();
        },
    );
}

/// The name in a thread's label (`thread 42 "name"`), or "None" (as
/// py-spy's test reads a profile named by no thread name) when it has none.
fn quoted_name(label: &str) -> String {
    match label.split_once('"').and_then(|(_, r)| r.rsplit_once('"')) {
        Some((name, _)) => name.to_string(),
        None => "None".to_string(),
    }
}

/// py-spy's thread-name case: `record --threads --idle` of a program that
/// starts ten named threads gives exactly their names and MainThread, in
/// speedscope's thread profiles and in the raw stacks' thread roots: no
/// nameless thread state that its thread has not taken up yet (3.12+
/// makes it first), and one root per thread even where samples came
/// before `threading` named the thread (the kernel's name then).
#[test]
fn record_threads_idle_names_every_thread_and_only_those() {
    let script = fixture("thread_names.py");
    for_each_interpreter(
        "record --threads --idle, thread names",
        |_| true,
        |i| {
            let mut want: std::collections::BTreeSet<String> =
                (0..10).map(|n| format!("CustomThreadName-{n}")).collect();
            want.insert("MainThread".to_string());
            // 3 s: a debug build on a loaded machine takes over 1.5 s to start.
            let args = ["-d", "3", "-t", "-i", "--", py(i), &script];
            let (out, json, _) = record_as("speedscope", &args);
            out.assert_success();
            let profile: Value = serde_json::from_str(&json).unwrap();
            let names: std::collections::BTreeSet<String> = profile["profiles"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| quoted_name(p["name"].as_str().unwrap()))
                .collect();
            assert_eq!(names, want, "{}: speedscope", i.label);

            let (out, raw, _) = record_as("raw", &args);
            out.assert_success();
            let stacks = raw_stacks(&raw);
            let mut roots: Vec<&str> = stacks
                .iter()
                .filter_map(|(stack, _)| stack.split(';').next())
                .collect();
            roots.sort();
            roots.dedup();
            let names: std::collections::BTreeSet<String> =
                roots.iter().map(|r| quoted_name(r)).collect();
            assert!(
                names == want && roots.len() == want.len(),
                "{}: raw roots {roots:#?}",
                i.label
            );
        },
    );
}

/// The locals of the fixture's `values` frame, by name.
fn values_locals(pid: i32, extra: &[&str]) -> std::collections::HashMap<String, Value> {
    let mut args = vec!["--locals"];
    args.extend_from_slice(extra);
    let process = &common::dump_json(pid, &args)[0];
    let frame = process["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["frames"].as_array().unwrap().iter())
        .find(|f| f["function"] == "values")
        .unwrap_or_else(|| panic!("no values frame: {process}"))
        .clone();
    frame["locals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_string(), l.clone()))
        .collect()
}

#[test]
fn locals_render_like_repr_numpy_nesting_truncation_cycles_invalid() {
    for_each_interpreter(
        "locals rendering",
        |_| true,
        |i| {
            let mut f = Fixture::spawn(i, "locals_values.py", &[]);
            let locals = values_locals(f.pid, &[]);
            let mut wrong = Vec::new();
            let numpy = f.ready["numpy"].as_object().unwrap();
            // numpy is installed for every interpreter of the matrix (.ci/run).
            assert_eq!(numpy.len(), 11, "numpy missing under {}", i.label);
            for (name, want) in f.ready["expected"].as_object().unwrap() {
                let got = &locals[name];
                if got["repr"] != *want || !got["left_out"].is_null() {
                    wrong.push(format!("{name}: {got}, want {want}"));
                }
            }
            // Each numpy scalar by value, as numpy's str() shows it.
            for (name, want) in numpy {
                if locals[name]["repr"] != *want {
                    wrong.push(format!("{name}: {}, want {want}", locals[name]));
                }
            }
            // Cut values: at most 80 characters (pystack's cut) with a
            // "..." where the cut is, before the closing bracket of a
            // container; the JSON says how much was left out.
            for (name, total) in [
                ("big_dict", 50),
                ("long_list", 100),
                ("big_tuple", 50),
                ("long_strs", 20),
                ("long_str", 500),
            ] {
                let got = &locals[name];
                let text = got["repr"].as_str().unwrap();
                let left = got["left_out"].as_u64().unwrap_or(0);
                let end = match name {
                    "long_str" => "...",
                    "big_dict" => ", ...}",
                    "big_tuple" => ", ...)",
                    _ => ", ...]",
                };
                if text.chars().count() > 80
                    || !text.ends_with(end)
                    || text.matches("...").count() != 1
                    || left == 0
                    || left >= total
                {
                    wrong.push(format!("{name}: {got}"));
                }
                if name == "long_str" {
                    let shown = text.matches('x').count() as u64;
                    if shown + left != total {
                        wrong.push(format!("{name}: {shown} shown + {left} left out"));
                    }
                }
            }
            assert!(wrong.is_empty(), "{}: {wrong:#?}", i.label);

            // A longer limit (-ll, 160 characters) shows more of the same value.
            let longer = values_locals(f.pid, &["-l"]);
            for name in ["big_dict", "long_list", "big_tuple", "long_str"] {
                let (a, b) = (&locals[name], &longer[name]);
                let text = b["repr"].as_str().unwrap().chars().count();
                assert!(
                    b["left_out"].as_u64().unwrap() < a["left_out"].as_u64().unwrap()
                        && (120..=160).contains(&text),
                    "{}: {a} vs {b}",
                    i.label
                );
            }
            f.assert_alive();
        },
    );
}

#[test]
fn frames_carry_end_line_and_columns_where_the_version_has_them() {
    for_each_interpreter(
        "positions",
        |_| true,
        |i| {
            let f = Fixture::spawn(i, "positions.py", &[]);
            let process = &common::dump_json(f.pid, &[])[0];
            let thread = process["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == "positioned")
                .unwrap_or_else(|| panic!("no positioned thread: {process}"));
            let frames = thread["frames"].as_array().unwrap();
            for (got, want) in frames.iter().zip(f.ready["frames"].as_array().unwrap()) {
                for key in ["function", "line", "end_line", "column", "end_column"] {
                    // Every key is present, null where the version has none.
                    assert!(got.get(key).is_some(), "{key} missing: {got}");
                    assert_eq!(got[key], want[key], "{key}: {got} vs {want}");
                }
            }
            if i.at_least(3, 11) {
                assert_ne!(
                    frames[1]["end_line"], frames[1]["line"],
                    "a call over lines"
                );
            }
            // Text: file:line:column (1-based) with --positions, file:line without.
            let pid = f.pid.to_string();
            let file = f.ready["file"].as_str().unwrap();
            let leaf = &f.ready["frames"][0];
            let plain = format!("({file}:{})", leaf["line"]);
            let with = match leaf["column"].as_u64() {
                Some(c) => format!("({file}:{}:{})", leaf["line"], c + 1),
                None => plain.clone(),
            };
            let out = pyinspect(&["dump", "--pid", &pid, "--positions"]);
            out.assert_success();
            assert!(out.stdout.contains(&with), "{with}\n{}", out.stdout);
            let out = pyinspect(&["dump", "--pid", &pid]);
            assert!(out.stdout.contains(&plain), "{plain}\n{}", out.stdout);
        },
    );
}

#[test]
fn the_gc_state_is_shown_and_samples_during_a_collection_get_a_gc_frame() {
    for_each_interpreter(
        "GC state",
        |_| true,
        |i| {
            let known = i.at_least(3, 7);
            let idle = Fixture::spawn(i, "gc_running.py", &["idle"]);
            let p = &common::dump_json(idle.pid, &[])[0];
            let want = if known {
                Value::Bool(false)
            } else {
                Value::Null
            };
            assert_eq!(p["gc_collecting"], want, "idle: {p}");
            drop(idle);

            let f = Fixture::spawn(i, "gc_running.py", &[]);
            let pid = f.pid.to_string();
            let p = &common::dump_json(f.pid, &[])[0];
            let want = if known {
                Value::Bool(true)
            } else {
                Value::Null
            };
            assert_eq!(p["gc_collecting"], want, "collecting: {p}");
            let text = pyinspect(&["dump", "--pid", &pid]);
            text.assert_success();
            assert_eq!(
                text.stdout.contains("\nGarbage collection running\n"),
                known,
                "{}",
                text.stdout
            );

            // Every sample of the collecting thread has [GC] on top; the
            // sleeping bystander never does.
            let (out, raw, _) = record_raw(&["-d", "0.6", "-i", "-t", "--pid", &pid]);
            out.assert_success();
            let stacks: Vec<&str> = raw.lines().collect();
            let collecting: Vec<&&str> = stacks
                .iter()
                .filter(|l| l.contains("collector_spin"))
                .collect();
            assert!(!collecting.is_empty(), "{raw}");
            for l in &collecting {
                let (stack, _) = l.rsplit_once(' ').unwrap();
                assert_eq!(stack.ends_with(";[GC]"), known, "{l}");
            }
            for l in stacks.iter().filter(|l| l.contains("bystander")) {
                assert!(!l.contains("[GC]"), "{l}");
            }
        },
    );
}

/// Processes whose command line contains `token`.
fn processes_with(token: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
        })
        .collect()
}

#[test]
fn record_duration_ends_what_a_launched_shell_started_too() {
    for_each_interpreter(
        "record -s -d -- bash script",
        |_| true,
        |i| {
            let dir = tempfile::tempdir().unwrap();
            let token = dir.path().to_str().unwrap().to_string();
            let script = dir.path().join("start.sh");
            // The token as an extra argument marks the script's Python process.
            std::fs::write(
                &script,
                format!("'{}' '{}' wait '{token}'\n", py(i), fixture("launched.py")),
            )
            .unwrap();
            // The SIGINT at the end finds the script's Python READY (else, again).
            let ((out, text, took), d) = until_ready_before_the_end(1.5, |ready, d| {
                let d = d.to_string();
                let args = ["-s", "-i", "-d", &d, "--", "bash", script.to_str().unwrap()];
                record_raw_telling(&args, Some(ready))
            });
            out.assert_success();
            assert!(took < Duration::from_secs_f64(d + 8.5), "took {took:?}");
            assert!(text.contains("waiting"), "{text}\n{}", out.describe());
            assert!(
                out.stderr.contains("sent SIGINT to the program"),
                "{}",
                out.describe()
            );
            let left = processes_with(&token);
            assert!(
                left.is_empty(),
                "still running: {left:?}\n{}",
                out.describe()
            );
        },
    );
}

/// `pyinspect top ARGS` on a 160x50 tmux terminal of its own: the screen
/// once `done` holds (or after `limit`).
fn top_screen(name: &str, args: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
    let socket = format!("pyinspect-parity-{}-{name}", std::process::id());
    let tmux = |args: &[&str]| {
        let out = Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux (apt-get install tmux)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cmd = format!("{} top {args}", pyinspect_bin());
    tmux(&[
        "new-session",
        "-d",
        "-x",
        "160",
        "-y",
        "50",
        "-s",
        "t",
        &cmd,
    ]);
    let start = Instant::now();
    let screen = loop {
        let s = tmux(&["capture-pane", "-p", "-t", "t"]);
        if done(&s) || start.elapsed() > limit {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    tmux(&["kill-server"]);
    screen
}

#[test]
fn top_shows_gc_time_as_a_gc_frame() {
    for_each_interpreter(
        "top [GC]",
        |_| true,
        |i| {
            let f = Fixture::spawn(i, "gc_running.py", &[]);
            let name: String = i
                .label
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let args = format!("--pid {}", f.pid);
            let screen = top_screen(&name, &args, Duration::from_secs(20), |s| {
                s.contains("collector_spin") && (!i.at_least(3, 7) || s.contains("[GC]"))
            });
            assert!(screen.contains("collector_spin"), "{screen}");
            assert_eq!(screen.contains("[GC]"), i.at_least(3, 7), "{screen}");
        },
    );
}

#[test]
fn record_s_under_a_program_that_never_starts_python_says_so() {
    let (out, text, took) = record_raw(&["-s", "-d", "1", "--", "sleep", "30"]);
    out.assert_success();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(text.is_empty(), "{text}");
    for needle in [
        "is not Python: following the Python processes it starts",
        "no Python process appeared",
        "wrote collapsed stacks",
        "sent SIGINT to the program",
    ] {
        assert!(out.stderr.contains(needle), "{needle}\n{}", out.describe());
    }
}
