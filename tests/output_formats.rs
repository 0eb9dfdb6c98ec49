//! Every `record` format written from a synthetic profile and read back.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::time::Duration;

use pyinspect::output::{OutputError, OutputFormat, Profile, ProfileOptions};
use pyinspect::stack::{Frame, ThreadStack, ThreadStatus};
use serde_json::Value;

mod common_output;
use common_output::pb;

const TICK: Duration = Duration::from_millis(10);
const TICKS: u32 = 100;
const TITLE: &str = "python app.py --größe <10> & more";

fn py(function: &str, file: &str, line: u32) -> Frame {
    Frame::python(function, file, line)
}

fn thread(ident: u64, os_tid: Option<u32>, name: Option<&str>, frames: Vec<Frame>) -> ThreadStack {
    ThreadStack {
        thread_id: ident,
        os_thread_id: os_tid,
        name: name.map(String::from),
        interpreter: 0,
        status: ThreadStatus::Active,
        holds_gil: false,
        frames,
        truncated: None,
        native_entry: None,
        name_source: None,
        wait: None,
        asyncio: None,
    }
}

/// Innermost first, as the reader hands them over.
fn main_stack(tick: u32) -> Vec<Frame> {
    let leaf = if tick.is_multiple_of(4) {
        py("io_wait", "/usr/lib/python3.11/selectors.py", 468)
    } else {
        py("compute_ünïcode", "/srv/app/app.py", 12)
    };
    vec![
        leaf,
        py("run", "/srv/app/app.py", 30),
        py("<module>", "/srv/app/app.py", 40),
    ]
}

fn worker_stack() -> Vec<Frame> {
    vec![
        py("处理", "/v/lib/python3.12/site-packages/pkg;odd/work.py", 7),
        py("run", "/usr/lib/python3.11/threading.py", 1010),
        py("_bootstrap", "/usr/lib/python3.11/threading.py", 1030),
    ]
}

struct Fixture {
    profile: Profile,
    /// (pid, thread ident) → samples added, and their summed weight.
    added: HashMap<(i32, u64), (u64, Duration)>,
}

/// Two processes: pid 100 with a main thread sampled every tick and a named
/// worker that is idle (not sampled) for ticks 40..60; pid 200 with an
/// anonymous thread without an OS thread id, sampled every other tick.
fn fixture(timeline: bool) -> Fixture {
    let mut profile = Profile::new(ProfileOptions {
        threads: true,
        nolineno: false,
        full_filenames: false,
        subprocesses: true,
        rate: 100.0,
        timeline,
    });
    let mut added: HashMap<(i32, u64), (u64, Duration)> = HashMap::new();
    let mut add = |profile: &mut Profile, pid: i32, cmd: &str, t: &ThreadStack, tick: u32| {
        profile.add(pid, cmd, t, TICK * tick, TICK);
        let e = added.entry((pid, t.thread_id)).or_default();
        e.0 += 1;
        e.1 += TICK;
    };
    for tick in 0..TICKS {
        let main = thread(
            0x7f00_0000_1000,
            Some(100),
            Some("MainThread"),
            main_stack(tick),
        );
        add(&mut profile, 100, TITLE, &main, tick);
        if !(40..60).contains(&tick) {
            let worker = thread(
                0x7f00_0000_2000,
                Some(101),
                Some("wörker-λ"),
                worker_stack(),
            );
            add(&mut profile, 100, TITLE, &worker, tick);
        }
        if tick.is_multiple_of(2) {
            let frames = vec![py("child_main", "/srv/app/child.py", 3)];
            let child = thread(0x7f00_0000_1000, None, None, frames);
            add(&mut profile, 200, "python -c 'import child'", &child, tick);
        }
    }
    Fixture { profile, added }
}

fn render(p: &Profile, format: OutputFormat) -> Vec<u8> {
    let mut out = Vec::new();
    format.write(p, &mut out, TITLE).unwrap();
    out
}

fn total_samples(f: &Fixture) -> u64 {
    f.added.values().map(|v| v.0).sum()
}

#[test]
fn extensions() {
    assert_eq!(OutputFormat::Flamegraph.extension(), "svg");
    assert_eq!(OutputFormat::Speedscope.extension(), "json");
    assert_eq!(OutputFormat::Chrometrace.extension(), "json");
    assert_eq!(OutputFormat::Raw.extension(), "txt");
    assert_eq!(OutputFormat::Pprof.extension(), "pb.gz");
    assert_eq!(OutputFormat::Gecko.extension(), "json");
    assert_eq!(OutputFormat::Html.extension(), "html");
    assert_eq!(OutputFormat::Heatmap.extension(), "heatmap.html");
}

#[test]
fn heatmap_has_own_and_total_per_line() {
    let f = fixture(false);
    let lines = common_output::heatmap(&render(&f.profile, OutputFormat::Heatmap));
    let get = |file: &str, line: u32| lines[&(file.to_string(), line)];
    // The main thread: 100 ticks, io_wait on every 4th, compute otherwise.
    assert_eq!(get("/srv/app/app.py", 12), (75, 75));
    assert_eq!(get("/usr/lib/python3.11/selectors.py", 468), (25, 25));
    assert_eq!(get("/srv/app/app.py", 30), (0, 100));
    assert_eq!(get("/srv/app/app.py", 40), (0, 100));
    // The worker (80 ticks) and the child process (50).
    assert_eq!(
        get("/v/lib/python3.12/site-packages/pkg;odd/work.py", 7),
        (80, 80)
    );
    assert_eq!(get("/srv/app/child.py", 3), (50, 50));
    assert_eq!(lines.len(), 8, "{:?}", lines.keys());
    let html = String::from_utf8(render(&f.profile, OutputFormat::Heatmap)).unwrap();
    assert!(html.contains("python app.py --größe &lt;10&gt; &amp; more"));
}

#[test]
fn gecko_has_the_firefox_profiler_shape() {
    let f = fixture(true);
    let g = common_output::gecko(&render(&f.profile, OutputFormat::Gecko));
    assert_eq!(g.v["meta"]["product"], TITLE);
    assert_eq!(g.v["meta"]["interval"], 10.0);
    // One track per thread, named as the thread is.
    assert_eq!(g.threads.len(), 3, "{:?}", g.threads);
    assert!(g.threads.contains(&"MainThread".to_string()));
    assert!(g.threads.contains(&"wörker-λ".to_string()));
    // Sample weights add up to the samples added, per thread.
    assert_eq!(g.weights["MainThread"], 100);
    assert_eq!(g.weights["wörker-λ"], 80);
    assert_eq!(g.weights.values().sum::<u64>(), total_samples(&f));
    assert!(g.functions.contains(&"compute_ünïcode".to_string()));
    assert!(g.functions.contains(&"处理".to_string()));
    // Real timestamps: the worker's samples resume after its 0.2 s gap,
    // which an empty sample marks.
    let worker = g.v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "wörker-λ")
        .unwrap();
    let times: Vec<f64> = worker["samples"]["time"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    let stacks = worker["samples"]["stack"].as_array().unwrap();
    assert_eq!(times, [0.0, 400.0, 600.0]);
    assert!(stacks[1].is_null());
    assert_eq!(worker["pid"], "100");
    assert_eq!(worker["tid"], 101);
}

#[test]
fn gecko_categories_and_native_libraries() {
    let mut p = Profile::new(ProfileOptions {
        threads: false,
        nolineno: false,
        full_filenames: false,
        subprocesses: false,
        rate: 1000.0,
        timeline: true,
    });
    let mut native = py("cblas_dgemm", "", 0);
    native.kind = pyinspect::stack::FrameKind::Native;
    native.file = None;
    native.line = None;
    native.module = Some("/usr/lib/libopenblas.so.0".into());
    let mut busy = thread(1, Some(1), None, vec![native, py("mul", "/a/m.py", 3)]);
    let ms = Duration::from_millis(1);
    for i in 0..10 {
        p.add(1, "python m.py", &busy, ms * i, ms);
    }
    busy.status = ThreadStatus::Idle;
    busy.frames = vec![py("wait", "/a/m.py", 9)];
    for i in 10..14 {
        p.add(1, "python m.py", &busy, ms * i, ms);
    }
    let g = common_output::gecko(&render(&p, OutputFormat::Gecko));
    assert_eq!(g.threads, ["MainThread"]);
    assert_eq!(g.leaf_categories["Native"], 10);
    assert_eq!(g.leaf_categories["Idle"], 4);
    assert_eq!(g.libraries, ["libopenblas.so.0"]);
    assert_eq!(g.v["libs"][0]["path"], "/usr/lib/libopenblas.so.0");
    assert!(g.categories.contains(&"Python".to_string()));
}

#[test]
fn html_is_one_self_contained_page() {
    let f = fixture(false);
    let bytes = render(&f.profile, OutputFormat::Html);
    let v = common_output::html_data(&bytes);
    let html = String::from_utf8(bytes).unwrap();
    // The title is escaped in the page and kept as it is in the data.
    assert!(html.contains("python app.py --größe &lt;10&gt; &amp; more"));
    assert_eq!(v["title"], TITLE);
    let threads: Vec<&str> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(threads.len(), 3);
    assert!(
        threads.iter().any(|t| t.contains("wörker-λ")),
        "{threads:?}"
    );
    let total: u64 = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[2].as_u64().unwrap())
        .sum();
    assert_eq!(total, total_samples(&f));
    let functions: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // Functions without their line: the top table adds a function's lines up.
    assert!(
        functions.contains(&"compute_ünïcode (app.py)"),
        "{functions:?}"
    );
    for id in ["flame", "search", "thread", "top"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
}

#[test]
fn raw_collapsed_stacks() {
    let f = fixture(false);
    assert_eq!(f.profile.samples(), total_samples(&f));
    assert_eq!(f.profile.threads_seen(), 3);
    let text = String::from_utf8(render(&f.profile, OutputFormat::Raw)).unwrap();
    let mut total = 0;
    let mut stacks = HashMap::new();
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        total += count.parse::<u64>().unwrap();
        stacks.insert(stack.to_string(), count.parse::<u64>().unwrap());
    }
    assert_eq!(total, f.profile.samples());
    let root = "process 100: \"python app.py --größe <10> & more\";thread 100 \"MainThread\"";
    assert_eq!(
        stacks[&format!("{root};<module> (app.py:40);run (app.py:30);compute_ünïcode (app.py:12)")],
        75
    );
    assert_eq!(
        stacks[&format!("{root};<module> (app.py:40);run (app.py:30);io_wait (selectors.py:468)")],
        25
    );
    // The `;` in the file name cannot split the frame.
    let worker = "process 100: \"python app.py --größe <10> & more\";thread 101 \"wörker-λ\";\
                  _bootstrap (threading.py:1030);run (threading.py:1010);处理 (pkg,odd/work.py:7)";
    assert_eq!(stacks[worker], 80);
    let child =
        "process 200: \"python -c 'import child'\";thread 0x7f0000001000;child_main (child.py:3)";
    assert_eq!(stacks[child], 50);
}

#[test]
fn flamegraph_svg_parses_and_holds_the_functions() {
    let f = fixture(false);
    let svg = String::from_utf8(render(&f.profile, OutputFormat::Flamegraph)).unwrap();
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&svg, opts).expect("the SVG is XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    let all = texts.join("\n");
    for name in [
        "compute_ünïcode (app.py:12)",
        "io_wait (selectors.py:468)",
        "<module> (app.py:40)",
        "处理 (pkg,odd/work.py:7)",
        "child_main (child.py:3)",
        "thread 101 \"wörker-λ\"",
    ] {
        assert!(all.contains(name), "{name} missing from the SVG");
    }
    // The title is the command line.
    let title = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("title"))
        .and_then(|n| n.text());
    assert_eq!(title, Some(TITLE));
}

#[test]
fn speedscope_has_the_schema_shape() {
    let f = fixture(true);
    let v: Value = serde_json::from_slice(&render(&f.profile, OutputFormat::Speedscope)).unwrap();
    assert_eq!(
        v["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    assert!(v["exporter"].as_str().unwrap().starts_with("pyinspect@"));
    assert_eq!(v["name"], TITLE);
    assert_eq!(v["activeProfileIndex"], 0);
    let frames = v["shared"]["frames"].as_array().unwrap();
    for frame in frames {
        assert!(frame["name"].is_string());
    }
    let names: HashSet<&str> = frames
        .iter()
        .map(|fr| fr["name"].as_str().unwrap())
        .collect();
    assert!(names.contains("compute_ünïcode (app.py:12)"));
    let unicode = frames
        .iter()
        .find(|fr| fr["name"] == "compute_ünïcode (app.py:12)")
        .unwrap();
    assert_eq!(unicode["file"], "/srv/app/app.py");
    assert_eq!(unicode["line"], 12);

    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 3);
    let mut by_name = HashMap::new();
    for p in profiles {
        assert_eq!(p["type"], "sampled");
        assert_eq!(p["unit"], "seconds");
        let samples = p["samples"].as_array().unwrap();
        let weights: Vec<f64> = p["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap())
            .collect();
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            for idx in s.as_array().unwrap() {
                assert!((idx.as_u64().unwrap() as usize) < frames.len());
            }
        }
        let (start, end) = (
            p["startValue"].as_f64().unwrap(),
            p["endValue"].as_f64().unwrap(),
        );
        let sum: f64 = weights.iter().sum();
        assert!((end - start - sum).abs() < 1e-6);
        // Time with a stack: what was added (gaps are empty samples).
        let busy: f64 = samples
            .iter()
            .zip(&weights)
            .filter(|(s, _)| !s.as_array().unwrap().is_empty())
            .map(|(_, w)| w)
            .sum();
        by_name.insert(
            p["name"].as_str().unwrap().to_string(),
            (busy, start, end, samples.len()),
        );
    }
    let main = by_name["Process 100 Thread 100 \"MainThread\""];
    assert!((main.0 - 1.0).abs() < 1e-6, "{main:?}");
    assert!((main.2 - 1.0).abs() < 1e-6);
    // The worker: 80 ticks busy, a 0.2 s gap, same stack throughout: two
    // runs and one empty sample.
    let worker = by_name["Process 100 Thread 101 \"wörker-λ\""];
    assert!((worker.0 - 0.8).abs() < 1e-6, "{worker:?}");
    assert!((worker.2 - worker.1 - 1.0).abs() < 1e-6);
    assert_eq!(worker.3, 3);
    let child = by_name["Process 200 Thread 0x7f0000001000"];
    assert!((child.0 - 0.5).abs() < 1e-6, "{child:?}");
    // Every busy sample's weight adds up to what the sampler reported.
    let total_busy: f64 = by_name.values().map(|v| v.0).sum();
    let added: f64 = f.added.values().map(|v| v.1.as_secs_f64()).sum();
    assert!((total_busy - added).abs() < 1e-6);
}

#[test]
fn chrome_trace_events_are_balanced() {
    let f = fixture(true);
    let v: Value = serde_json::from_slice(&render(&f.profile, OutputFormat::Chrometrace)).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut thread_names = HashMap::new();
    let mut process_names = HashMap::new();
    // (pid, tid) → (open slices, last ts)
    let mut tracks: HashMap<(i64, i64), (Vec<String>, f64)> = HashMap::new();
    let mut slices = 0;
    let mut max_ts: f64 = 0.0;
    for e in events {
        let pid = e["pid"].as_i64().unwrap();
        let tid = e["tid"].as_i64().unwrap();
        let name = e["name"].as_str().unwrap().to_string();
        match e["ph"].as_str().unwrap() {
            "M" => {
                let label = e["args"]["name"].as_str().unwrap().to_string();
                match name.as_str() {
                    "thread_name" => thread_names.insert((pid, tid), label),
                    "process_name" => process_names.insert(pid, label),
                    other => panic!("unexpected metadata {other}"),
                };
            }
            ph @ ("B" | "E") => {
                let ts = e["ts"].as_f64().unwrap();
                max_ts = max_ts.max(ts);
                let track = tracks.entry((pid, tid)).or_insert((Vec::new(), 0.0));
                assert!(ts >= track.1, "ts goes back on {pid}/{tid}");
                track.1 = ts;
                if ph == "B" {
                    track.0.push(name);
                    slices += 1;
                } else {
                    assert_eq!(track.0.pop(), Some(name), "E without its B");
                }
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    for (key, (open, _)) in &tracks {
        assert!(open.is_empty(), "{key:?} leaves {open:?} open");
        assert!(thread_names.contains_key(key), "{key:?} has no thread_name");
    }
    assert_eq!(tracks.len(), 3);
    assert_eq!(thread_names[&(100, 100)], "MainThread");
    assert_eq!(thread_names[&(100, 101)], "wörker-λ");
    assert_eq!(
        thread_names[&(200, 0x7f00_0000_1000)],
        "thread 0x7f0000001000"
    );
    assert!(process_names[&100].contains(TITLE));
    assert!(process_names[&200].contains("import child"));
    // Ends when the last sample's time ends, in microseconds.
    assert!((max_ts - 1_000_000.0).abs() < 1e-3, "{max_ts}");
    // Stack diffing: the main thread's two leaves alternate under one
    // `run`, so `run` opens once; the worker's gap closes and reopens it.
    assert!(slices < 400, "{slices}");
}

#[test]
fn pprof_decodes() {
    let f = fixture(false);
    let gz = render(&f.profile, OutputFormat::Pprof);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();

    let strings: Vec<String> = pb::messages(&raw, 6)
        .iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(strings[0], "");
    let s = |i: u64| strings[i as usize].as_str();

    let types: Vec<(&str, &str)> = pb::messages(&raw, 1)
        .iter()
        .map(|vt| (s(pb::one(vt, 1)), s(pb::one(vt, 2))))
        .collect();
    assert_eq!(types, [("samples", "count"), ("wall", "nanoseconds")]);
    let period_type = pb::messages(&raw, 11)[0];
    assert_eq!(
        (s(pb::one(period_type, 1)), s(pb::one(period_type, 2))),
        ("wall", "nanoseconds")
    );
    assert_eq!(pb::one(&raw, 12), 10_000_000);
    assert_eq!(pb::one(&raw, 10), 1_000_000_000);
    assert!(pb::one(&raw, 9) > 1_600_000_000_000_000_000);
    assert_eq!(s(pb::one(&raw, 14)), "wall");

    let functions: HashMap<u64, (String, String)> = pb::messages(&raw, 5)
        .iter()
        .map(|m| {
            (
                pb::one(m, 1),
                (s(pb::one(m, 2)).to_string(), s(pb::one(m, 4)).to_string()),
            )
        })
        .collect();
    let locations: HashMap<u64, (u64, u64)> = pb::messages(&raw, 4)
        .iter()
        .map(|m| {
            let line = pb::messages(m, 4)[0];
            (pb::one(m, 1), (pb::one(line, 1), pb::one(line, 2)))
        })
        .collect();
    let names: HashSet<&str> = functions.values().map(|(n, _)| n.as_str()).collect();
    for name in [
        "compute_ünïcode",
        "io_wait",
        "<module>",
        "处理",
        "child_main",
    ] {
        assert!(names.contains(name), "{name} missing");
    }
    assert!(functions
        .values()
        .any(|(n, file)| n == "处理" && file == "/v/lib/python3.12/site-packages/pkg;odd/work.py"));

    let (mut count, mut nanos) = (0, 0);
    let mut leaf_counts: HashMap<String, u64> = HashMap::new();
    let mut thread_labels = HashSet::new();
    for sample in pb::messages(&raw, 2) {
        let values = pb::varints(sample, 2);
        assert_eq!(values.len(), 2);
        count += values[0];
        nanos += values[1];
        let locs = pb::varints(sample, 1);
        let (function, line) = locations[&locs[0]];
        let leaf = format!("{}:{line}", functions[&function].0);
        *leaf_counts.entry(leaf).or_default() += values[0];
        // Leaf first: the root is the process frame.
        let (root, _) = locations[locs.last().unwrap()];
        assert!(functions[&root].0.starts_with("process "));
        let mut labels = HashMap::new();
        for label in pb::messages(sample, 3) {
            labels.insert(
                s(pb::one(label, 1)),
                (s(pb::one(label, 2)), pb::one(label, 3)),
            );
        }
        thread_labels.insert((labels["thread"].0, labels["thread_id"].1, labels["pid"].1));
    }
    assert_eq!(count, f.profile.samples());
    let added: Duration = f.added.values().map(|v| v.1).sum();
    assert_eq!(nanos as u128, added.as_nanos());
    assert_eq!(leaf_counts["compute_ünïcode:12"], 75);
    assert_eq!(leaf_counts["io_wait:468"], 25);
    assert_eq!(leaf_counts["处理:7"], 80);
    assert_eq!(
        thread_labels,
        HashSet::from([
            ("MainThread", 100, 100),
            ("wörker-λ", 101, 100),
            ("thread 0x7f0000001000", 0x7f00_0000_1000, 200)
        ])
    );
}

#[test]
fn timeline_formats_need_the_timeline() {
    let f = fixture(false);
    for format in [
        OutputFormat::Speedscope,
        OutputFormat::Chrometrace,
        OutputFormat::Gecko,
    ] {
        let err = format
            .write(&f.profile, &mut Vec::new(), TITLE)
            .unwrap_err();
        assert!(matches!(err, OutputError::NoTimeline(_)), "{err}");
    }
}

#[test]
fn an_empty_profile() {
    let p = Profile::new(ProfileOptions {
        threads: false,
        nolineno: false,
        full_filenames: false,
        subprocesses: false,
        rate: 100.0,
        timeline: true,
    });
    // A valid SVG that says so: a recording may end before its first sample.
    let svg = String::from_utf8(render(&p, OutputFormat::Flamegraph)).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(svg.contains("No samples"), "{svg}");
    // The page formats say so too, and the gecko profile has no thread.
    for format in [OutputFormat::Html, OutputFormat::Heatmap] {
        let page = String::from_utf8(render(&p, format)).unwrap();
        assert!(page.contains("No samples"), "{format:?}");
    }
    let g = common_output::gecko(&render(&p, OutputFormat::Gecko));
    assert!(g.threads.is_empty());
    assert!(render(&p, OutputFormat::Raw).is_empty());
    let v: Value = serde_json::from_slice(&render(&p, OutputFormat::Speedscope)).unwrap();
    assert_eq!(v["profiles"].as_array().unwrap().len(), 0);
    let v: Value = serde_json::from_slice(&render(&p, OutputFormat::Chrometrace)).unwrap();
    assert_eq!(v["traceEvents"].as_array().unwrap().len(), 0);
    let mut raw = Vec::new();
    let gz = render(&p, OutputFormat::Pprof);
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    assert!(pb::messages(&raw, 2).is_empty());
}
