//! A task's own fields: a C `TaskObj` read as one struct, a Python-level
//! `Task` from its `__dict__`, told apart by the type's MRO.

use super::objects::{callback_list, py_attr, py_state};
use super::state::{AsyncioReader, Kind, RawTask};
use crate::cpython_layouts::asyncio::AsyncioLayout;
use crate::memory::{le_u64, le_u8, MemoryExt};
use crate::python::objects::ObjReader;

impl AsyncioReader {
    /// The type's MRO as type names, cached per type.
    pub(super) fn mro(&mut self, objr: &ObjReader, ty: u64, l: &AsyncioLayout) -> Vec<String> {
        if let Some(v) = self.mro_names.get(&ty) {
            return v.clone();
        }
        let mut names = Vec::new();
        if let Ok(mro) = objr.mem.read_u64(ty.wrapping_add(l.type_mro)) {
            if let Ok((types, _)) = objr.tuple_items(mro, 32) {
                for t in types {
                    let n = objr
                        .mem
                        .read_u64(t.wrapping_add(objr.layout.object.tp_name))
                        .and_then(|p| objr.c_string(p, 128));
                    if let Ok(n) = n {
                        names.push(n);
                    }
                }
            }
        }
        if self.mro_names.len() > 4096 {
            self.mro_names.clear();
        }
        self.mro_names.insert(ty, names.clone());
        names
    }

    pub(super) fn kind(&mut self, objr: &ObjReader, obj: u64, l: &AsyncioLayout) -> Kind {
        let Ok(ty) = objr.type_of(obj) else {
            return Kind::Other;
        };
        if let Some(k) = self.kinds.get(&ty) {
            return *k;
        }
        let mro = self.mro(objr, ty, l);
        let has = |n: &str| mro.iter().any(|m| m == n);
        let k = if has("_asyncio.Task") {
            Kind::CTask
        } else if has("_asyncio.Future") {
            Kind::CFuture
        } else if has("Task") && objr.instance_attr(obj, "_coro").is_ok_and(|v| v.is_some()) {
            Kind::PyTask
        } else if has("Future") && py_attr(objr, l, obj, "_state").is_some() {
            // A pending Python future's `_state` is its class's default.
            Kind::PyFuture
        } else {
            Kind::Other
        };
        if self.kinds.len() > 4096 {
            self.kinds.clear();
        }
        self.kinds.insert(ty, k);
        k
    }

    pub(super) fn read_tasks(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        addrs: &[u64],
    ) -> Vec<RawTask> {
        let mut out = Vec::with_capacity(addrs.len());
        let mut buf = vec![0u8; l.task_size as usize];
        for &a in addrs {
            match self.kind(objr, a, l) {
                Kind::CTask => {
                    if objr.mem.read(a, &mut buf).is_err() {
                        continue;
                    }
                    let flag = |f: crate::cpython_layouts::asyncio::Flag| {
                        le_u8(&buf, f.offset) & f.mask != 0
                    };
                    let cancels = l
                        .task_num_cancels_requested
                        .map_or(0, |o| crate::memory::le_u32(&buf, o));
                    let mut callbacks = Vec::new();
                    let cb0 = le_u64(&buf, l.fut_callback0);
                    if cb0 != 0 {
                        callbacks.push(cb0);
                    }
                    let list = le_u64(&buf, l.fut_callbacks);
                    if list != 0 {
                        callbacks.extend(callback_list(objr, list));
                    }
                    let awaited_by = l.awaited_by.map(|ab| {
                        let v = le_u64(&buf, ab.awaited_by);
                        if v == 0 {
                            Vec::new()
                        } else if le_u8(&buf, ab.is_set) != 0 {
                            objr.set_items(v, 4096).unwrap_or_default()
                        } else {
                            vec![v]
                        }
                    });
                    out.push(RawTask {
                        addr: a,
                        loop_: le_u64(&buf, l.fut_loop),
                        state: crate::memory::le_u32(&buf, l.fut_state).min(255) as u8,
                        log_tb: flag(l.fut_log_tb),
                        cancelling: cancels > 0 || flag(l.task_must_cancel),
                        name: l.task_name.map_or(0, |o| le_u64(&buf, o)),
                        coro: le_u64(&buf, l.task_coro),
                        waiter: le_u64(&buf, l.task_fut_waiter),
                        callbacks,
                        awaited_by,
                        via: None,
                    });
                }
                Kind::PyTask => {
                    let attr = |n: &str| py_attr(objr, l, a, n).unwrap_or(0);
                    let state = match py_state(objr, attr("_state")) {
                        Some(s) => s,
                        None => continue,
                    };
                    let truthy = |v: u64| v != 0 && objr.int_u64(v).is_ok_and(|n| n != 0);
                    let none = |v: u64| v != 0 && objr.type_name(v).is_ok_and(|t| t == "NoneType");
                    let waiter = attr("_fut_waiter");
                    let cbs = attr("_callbacks");
                    out.push(RawTask {
                        addr: a,
                        loop_: attr("_loop"),
                        state,
                        // `self.__log_traceback`, name-mangled by Future.
                        log_tb: truthy(attr("_Future__log_traceback")),
                        cancelling: truthy(attr("_must_cancel"))
                            || truthy(attr("_num_cancels_requested")),
                        name: attr("_name"),
                        coro: attr("_coro"),
                        waiter: if none(waiter) { 0 } else { waiter },
                        callbacks: if cbs != 0 && !none(cbs) {
                            callback_list(objr, cbs)
                        } else {
                            Vec::new()
                        },
                        awaited_by: None,
                        via: None,
                    });
                }
                _ => {}
            }
        }
        out
    }
}
