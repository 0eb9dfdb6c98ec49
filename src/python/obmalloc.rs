//! CPython's object allocator (obmalloc) from outside: its arena table,
//! read through each version's layout (src/cpython_layouts/obmalloc.rs),
//! every count and pointer bounded. Reads memory only; /proc is
//! src/procfs.rs's.

use crate::cpython_layouts::obmalloc::{ArenaTable, ObmallocLayout};
use crate::memory::{le_u32, le_u64, Memory, MemoryExt};
use crate::python::bounds::MAX_INTERPRETERS;
use crate::python::process::PythonProcess;

/// Arena slots read from one table, at most (1 TiB of 1 MiB arenas).
const MAX_ARENA_SLOTS: u64 = 1 << 20;

/// One arena in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arena {
    pub(crate) address: u64,
    /// Pools carved from it and in use (`ntotalpools - nfreepools`).
    pub(crate) used_pools: u64,
    pub(crate) total_pools: u64,
}

/// The allocator's arenas, of every interpreter with its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arenas {
    pub(crate) arena_size: u64,
    pub(crate) pool_size: u64,
    pub(crate) arenas: Vec<Arena>,
    /// What did not add up (a table changing while read).
    pub(crate) partial: Vec<String>,
}

/// Read the arena table(s) of `process`; Err: why they cannot be reached.
pub(crate) fn read_arenas(mem: &dyn Memory, process: &PythonProcess) -> Result<Arenas, String> {
    let v = &process.version;
    let Some(l) = crate::cpython_layouts::obmalloc::for_version(v.major, v.minor) else {
        return Err(format!(
            "Python {v}'s object allocator layout is not known (3.8 to 3.15 are)"
        ));
    };
    // (arenas, maxarenas, narenas) of each table.
    let mut tables: Vec<(u64, u64, u64)> = Vec::new();
    match l.table {
        ArenaTable::Statics => {
            let Some([a, m, n]) = process.obmalloc_statics else {
                return Err(format!(
                    "Python {v} keeps its arena table in statics, and the interpreter's binary \
                     has no symbol table naming them (a stripped build)"
                ));
            };
            let t = (
                mem.read_u64(a).map_err(|e| e.to_string())?,
                u64::from(mem.read_u32(m).map_err(|e| e.to_string())?),
                mem.read_u64(n).map_err(|e| e.to_string())?,
            );
            if !plausible(mem, l, t) {
                return Err(format!("Python {v}'s arena table does not read as one"));
            }
            tables.push(t);
        }
        ArenaTable::InInterp(offsets) | ArenaTable::InterpPointer(offsets) => {
            let pointer = matches!(l.table, ArenaTable::InterpPointer(_));
            let interps = interpreters(mem, process);
            // The one offset at which the main (first) interpreter's state
            // reads as a table; the others are read at the same one.
            let state_at = |interp: u64, off: u64| -> Option<u64> {
                let at = interp.checked_add(off)?;
                if pointer {
                    mem.read_u64(at).ok().filter(|&p| p != 0)
                } else {
                    Some(at)
                }
            };
            let read_state = |state: u64| -> Option<(u64, u64, u64)> {
                let mgmt = state.checked_add(l.mgmt)?;
                Some((
                    mem.read_u64(mgmt + l.mgmt_arenas).ok()?,
                    u64::from(mem.read_u32(mgmt + l.mgmt_maxarenas).ok()?),
                    mem.read_u64(mgmt + l.mgmt_narenas).ok()?,
                ))
            };
            let main = *interps.last().ok_or("no interpreter to read")?;
            let off = offsets
                .iter()
                .copied()
                .find(|&off| {
                    state_at(main, off)
                        .and_then(read_state)
                        .is_some_and(|t| t.1 > 0 && plausible(mem, l, t))
                })
                .ok_or_else(|| {
                    format!(
                        "Python {v}'s obmalloc state does not read as one where its layout puts it"
                    )
                })?;
            let mut states = Vec::new();
            for &interp in &interps {
                let Some(state) = state_at(interp, off) else {
                    continue;
                };
                if states.contains(&state) {
                    continue;
                }
                states.push(state);
                // An interpreter sharing the main one's allocator has an
                // empty table of its own (3.12).
                if let Some(t) = read_state(state).filter(|t| t.1 > 0 && plausible(mem, l, *t)) {
                    tables.push(t);
                }
            }
        }
    }
    let mut out = Arenas {
        arena_size: l.arena_size,
        pool_size: l.pool_size,
        ..Default::default()
    };
    let max_pools = l.arena_size / l.pool_size;
    for (arenas, maxarenas, narenas) in tables {
        let mut found = 0u64;
        let per_read = 1u64 << 16;
        let mut first = 0;
        while first < maxarenas {
            let n = per_read.min(maxarenas - first);
            let at = arenas + first * l.arena_object_size;
            let len = (n * l.arena_object_size) as usize;
            let bytes = mem
                .read_vec(at, len, len)
                .map_err(|e| format!("reading the arena table at 0x{at:x}: {e}"))?;
            first += n;
            for slot in bytes.chunks_exact(l.arena_object_size as usize) {
                let address = le_u64(slot, l.ao_address);
                if address == 0 {
                    continue;
                }
                let nfree = u64::from(le_u32(slot, l.ao_nfreepools));
                let ntotal = u64::from(le_u32(slot, l.ao_ntotalpools));
                found += 1;
                if ntotal > max_pools || nfree > ntotal {
                    out.partial.push(format!(
                        "arena 0x{address:x} has {nfree} of {ntotal} pools free"
                    ));
                    continue;
                }
                out.arenas.push(Arena {
                    address,
                    used_pools: ntotal - nfree,
                    total_pools: ntotal,
                });
            }
        }
        if found != narenas {
            out.partial.push(format!(
                "the allocator counts {narenas} arenas, its table has {found} (it changed while read)"
            ));
        }
    }
    out.partial.truncate(8);
    Ok(out)
}

/// A table's counts in bounds, and its slots readable.
fn plausible(
    mem: &dyn Memory,
    l: &ObmallocLayout,
    (arenas, maxarenas, narenas): (u64, u64, u64),
) -> bool {
    if maxarenas == 0 {
        return arenas == 0 && narenas == 0;
    }
    arenas != 0
        && arenas % 8 == 0
        && maxarenas <= MAX_ARENA_SLOTS
        && maxarenas % 16 == 0
        && narenas <= maxarenas
        && mem
            .read_u64(arenas + (maxarenas - 1) * l.arena_object_size)
            .is_ok()
}

/// The interpreters, newest first (the main one last), bounded.
fn interpreters(mem: &dyn Memory, process: &PythonProcess) -> Vec<u64> {
    let mut out = Vec::new();
    let mut interp = mem.read_u64(process.interp_head_ptr).unwrap_or(0);
    while interp != 0 && out.len() < MAX_INTERPRETERS && !out.contains(&interp) {
        out.push(interp);
        interp = mem
            .read_u64(interp.wrapping_add(process.layout.interp.next))
            .unwrap_or(0);
    }
    out
}
