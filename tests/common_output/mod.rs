//! Readers for the profile formats, shared by the output and record tests:
//! each checks the format's shape and returns what the tests compare.
// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;

/// The pprof tests' view of the crate's own protobuf reader
/// (`pyinspect::output::wire`): a malformed file fails the test.
pub mod pb {
    use pyinspect::output::wire;

    pub fn varints(b: &[u8], number: u64) -> Vec<u64> {
        wire::ints(b, number).expect("a well-formed protobuf message")
    }

    pub fn one(b: &[u8], number: u64) -> u64 {
        wire::int(b, number).expect("a well-formed protobuf message")
    }

    pub fn messages(b: &[u8], number: u64) -> Vec<&[u8]> {
        wire::messages(b, number).expect("a well-formed protobuf message")
    }
}

/// Collapsed stacks (`a;b;c count` lines) as (stack, count).
pub fn raw_stacks(bytes: &[u8]) -> Vec<(String, u64)> {
    let text = std::str::from_utf8(bytes).expect("collapsed stacks are UTF-8");
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("`stack count` line");
            (stack.to_string(), count.parse().expect("a count"))
        })
        .collect()
}

/// The SVG parses as XML; returns all its text joined by newlines.
pub fn svg_text(bytes: &[u8]) -> String {
    let svg = std::str::from_utf8(bytes).expect("the SVG is UTF-8");
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(svg, opts).expect("the SVG is XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    texts.join("\n")
}

/// speedscope's schema shape; returns the frame names and the number of
/// non-empty samples.
pub fn speedscope(bytes: &[u8]) -> (Vec<String>, usize) {
    let v: Value = serde_json::from_slice(bytes).expect("speedscope is JSON");
    assert_eq!(
        v["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = v["shared"]["frames"].as_array().expect("shared.frames");
    let names: Vec<String> = frames
        .iter()
        .map(|f| f["name"].as_str().expect("frame name").to_string())
        .collect();
    let mut busy = 0;
    for p in v["profiles"].as_array().expect("profiles") {
        assert_eq!(p["type"], "sampled");
        let samples = p["samples"].as_array().expect("samples");
        let weights = p["weights"].as_array().expect("weights");
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            let s = s.as_array().expect("a sample is a list");
            for idx in s {
                assert!((idx.as_u64().expect("frame index") as usize) < frames.len());
            }
            busy += usize::from(!s.is_empty());
        }
        for w in weights {
            assert!(w.as_f64().expect("weight") >= 0.0);
        }
    }
    (names, busy)
}

/// Chrome trace events: B/E balanced per track, time never going back;
/// returns the slice names.
pub fn chrome_trace(bytes: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(bytes).expect("Chrome trace is JSON");
    let mut tracks: HashMap<(i64, i64), (Vec<String>, f64)> = HashMap::new();
    let mut names = Vec::new();
    for e in v["traceEvents"].as_array().expect("traceEvents") {
        let key = (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap());
        let name = e["name"].as_str().unwrap().to_string();
        match e["ph"].as_str().unwrap() {
            "M" => {}
            ph @ ("B" | "E") => {
                let ts = e["ts"].as_f64().unwrap();
                let t = tracks.entry(key).or_insert((Vec::new(), 0.0));
                assert!(ts >= t.1, "ts goes back on {key:?}");
                t.1 = ts;
                if ph == "B" {
                    t.0.push(name.clone());
                    names.push(name);
                } else {
                    assert_eq!(t.0.pop(), Some(name), "E without its B");
                }
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    for (key, (open, _)) in tracks {
        assert!(open.is_empty(), "{key:?} leaves {open:?} open");
    }
    names
}

/// A gzipped pprof profile: returns (function names, total sample count).
pub fn pprof(gz: &[u8]) -> (Vec<String>, u64) {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("pprof is gzip");
    let strings: Vec<String> = pb::messages(&raw, 6)
        .iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(strings[0], "");
    let functions = pb::messages(&raw, 5)
        .iter()
        .map(|m| strings[pb::one(m, 2) as usize].clone())
        .collect();
    let count = pb::messages(&raw, 2)
        .iter()
        .map(|s| pb::varints(s, 2)[0])
        .sum();
    (functions, count)
}

/// What a Firefox Profiler (processed format) file holds, after checking its
/// shape the way the profiler reads it: every table's columns as long as its
/// `length`, every index in range, times not going back.
pub struct Gecko {
    pub threads: Vec<String>,
    /// Sample weight per thread name.
    pub weights: HashMap<String, u64>,
    /// Function names, all threads together.
    pub functions: Vec<String>,
    /// Category names by index, and for each thread the category names of
    /// its samples' leaf stacks with their weights.
    pub categories: Vec<String>,
    pub leaf_categories: HashMap<String, u64>,
    /// Library names that native functions point to.
    pub libraries: Vec<String>,
    pub v: Value,
}

fn table<'a>(v: &'a Value, name: &str, columns: &[&str]) -> (usize, Vec<&'a Vec<Value>>) {
    let t = &v[name];
    let len = t["length"]
        .as_u64()
        .unwrap_or_else(|| panic!("{name}.length"));
    let cols = columns
        .iter()
        .map(|c| {
            let col = t[*c]
                .as_array()
                .unwrap_or_else(|| panic!("{name}.{c} is a column"));
            assert_eq!(
                col.len() as u64,
                len,
                "{name}.{c} has {name}.length entries"
            );
            col
        })
        .collect();
    (len as usize, cols)
}

fn index_in(v: &Value, len: usize, what: &str) -> Option<usize> {
    if v.is_null() {
        return None;
    }
    let i = v
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: {v} is an index")) as usize;
    assert!(i < len, "{what}: {i} out of {len}");
    Some(i)
}

// Column tables are read row by row across several columns.
#[allow(clippy::needless_range_loop)]
pub fn gecko(bytes: &[u8]) -> Gecko {
    let v: Value = serde_json::from_slice(bytes).expect("a gecko profile is JSON");
    let meta = &v["meta"];
    assert!(meta["preprocessedProfileVersion"].as_u64().unwrap() >= 47);
    assert!(meta["interval"].as_f64().unwrap() > 0.0);
    assert!(
        meta["startTime"].as_f64().unwrap() > 1.0e12,
        "ms since the epoch"
    );
    let categories: Vec<String> = meta["categories"]
        .as_array()
        .expect("meta.categories")
        .iter()
        .map(|c| {
            assert!(c["color"].is_string());
            assert!(c["subcategories"].as_array().is_some_and(|s| !s.is_empty()));
            c["name"].as_str().unwrap().to_string()
        })
        .collect();
    let libs = v["libs"].as_array().expect("libs");
    for l in libs {
        for k in ["name", "path", "debugName", "debugPath", "breakpadId"] {
            assert!(l[k].is_string(), "libs[].{k}");
        }
    }
    let strings: Vec<&str> = v["shared"]["stringArray"]
        .as_array()
        .expect("shared.stringArray")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let mut out = Gecko {
        threads: Vec::new(),
        weights: HashMap::new(),
        functions: Vec::new(),
        categories: categories.clone(),
        leaf_categories: HashMap::new(),
        libraries: Vec::new(),
        v: Value::Null,
    };
    for t in v["threads"].as_array().expect("threads") {
        let name = t["name"].as_str().expect("thread name").to_string();
        assert!(t["pid"].is_string(), "pid is a string");
        assert!(t["tid"].is_number());
        let (nres, res) = table(t, "resourceTable", &["lib", "name", "type"]);
        for i in 0..nres {
            index_in(&res[0][i], libs.len(), "resourceTable.lib");
            index_in(&res[1][i], strings.len(), "resourceTable.name");
        }
        let (nfunc, func) = table(
            t,
            "funcTable",
            &[
                "name",
                "isJS",
                "relevantForJS",
                "resource",
                "fileName",
                "lineNumber",
            ],
        );
        for i in 0..nfunc {
            let n = index_in(&func[0][i], strings.len(), "funcTable.name").unwrap();
            out.functions.push(strings[n].to_string());
            index_in(&func[4][i], strings.len(), "funcTable.fileName");
            let r = func[3][i].as_i64().expect("funcTable.resource");
            if r >= 0 {
                assert!((r as usize) < nres);
                let lib = res[0][r as usize].as_u64().unwrap() as usize;
                out.libraries
                    .push(libs[lib]["name"].as_str().unwrap().to_string());
            }
        }
        let (nframe, frame) = table(
            t,
            "frameTable",
            &[
                "address",
                "inlineDepth",
                "category",
                "subcategory",
                "func",
                "line",
            ],
        );
        for i in 0..nframe {
            index_in(&frame[4][i], nfunc, "frameTable.func").unwrap();
            index_in(&frame[2][i], categories.len(), "frameTable.category");
        }
        let (nstack, stack) = table(t, "stackTable", &["frame", "prefix", "category"]);
        for i in 0..nstack {
            index_in(&stack[0][i], nframe, "stackTable.frame").unwrap();
            if let Some(p) = index_in(&stack[1][i], nstack, "stackTable.prefix") {
                assert!(p < i, "a prefix comes before its stack");
            }
        }
        let (nsamples, samples) = table(t, "samples", &["stack", "time", "weight"]);
        assert_eq!(t["samples"]["weightType"], "samples");
        let mut last = f64::MIN;
        let mut total = 0;
        for i in 0..nsamples {
            let time = samples[1][i].as_f64().expect("samples.time");
            assert!(time >= last, "sample times never go back");
            last = time;
            let w = samples[2][i].as_u64().expect("samples.weight");
            total += w;
            if let Some(s) = index_in(&samples[0][i], nstack, "samples.stack") {
                let c = stack[2][s].as_u64().unwrap() as usize;
                *out.leaf_categories
                    .entry(categories[c].clone())
                    .or_default() += w;
            }
        }
        table(
            t,
            "markers",
            &["data", "name", "startTime", "endTime", "phase", "category"],
        );
        out.weights.insert(name.clone(), total);
        out.threads.push(name);
    }
    out.v = v;
    out
}

/// The data an HTML profile carries, after checking the page is whole: one
/// document, no external script, style or link, the data element parses.
pub fn html_data(bytes: &[u8]) -> Value {
    let html = std::str::from_utf8(bytes).expect("the page is UTF-8");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    let lower = html.to_ascii_lowercase();
    for external in [
        "<script src",
        "<link",
        "http://",
        "https://",
        "@import",
        "url(",
    ] {
        assert!(
            !lower.contains(external),
            "the page refers to something outside: {external}"
        );
    }
    let open = "<script type=\"application/json\" id=\"profile-data\">";
    let start = html.find(open).expect("the data element") + open.len();
    let end = start
        + html[start..]
            .find("</script>")
            .expect("the data element ends");
    let v: Value = serde_json::from_str(&html[start..end]).expect("the data is JSON");
    let frames = v["frames"].as_array().expect("frames").len();
    let stacks = v["stacks"].as_array().expect("stacks");
    for s in stacks {
        for f in s.as_array().unwrap() {
            assert!((f.as_u64().unwrap() as usize) < frames);
        }
    }
    let threads = v["threads"].as_array().expect("threads").len();
    for s in v["samples"].as_array().expect("samples") {
        let s = s.as_array().unwrap();
        assert!((s[0].as_u64().unwrap() as usize) < stacks.len());
        assert!((s[1].as_u64().unwrap() as usize) < threads);
        assert!(s[2].as_u64().unwrap() > 0);
    }
    v
}

/// A line heatmap page: (file, line) → (own, total) sample counts of every
/// sampled line, after checking the page is whole and self-contained.
pub fn heatmap(bytes: &[u8]) -> HashMap<(String, u32), (u64, u64)> {
    let html = std::str::from_utf8(bytes).expect("the page is UTF-8");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert!(!html.contains("<script"), "a static page");
    let attr = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
        let end = start + tag[start..].find('"')?;
        Some(
            tag[start..end]
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&"),
        )
    };
    let mut out = HashMap::new();
    let mut file = None;
    for tag in html.split('<').skip(1) {
        if tag.starts_with("section ") {
            file = attr(tag, "data-file");
        } else if tag.starts_with("tr class=\"hit\"") {
            let f = file.clone().expect("a line row inside a file section");
            let line: u32 = attr(tag, "data-line").unwrap().parse().unwrap();
            let own: u64 = attr(tag, "data-own").unwrap().parse().unwrap();
            let total: u64 = attr(tag, "data-total").unwrap().parse().unwrap();
            assert!(own <= total, "{f}:{line} own {own} > total {total}");
            assert!(
                out.insert((f, line), (own, total)).is_none(),
                "one row a line"
            );
        }
    }
    out
}
