//! `record --engine bpf`: the eBPF engine against the ptrace engine on every
//! matrix interpreter, and its refusals (privilege, kernel, options).

mod common;
mod common_output;

use common::{assert_one_clean_error_line, for_each_interpreter, Fixture, Output, BIN};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

fn record(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.arg("record").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    common::run_command(c, Duration::from_secs(120))
}

/// Each stack's share of the samples, with frames as function names only
/// (lines are compared apart), leaving out stacks under 2%.
fn function_shares(stacks: &[(String, u64)]) -> BTreeMap<String, f64> {
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for (s, n) in stacks {
        let names: Vec<&str> = s
            .split(';')
            .map(|f| f.split(" (").next().unwrap_or(f))
            .collect();
        *by.entry(names.join(";")).or_default() += n;
    }
    by.into_iter()
        .map(|(s, n)| (s, n as f64 / total.max(1) as f64))
        .filter(|(_, share)| *share >= 0.02)
        .collect()
}

/// Every frame (function and line) seen in stacks holding at least 2%.
fn frames(stacks: &[(String, u64)]) -> BTreeSet<String> {
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    stacks
        .iter()
        .filter(|(_, n)| *n as f64 >= 0.02 * total as f64)
        .flat_map(|(s, _)| s.split(';').map(str::to_string))
        .collect()
}

/// Both engines record the same running fixture at once; the functions,
/// the frames and the shares agree.
#[test]
fn same_stacks_as_the_ptrace_engine() {
    for_each_interpreter(
        "bpf_same_stacks",
        |_| true,
        |interp| {
            let f = Fixture::spawn(interp, "bpf_work.py", &[]);
            let dir = tempfile::tempdir().unwrap();
            let pid = f.pid.to_string();
            let run = |engine: &str| {
                let path = dir.path().join(format!("{engine}.txt"));
                let args: Vec<String> = [
                    "--engine", engine, "-f", "raw", "-r", "1000", "-d", "3", "-o",
                ]
                .iter()
                .map(|s| s.to_string())
                .chain([path.display().to_string(), "--pid".into(), pid.clone()])
                .collect();
                (args, path)
            };
            let (bpf_args, bpf_path) = run("bpf");
            let (pt_args, pt_path) = run("ptrace");
            let (bpf, pt) = std::thread::scope(|s| {
                let b = s.spawn(|| {
                    let a: Vec<&str> = bpf_args.iter().map(String::as_str).collect();
                    record(&a, &[])
                });
                let p = record(&pt_args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
                (b.join().unwrap(), p)
            });
            bpf.assert_success();
            pt.assert_success();
            let read = |p: &std::path::Path| common_output::raw_stacks(&std::fs::read(p).unwrap());
            let (b, p) = (read(&bpf_path), read(&pt_path));
            let total: u64 = b.iter().map(|(_, n)| n).sum();
            assert!(total >= 300, "only {total} bpf samples\n{}", bpf.describe());
            let (bs, ps) = (function_shares(&b), function_shares(&p));
            let keys = |m: &BTreeMap<String, f64>| m.keys().cloned().collect::<BTreeSet<_>>();
            // A stack near the 2% cut can fall either side of it.
            let big = |m: &BTreeMap<String, f64>| {
                m.iter()
                    .filter(|(_, v)| **v >= 0.06)
                    .map(|(k, _)| k.clone())
                    .collect::<BTreeSet<_>>()
            };
            assert!(
                big(&bs).is_subset(&keys(&ps)) && big(&ps).is_subset(&keys(&bs)),
                "functions differ:\nbpf {bs:#?}\nptrace {ps:#?}"
            );
            for (k, v) in &bs {
                let other = ps.get(k).copied().unwrap_or(0.0);
                assert!(
                    (v - other).abs() <= 0.06,
                    "{k}: bpf {v:.3}, ptrace {other:.3}\nbpf {bs:#?}\nptrace {ps:#?}"
                );
            }
            let hot = |m: &BTreeMap<String, f64>| {
                m.iter()
                    .filter(|(k, _)| k.contains("hot_function"))
                    .map(|(_, v)| v)
                    .sum::<f64>()
            };
            assert!(
                (hot(&bs) - hot(&ps)).abs() <= 0.05,
                "hot_function: bpf {:.3}, ptrace {:.3}",
                hot(&bs),
                hot(&ps)
            );
            let (bf, pf) = (frames(&b), frames(&p));
            let hot_frames = |s: &BTreeSet<String>| {
                s.iter()
                    .filter(|f| f.starts_with("hot_function") || f.starts_with("cold_function"))
                    .cloned()
                    .collect::<BTreeSet<_>>()
            };
            assert_eq!(
                hot_frames(&bf),
                hot_frames(&pf),
                "the callers' lines differ"
            );
        },
    );
}

/// A kernel without perf_event programs (simulated): one clear line, and no
/// profile; the ptrace engine, asked, still works.
#[test]
fn refuses_clearly_without_the_kernel_feature_or_privilege() {
    let interp = common::pyenv((3, 12));
    let f = Fixture::spawn(interp, "bpf_work.py", &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.txt");
    let pid = f.pid.to_string();
    let args = [
        "--engine",
        "bpf",
        "-f",
        "raw",
        "-d",
        "1",
        "-o",
        out.to_str().unwrap(),
        "--pid",
        &pid,
    ];
    let r = record(&args, &[("PYINSPECT_BPF_UNAVAILABLE", "1")]);
    let line = assert_one_clean_error_line(&r);
    assert!(
        line.contains("bpf engine cannot be used") && line.contains("perf_event"),
        "{line}"
    );
    assert!(!out.exists(), "a profile was written");

    // Options the engine does not take yet.
    for extra in [
        &["--native"][..],
        &["--idle"],
        &["--mode", "offcpu"],
        &["-s"],
    ] {
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        let line = assert_one_clean_error_line(&record(&a, &[]));
        assert!(line.contains("does not take"), "{extra:?}: {line}");
    }

    // Not root, no capabilities: refused before anything is loaded.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        BIN,
        "record",
    ])
    .args(args);
    let r = common::run_command(c, Duration::from_secs(60));
    let line = assert_one_clean_error_line(&r);
    assert!(line.contains("CAP_BPF"), "{line}");

    // top does not take it yet: said, not ignored.
    let mut c = Command::new(BIN);
    c.args(["top", "--engine", "bpf", "--pid", &pid]);
    let line = assert_one_clean_error_line(&common::run_command(c, Duration::from_secs(60)));
    assert!(line.contains("bpf engine cannot be used"), "{line}");
    eprintln!("bpf refusals: covered {}", interp.label);
}
