//! Collapsed stacks (`raw`) and the flame graph SVG drawn from them.

use std::borrow::Cow;
use std::io::Write;

use inferno::flamegraph::{self, Direction};

use super::{OutputError, Profile};

/// `root;…;leaf count` lines, sorted, one per distinct stack, counts summed
/// over threads (a `--threads` root keeps threads apart when asked for).
fn lines(p: &Profile) -> Vec<String> {
    let mut counts = vec![0u64; p.stacks.len()];
    for (&(stack, _), totals) in &p.totals {
        counts[stack as usize] += totals.count;
    }
    let mut lines: Vec<String> = counts
        .iter()
        .enumerate()
        .filter(|&(stack, &count)| count > 0 && !p.stacks.get(stack as u32).is_empty())
        .map(|(stack, count)| {
            let mut line = String::new();
            for (i, &frame) in p.stacks.get(stack as u32).iter().enumerate() {
                if i > 0 {
                    line.push(';');
                }
                line.push_str(&sanitize(p.label(frame)));
            }
            line.push(' ');
            line.push_str(&count.to_string());
            line
        })
        .collect();
    lines.sort_unstable();
    lines
}

/// `;` separates frames and a line ends the stack, so neither may appear in
/// a frame name (a `;` can, in a file name or a native symbol).
fn sanitize(label: &str) -> Cow<'_, str> {
    if label.contains([';', '\n', '\r']) {
        Cow::Owned(label.replace(';', ",").replace(['\n', '\r'], " "))
    } else {
        Cow::Borrowed(label)
    }
}

pub(super) fn write_raw(p: &Profile, out: &mut dyn Write) -> Result<(), OutputError> {
    for line in lines(p) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

pub(super) fn write_flamegraph(
    p: &Profile,
    out: &mut dyn Write,
    title: &str,
) -> Result<(), OutputError> {
    let lines = lines(p);
    if lines.is_empty() {
        // A recording can end before its first sample (a tiny --duration, a
        // program that is gone at once): still a valid flame graph file.
        write!(
            out,
            concat!(
                r#"<?xml version="1.0" standalone="no"?>"#,
                "\n",
                r#"<svg version="1.1" width="1200" height="60" xmlns="http://www.w3.org/2000/svg">"#,
                r#"<text x="600" y="36" text-anchor="middle" font-family="Verdana" font-size="17">"#,
                "No samples</text></svg>\n"
            )
        )?;
        return Ok(());
    }
    let mut opts = flamegraph::Options::default();
    opts.title = title.to_string();
    // Icicle: the root at the top and callees below it reads like the
    // tracebacks and `pyinspect dump` output Python users know (outermost
    // first), and matches what py-spy users are used to.
    opts.direction = Direction::Inverted;
    opts.min_width = 0.1;
    opts.count_name = "samples".to_string();
    // Colour by name, so a function keeps its colour across flame graphs.
    opts.hash = true;
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_replaced() {
        assert_eq!(sanitize("f (a;b.py:1)"), "f (a,b.py:1)");
        assert_eq!(sanitize("multi\nline"), "multi line");
        assert!(matches!(sanitize("plain (x.py:3)"), Cow::Borrowed(_)));
    }
}
