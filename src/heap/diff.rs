//! `heap --diff BEFORE AFTER`: the types that grew between two snapshots,
//! by bytes then by count.

use super::output::{human_bytes, Snapshot};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Growth {
    #[serde(rename = "type")]
    pub(crate) name: String,
    pub(crate) count_before: u64,
    pub(crate) count_after: u64,
    pub(crate) bytes_before: u64,
    pub(crate) bytes_after: u64,
}

impl Growth {
    pub(crate) fn bytes(&self) -> i128 {
        self.bytes_after as i128 - self.bytes_before as i128
    }
    pub(crate) fn count(&self) -> i128 {
        self.count_after as i128 - self.count_before as i128
    }
}

/// Every type that grew in count or bytes, most bytes gained first.
pub(crate) fn growth(before: &Snapshot, after: &Snapshot) -> Vec<Growth> {
    let old: HashMap<&str, (u64, u64)> = before
        .types
        .iter()
        .map(|t| (t.name.as_str(), (t.count, t.bytes)))
        .collect();
    let mut out: Vec<Growth> = after
        .types
        .iter()
        .map(|t| {
            let (c, b) = old.get(t.name.as_str()).copied().unwrap_or((0, 0));
            Growth {
                name: t.name.clone(),
                count_before: c,
                count_after: t.count,
                bytes_before: b,
                bytes_after: t.bytes,
            }
        })
        .filter(|g| g.bytes() > 0 || g.count() > 0)
        .collect();
    out.sort_by(|a, b| {
        b.bytes()
            .cmp(&a.bytes())
            .then(b.count().cmp(&a.count()))
            .then(a.name.cmp(&b.name))
    });
    out
}

pub(crate) fn write_text(
    before: &Snapshot,
    after: &Snapshot,
    grown: &[Growth],
    top: usize,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    let delta = after.bytes as i128 - before.bytes as i128;
    writeln!(
        w,
        "{} → {} objects ({:+}), {} → {} ({:+} bytes)",
        before.objects,
        after.objects,
        after.objects as i128 - before.objects as i128,
        human_bytes(before.bytes),
        human_bytes(after.bytes),
        delta
    )?;
    for (which, s) in [("before", before), ("after", after)] {
        for p in &s.partial {
            writeln!(w, "partial ({which}): {}", crate::stack::escape_controls(p))?;
        }
    }
    if grown.is_empty() {
        writeln!(w, "no type grew")?;
        return Ok(());
    }
    writeln!(w, "{:>12} {:>14}  TYPE", "+COUNT", "+BYTES")?;
    let shown = if top == 0 { grown.len() } else { top };
    for g in grown.iter().take(shown) {
        writeln!(
            w,
            "{:>+12} {:>+14}  {}",
            g.count(),
            g.bytes(),
            crate::stack::escape_controls(&g.name)
        )?;
    }
    if grown.len() > shown {
        writeln!(w, "({} more types grew)", grown.len() - shown)?;
    }
    Ok(())
}
