//! `pyinspect diff BEFORE AFTER`: a differential flame graph of two
//! recordings and the functions whose share of the samples changed most.

use crate::output::{read_recording, share_changes, write_differential};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

pub struct DiffOptions {
    pub before: PathBuf,
    pub after: PathBuf,
    pub output: Option<PathBuf>,
    /// Draw the before profile's shape instead of the after one's.
    pub negate: bool,
    /// Rows of the table of changed functions (0: no table).
    pub top: usize,
    /// Keep native frames' whole signatures (`--full-names`); by default
    /// they are shortened as `record` names them, so that recordings of
    /// other tools (or with `--full-names`) compare with ours.
    pub full_names: bool,
}

fn load(path: &Path) -> anyhow::Result<crate::output::Recording> {
    if path.is_dir() {
        bail!("{} is a directory, not a recording", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    read_recording(&bytes)
        .with_context(|| format!("{} is not a recording we can read", path.display()))
}

fn pct(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

fn signed_pct(delta: f64) -> String {
    format!("{:+.2}%", delta * 100.0)
}

pub fn run(opts: DiffOptions) -> anyhow::Result<i32> {
    let mut before = load(&opts.before)?;
    let mut after = load(&opts.after)?;
    if !opts.full_names {
        before.shorten_names();
        after.shorten_names();
    }
    let path = opts
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("diff.svg"));
    let out = crate::output::sink::OutputFile::create(&path)?;
    let shown = out.shown().to_string();
    let title = format!("{} → {}", opts.before.display(), opts.after.display());
    out.write_with(|w| write_differential(&before, &after, opts.negate, &title, w))
        .map_err(|e| anyhow::anyhow!(e))?;
    eprintln!(
        "pyinspect: wrote differential flame graph to {} (before {} samples, after {}; {})",
        shown,
        before.total(),
        after.total(),
        if opts.negate {
            "before's shape, red: grew after"
        } else {
            "after's shape, red: grew"
        }
    );
    if opts.top == 0 {
        return Ok(0);
    }
    let changes = share_changes(&before, &after, opts.top);
    if changes.is_empty() {
        println!("No function's share of the samples changed.");
        return Ok(0);
    }
    let width = changes
        .iter()
        .map(|c| c.function.chars().count())
        .max()
        .unwrap_or(8)
        .clamp(8, 80);
    println!(
        "{:<width$}  {:>9} {:>9} {:>9}  {:>9} {:>9} {:>9}",
        "FUNCTION", "OWN BEF", "OWN AFT", "CHANGE", "TOT BEF", "TOT AFT", "CHANGE"
    );
    for c in &changes {
        let mut name: String = c.function.chars().take(width).collect();
        if c.function.chars().count() > width {
            name.pop();
            name.push('…');
        }
        println!(
            "{:<width$}  {:>9} {:>9} {:>9}  {:>9} {:>9} {:>9}",
            name,
            pct(c.own_before),
            pct(c.own_after),
            signed_pct(c.own_delta()),
            pct(c.total_before),
            pct(c.total_after),
            signed_pct(c.total_delta())
        );
    }
    Ok(0)
}
