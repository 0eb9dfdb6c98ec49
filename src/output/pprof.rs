//! pprof: a gzipped `perftools.profiles.Profile` message
//! (github.com/google/pprof/blob/main/proto/profile.proto), read by
//! `go tool pprof`, Pyroscope and Grafana.
//!
//! The few message types needed are encoded by hand: a varint and
//! length-delimited writer is all protobuf's wire format asks for here, and
//! it spares a code generator and its dependencies.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::Profile;

/// Protobuf wire format, written into a byte buffer.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn tag(&mut self, field: u64, wire_type: u64) {
        self.varint(field << 3 | wire_type);
    }

    /// A varint field (uint64, int64 of non-negative values); zero is the
    /// default and is left out, as protobuf encoders do.
    fn uint(&mut self, field: u64, v: u64) {
        if v != 0 {
            self.tag(field, 0);
            self.varint(v);
        }
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.tag(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u64, build: impl FnOnce(&mut Pb)) {
        let mut m = Pb::default();
        build(&mut m);
        self.bytes(field, &m.0);
    }

    fn packed(&mut self, field: u64, values: impl IntoIterator<Item = u64>) {
        let mut m = Pb::default();
        for v in values {
            m.varint(v);
        }
        if !m.0.is_empty() {
            self.bytes(field, &m.0);
        }
    }
}

/// pprof's string table: index 0 must be "".
struct Strings {
    ids: HashMap<String, u64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            ids: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.list.len() as u64;
        self.ids.insert(s.to_string(), id);
        self.list.push(s.to_string());
        id
    }
}

// Field numbers from profile.proto.
mod field {
    pub(crate) const SAMPLE_TYPE: u64 = 1;
    pub(crate) const SAMPLE: u64 = 2;
    pub(crate) const LOCATION: u64 = 4;
    pub(crate) const FUNCTION: u64 = 5;
    pub(crate) const STRING_TABLE: u64 = 6;
    pub(crate) const TIME_NANOS: u64 = 9;
    pub(crate) const DURATION_NANOS: u64 = 10;
    pub(crate) const PERIOD_TYPE: u64 = 11;
    pub(crate) const PERIOD: u64 = 12;
    pub(crate) const COMMENT: u64 = 13;
    pub(crate) const DEFAULT_SAMPLE_TYPE: u64 = 14;
    // ValueType
    pub(crate) const VT_TYPE: u64 = 1;
    pub(crate) const VT_UNIT: u64 = 2;
    // Sample
    pub(crate) const S_LOCATION_ID: u64 = 1;
    pub(crate) const S_VALUE: u64 = 2;
    pub(crate) const S_LABEL: u64 = 3;
    // Label
    pub(crate) const L_KEY: u64 = 1;
    pub(crate) const L_STR: u64 = 2;
    pub(crate) const L_NUM: u64 = 3;
    // Location
    pub(crate) const LOC_ID: u64 = 1;
    pub(crate) const LOC_LINE: u64 = 4;
    // Line
    pub(crate) const LINE_FUNCTION_ID: u64 = 1;
    pub(crate) const LINE_LINE: u64 = 2;
    // Function
    pub(crate) const F_ID: u64 = 1;
    pub(crate) const F_NAME: u64 = 2;
    pub(crate) const F_SYSTEM_NAME: u64 = 3;
    pub(crate) const F_FILENAME: u64 = 4;
}

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> io::Result<()> {
    let body = encode(p, title);
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&body)?;
    gz.finish()?;
    Ok(())
}

fn encode(p: &Profile, title: &str) -> Vec<u8> {
    let mut s = Strings::new();
    let mut pb = Pb::default();

    let value_type = |pb: &mut Pb, s: &mut Strings, field: u64, ty: &str, unit: &str| {
        let (ty, unit) = (s.id(ty), s.id(unit));
        pb.message(field, |m| {
            m.uint(field::VT_TYPE, ty);
            m.uint(field::VT_UNIT, unit);
        });
    };
    value_type(&mut pb, &mut s, field::SAMPLE_TYPE, "samples", "count");
    value_type(&mut pb, &mut s, field::SAMPLE_TYPE, "wall", "nanoseconds");
    value_type(&mut pb, &mut s, field::PERIOD_TYPE, "wall", "nanoseconds");

    // One sample per (stack, thread), labelled with the thread and process;
    // sorted so that the same profile always encodes the same way.
    let mut keys: Vec<_> = p.totals.keys().copied().collect();
    keys.sort_unstable();
    let (k_thread, k_thread_id, k_pid) = (s.id("thread"), s.id("thread_id"), s.id("pid"));
    let thread_names: Vec<u64> = p
        .threads
        .iter()
        .map(|t| match t.name {
            Some(n) => s.id(p.strings.get(n)),
            None => s.id(&format!("thread {}", t.display_id())),
        })
        .collect();
    for (stack, t) in keys {
        let totals = p.totals[&(stack, t)];
        let thread = &p.threads[t as usize];
        pb.message(field::SAMPLE, |m| {
            // Leaf first; location ids are frame ids + 1 (0 is invalid).
            let frames = p.stacks.get(stack);
            m.packed(
                field::S_LOCATION_ID,
                frames.iter().rev().map(|&f| u64::from(f) + 1),
            );
            m.packed(field::S_VALUE, [totals.count, totals.ns]);
            m.message(field::S_LABEL, |l| {
                l.uint(field::L_KEY, k_thread);
                l.uint(field::L_STR, thread_names[t as usize]);
            });
            m.message(field::S_LABEL, |l| {
                l.uint(field::L_KEY, k_thread_id);
                l.uint(field::L_NUM, thread.os_tid.map_or(thread.ident, u64::from));
            });
            m.message(field::S_LABEL, |l| {
                l.uint(field::L_KEY, k_pid);
                l.uint(field::L_NUM, thread.pid as u64);
            });
        });
    }

    // A function per distinct (name, file); a location per frame.
    let mut functions: HashMap<(u32, Option<u32>), u64> = HashMap::new();
    for (i, frame) in p.frames.iter().enumerate() {
        let next_id = functions.len() as u64 + 1;
        let function = *functions
            .entry((frame.function, frame.file))
            .or_insert_with(|| {
                let name = s.id(p.strings.get(frame.function));
                let file = frame.file.map_or(0, |f| s.id(p.strings.get(f)));
                pb.message(field::FUNCTION, |m| {
                    m.uint(field::F_ID, next_id);
                    m.uint(field::F_NAME, name);
                    m.uint(field::F_SYSTEM_NAME, name);
                    m.uint(field::F_FILENAME, file);
                });
                next_id
            });
        pb.message(field::LOCATION, |m| {
            m.uint(field::LOC_ID, i as u64 + 1);
            m.message(field::LOC_LINE, |l| {
                l.uint(field::LINE_FUNCTION_ID, function);
                l.uint(field::LINE_LINE, u64::from(frame.line));
            });
        });
    }

    let started = p
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0));
    pb.uint(field::TIME_NANOS, started);
    pb.uint(field::DURATION_NANOS, p.end_ns);
    if p.opts.rate.is_finite() && p.opts.rate > 0.0 {
        pb.uint(field::PERIOD, (1e9 / p.opts.rate).round() as u64);
    }
    let comment = s.id(title);
    pb.packed(field::COMMENT, [comment]);
    let wall = s.id("wall");
    pb.uint(field::DEFAULT_SAMPLE_TYPE, wall);

    for string in &s.list {
        pb.bytes(field::STRING_TABLE, string.as_bytes());
    }
    pb.0
}
