//! Code objects: the cache (checked against each object's header on every
//! use), decoding name, file, line table and positions, the instruction's
//! byte offset, and the locals a frame's slots hold (shown, or followed to
//! the locks they name).

use super::types::{stack_buf, CodeInfo, LocalRef, RawFrame, Reader};
use crate::cpython_layouts::{InstrPosition, LineTableFormat};
use crate::error::MemError;
use crate::memory::{le_i32, le_u64, Memory, MemoryExt};
use crate::python::linetable::{LineTable, Positions};
use crate::python::objects::ObjReader;
use crate::stack::Local;
use std::sync::Arc;

const MAX_CODE_CACHE: usize = 100_000;
const MAX_CODE_TYPES: usize = 1024;
/// Longest line table we decode; CPython's own are far smaller.
const MAX_LINETABLE: u64 = 1 << 20;
/// Most locals shown per frame.
pub(super) const MAX_LOCALS: u64 = 256;

/// Lock types whose waits can be named: `thread.lock` (2.7), `_thread.lock`,
/// `_thread.RLock`; `Condition` is followed to name a Condition's waiter.
fn is_lock_type(name: &str) -> bool {
    matches!(
        name,
        "thread.lock" | "_thread.lock" | "_thread.RLock" | "lock" | "RLock" | "Condition"
    )
}

impl Reader {
    /// Offset in bytes of the frame's instruction in its bytecode.
    pub(super) fn byte_offset(&self, f: &RawFrame) -> u64 {
        let l = &self.process.layout;
        match (l.frame.position.clone(), l.code.code_adaptive) {
            (InstrPosition::InstrPointer(_), Some(adaptive)) => {
                f.instr.saturating_sub(f.code.wrapping_add(adaptive))
            }
            _ => f.instr,
        }
    }

    /// The code object at `addr`, from the cache when its header is unchanged.
    /// `Ok(None)` when the object is not a code object.
    pub(super) fn code_info(
        &mut self,
        mem: &dyn Memory,
        addr: u64,
        positions: bool,
    ) -> Result<Option<Arc<CodeInfo>>, MemError> {
        let c = self.process.layout.code.clone();
        let ob_type_off = self.process.layout.object.ob_type;
        // The header fits on the stack for every known layout; a larger one
        // (a future `_Py_DebugOffsets`) takes the heap.
        let mut small = [0u8; 512];
        let mut large = Vec::new();
        let hdr = stack_buf(&mut small, &mut large, c.size as usize);
        mem.read(addr, hdr)?;
        let hdr: &[u8] = hdr;
        let header = [
            le_u64(hdr, ob_type_off),
            le_u64(hdr, c.filename),
            le_u64(hdr, c.name),
            le_u64(hdr, c.linetable),
        ];
        let with_positions = positions && c.linetable_format == LineTableFormat::Locations311;
        if let Some(ci) = self.code_cache.get(&addr) {
            if ci.header == header
                && ci.firstlineno == le_i32(hdr, c.firstlineno)
                && (ci.positions.is_some() || !with_positions)
            {
                return Ok(Some(ci.clone()));
            }
        }
        let objr = ObjReader::new(mem, &self.process.layout);
        let ty = header[0];
        let is_code = match self.code_types.get(&ty) {
            Some(v) => *v,
            None => {
                let v = objr.type_name(addr).map(|n| n == "code").unwrap_or(false);
                // Torn reads can show any word as a type: keep the cache small.
                if self.code_types.len() >= MAX_CODE_TYPES {
                    self.code_types.clear();
                }
                self.code_types.insert(ty, v);
                v
            }
        };
        if !is_code {
            return Ok(None);
        }
        let name = objr.full_string(header[2])?;
        let file = objr.full_string(header[1])?;
        let function = match c.qualname {
            Some(q) => objr
                .full_string(le_u64(hdr, q))
                .unwrap_or_else(|_| name.clone()),
            None => name,
        };
        let firstlineno = le_i32(hdr, c.firstlineno);
        let (table, _) = objr.bytes(header[3], MAX_LINETABLE)?;
        let lines = LineTable::parse(c.linetable_format, &table, firstlineno);
        let positions = (c.linetable_format
            == crate::cpython_layouts::LineTableFormat::Locations311)
            .then(|| Positions::parse(&table, firstlineno));
        let flags = le_i32(hdr, c.flags) as u64;
        let nargs = le_i32(hdr, c.argcount).max(0) as u64
            + c.kwonlyargcount.map_or(0, |o| le_i32(hdr, o).max(0) as u64)
            + (flags & 0x4 != 0) as u64
            + (flags & 0x8 != 0) as u64;
        let varnames = le_u64(hdr, c.varnames);
        let nslots = match c.localspluskinds {
            // 3.11+: every named slot (locals, cells, free variables).
            Some(_) => objr.tuple_items(varnames, 0).map(|(_, n)| n).unwrap_or(0),
            None => le_i32(hdr, c.nlocals).max(0) as u64,
        };
        let ci = Arc::new(CodeInfo {
            header,
            firstlineno,
            // Escaped once here, so that every sample's frames share these
            // (see `ThreadStack::escape_names`, which then finds nothing to do).
            function: crate::stack::escape_controls(&function).into(),
            file: crate::stack::escape_controls(&file).into(),
            lines,
            positions,
            nslots,
            nargs,
            varnames,
            kinds: c.localspluskinds.map_or(0, |o| le_u64(hdr, o)),
            names: Default::default(),
        });
        if self.code_cache.len() >= MAX_CODE_CACHE {
            self.code_cache.clear();
        }
        self.code_cache.insert(addr, ci.clone());
        Ok(Some(ci))
    }

    pub(super) fn locals(
        &self,
        mem: &dyn Memory,
        ci: &CodeInfo,
        f: &RawFrame,
        chars: usize,
    ) -> Vec<Local> {
        let objr = ObjReader::new(mem, &self.process.layout);
        let n = ci.nslots.min(MAX_LOCALS);
        let (names, slots) = self.local_slots(&objr, ci, f);
        if slots.is_empty() {
            return Vec::new();
        }
        let kinds = if ci.kinds != 0 {
            objr.bytes(ci.kinds, n).map(|(k, _)| k).unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut out = Vec::new();
        for (i, (name, mut v)) in names.iter().zip(slots).enumerate() {
            // CO_FAST_HIDDEN (0x10): inlined comprehension temporaries, not user locals.
            if kinds.get(i).is_some_and(|k| k & 0x10 != 0) {
                continue;
            }
            if v == 0 {
                continue;
            }
            // Cells and free variables hold a cell object: show what it holds.
            if kinds.get(i).is_some_and(|k| k & 0xc0 != 0)
                && objr.type_name(v).is_ok_and(|t| t == "cell")
            {
                match mem.read_u64(v.wrapping_add(self.process.layout.object.cell_ref)) {
                    Ok(0) | Err(_) => continue,
                    Ok(inner) => v = inner,
                }
            }
            let Some(name) = name.clone() else {
                continue;
            };
            let r = objr.repr(v, chars);
            out.push(Local {
                name,
                repr: r.text,
                left_out: r.left_out,
                is_arg: (i as u64) < ci.nargs,
            });
        }
        out
    }

    /// The locals of one frame that refer to locks or Conditions (`all`:
    /// to anything), each with its object.
    pub(super) fn local_refs(
        &self,
        mem: &dyn Memory,
        ci: &CodeInfo,
        f: &RawFrame,
        frame: usize,
        all: bool,
    ) -> Vec<LocalRef> {
        let l = &self.process.layout;
        let objr = ObjReader::new(mem, l);
        let (names, slots) = self.local_slots(&objr, ci, f);
        // The object header ends after ob_type.
        let head = l.object.ob_type + 8;
        let mut out = Vec::new();
        for (name, v) in names.iter().zip(slots) {
            if v == 0 {
                continue;
            }
            let Ok(kind) = objr.type_name(v) else {
                continue;
            };
            if !all && !is_lock_type(&kind) {
                continue;
            }
            let Some(name) = name.clone() else {
                continue;
            };
            let inner_addr = v.wrapping_add(head);
            out.push(LocalRef {
                frame,
                name,
                obj: v,
                kind,
                inner: mem.read_u64(inner_addr).unwrap_or(0),
                inner_addr,
            });
        }
        out
    }

    /// The names of a frame's local slots and what each holds (0: nothing),
    /// one read of the slots; both empty when either cannot be read.
    fn local_slots(
        &self,
        objr: &ObjReader,
        ci: &CodeInfo,
        f: &RawFrame,
    ) -> (Arc<[Option<String>]>, Vec<u64>) {
        let l = &self.process.layout;
        let names = local_names(objr, ci);
        if names.is_empty() {
            return (names, Vec::new());
        }
        let slots_at = f.addr.wrapping_add(l.frame.localsplus);
        let Ok(raw) = objr.mem.read_vec(slots_at, names.len() * 8, 1 << 20) else {
            return (Arc::from([]), Vec::new());
        };
        let slots = (0..names.len() as u64)
            .map(|i| le_u64(&raw, i * 8) & !l.frame.pointer_tag_bits)
            .collect();
        (names, slots)
    }

    /// The objects a frame's local slots hold, unchecked: what
    /// [`Reader::local_refs`] would read, for fetching their pages first.
    pub(super) fn local_objects(&self, mem: &dyn Memory, ci: &CodeInfo, f: &RawFrame) -> Vec<u64> {
        let objr = ObjReader::new(mem, &self.process.layout);
        let (_, mut slots) = self.local_slots(&objr, ci, f);
        slots.retain(|v| *v != 0);
        slots
    }
}

/// The names of code object `ci`'s local slots (None where one could not
/// be read), read once per code object (every frame of a function has the
/// same) once all of them could be; empty when its tuple cannot be read.
fn local_names(objr: &ObjReader, ci: &CodeInfo) -> Arc<[Option<String>]> {
    if let Some(names) = ci.names.get() {
        return names.clone();
    }
    let n = ci.nslots.min(MAX_LOCALS);
    let Ok((objs, _)) = objr.tuple_items(ci.varnames, n) else {
        return Arc::from([]);
    };
    let names: Arc<[Option<String>]> = objs.iter().map(|o| objr.full_string(*o).ok()).collect();
    if names.iter().all(Option::is_some) {
        let _ = ci.names.set(names.clone());
    }
    names
}
