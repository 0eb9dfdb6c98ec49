//! `heap --diff BEFORE AFTER` (and `--every`): the types that grew between
//! two snapshots, by bytes then by count; the module globals whose
//! containers grew; the memory split's rows, before and after.

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

/// A module global's container that grew.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct GlobalGrowth {
    /// `module.name`s that refer to it.
    pub(crate) holders: Vec<String>,
    #[serde(rename = "type")]
    pub(crate) name: String,
    pub(crate) length_before: u64,
    pub(crate) length_after: u64,
    pub(crate) bytes_before: u64,
    pub(crate) bytes_after: u64,
}

impl GlobalGrowth {
    fn bytes(&self) -> i128 {
        self.bytes_after as i128 - self.bytes_before as i128
    }
    fn length(&self) -> i128 {
        self.length_after as i128 - self.length_before as i128
    }
}

/// One row of the memory split, before and after.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct MemoryRow {
    pub(crate) row: &'static str,
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// What `--diff` reports.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Report {
    /// The types that grew, most bytes gained first.
    pub(crate) types: Vec<Growth>,
    /// The module globals' containers that grew, most bytes gained first.
    pub(crate) globals: Vec<GlobalGrowth>,
    /// The memory split's rows (empty unless both snapshots have it).
    pub(crate) memory: Vec<MemoryRow>,
}

pub(crate) fn report(before: &Snapshot, after: &Snapshot) -> Report {
    Report {
        types: growth(before, after),
        globals: globals_growth(before, after),
        memory: memory_rows(before, after),
    }
}

/// The globals' containers that grew: matched by a holder's name and the
/// type (the same global, in this process or a later run of it).
pub(crate) fn globals_growth(before: &Snapshot, after: &Snapshot) -> Vec<GlobalGrowth> {
    let mut out: Vec<GlobalGrowth> = after
        .globals
        .iter()
        .filter(|g| !g.holders.is_empty())
        .map(|g| {
            let old = before
                .globals
                .iter()
                .find(|b| b.name == g.name && b.holders.iter().any(|h| g.holders.contains(h)));
            GlobalGrowth {
                holders: g.holders.clone(),
                name: g.name.clone(),
                length_before: old.map_or(0, |b| b.length),
                length_after: g.length,
                bytes_before: old.map_or(0, |b| b.bytes),
                bytes_after: g.bytes,
            }
        })
        .filter(|g| g.bytes() > 0 || g.length() > 0)
        .collect();
    out.sort_by(|a, b| {
        b.bytes()
            .cmp(&a.bytes())
            .then(b.length().cmp(&a.length()))
            .then(a.holders.cmp(&b.holders))
    });
    out
}

fn memory_rows(before: &Snapshot, after: &Snapshot) -> Vec<MemoryRow> {
    let (Some(b), Some(a)) = (&before.memory, &after.memory) else {
        return Vec::new();
    };
    let rows = [
        ("rss", b.rss, a.rss),
        ("python_allocator", b.python_allocator, a.python_allocator),
        ("malloc_heap", b.malloc_heap, a.malloc_heap),
        ("anonymous", b.anonymous, a.anonymous),
        ("thread_stacks", b.thread_stacks, a.thread_stacks),
        ("files", b.files, a.files),
    ];
    rows.into_iter()
        .filter_map(|(row, b, a)| {
            Some(MemoryRow {
                row,
                before: b?,
                after: a?,
            })
        })
        .collect()
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
    r: &Report,
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
    let grown = &r.types;
    if grown.is_empty() {
        writeln!(w, "no type grew")?;
    } else {
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
    }
    if !r.globals.is_empty() {
        writeln!(w)?;
        writeln!(w, "Module globals that grew:")?;
        writeln!(w, "{:>12} {:>14}  GLOBAL", "+ITEMS", "+BYTES")?;
        for g in r.globals.iter().take(10) {
            writeln!(
                w,
                "{:>+12} {:>+14}  {} ({}, {} items, {})",
                g.length(),
                g.bytes(),
                crate::stack::escape_controls(&g.holders.join(", ")),
                crate::stack::escape_controls(&g.name),
                g.length_after,
                human_bytes(g.bytes_after)
            )?;
        }
    }
    if !r.memory.is_empty() {
        writeln!(w)?;
        writeln!(w, "Memory (resident):")?;
        for m in &r.memory {
            writeln!(
                w,
                "{:>12} → {:>12} {:>+14}  {}",
                human_bytes(m.before),
                human_bytes(m.after),
                m.after as i128 - m.before as i128,
                m.row
            )?;
        }
    }
    Ok(())
}
