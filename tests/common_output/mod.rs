//! Readers for the profile formats, shared by the output and record tests:
//! each checks the format's shape and returns what the tests compare.
// Each test crate uses its own subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::io::Read;

/// Just enough of protobuf's wire format to read a pprof profile back.
pub mod pb {
    pub enum Field<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], i: &mut usize) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[*i];
            *i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    }

    pub fn fields(b: &[u8]) -> Vec<(u64, Field<'_>)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let key = varint(b, &mut i);
            let field = match key & 7 {
                0 => Field::Varint(varint(b, &mut i)),
                2 => {
                    let len = varint(b, &mut i) as usize;
                    i += len;
                    Field::Bytes(&b[i - len..i])
                }
                w => panic!("unexpected wire type {w}"),
            };
            out.push((key >> 3, field));
        }
        out
    }

    /// A repeated varint field, packed or not.
    pub fn varints(b: &[u8], number: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for (n, f) in fields(b) {
            match f {
                Field::Varint(v) if n == number => out.push(v),
                Field::Bytes(p) if n == number => {
                    let mut i = 0;
                    while i < p.len() {
                        out.push(varint(p, &mut i));
                    }
                }
                _ => {}
            }
        }
        out
    }

    pub fn one(b: &[u8], number: u64) -> u64 {
        varints(b, number).first().copied().unwrap_or(0)
    }

    pub fn messages(b: &[u8], number: u64) -> Vec<&[u8]> {
        fields(b)
            .into_iter()
            .filter_map(|(n, f)| match f {
                Field::Bytes(p) if n == number => Some(p),
                _ => None,
            })
            .collect()
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
