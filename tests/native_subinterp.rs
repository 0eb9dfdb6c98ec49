//! `dump --native` on threads that run sub-interpreters (3.11+): nested in
//! the thread's main-interpreter call, one after another, several per
//! thread, and (3.12+) a sub-interpreter running another. Every thread
//! state's Python frames must be merged into the thread's native stack by
//! stack address (no "could not be matched", no unwind cut short), on every
//! dump of a repeated series.
//!
//! The fixture is python_fixtures/native/subinterp_native.py.

mod common;

use common::{dump_json, pyinspect, Fixture, Interpreter};
use serde_json::Value;

/// Dumps per interpreter.
const REPEATS: usize = 20;

/// Every interpreter of the matrix with sub-interpreters whose eval loop
/// keeps its state on the C stack (3.11+).
fn interpreters() -> Vec<Interpreter> {
    common::interpreters()
        .iter()
        .filter(|i| i.at_least(3, 11))
        .cloned()
        .collect()
}

fn python_names(t: &Value) -> Vec<String> {
    t["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["kind"] == "python")
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Problems in one dump: merge fallbacks, cut unwinds, and sub-interpreter
/// threads whose sleeping frame is missing or not under a native frame.
fn problems(dump: &Value, ready: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let threads = dump["threads"].as_array().cloned().unwrap_or_default();
    for t in &threads {
        if let Some(why) = t["truncated"].as_str() {
            out.push(format!(
                "thread {} (interpreter {}): {why}",
                t["os_thread_id"], t["interpreter"]
            ));
        }
    }
    for (name, tid) in ready["threads"].as_object().into_iter().flatten() {
        let on_thread: Vec<&Value> = threads
            .iter()
            .filter(|t| t["os_thread_id"] == *tid)
            .collect();
        // The main interpreter's state runs the thread's function.
        if !on_thread
            .iter()
            .any(|t| t["interpreter"] == 0 && python_names(t).contains(name))
        {
            out.push(format!("{name}: no main-interpreter stack running {name}"));
        }
        // A sub-interpreter's state sleeps, with native frames inside.
        let sleeping = on_thread.iter().find(|t| {
            t["interpreter"] != 0
                && python_names(t).first().map(String::as_str) == Some("sub_sleep")
        });
        match sleeping {
            Some(t) => {
                let first = &t["frames"][0];
                if first["kind"] != "native" {
                    out.push(format!("{name}: sub_sleep is not under a native frame"));
                }
            }
            None => out.push(format!("{name}: no sub-interpreter stack in sub_sleep")),
        }
    }
    out
}

#[test]
fn sub_interpreters_merge_by_stack_address() {
    let mut failures = Vec::new();
    for i in interpreters() {
        let f = Fixture::spawn_with_timeout(
            &i,
            "native/subinterp_native.py",
            &[],
            std::time::Duration::from_secs(60),
        );
        let mut bad = 0;
        let mut first = None;
        for _ in 0..REPEATS {
            let d = dump_json(f.pid, &["--native"]).remove(0);
            let p = problems(&d, &f.ready);
            if !p.is_empty() {
                bad += 1;
                first.get_or_insert(p);
            }
        }
        eprintln!(
            "sub-interpreters on {}: {}/{REPEATS} dumps merged",
            i.label,
            REPEATS - bad
        );
        if let Some(p) = first {
            failures.push(format!(
                "{}: {bad} bad dumps, e.g.\n  {}",
                i.label,
                p.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// record's summary says how the native merges were made: on sid's
/// stripped 3.14 (no eval-loop symbol to go by) every one by stack address.
#[test]
fn record_summary_counts_merge_methods() {
    let i = common::find_interpreter("sid's stripped 3.14", |i| {
        i.version == (3, 14) && !i.symbols && !i.debug
    });
    let f = Fixture::spawn_with_timeout(
        i,
        "native/subinterp_native.py",
        &[],
        std::time::Duration::from_secs(60),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.txt");
    let r = pyinspect(&[
        "record",
        "--pid",
        &f.pid.to_string(),
        "--native",
        "--idle",
        "-d",
        "1",
        "-r",
        "20",
        "-f",
        "raw",
        "-o",
        out.to_str().unwrap(),
    ]);
    r.assert_success();
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("native merges:"))
        .unwrap_or_else(|| panic!("no merge counts in the summary\n{}", r.describe()));
    let n = |what: &str| -> u64 {
        line.split(", ")
            .find(|p| p.contains(what))
            .and_then(|p| {
                p.trim_start_matches("pyinspect: native merges: ")
                    .split(' ')
                    .next()
            })
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no '{what}' count in: {line}"))
    };
    assert!(n("by stack address") > 0, "{line}");
    assert_eq!(n("by eval-loop names"), 0, "{line}");
    assert_eq!(n("fell back"), 0, "{line}");
}
