//! tracemalloc's traces from outside: what each allocation site holds now,
//! as `tracemalloc.take_snapshot().statistics("lineno")` would say, read
//! through each version's layout (src/cpython_layouts/tracemalloc.rs),
//! every count and pointer bounded. Reads memory only; /proc is
//! src/procfs.rs's.
//!
//! tracemalloc keeps a hash table from each traced block's address to its
//! trace (size, traceback), one more per domain besides the default one
//! (a domain is numpy's, say), and interns tracebacks: blocks allocated
//! from the same Python stack share one. So the traces are summed per
//! traceback first, and each traceback read once.

use crate::cpython_layouts::tracemalloc::{FilenameKind, TracemallocLayout, TracemallocState};
use crate::memory::{le_u64, Memory, MemoryExt};
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::process::PythonProcess;
use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

/// Traces read at most, all domains together (tracemalloc's own tables
/// take about 60 bytes a trace in the target).
const MAX_TRACES: u64 = 50_000_000;
/// Buckets of one table read at most.
const MAX_BUCKETS: u64 = 1 << 28;
/// Domains read at most.
const MAX_DOMAINS: u64 = 4096;
/// tracemalloc's own limit on the frames a traceback keeps.
const MAX_NFRAME: u32 = 65535;
/// Frames of one site's traceback shown at most.
const MAX_FRAMES_SHOWN: usize = 100;
/// Entries read through one page cache before a fresh one.
const ENTRIES_PER_CACHE: usize = 4096;
/// Bucket pointers read in one go.
const BUCKETS_PER_READ: u64 = 8192;

/// One allocation site: the most recent frame of the tracebacks of the
/// blocks it allocated that are still alive, and their total.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Site {
    pub(crate) filename: String,
    pub(crate) lineno: u32,
    /// Bytes of the live blocks allocated there, and their number.
    pub(crate) size: u64,
    pub(crate) count: u64,
    /// Where tracemalloc keeps more than one frame: the traceback (most
    /// recent call first) that holds the most of this site's bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) traceback: Vec<SiteFrame>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SiteFrame {
    pub(crate) filename: String,
    pub(crate) lineno: u32,
}

/// What tracemalloc holds now.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Traces {
    pub(crate) tracing: bool,
    /// Frames a traceback keeps (`tracemalloc.start(N)`).
    pub(crate) max_nframe: u32,
    /// Blocks traced and their bytes, all domains.
    pub(crate) blocks: u64,
    pub(crate) bytes: u64,
    /// tracemalloc's peak of traced bytes (3.12+, where it is in reach).
    #[serde(default)]
    pub(crate) peak_bytes: Option<u64>,
    /// The largest sites, by bytes then blocks.
    pub(crate) sites: Vec<Site>,
    /// What did not read whole (a table changing as it was read).
    #[serde(default)]
    pub(crate) partial: Vec<String>,
}

/// Where a process's tracemalloc state is, found and checked.
struct Where {
    config: u64,
    traces: u64,
    domains: u64,
    /// `traced_memory`, `peak_traced_memory` (3.12+).
    memory: Option<u64>,
}

/// Read `process`'s traces and its `top` largest sites; Err: why they
/// cannot be reached.
pub(crate) fn read(
    mem: &dyn Memory,
    process: &PythonProcess,
    top: usize,
) -> Result<Traces, String> {
    let v = &process.version;
    let Some(l) = crate::cpython_layouts::tracemalloc::for_version(v.major, v.minor) else {
        return Err(format!(
            "Python {v}'s tracemalloc layout is not known (3.9 to 3.15 are)"
        ));
    };
    let w = locate(mem, process, l)?;
    let tracing = mem
        .read_u32(w.config + l.config_tracing)
        .map_err(|e| e.to_string())?
        == 1;
    let max_nframe = mem
        .read_u32(w.config + l.config_max_nframe)
        .map_err(|e| e.to_string())?;
    let mut out = Traces {
        tracing,
        max_nframe,
        ..Default::default()
    };
    if !tracing {
        return Ok(out);
    }
    if let Some(m) = w.memory {
        out.peak_bytes = mem.read_u64(m + 8).ok();
    }
    // Bytes and blocks per traceback, all domains.
    let mut per_tb: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut budget = MAX_TRACES;
    let default = mem.read_u64(w.traces).map_err(|e| e.to_string())?;
    walk_traces(mem, l, default, &mut per_tb, &mut budget, &mut out.partial);
    let domains = mem.read_u64(w.domains).unwrap_or(0);
    if domains != 0 {
        let mut tables = Vec::new();
        let mut domain_budget = MAX_DOMAINS;
        walk_table(
            mem,
            l,
            domains,
            &mut domain_budget,
            &mut out.partial,
            |_, table| tables.push(table),
        );
        for t in tables {
            walk_traces(mem, l, t, &mut per_tb, &mut budget, &mut out.partial);
        }
    }
    // Sites: the first (most recent) frame of each traceback.
    let mut cache = PageCache::new(mem);
    let mut sites: HashMap<(u64, u32), SiteSum> = HashMap::new();
    for (i, (&tb, &(size, count))) in per_tb.iter().enumerate() {
        if i % ENTRIES_PER_CACHE == ENTRIES_PER_CACHE - 1 {
            cache = PageCache::new(mem);
        }
        out.bytes = out.bytes.saturating_add(size);
        out.blocks += count;
        let Some((filename, lineno)) = frame(&cache, l, tb, 0) else {
            out.partial
                .push(format!("a traceback at 0x{tb:x} could not be read"));
            continue;
        };
        let s = sites.entry((filename, lineno)).or_default();
        s.size = s.size.saturating_add(size);
        s.count += count;
        if size > s.largest.1 {
            s.largest = (tb, size);
        }
    }
    out.partial.dedup();
    out.partial.truncate(8);
    let mut sites: Vec<((u64, u32), SiteSum)> = sites.into_iter().collect();
    // Largest first, as `statistics()` sorts them: by bytes, then blocks,
    // then (among equals) file name and line, descending. Names are read
    // only for the sites kept and those tied with the last one.
    sites.sort_unstable_by_key(|s| std::cmp::Reverse((s.1.size, s.1.count)));
    if let Some(last) = sites
        .get(top.saturating_sub(1))
        .map(|s| (s.1.size, s.1.count))
    {
        let tied = sites[top..]
            .iter()
            .take_while(|s| (s.1.size, s.1.count) == last)
            .count();
        sites.truncate(top + tied);
    }
    let objr = ObjReader::new(mem, &process.layout);
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut name = |p: u64| -> String {
        names
            .entry(p)
            .or_insert_with(|| {
                match l.filename {
                    FilenameKind::Object => objr.string(p, 4096).map(|(s, _)| s),
                    FilenameKind::CString => objr.c_string(p, 4096),
                }
                .unwrap_or_else(|_| "<unreadable>".to_string())
            })
            .clone()
    };
    let mut sites: Vec<(String, u32, SiteSum)> = sites
        .into_iter()
        .map(|((f, lineno), s)| (name(f), lineno, s))
        .collect();
    sites.sort_by(|a, b| (b.2.size, b.2.count, &b.0, b.1).cmp(&(a.2.size, a.2.count, &a.0, a.1)));
    sites.truncate(top);
    for (filename, lineno, s) in sites {
        let mut traceback = Vec::new();
        if max_nframe > 1 {
            let mut n = [0u8; 2];
            let n = match mem.read(s.largest.0.wrapping_add(l.tb_nframe), &mut n) {
                Ok(()) => (u16::from_le_bytes(n) as usize).min(MAX_FRAMES_SHOWN),
                Err(_) => 0,
            };
            for i in 0..n {
                match frame(&cache, l, s.largest.0, i) {
                    Some((f, line)) => traceback.push(SiteFrame {
                        filename: name(f),
                        lineno: line,
                    }),
                    None => break,
                }
            }
        }
        out.sites.push(Site {
            filename,
            lineno,
            size: s.size,
            count: s.count,
            traceback,
        });
    }
    Ok(out)
}

#[derive(Default)]
struct SiteSum {
    size: u64,
    count: u64,
    /// The traceback holding the most of the site's bytes, and those.
    largest: (u64, u64),
}

/// The state's config and tables: the globals (3.9–3.11), or the offset
/// of `_PyRuntime` at which a config, its memory counts and its tables
/// read as tracemalloc's (3.12+).
fn locate(
    mem: &dyn Memory,
    process: &PythonProcess,
    l: &TracemallocLayout,
) -> Result<Where, String> {
    let v = &process.version;
    match l.state {
        TracemallocState::Globals => {
            let Some([config, traces, domains]) = process.tracemalloc_globals else {
                return Err(format!(
                    "Python {v} keeps tracemalloc's traces in statics, and the interpreter's \
                     binary has no symbol table naming them (a stripped build)"
                ));
            };
            Ok(Where {
                config,
                traces,
                domains,
                memory: None,
            })
        }
        TracemallocState::InRuntime(offsets) => {
            let runtime = process
                .layout
                .runtime
                .interpreters_head
                .and_then(|h| process.interp_head_ptr.checked_sub(h))
                .ok_or("the runtime's address is not known")?;
            offsets
                .iter()
                .filter_map(|&off| runtime.checked_add(off))
                .find(|&state| plausible_state(mem, l, state))
                .map(|state| Where {
                    config: state,
                    traces: state + l.state_traces,
                    domains: state + l.state_domains,
                    memory: Some(state + l.state_traced_memory),
                })
                .ok_or_else(|| {
                    format!(
                        "Python {v}'s tracemalloc state does not read as one where its layout \
                         puts it"
                    )
                })
        }
    }
}

/// Whether a runtime state at `state` reads as tracemalloc's: a config
/// (initialized 0 to 2, tracing 0 or 1, 1 to 65,535 frames), traced bytes
/// within their peak, and tables while it traces.
fn plausible_state(mem: &dyn Memory, l: &TracemallocLayout, state: u64) -> bool {
    let mut c = [0u8; 12];
    if mem.read(state, &mut c).is_err() {
        return false;
    }
    let word = |at: u64| u32::from_le_bytes(c[at as usize..at as usize + 4].try_into().unwrap());
    let (initialized, tracing, nframe) =
        (word(0), word(l.config_tracing), word(l.config_max_nframe));
    if initialized > 2 || tracing > 1 || !(1..=MAX_NFRAME).contains(&nframe) {
        return false;
    }
    let (Ok(traced), Ok(peak)) = (
        mem.read_u64(state + l.state_traced_memory),
        mem.read_u64(state + l.state_traced_memory + 8),
    ) else {
        return false;
    };
    if traced > peak {
        return false;
    }
    if tracing == 0 {
        return true;
    }
    let table = |at: u64| mem.read_u64(at).ok().filter(|&t| t != 0 && t % 8 == 0);
    table(state + l.state_traces).is_some() && table(state + l.state_domains).is_some()
}

/// Sum the traces of one traces table per traceback.
fn walk_traces(
    mem: &dyn Memory,
    l: &TracemallocLayout,
    table: u64,
    per_tb: &mut HashMap<u64, (u64, u64)>,
    budget: &mut u64,
    partial: &mut Vec<String>,
) {
    let mut traces = Vec::new();
    walk_table(mem, l, table, budget, partial, |_, trace| {
        traces.push(trace)
    });
    // The traces themselves, in address order (they cluster).
    traces.sort_unstable();
    let mut cache = PageCache::new(mem);
    let mut buf = [0u8; 16];
    for (i, t) in traces.into_iter().enumerate() {
        if i % ENTRIES_PER_CACHE == ENTRIES_PER_CACHE - 1 {
            cache = PageCache::new(mem);
        }
        if cache.read(t, &mut buf).is_err() {
            partial.push(format!("a trace at 0x{t:x} could not be read"));
            continue;
        }
        let size = le_u64(&buf, 0);
        let tb = le_u64(&buf, l.trace_traceback);
        let e = per_tb.entry(tb).or_default();
        e.0 = e.0.saturating_add(size);
        e.1 += 1;
    }
}

/// Each (key, value) of a `_Py_hashtable_t` at `table`, at most `budget`
/// of them (lessened by those read).
fn walk_table(
    mem: &dyn Memory,
    l: &TracemallocLayout,
    table: u64,
    budget: &mut u64,
    partial: &mut Vec<String>,
    mut each: impl FnMut(u64, u64),
) {
    let mut head = [0u8; 24];
    if mem.read(table, &mut head).is_err() {
        partial.push(format!("the table at 0x{table:x} could not be read"));
        return;
    }
    let nentries = le_u64(&head, l.ht_nentries);
    let nbuckets = le_u64(&head, l.ht_nbuckets);
    let buckets = le_u64(&head, l.ht_buckets);
    if nbuckets == 0 || nbuckets > MAX_BUCKETS || buckets == 0 {
        if nentries != 0 {
            partial.push(format!(
                "the table at 0x{table:x} has {nbuckets} buckets for {nentries} entries"
            ));
        }
        return;
    }
    if nentries > *budget {
        partial.push(format!(
            "a table of {nentries} entries, more than the {MAX_TRACES} read"
        ));
    }
    // An entry more than the table says it has is a table that changed
    // (or a chain that loops): stopped there.
    let limit = nentries.min(*budget);
    let mut seen = 0u64;
    let mut cache = PageCache::new(mem);
    let mut in_cache = 0usize;
    let mut ptrs = vec![0u8; (BUCKETS_PER_READ * 8) as usize];
    let mut entry = [0u8; 32];
    let mut b = 0u64;
    'buckets: while b < nbuckets {
        let n = (nbuckets - b).min(BUCKETS_PER_READ);
        let chunk = &mut ptrs[..(n * 8) as usize];
        if mem.read(buckets + b * 8, chunk).is_err() {
            partial.push(format!("the buckets at 0x{buckets:x} could not be read"));
            break;
        }
        for i in 0..n {
            let mut e = le_u64(chunk, i * 8);
            while e != 0 {
                if seen >= limit {
                    partial.push(format!(
                        "the table at 0x{table:x} has more entries than the {nentries} it counts \
                         (it changed while read, or loops)"
                    ));
                    break 'buckets;
                }
                in_cache += 1;
                if in_cache == ENTRIES_PER_CACHE {
                    cache = PageCache::new(mem);
                    in_cache = 0;
                }
                if cache.read(e, &mut entry).is_err() {
                    partial.push(format!("an entry at 0x{e:x} could not be read"));
                    break;
                }
                seen += 1;
                each(le_u64(&entry, l.entry_key), le_u64(&entry, l.entry_value));
                e = le_u64(&entry, 0);
            }
        }
        b += n;
    }
    *budget -= seen;
}

/// Frame `i` of the traceback at `tb`: its filename object and line.
fn frame(mem: &dyn Memory, l: &TracemallocLayout, tb: u64, i: usize) -> Option<(u64, u32)> {
    let at = tb
        .checked_add(l.tb_frames)?
        .checked_add(i as u64 * l.frame_size)?;
    let mut f = [0u8; 12];
    mem.read(at, &mut f[..l.frame_size as usize]).ok()?;
    let filename = le_u64(&f, 0);
    let lineno = u32::from_le_bytes(
        f[l.frame_lineno as usize..l.frame_lineno as usize + 4]
            .try_into()
            .ok()?,
    );
    (filename != 0).then_some((filename, lineno))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;

    const TABLE: u64 = 0x1000;
    const BUCKETS: u64 = 0x2000;
    const ENTRIES: u64 = 0x3000;
    const TRACES: u64 = 0x4000;

    fn l() -> &'static TracemallocLayout {
        crate::cpython_layouts::tracemalloc::for_version(3, 12).unwrap()
    }

    /// Words, in a page of their own (the page cache reads 1 KiB blocks).
    fn words(ws: &[u64]) -> Vec<u8> {
        let mut b: Vec<u8> = ws.iter().flat_map(|w| w.to_le_bytes()).collect();
        b.resize(0x1000, 0);
        b
    }

    /// A traces table of `nentries` (as it says), `nbuckets` buckets, and
    /// three entries in bucket 0: e0 → e1 → e2 → `last_next`.
    fn table(nentries: u64, nbuckets: u64, last_next: u64) -> SliceMemory {
        let mut m = SliceMemory::new();
        m.add(TABLE, words(&[nentries, nbuckets, BUCKETS]));
        m.add(BUCKETS, words(&[ENTRIES, 0, 0, 0]));
        let e = |i: u64| ENTRIES + i * 32;
        let mut entries = Vec::new();
        for i in 0..3 {
            let next = if i == 2 { last_next } else { e(i + 1) };
            entries.extend([next, 0, 0x9000 + i, TRACES + i * 16]);
        }
        m.add(ENTRIES, words(&entries));
        // Three traces of 100, 200, 300 bytes, two sharing a traceback.
        m.add(TRACES, words(&[100, 0x5000, 200, 0x5000, 300, 0x6000]));
        m
    }

    fn walk(m: &SliceMemory) -> (HashMap<u64, (u64, u64)>, Vec<String>) {
        let mut per_tb = HashMap::new();
        let mut partial = Vec::new();
        let mut budget = MAX_TRACES;
        walk_traces(m, l(), TABLE, &mut per_tb, &mut budget, &mut partial);
        (per_tb, partial)
    }

    #[test]
    fn traces_are_summed_per_traceback() {
        let (per_tb, partial) = walk(&table(3, 4, 0));
        assert!(partial.is_empty(), "{partial:?}");
        assert_eq!(per_tb.get(&0x5000), Some(&(300, 2)));
        assert_eq!(per_tb.get(&0x6000), Some(&(300, 1)));
    }

    /// A chain that loops back to its first entry, a count the table does
    /// not hold, a bucket count past the bound: each stops, says so, and
    /// reads no more than the table claims.
    #[test]
    fn a_looping_or_lying_table_is_bounded() {
        let (per_tb, partial) = walk(&table(3, 4, ENTRIES));
        assert_eq!(per_tb.values().map(|v| v.1).sum::<u64>(), 3);
        assert!(
            partial[0].contains("more entries than the 3"),
            "{partial:?}"
        );
        let (per_tb, partial) = walk(&table(1, 4, 0));
        assert_eq!(per_tb.values().map(|v| v.1).sum::<u64>(), 1);
        assert!(!partial.is_empty());
        let (per_tb, partial) = walk(&table(3, u64::MAX, 0));
        assert!(per_tb.is_empty());
        assert!(partial[0].contains("buckets"), "{partial:?}");
        // Buckets that run into unmapped memory: what was read is kept.
        let (per_tb, partial) = walk(&table(3, 1 << 20, 0));
        assert_eq!(per_tb.values().map(|v| v.1).sum::<u64>(), 0);
        assert!(partial[0].contains("could not be read"), "{partial:?}");
    }
}
