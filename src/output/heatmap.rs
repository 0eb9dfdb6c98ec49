//! A line heatmap as one static HTML page: per source file (most sampled
//! first), each sampled line with its own share (the line was running) and
//! its total share (the line was on the stack), its background as hot as
//! its total share. Where the file is readable here, its text is shown
//! around the sampled lines.

use std::collections::HashMap;
use std::io::Write;

use super::profile::FrameClass;
use super::{OutputError, Profile, EXPORTER};

/// Source files larger than this are not read for their text.
const MAX_SOURCE_BYTES: u64 = 4 << 20;
/// Unsampled lines shown around each sampled one, when the text is known.
const CONTEXT: u32 = 2;

#[derive(Default, Clone, Copy)]
struct Counts {
    own: u64,
    total: u64,
    /// The function the line is in (a string id).
    function: u32,
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

fn source_lines(path: &str) -> Option<Vec<String>> {
    let p = std::path::Path::new(path);
    if !p.is_absolute() || std::fs::metadata(p).ok()?.len() > MAX_SOURCE_BYTES {
        return None;
    }
    let bytes = std::fs::read(p).ok()?;
    Some(
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// White to red by share of the file's hottest line.
fn heat(share: f64) -> String {
    let s = share.clamp(0.0, 1.0);
    let g = (255.0 - 160.0 * s) as u8;
    let b = (255.0 - 215.0 * s) as u8;
    format!("rgb(255,{g},{b})")
}

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> Result<(), OutputError> {
    // (file, line) → counts; a line counts once per sample in `total`.
    let mut lines: HashMap<(u32, u32), Counts> = HashMap::new();
    let mut samples = 0u64;
    for (&(stack, _), t) in &p.totals {
        let frames = p.stacks.get(stack);
        samples += t.count;
        let py: Vec<(u32, u32, u32)> = frames
            .iter()
            .map(|&f| &p.frames[f as usize])
            .filter(|f| f.kind == FrameClass::Python && f.line > 0)
            .filter_map(|f| Some((f.file?, f.line, f.function)))
            .collect();
        if let Some(&leaf) = frames.last() {
            let f = &p.frames[leaf as usize];
            if let (FrameClass::Python, Some(file), true) = (f.kind, f.file, f.line > 0) {
                lines.entry((file, f.line)).or_default().own += t.count;
            }
        }
        let mut seen: Vec<(u32, u32)> = Vec::with_capacity(py.len());
        for (file, line, function) in py {
            let key = (file, line);
            if !seen.contains(&key) {
                seen.push(key);
                let c = lines.entry(key).or_default();
                c.total += t.count;
                c.function = function;
            }
        }
    }
    if lines.is_empty() {
        return super::html::no_samples(out, title);
    }
    let mut files: HashMap<u32, Vec<(u32, Counts)>> = HashMap::new();
    for (&(file, line), &c) in &lines {
        files.entry(file).or_default().push((line, c));
    }
    let mut order: Vec<(u32, u64, u64)> = files
        .iter()
        .map(|(&f, ls)| {
            let own = ls.iter().map(|(_, c)| c.own).sum();
            let total = ls.iter().map(|(_, c)| c.total).max().unwrap_or(0);
            (f, own, total)
        })
        .collect();
    order.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    let pct = |n: u64| 100.0 * n as f64 / samples.max(1) as f64;

    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"generator\" content=\"{EXPORTER}\">\n<title>{} — line heatmap</title>\n\
         <style>\nbody{{font:13px/1.4 system-ui,sans-serif;margin:0 16px 24px}}\
         h1{{font-size:16px}}h2{{font-size:14px;margin:18px 0 4px;word-break:break-all}}\
         table{{border-collapse:collapse}}td,th{{padding:0 8px;text-align:right}}\
         td.src{{text-align:left;font-family:monospace;white-space:pre}}\
         th.src,td.fn{{text-align:left}}\
         tr.gap td{{color:#999}}th{{background:#f5f5f5}}\n</style>\n</head>\n<body>\n\
         <h1>{}</h1>\n<p>{samples} samples. <b>Own</b>: the line was running; \
         <b>total</b>: the line was on the stack. Files by their hottest line.</p>\n",
        escape(title),
        escape(title)
    )?;
    writeln!(out, "<nav><ul>")?;
    for (i, &(f, own, total)) in order.iter().enumerate() {
        writeln!(
            out,
            "<li><a href=\"#f{i}\">{}</a> — own {:.2}%, hottest line {:.2}%</li>",
            escape(p.strings.get(f)),
            pct(own),
            pct(total)
        )?;
    }
    writeln!(out, "</ul></nav>")?;
    for (i, &(f, own, total)) in order.iter().enumerate() {
        let path = p.strings.get(f);
        let mut ls = files[&f].clone();
        ls.sort_by_key(|(l, _)| *l);
        let hottest = ls.iter().map(|(_, c)| c.total).max().unwrap_or(1).max(1);
        let text = source_lines(path);
        writeln!(
            out,
            "<section class=\"file\" id=\"f{i}\" data-file=\"{}\">\n<h2>{} \
             <small>own {:.2}%, hottest line {:.2}%</small></h2>\n<table>\n\
             <tr><th>line</th><th>own</th><th>total</th><th>function</th>\
             <th class=\"src\">source</th></tr>",
            escape(path),
            escape(path),
            pct(own),
            pct(total)
        )?;
        // Sampled lines, with a little of the text around them.
        let counts: HashMap<u32, Counts> = ls.iter().copied().collect();
        let mut shown: Vec<u32> = Vec::new();
        for &(l, _) in &ls {
            let lo = if text.is_some() {
                l.saturating_sub(CONTEXT).max(1)
            } else {
                l
            };
            let hi = if text.is_some() { l + CONTEXT } else { l };
            shown.extend(lo..=hi);
        }
        shown.sort_unstable();
        shown.dedup();
        let max_line = text.as_ref().map_or(u32::MAX, |t| t.len() as u32);
        let mut prev = 0u32;
        for l in shown {
            if text.is_some() && l > max_line && !counts.contains_key(&l) {
                continue;
            }
            if prev != 0 && l > prev + 1 {
                writeln!(
                    out,
                    "<tr class=\"gap\"><td>⋮</td><td></td><td></td><td></td></tr>"
                )?;
            }
            prev = l;
            let src = text
                .as_ref()
                .and_then(|t| t.get(l as usize - 1))
                .map(|s| escape(s))
                .unwrap_or_default();
            match counts.get(&l) {
                Some(c) => writeln!(
                    out,
                    "<tr class=\"hit\" data-line=\"{l}\" data-own=\"{}\" data-total=\"{}\" \
                     style=\"background:{}\"><td>{l}</td><td>{:.2}%</td><td>{:.2}%</td>\
                     <td class=\"fn\">{}</td><td class=\"src\">{src}</td></tr>",
                    c.own,
                    c.total,
                    heat(c.total as f64 / hottest as f64),
                    pct(c.own),
                    pct(c.total),
                    escape(p.strings.get(c.function))
                )?,
                None => writeln!(
                    out,
                    "<tr><td>{l}</td><td></td><td></td><td></td><td class=\"src\">{src}</td></tr>"
                )?,
            }
        }
        writeln!(out, "</table>\n</section>")?;
    }
    writeln!(out, "</body>\n</html>")?;
    Ok(())
}
