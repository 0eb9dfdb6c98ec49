//! One self-contained HTML page (no network: the script, its style and the
//! data are inline): a zoomable flame graph (icicle, root on top), a search
//! that highlights matching frames and says their share, a thread selector
//! and a top-functions table.
//!
//! The data is the profile's interned stacks and their per-thread counts as
//! JSON in a `<script type="application/json">` element; the page's script
//! builds the call tree for the chosen thread in the browser.

use std::io::{self, Write};

use super::profile::FrameClass;
use super::{OutputError, Profile, EXPORTER};

const STYLE: &str = include_str!("html/page.css");
const SCRIPT: &str = include_str!("html/page.js");

/// JSON made safe inside a `<script>` element: `<` only occurs in strings,
/// where `\u003c` means the same, so no `</script>` or `<!--` can appear.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The function a frame belongs to, for the top-functions table: the label
/// without its line number, so that lines of one function add up.
fn function_label(p: &Profile, frame: u32) -> String {
    let info = &p.frames[frame as usize];
    let label = p.label(frame);
    if info.kind == FrameClass::Python && info.line > 0 {
        let suffix = format!(":{})", info.line);
        if let Some(head) = label.strip_suffix(&suffix) {
            return format!("{head})");
        }
    }
    label.to_string()
}

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> Result<(), OutputError> {
    if p.totals.is_empty() {
        return no_samples(out, title);
    }
    let data = data_json(p, title)?;
    let title_html = html_escape(title);
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"generator\" content=\"{EXPORTER}\">\n\
         <title>{title_html} — pyinspect</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <header>\n<h1 id=\"title\">{title_html}</h1>\n<div class=\"controls\">\n\
         <label>Thread <select id=\"thread\"><option value=\"-1\">All threads</option></select></label>\n\
         <input id=\"search\" type=\"search\" placeholder=\"Search functions (regex)\" size=\"32\">\n\
         <button id=\"reset\" type=\"button\">Reset zoom</button>\n\
         <span id=\"matched\"></span>\n</div>\n</header>\n\
         <nav id=\"crumbs\"></nav>\n<div id=\"flame\" role=\"img\" aria-label=\"flame graph\"></div>\n\
         <div id=\"details\">Click a frame to zoom in; hover for its samples.</div>\n\
         <h2>Top functions</h2>\n<table id=\"top\"><thead><tr>\
         <th data-key=\"name\">Function</th><th data-key=\"self\">Own</th>\
         <th data-key=\"self\">Own %</th><th data-key=\"total\">Total</th>\
         <th data-key=\"total\">Total %</th></tr></thead><tbody></tbody></table>\n\
         <script type=\"application/json\" id=\"profile-data\">"
    )?;
    out.write_all(script_safe(&data).as_bytes())?;
    write!(
        out,
        "</script>\n<script>\n{SCRIPT}</script>\n</body>\n</html>\n"
    )?;
    Ok(())
}

fn data_json(p: &Profile, title: &str) -> io::Result<String> {
    use serde_json::json;
    let threads: Vec<_> = p
        .threads
        .iter()
        .map(|t| {
            let name = match t.name {
                Some(n) => format!("{} \"{}\"", t.display_id(), p.strings.get(n)),
                None => t.display_id(),
            };
            if p.opts.subprocesses {
                format!("process {} thread {name}", t.pid)
            } else {
                format!("thread {name}")
            }
        })
        .collect();
    let frames: Vec<&str> = (0..p.frames.len() as u32).map(|f| p.label(f)).collect();
    // Function of each frame, as an index into `functions`.
    let mut functions: Vec<String> = Vec::new();
    let mut function_ids: std::collections::HashMap<String, usize> = Default::default();
    let frame_function: Vec<usize> = (0..p.frames.len() as u32)
        .map(|f| {
            let name = function_label(p, f);
            let next = functions.len();
            *function_ids.entry(name.clone()).or_insert_with(|| {
                functions.push(name);
                next
            })
        })
        .collect();
    let kinds: Vec<u8> = p
        .frames
        .iter()
        .map(|f| match f.kind {
            FrameClass::Python => 0,
            FrameClass::Native => 1,
            FrameClass::Synthetic => 2,
        })
        .collect();
    let stacks: Vec<&[u32]> = (0..p.stacks.len() as u32)
        .map(|s| p.stacks.get(s))
        .collect();
    let mut samples: Vec<[u64; 3]> = p
        .totals
        .iter()
        .filter(|(_, t)| t.count > 0)
        .map(|(&(stack, thread), t)| [u64::from(stack), u64::from(thread), t.count])
        .collect();
    samples.sort_unstable();
    let v = json!({
        "title": title,
        "exporter": EXPORTER,
        "rate": p.opts.rate,
        "threads": threads,
        "frames": frames,
        "kinds": kinds,
        "functions": functions,
        "frameFunction": frame_function,
        "stacks": stacks,
        "samples": samples,
    });
    Ok(serde_json::to_string(&v)?)
}

/// A recording that ended before its first sample still gets its page.
pub(super) fn no_samples(out: &mut dyn Write, title: &str) -> Result<(), OutputError> {
    let t = html_escape(title);
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{t} — pyinspect</title>\n</head>\n<body>\n<h1>{t}</h1>\n\
         <p>No samples were taken.</p>\n</body>\n</html>\n"
    )
    .map_err(OutputError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_cannot_close_the_script_element() {
        let s = script_safe(r#"{"f":"</script><!-- x"}"#);
        assert!(!s.contains("</script"));
        assert!(!s.contains("<!--"));
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back["f"], "</script><!-- x");
        assert_eq!(html_escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
