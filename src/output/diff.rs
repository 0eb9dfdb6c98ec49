//! Comparing two recordings: reading them back (collapsed stacks, ours or
//! py-spy's or flamegraph.pl's, and pprof, gzipped or not), the differential
//! flame graph (inferno's differential mode) and the functions whose share
//! of the samples changed most.

use std::collections::HashMap;
use std::io::{Read, Write};

use inferno::flamegraph::{self, Direction};
use thiserror::Error;

use super::OutputError;

/// Bound on a decompressed pprof profile, so that a small hostile file
/// cannot make us allocate without limit.
const MAX_PPROF_BYTES: u64 = 1 << 30;

/// One recording: `root;…;leaf` stacks with their sample counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recording {
    pub(crate) stacks: Vec<(String, u64)>,
}

impl Recording {
    pub(crate) fn total(&self) -> u64 {
        self.stacks.iter().map(|(_, c)| *c).sum()
    }

    /// Native frames named short, as `record` names them (see
    /// `native_unwind::short_name`); stacks that become one are added up.
    pub(crate) fn shorten_names(&mut self) {
        let mut counts: HashMap<String, u64> = HashMap::with_capacity(self.stacks.len());
        let mut order = Vec::with_capacity(self.stacks.len());
        for (stack, count) in std::mem::take(&mut self.stacks) {
            let short: Vec<std::borrow::Cow<'_, str>> = stack.split(';').map(short_label).collect();
            let short = short.join(";");
            match counts.get_mut(&short) {
                Some(c) => *c = c.saturating_add(count),
                None => {
                    order.push(short.clone());
                    counts.insert(short, count);
                }
            }
        }
        self.stacks = order
            .into_iter()
            .map(|s| {
                let c = counts[&s];
                (s, c)
            })
            .collect();
    }
}

/// A frame's label with a native name made short: `name (where)` or
/// `name`, where the name is C++ or Rust (it has `::`; Python's names,
/// thread and process roots and wait leaves are left as they are).
fn short_label(label: &str) -> std::borrow::Cow<'_, str> {
    if !label.contains("::") || label.contains('"') {
        return label.into();
    }
    // The trailing ` (libfoo.so)` / ` (file.cpp:12)`, if any: the `(`
    // matching the last `)`, after a space.
    let mut split = label.len();
    if label.ends_with(')') {
        let mut depth = 0usize;
        for (i, c) in label.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        if label[..i].ends_with(' ') {
                            split = i - 1;
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let (name, place) = label.split_at(split);
    match crate::native_unwind::short_name(name) {
        std::borrow::Cow::Borrowed(n) if n.len() == name.len() => label.into(),
        short => format!("{short}{place}").into(),
    }
}

#[derive(Debug, Error)]
pub(crate) enum ReadError {
    #[error("it is empty")]
    Empty,
    #[error("line {line} is not `frame;frame;… count` (collapsed stacks): {text:?}")]
    BadLine { line: usize, text: String },
    #[error("it holds no samples")]
    NoSamples,
    #[error("it is gzip-compressed but not a pprof profile: {0}")]
    BadGzip(String),
    #[error("it is neither collapsed stacks nor a pprof profile ({0})")]
    NotAProfile(String),
}

/// Read a recording, telling the format by its content.
pub(crate) fn read_recording(bytes: &[u8]) -> Result<Recording, ReadError> {
    if bytes.is_empty() {
        return Err(ReadError::Empty);
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(MAX_PPROF_BYTES)
            .read_to_end(&mut raw)
            .map_err(|e| ReadError::BadGzip(e.to_string()))?;
        return pprof(&raw).map_err(|e| ReadError::BadGzip(e.to_string()));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => collapsed(text),
        // Not text: an uncompressed pprof profile, or nothing we know.
        Err(_) => pprof(bytes).map_err(|e| ReadError::NotAProfile(e.to_string())),
    }
}

fn collapsed(text: &str) -> Result<Recording, ReadError> {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    let mut order = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let bad = || ReadError::BadLine {
            line: i + 1,
            text: line.chars().take(80).collect(),
        };
        let (stack, count) = line.rsplit_once(' ').ok_or_else(bad)?;
        let stack = stack.trim_end();
        // flamegraph.pl's collapse scripts may write fractional counts.
        let count: u64 = match count.parse::<u64>() {
            Ok(c) => c,
            Err(_) => match count.parse::<f64>() {
                Ok(f) if f.is_finite() && f >= 0.0 => f.round() as u64,
                _ => return Err(bad()),
            },
        };
        if stack.is_empty() {
            return Err(bad());
        }
        let e = counts.entry(stack).or_insert_with(|| {
            order.push(stack);
            0
        });
        *e = e.saturating_add(count);
    }
    let stacks: Vec<(String, u64)> = order
        .into_iter()
        .map(|s| (s.to_string(), counts[s]))
        .filter(|(_, c)| *c > 0)
        .collect();
    if stacks.is_empty() {
        return Err(ReadError::NoSamples);
    }
    Ok(Recording { stacks })
}

/// protobuf's wire format, read defensively: every length is checked. The
/// one reader of it: the tests read the pprof files back with it too.
pub mod wire {
    pub(crate) enum Value<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*i).ok_or("a varint runs past the end")?;
            *i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
        }
        Err("a varint is too long".into())
    }

    pub(crate) fn fields(b: &[u8]) -> Result<Vec<(u64, Value<'_>)>, String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let key = varint(b, &mut i)?;
            let v = match key & 7 {
                0 => Value::Varint(varint(b, &mut i)?),
                1 => {
                    i = i
                        .checked_add(8)
                        .filter(|e| *e <= b.len())
                        .ok_or("truncated")?;
                    continue;
                }
                2 => {
                    let len = varint(b, &mut i)?;
                    let end = usize::try_from(len)
                        .ok()
                        .and_then(|l| i.checked_add(l))
                        .filter(|e| *e <= b.len())
                        .ok_or("a field runs past the end")?;
                    let v = Value::Bytes(&b[i..end]);
                    i = end;
                    v
                }
                5 => {
                    i = i
                        .checked_add(4)
                        .filter(|e| *e <= b.len())
                        .ok_or("truncated")?;
                    continue;
                }
                w => return Err(format!("unknown wire type {w}")),
            };
            out.push((key >> 3, v));
        }
        Ok(out)
    }

    /// A repeated integer field, packed or not.
    pub fn ints(b: &[u8], number: u64) -> Result<Vec<u64>, String> {
        let mut out = Vec::new();
        for (n, v) in fields(b)? {
            if n != number {
                continue;
            }
            match v {
                Value::Varint(x) => out.push(x),
                Value::Bytes(p) => {
                    let mut i = 0;
                    while i < p.len() {
                        out.push(varint(p, &mut i)?);
                    }
                }
            }
        }
        Ok(out)
    }

    /// A singular integer field (the last one, as protobuf reads it; 0 when absent).
    pub fn int(b: &[u8], number: u64) -> Result<u64, String> {
        Ok(ints(b, number)?.last().copied().unwrap_or(0))
    }

    /// The embedded messages (or strings) of a repeated field.
    pub fn messages(b: &[u8], number: u64) -> Result<Vec<&[u8]>, String> {
        Ok(fields(b)?
            .into_iter()
            .filter_map(|(n, v)| match v {
                Value::Bytes(m) if n == number => Some(m),
                _ => None,
            })
            .collect())
    }
}

/// A pprof `Profile`: each sample's stack (locations, leaf first; a
/// location's lines innermost first) with its first value.
fn pprof(raw: &[u8]) -> Result<Recording, String> {
    use wire::Value;
    let mut strings: Vec<String> = Vec::new();
    let mut functions: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut locations: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    let mut samples: Vec<&[u8]> = Vec::new();
    for (n, v) in wire::fields(raw)? {
        let Value::Bytes(m) = v else { continue };
        match n {
            2 => samples.push(m),
            4 => {
                let id = wire::int(m, 1)?;
                let mut lines = Vec::new();
                for (ln, lv) in wire::fields(m)? {
                    if let (4, Value::Bytes(l)) = (ln, lv) {
                        lines.push((wire::int(l, 1)?, wire::int(l, 2)?));
                    }
                }
                locations.insert(id, lines);
            }
            5 => {
                let id = wire::int(m, 1)?;
                functions.insert(id, (wire::int(m, 2)?, wire::int(m, 4)?));
            }
            6 => strings.push(String::from_utf8_lossy(m).into_owned()),
            _ => {}
        }
    }
    if strings.first().is_some_and(|s| !s.is_empty()) || strings.is_empty() {
        return Err("no pprof string table".into());
    }
    let string = |i: u64| strings.get(i as usize).map(String::as_str).unwrap_or("");
    let mut rec: HashMap<String, u64> = HashMap::new();
    for s in samples {
        let value = wire::ints(s, 2)?.first().copied().unwrap_or(0);
        if value == 0 {
            continue;
        }
        let mut frames: Vec<String> = Vec::new();
        for loc in wire::ints(s, 1)? {
            let lines = locations
                .get(&loc)
                .ok_or_else(|| format!("a sample names location {loc}, which is not there"))?;
            for &(function, line) in lines {
                let (name, file) = functions.get(&function).copied().unwrap_or((0, 0));
                let name = match string(name) {
                    "" => "?",
                    n => n,
                };
                let label = match (string(file), line) {
                    ("", _) => name.to_string(),
                    (f, 0) => format!("{name} ({f})"),
                    (f, l) => format!("{name} ({f}:{l})"),
                };
                frames.push(label.replace(';', ","));
            }
        }
        if frames.is_empty() {
            continue;
        }
        frames.reverse();
        *rec.entry(frames.join(";")).or_default() += value;
    }
    if rec.is_empty() {
        return Err("no samples".into());
    }
    let mut stacks: Vec<(String, u64)> = rec.into_iter().collect();
    stacks.sort();
    Ok(Recording { stacks })
}

fn folded(r: &Recording) -> Vec<u8> {
    let mut out = Vec::new();
    for (s, c) in &r.stacks {
        out.extend_from_slice(s.as_bytes());
        out.push(b' ');
        out.extend_from_slice(c.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// The differential flame graph: the after profile's shape (with `negate`,
/// the before profile's), frames red where their share grew and blue where
/// it shrank, the before counts scaled to the after total.
pub(crate) fn write_differential(
    before: &Recording,
    after: &Recording,
    negate: bool,
    title: &str,
    out: &mut dyn Write,
) -> Result<(), OutputError> {
    let (first, second) = if negate {
        (after, before)
    } else {
        (before, after)
    };
    let mut lines = Vec::new();
    let opts = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_readers(opts, &folded(first)[..], &folded(second)[..], &mut lines)?;
    let text = String::from_utf8_lossy(&lines);
    let mut sorted: Vec<&str> = text.lines().collect();
    sorted.sort_unstable();
    let mut o = flamegraph::Options::default();
    o.title = title.to_string();
    o.subtitle = Some(if negate {
        "before's shape; red: grew after, blue: shrank after (normalised by total samples)".into()
    } else {
        "after's shape; red: grew, blue: shrank (normalised by total samples)".into()
    });
    o.direction = Direction::Inverted;
    o.count_name = "samples".to_string();
    o.min_width = 0.1;
    // The colour means the change from before to after in both views.
    o.negate_differentials = negate;
    let mut w = std::io::BufWriter::new(out);
    flamegraph::from_lines(&mut o, sorted.iter().copied(), &mut w)?;
    w.flush()?;
    Ok(())
}

/// One function's share of the samples before and after, own (as the leaf)
/// and total (anywhere on the stack).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShareChange {
    pub(crate) function: String,
    pub(crate) own_before: f64,
    pub(crate) own_after: f64,
    pub(crate) total_before: f64,
    pub(crate) total_after: f64,
}

impl ShareChange {
    pub(crate) fn own_delta(&self) -> f64 {
        self.own_after - self.own_before
    }
    pub(crate) fn total_delta(&self) -> f64 {
        self.total_after - self.total_before
    }
}

fn shares(r: &Recording) -> HashMap<&str, (f64, f64)> {
    let total = r.total().max(1) as f64;
    let mut m: HashMap<&str, (f64, f64)> = HashMap::new();
    for (stack, count) in &r.stacks {
        let c = *count as f64 / total;
        let frames: Vec<&str> = stack.split(';').collect();
        if let Some(leaf) = frames.last() {
            m.entry(leaf).or_default().0 += c;
        }
        let mut seen: Vec<&str> = Vec::with_capacity(frames.len());
        for f in frames {
            if !seen.contains(&f) {
                seen.push(f);
                m.entry(f).or_default().1 += c;
            }
        }
    }
    m
}

/// The `limit` functions whose share changed most (by own share, then total).
pub(crate) fn share_changes(
    before: &Recording,
    after: &Recording,
    limit: usize,
) -> Vec<ShareChange> {
    let b = shares(before);
    let a = shares(after);
    let mut names: Vec<&str> = b.keys().chain(a.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let mut v: Vec<ShareChange> = names
        .into_iter()
        .map(|n| {
            let (ob, tb) = b.get(n).copied().unwrap_or_default();
            let (oa, ta) = a.get(n).copied().unwrap_or_default();
            ShareChange {
                function: n.to_string(),
                own_before: ob,
                own_after: oa,
                total_before: tb,
                total_after: ta,
            }
        })
        .collect();
    v.sort_by(|x, y| {
        let key = |c: &ShareChange| (c.own_delta().abs(), c.total_delta().abs());
        key(y)
            .partial_cmp(&key(x))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| x.function.cmp(&y.function))
    });
    v.retain(|c| c.own_delta().abs() > 1e-9 || c.total_delta().abs() > 1e-9);
    v.truncate(limit);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(lines: &str) -> Recording {
        read_recording(lines.as_bytes()).unwrap()
    }

    #[test]
    fn collapsed_inputs_and_their_errors() {
        let r = rec("a;b 3\na;c 1\n\na;b 2\n");
        assert_eq!(r.total(), 6);
        assert_eq!(r.stacks[0], ("a;b".to_string(), 5));
        // flamegraph.pl may write fractions; CRLF files are fine.
        assert_eq!(rec("x;y 2.6\r\n").total(), 3);
        assert!(matches!(read_recording(b""), Err(ReadError::Empty)));
        assert!(matches!(
            read_recording(b"no count here\n"),
            Err(ReadError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            read_recording(b"a;b 1\nbroken\n"),
            Err(ReadError::BadLine { line: 2, .. })
        ));
        assert!(matches!(
            read_recording(b"a;b 0\n"),
            Err(ReadError::NoSamples)
        ));
        assert!(matches!(
            read_recording(b" 5\n"),
            Err(ReadError::BadLine { .. })
        ));
        assert!(matches!(
            read_recording(&[0xff, 0xfe, 0x00, 0x01]),
            Err(ReadError::NotAProfile(_))
        ));
        assert!(matches!(
            read_recording(&[0x1f, 0x8b, 0x00]),
            Err(ReadError::BadGzip(_))
        ));
    }

    #[test]
    fn changes_are_normalised_shares() {
        let before = rec("main;a 50\nmain;b 50\n");
        let after = rec("main;a 150\nmain;b 50\n");
        let c = share_changes(&before, &after, 10);
        assert_eq!(c[0].function, "a");
        assert!((c[0].own_before - 0.5).abs() < 1e-9);
        assert!((c[0].own_after - 0.75).abs() < 1e-9);
        assert_eq!(c[1].function, "b");
        assert!((c[1].own_delta() + 0.25).abs() < 1e-9);
        // main is on every stack in both: no change, not listed.
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn native_names_are_read_short() {
        let mut r = rec(
            "main (app.py:3);ns::f(std::vector<int, std::allocator<int> > const&) (libx.so);read (libc.so.6) 2\n\
             main (app.py:3);ns::f (libx.so);read (libc.so.6) 3\n\
             thread 1 \"a::b(c)\";<module> (x.py:1);f.<locals>.g (x.py:2);ns::g(int) 1\n",
        );
        r.shorten_names();
        assert_eq!(
            r.stacks,
            vec![
                (
                    "main (app.py:3);ns::f (libx.so);read (libc.so.6)".to_string(),
                    5
                ),
                (
                    "thread 1 \"a::b(c)\";<module> (x.py:1);f.<locals>.g (x.py:2);ns::g"
                        .to_string(),
                    1
                ),
            ]
        );
        assert_eq!(short_label("a::b() (x.so)"), "a::b (x.so)");
        assert_eq!(short_label("a::operator() (x.so)"), "a::operator() (x.so)");
        assert_eq!(short_label("a::b<int>"), "a::b<int>");
        assert_eq!(short_label("f (x.py:1)"), "f (x.py:1)");
        assert_eq!(short_label("a::b ((x.so)"), "a::b ((x.so)");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x1234_5678_u64;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 33) as u8
                })
                .collect();
            let _ = read_recording(&bytes);
            let _ = pprof(&bytes);
        }
    }
}
