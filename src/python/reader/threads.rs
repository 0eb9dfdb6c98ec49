//! Interpreters and their thread states: the interpreter list, each
//! thread's state and kernel tid (learnt from glibc before 3.11, translated
//! out of a pid namespace), the GIL holder and the collector's flag, and
//! thread names from `threading._active`.

use super::types::{RawThread, Reader};
use crate::error::{Error, MemError, Result};
use crate::memory::{le_u64, Memory, MemoryExt};
use crate::python::bounds::{MAX_INTERPRETERS, MAX_THREADS};
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::process::{GilSource, GilSyncSource};
use crate::target::TargetSource;
use foldhash::HashMap as FastMap;
use foldhash::HashMapExt;
use foldhash::HashSet as FastSet;
use foldhash::HashSetExt;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// A thread name missing from the cache triggers a rescan at most this often.
const NAME_RESCAN: Duration = Duration::from_millis(500);

impl Reader {
    pub(super) fn interpreters(&self, mem: &dyn Memory) -> Result<Vec<(u64, i64)>> {
        let l = &self.process.layout;
        let head = mem
            .read_u64(self.process.interp_head_ptr)
            .map_err(|e| Error::from_mem(self.process.pid, e))?;
        if head == 0 {
            return Err(Error::NotInitialized {
                pid: self.process.pid,
            });
        }
        let mut out = Vec::new();
        let mut seen = FastSet::new();
        let mut i = head;
        while i != 0 && out.len() < MAX_INTERPRETERS && seen.insert(i) {
            let id = match l.interp.id {
                Some(off) => mem
                    .read_u64(i.wrapping_add(off))
                    .map(|v| v as i64)
                    .unwrap_or(-1),
                None => -1,
            };
            out.push((i, id));
            i = mem.read_u64(i.wrapping_add(l.interp.next)).unwrap_or(0);
        }
        // Without an id field, number them from the oldest (the main one, last in the list).
        if l.interp.id.is_none() {
            let n = out.len() as i64;
            for (k, e) in out.iter_mut().enumerate() {
                e.1 = n - 1 - k as i64;
            }
        }
        Ok(out)
    }

    /// Each Python thread's kernel tid, and whether it holds the GIL: what
    /// deciding which threads to pause needs, without walking any frame.
    pub(crate) fn python_threads(&mut self, src: &dyn TargetSource) -> Result<Vec<(i32, bool)>> {
        let cache = PageCache::resume(src, std::mem::take(&mut self.thread_pages));
        let threads = self.threads(src, &cache)?;
        let mut holders: FastMap<u64, Option<u64>> = FastMap::new();
        let out = threads
            .iter()
            .filter_map(|t| {
                let holder = *holders
                    .entry(t.interp)
                    .or_insert_with(|| self.gil_holder(&cache, t.interp));
                Some((t.native_tid? as i32, holder == Some(t.tstate)))
            })
            .collect();
        self.thread_pages = cache.into_store();
        Ok(out)
    }

    /// Walk interpreters and thread states (not their frames: see
    /// [`Reader::walk_thread`]).
    pub(super) fn threads(
        &mut self,
        src: &dyn TargetSource,
        mem: &dyn Memory,
    ) -> Result<Vec<RawThread>> {
        let l = self.process.layout.clone();
        let mut out = Vec::new();
        let mut buf = vec![0u8; l.thread.size as usize];
        for (interp, interp_id) in self.interpreters(mem)? {
            let mut seen = FastSet::new();
            let mut ts = mem
                .read_u64(interp.wrapping_add(l.interp.tstate_head))
                .unwrap_or(0);
            while ts != 0 && out.len() < MAX_THREADS && seen.insert(ts) {
                if let Err(e) = mem.read(ts, &mut buf) {
                    if e == MemError::Gone {
                        return Err(Error::ProcessExited {
                            pid: self.process.pid,
                        });
                    }
                    break;
                }
                out.push(RawThread {
                    interp,
                    interp_id,
                    ..RawThread::from_state(&l, &buf, ts)
                });
                ts = le_u64(&buf, l.thread.next);
            }
        }
        if l.thread.native_thread_id.is_none() {
            self.map_pthreads(src, mem, &mut out);
        }
        self.translate_namespaced(src, &mut out);
        Ok(out)
    }

    /// Before 3.11 the thread state has no kernel tid: find it inside
    /// glibc's `struct pthread` (which `thread_id` points at). The offset is
    /// learnt once per process from the tids the kernel lists.
    /// A containerised target records tids of its own pid namespace: turn
    /// them into ours (the map is rebuilt when a thread is not in it).
    pub(super) fn translate_namespaced(
        &mut self,
        src: &dyn TargetSource,
        threads: &mut [RawThread],
    ) {
        let ns = self.ns_tids.get_or_insert_with(|| src.namespaced_tids());
        let Some(map) = ns else { return };
        if threads
            .iter()
            .any(|t| t.native_tid.is_some_and(|v| !map.contains_key(&v)))
        {
            *ns = src.namespaced_tids();
        }
        let Some(map) = ns else { return };
        for t in threads.iter_mut() {
            t.native_tid = t.native_tid.and_then(|v| map.get(&v).copied());
        }
    }

    pub(super) fn map_pthreads(
        &mut self,
        src: &dyn TargetSource,
        mem: &dyn Memory,
        threads: &mut [RawThread],
    ) {
        if self.tid_offset.is_none() && !threads.is_empty() {
            // Learnt once; afterwards the field is read directly, so sampling
            // does not list /proc/PID/task every time. In another pid
            // namespace glibc holds the target's own view of the tids.
            let tidset: HashSet<u32> = match src.namespaced_tids() {
                Some(map) => map.keys().copied().collect(),
                None => match src.threads() {
                    Ok(tids) => tids.iter().map(|t| *t as u32).collect(),
                    Err(_) => return,
                },
            };
            self.tid_offset = Some(calibrate_tid_offset(mem, threads, &tidset));
        }
        if let Some(Some(off)) = self.tid_offset {
            for t in threads.iter_mut() {
                // glibc writes the tid when it (re)uses a struct pthread, so
                // the field is current even for recycled thread descriptors.
                t.native_tid = mem
                    .read_u32(t.thread_id.wrapping_add(off))
                    .ok()
                    .filter(|v| *v != 0 && *v <= i32::MAX as u32);
            }
        }
    }

    pub(super) fn gil_holder(&self, mem: &dyn Memory, interp: u64) -> Option<u64> {
        match self.process.gil {
            GilSource::TstatePtr(a) => mem.read_u64(a).ok(),
            GilSource::PerInterp {
                ceval_gil,
                last_holder,
                locked,
            } => {
                let g = mem
                    .read_u64(interp.wrapping_add(ceval_gil))
                    .ok()
                    .filter(|g| *g != 0)?;
                let locked = mem.read_u32(g.wrapping_add(locked)).ok()?;
                if locked == 0 {
                    return Some(0);
                }
                mem.read_u64(g.wrapping_add(last_holder)).ok()
            }
            GilSource::Unknown => None,
        }
    }

    /// Where the `collecting` flag of `interp`'s garbage collector is: the
    /// interpreter's `gc.collecting` (3.9+), or the runtime's (3.7, 3.8).
    /// None where the layout has neither.
    pub(super) fn gc_flag_addr(&self, interp: u64) -> Option<u64> {
        let l = &self.process.layout;
        match (l.interp.gc_collecting, l.runtime.gc_collecting) {
            (Some(off), _) => Some(interp.wrapping_add(off)),
            // 3.7+: the head pointer lives inside `_PyRuntime`.
            (None, Some(off)) => Some(
                self.process
                    .interp_head_ptr
                    .wrapping_sub(l.runtime.interpreters_head?)
                    .wrapping_add(off),
            ),
            (None, None) => None,
        }
    }

    /// Where the GIL's mutex and condition variables of `interp` are.
    pub(super) fn gil_sync_ranges(&self, mem: &dyn Memory, interp: u64) -> Vec<(u64, u64)> {
        match &self.process.gil_sync {
            GilSyncSource::Ranges(v) => v.clone(),
            GilSyncSource::Pointer { ptr, size } => match mem.read_u64(*ptr) {
                Ok(p) if p != 0 => vec![(p, p.wrapping_add(*size))],
                _ => Vec::new(),
            },
            GilSyncSource::PerInterp {
                ceval_gil,
                start,
                end,
            } => match mem.read_u64(interp.wrapping_add(*ceval_gil)) {
                Ok(g) if g != 0 => vec![(g.wrapping_add(*start), g.wrapping_add(*end))],
                _ => Vec::new(),
            },
            GilSyncSource::Unknown => Vec::new(),
        }
    }

    /// Thread names from each interpreter's `threading._active`, rescanned
    /// only when a thread we have not named appears, and not too often.
    pub(super) fn refresh_names(&mut self, mem: &dyn Memory, raw: &[RawThread]) {
        let missing = raw
            .iter()
            .any(|t| !self.names.contains_key(&(t.interp, t.thread_id)));
        if !missing
            || self
                .last_name_scan
                .is_some_and(|t| t.elapsed() < NAME_RESCAN)
        {
            return;
        }
        self.last_name_scan = Some(Instant::now());
        let l = &self.process.layout;
        let objr = ObjReader::new(mem, l);
        let attr = l.thread_name_attr;
        let interps: HashSet<u64> = raw.iter().map(|t| t.interp).collect();
        for interp in interps {
            let scan = || -> Result<Vec<(u64, String)>, MemError> {
                let modules = mem.read_u64(interp.wrapping_add(l.interp.modules))?;
                if modules == 0 {
                    return Ok(Vec::new());
                }
                let Some(threading) = objr.dict_get(modules, "threading")? else {
                    return Ok(Vec::new());
                };
                let md = mem.read_u64(threading.wrapping_add(l.object.module_dict))?;
                let Some(active) = objr.dict_get(md, "_active")? else {
                    return Ok(Vec::new());
                };
                // The dict may be resized under the read: an entry is taken
                // only with an int key and a str name, so a stale table's
                // bytes name no thread (3.10 once named one "" that way).
                let typed = |obj: u64, names: &[&str]| {
                    objr.type_name(obj)
                        .is_ok_and(|t| names.contains(&t.as_str()))
                };
                let mut names = Vec::new();
                for (k, v) in objr.dict_items(active, MAX_THREADS as u64)? {
                    if !typed(k, &["int", "long"]) {
                        continue;
                    }
                    let Ok(ident) = objr.int_u64(k) else { continue };
                    if let Ok(Some(n)) = objr.instance_attr(v, attr) {
                        if !typed(n, &["str", "unicode"]) {
                            continue;
                        }
                        if let Ok((s, _)) = objr.string(n, 256) {
                            names.push((ident, s));
                        }
                    }
                }
                Ok(names)
            };
            if let Ok(names) = scan() {
                // Replace this interpreter's names: threads that ended drop out,
                // so a long recording of a churning pool keeps the cache small.
                self.names.retain(|(i, _), _| *i != interp);
                for (ident, name) in names {
                    self.names.insert((interp, ident), name);
                }
            }
        }
    }
}

/// Find where glibc keeps the kernel tid in `struct pthread`: an offset at
/// which every thread's pthread holds one of the process's tids.
fn calibrate_tid_offset(
    mem: &dyn Memory,
    threads: &[RawThread],
    tids: &HashSet<u32>,
) -> Option<u64> {
    const WINDOW: usize = 2048;
    let first = threads.iter().find(|t| t.thread_id != 0)?;
    let mut buf = vec![0u8; WINDOW];
    mem.read(first.thread_id, &mut buf).ok()?;
    // glibc 2.36 on x86-64 keeps it at 0x2d0; try that first, then any.
    let mut offsets: Vec<u64> = vec![0x2d0];
    offsets.extend((0..WINDOW as u64).step_by(4).filter(|o| *o != 0x2d0));
    offsets.into_iter().find(|&off| {
        let v = crate::memory::le_u32(&buf, off);
        if !tids.contains(&v) {
            return false;
        }
        let mut seen = FastSet::new();
        threads.iter().filter(|t| t.thread_id != 0).all(|t| {
            mem.read_u32(t.thread_id.wrapping_add(off))
                .is_ok_and(|v| tids.contains(&v) && seen.insert(v))
        })
    })
}
