//! The census as text (a table, largest first) and as a JSON snapshot,
//! the one format `heap --diff` reads back.

use super::census::{Census, TypeRow};
use super::memsplit::MemorySplit;
use crate::python::tracemalloc::Traces;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// One census as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub(crate) pid: i32,
    pub(crate) python: String,
    /// Milliseconds the target's threads were stopped (0: not paused).
    pub(crate) paused_ms: f64,
    /// Read without pausing (`--nonblocking`): counts may be torn.
    pub(crate) nonblocking: bool,
    pub(crate) objects: u64,
    pub(crate) bytes: u64,
    pub(crate) gc_tracked: u64,
    pub(crate) interpreters: usize,
    /// Why the census is partial; empty when whole.
    pub(crate) partial: Vec<String>,
    /// What is approximate (objects counted, their size not exact).
    #[serde(default)]
    pub(crate) notes: Vec<String>,
    pub(crate) types: Vec<SnapshotType>,
    /// The largest containers and the module globals holding them.
    #[serde(default)]
    pub(crate) containers: Vec<SnapshotContainer>,
    /// The whole process's memory split (None in snapshots from before
    /// it was read).
    #[serde(default)]
    pub(crate) memory: Option<MemorySplit>,
    /// The containers module globals hold, largest first (at most 50):
    /// what `--diff` and `--every` follow by name.
    #[serde(default)]
    pub(crate) globals: Vec<SnapshotContainer>,
    /// tracemalloc's traces by allocation site, when they could be read
    /// (`tracing: false` when tracemalloc is not tracing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tracemalloc: Option<Traces>,
    /// Why tracemalloc's traces could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tracemalloc_unread: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SnapshotContainer {
    #[serde(rename = "type")]
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) length: u64,
    pub(crate) bytes: u64,
    pub(crate) holders: Vec<String>,
}

impl From<super::holders::Container> for SnapshotContainer {
    fn from(k: super::holders::Container) -> SnapshotContainer {
        SnapshotContainer {
            name: k.type_name,
            address: format!("0x{:x}", k.address),
            length: k.length,
            bytes: k.bytes,
            holders: k.holders,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SnapshotType {
    #[serde(rename = "type")]
    pub(crate) name: String,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
}

impl Snapshot {
    pub(crate) fn new(
        pid: i32,
        python: String,
        paused_ms: f64,
        nonblocking: bool,
        c: Census,
    ) -> Snapshot {
        Snapshot {
            memory: None,
            tracemalloc: None,
            tracemalloc_unread: None,
            pid,
            python,
            paused_ms,
            nonblocking,
            objects: c.objects,
            bytes: c.bytes,
            gc_tracked: c.gc_tracked,
            interpreters: c.interpreters,
            partial: c.partial,
            notes: c.notes,
            containers: c
                .containers
                .into_iter()
                .map(SnapshotContainer::from)
                .collect(),
            globals: c.globals.into_iter().map(SnapshotContainer::from).collect(),
            types: c
                .types
                .into_iter()
                .map(|TypeRow { name, count, bytes }| SnapshotType { name, count, bytes })
                .collect(),
        }
    }
}

/// Bytes for people: "1.2 MB" (powers of 1000, like `ls -h --si`).
pub(crate) fn human_bytes(b: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// The census as a table: `top` types (0: all), then the totals.
pub(crate) fn write_text(s: &Snapshot, top: usize, w: &mut dyn Write) -> std::io::Result<()> {
    let pause = if s.nonblocking {
        "not paused: counts may be torn".to_string()
    } else if s.paused_ms > 0.0 {
        format!("paused {:.0} ms", s.paused_ms)
    } else {
        "a core file".to_string()
    };
    writeln!(
        w,
        "Process {} (Python {}): {} objects, {} ({}; {} on the collector's lists; {})",
        s.pid,
        s.python,
        s.objects,
        human_bytes(s.bytes),
        s.bytes,
        s.gc_tracked,
        pause
    )?;
    for p in &s.partial {
        writeln!(w, "partial: {}", crate::stack::escape_controls(p))?;
    }
    for n in &s.notes {
        writeln!(w, "note: {}", crate::stack::escape_controls(n))?;
    }
    writeln!(w, "{:>12} {:>12} {:>7}  TYPE", "COUNT", "BYTES", "SHARE")?;
    let shown = if top == 0 { s.types.len() } else { top };
    for t in s.types.iter().take(shown) {
        writeln!(
            w,
            "{:>12} {:>12} {:>6.1}%  {}",
            t.count,
            human_bytes(t.bytes),
            if s.bytes > 0 {
                t.bytes as f64 * 100.0 / s.bytes as f64
            } else {
                0.0
            },
            crate::stack::escape_controls(&t.name)
        )?;
    }
    if s.types.len() > shown {
        let rest = &s.types[shown..];
        writeln!(
            w,
            "{:>12} {:>12} {:>7}  ({} more types)",
            rest.iter().map(|t| t.count).sum::<u64>(),
            human_bytes(rest.iter().map(|t| t.bytes).sum()),
            "",
            rest.len()
        )?;
    }
    writeln!(
        w,
        "{:>12} {:>12} {:>7}  total",
        s.objects,
        human_bytes(s.bytes),
        ""
    )?;
    if let Some(m) = &s.memory {
        writeln!(w)?;
        write_memory(m, w)?;
    }
    if !s.containers.is_empty() {
        writeln!(w)?;
        writeln!(w, "Largest containers:")?;
        for k in &s.containers {
            let held = if k.holders.is_empty() {
                String::new()
            } else {
                format!("  held by {}", k.holders.join(", "))
            };
            writeln!(
                w,
                "{:>12} {:>12}  {} ({} items){}",
                "",
                human_bytes(k.bytes),
                crate::stack::escape_controls(&k.name),
                k.length,
                crate::stack::escape_controls(&held)
            )?;
        }
    }
    if let Some(t) = s.tracemalloc.as_ref().filter(|t| t.tracing) {
        writeln!(w)?;
        write_sites(t, top, w)?;
    } else if let Some(why) = &s.tracemalloc_unread {
        writeln!(w)?;
        writeln!(
            w,
            "tracemalloc's allocation sites: not read ({})",
            crate::stack::escape_controls(why)
        )?;
    }
    Ok(())
}

/// tracemalloc's largest allocation sites (`top`, 0: all read), as
/// `statistics("lineno")` lists them, each with its traceback where
/// tracemalloc keeps more than one frame.
fn write_sites(t: &Traces, top: usize, w: &mut dyn Write) -> std::io::Result<()> {
    let peak = t
        .peak_bytes
        .map(|p| format!(", peak {}", human_bytes(p)))
        .unwrap_or_default();
    writeln!(
        w,
        "Allocation sites (tracemalloc, {} frame{} kept): {} blocks, {} traced{}",
        t.max_nframe,
        if t.max_nframe == 1 { "" } else { "s" },
        t.blocks,
        human_bytes(t.bytes),
        peak
    )?;
    for p in &t.partial {
        writeln!(w, "partial: {}", crate::stack::escape_controls(p))?;
    }
    writeln!(
        w,
        "{:>12} {:>12} {:>10}  SITE",
        "BLOCKS", "BYTES", "AVERAGE"
    )?;
    let shown = if top == 0 { t.sites.len() } else { top };
    for s in t.sites.iter().take(shown) {
        writeln!(
            w,
            "{:>12} {:>12} {:>10}  {}:{}",
            s.count,
            human_bytes(s.size),
            human_bytes(s.size / s.count.max(1)),
            crate::stack::escape_controls(&s.filename),
            s.lineno
        )?;
        for f in s.traceback.iter().skip(1) {
            writeln!(
                w,
                "{:>36}  called from {}:{}",
                "",
                crate::stack::escape_controls(&f.filename),
                f.lineno
            )?;
        }
    }
    Ok(())
}

/// The split as a short table.
fn write_memory(s: &MemorySplit, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let allocator = match (&s.allocator, &s.allocator_unread) {
        (Some(a), _) => format!(
            "{} arenas of {}: pools {} in use, {} free",
            a.arenas,
            human_bytes(a.arena_size),
            human_bytes(a.pools_used_bytes),
            human_bytes(a.pools_free_bytes)
        ),
        (None, Some(why)) => format!("not read: {why}"),
        (None, None) => "not read".into(),
    };
    let Some(rss) = s.rss else {
        writeln!(w, "Python's object allocator: {allocator}")?;
        for n in &s.notes {
            writeln!(w, "note: {}", crate::stack::escape_controls(n))?;
        }
        return Ok(());
    };
    writeln!(w, "Memory: {} resident ({rss} bytes)", human_bytes(rss))?;
    let share = |b: u64| {
        if rss > 0 {
            b as f64 * 100.0 / rss as f64
        } else {
            0.0
        }
    };
    let row = |w: &mut dyn std::io::Write, b: Option<u64>, what: &str| -> std::io::Result<()> {
        match b {
            Some(b) => writeln!(w, "{:>12} {:>6.1}%  {what}", human_bytes(b), share(b)),
            None => writeln!(w, "{:>12} {:>7}  {what}", "?", ""),
        }
    };
    row(
        w,
        s.python_allocator,
        &format!(
            "Python objects (obmalloc; {})",
            crate::stack::escape_controls(&allocator)
        ),
    )?;
    row(
        w,
        s.malloc_heap,
        "malloc heap ([heap], glibc arenas and mmapped chunks)",
    )?;
    row(w, s.anonymous, "other anonymous memory")?;
    row(w, s.thread_stacks, "thread stacks")?;
    row(w, s.files, "files and libraries")?;
    row(w, s.other, "kernel ([vdso], [vvar])")?;
    if let Some(swap) = s.swap.filter(|&b| b > 0) {
        writeln!(
            w,
            "{:>12} {:>7}  swapped out (not in the above)",
            human_bytes(swap),
            ""
        )?;
    }
    for n in &s.notes {
        writeln!(w, "note: {}", crate::stack::escape_controls(n))?;
    }
    Ok(())
}
