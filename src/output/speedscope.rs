//! speedscope's file format (https://www.speedscope.app/file-format-schema.json):
//! one "sampled" profile per thread, weighted by real time in seconds.
//!
//! Written as a stream: the timeline can be long, and building a JSON tree
//! of it first would cost several times its size.

use std::io::{self, Write};

use super::{Profile, EXPORTER};

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> io::Result<()> {
    out.write_all(b"{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"")?;
    out.write_all(b",\"exporter\":")?;
    serde_json::to_writer(&mut *out, EXPORTER)?;
    out.write_all(b",\"name\":")?;
    serde_json::to_writer(&mut *out, title)?;
    out.write_all(b",\"activeProfileIndex\":0,\"shared\":{\"frames\":[")?;
    for (i, frame) in p.frames.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut *out, p.strings.get(frame.label))?;
        if let Some(file) = frame.file {
            out.write_all(b",\"file\":")?;
            serde_json::to_writer(&mut *out, p.strings.get(file))?;
        }
        if frame.line > 0 {
            write!(out, ",\"line\":{}", frame.line)?;
        }
        out.write_all(b"}")?;
    }
    out.write_all(b"]},\"profiles\":[")?;
    let mut first = true;
    for (t, runs) in super::chrometrace::runs_by_thread(p).iter().enumerate() {
        if runs.is_empty() {
            continue;
        }
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        write_thread(p, t, runs, out)?;
    }
    out.write_all(b"]}")?;
    Ok(())
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One thread's profile. A stretch where the thread was not sampled (idle,
/// not holding the GIL) becomes an empty sample, so the time axis of
/// speedscope's time-order view stays true.
fn write_thread(p: &Profile, t: usize, runs: &[u32], out: &mut dyn Write) -> io::Result<()> {
    let thread = &p.threads[t];
    let mut name = match thread.name {
        Some(n) => format!("Thread {} \"{}\"", thread.display_id(), p.strings.get(n)),
        None => format!("Thread {}", thread.display_id()),
    };
    if p.opts.subprocesses {
        name = format!("Process {} {name}", thread.pid);
    }
    // (stack or None for a gap, weight in ns)
    let mut samples: Vec<(Option<u32>, u64)> = Vec::with_capacity(runs.len());
    let mut prev_end: Option<u64> = None;
    for &r in runs {
        let run = &p.runs[r as usize];
        if let Some(end) = prev_end {
            if run.after_gap && run.start_ns > end {
                samples.push((None, run.start_ns - end));
            }
        }
        samples.push((Some(run.stack), run.dur_ns));
        prev_end = Some(run.start_ns.saturating_add(run.dur_ns));
    }
    let start = p.runs[runs[0] as usize].start_ns;
    let total: u64 = samples.iter().map(|&(_, w)| w).sum();

    out.write_all(b"{\"type\":\"sampled\",\"name\":")?;
    serde_json::to_writer(&mut *out, &name)?;
    write!(
        out,
        ",\"unit\":\"seconds\",\"startValue\":{},\"endValue\":{},\"samples\":[",
        seconds(start),
        seconds(start.saturating_add(total))
    )?;
    for (i, &(stack, _)) in samples.iter().enumerate() {
        out.write_all(if i > 0 { b",[" } else { b"[" })?;
        if let Some(stack) = stack {
            for (j, frame) in p.stacks.get(stack).iter().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                write!(out, "{frame}")?;
            }
        }
        out.write_all(b"]")?;
    }
    out.write_all(b"],\"weights\":[")?;
    for (i, &(_, weight)) in samples.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write!(out, "{}", seconds(weight))?;
    }
    out.write_all(b"]}")?;
    Ok(())
}
