//! Who awaits whom: a task's recorded awaiters (3.14+), the tasks whose
//! `fut_waiter` it is, and a bounded search from its done-callbacks; and
//! what a waiting task awaits (a task, a gather, a primitive, a sleep).

use super::loops::Timers;
use super::objects::{callback_list, deque_items, instance_attrs};
use super::state::{AsyncioReader, Kind, RawTask};
use crate::cpython_layouts::asyncio::AsyncioLayout;
use crate::memory::MemoryExt;
use crate::python::objects::ObjReader;
use crate::stack::Awaiting;
use std::collections::{HashMap, HashSet};

/// The reference search from a task's callbacks to its awaiter.
const SEARCH_DEPTH: u32 = 4;
const SEARCH_NODES: usize = 48;
/// Items looked at per container during that search.
const SEARCH_ITEMS: u64 = 16;

/// The search's findings, kept for one snapshot.
#[derive(Default)]
struct Memo {
    /// Callback → the tasks found from it.
    starts: HashMap<u64, Vec<usize>>,
    /// Object → (tasks it names, objects it refers to).
    nodes: HashMap<u64, (Vec<usize>, Vec<u64>)>,
}

impl AsyncioReader {
    /// Each task's awaiters (indexes into `tasks`).
    pub(super) fn parents(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        tasks: &[RawTask],
        index: &HashMap<u64, usize>,
    ) -> Vec<Vec<usize>> {
        let mut waiting_on: HashMap<u64, Vec<usize>> = HashMap::new();
        for (k, t) in tasks.iter().enumerate() {
            if t.waiter != 0 {
                waiting_on.entry(t.waiter).or_default().push(k);
            }
        }
        let mut out = vec![Vec::new(); tasks.len()];
        let mut memo = Memo::default();
        for (k, t) in tasks.iter().enumerate() {
            let mut ps: Vec<usize> = Vec::new();
            let push = |p: usize, ps: &mut Vec<usize>| {
                if p != k && !ps.contains(&p) {
                    ps.push(p);
                }
            };
            if let Some(ab) = &t.awaited_by {
                // 3.14+: the task's own record.
                for a in ab {
                    if let Some(&p) = index.get(a) {
                        push(p, &mut ps);
                    }
                }
            } else {
                if let Some(ws) = waiting_on.get(&t.addr) {
                    for &p in ws {
                        push(p, &mut ps);
                    }
                }
                if !t.callbacks.is_empty() {
                    for p in self.search(objr, l, &t.callbacks, index, &waiting_on, &mut memo) {
                        push(p, &mut ps);
                    }
                }
            }
            out[k] = ps;
        }
        out
    }

    /// From a task's done-callbacks, the tasks that wait for it: those whose
    /// awaited future is reachable, and a `TaskGroup`'s parent task. Each
    /// callback's result is kept for the snapshot (a gather's children share
    /// one callback), and each object is looked into once.
    fn search(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        callbacks: &[u64],
        index: &HashMap<u64, usize>,
        waiting_on: &HashMap<u64, Vec<usize>>,
        memo: &mut Memo,
    ) -> Vec<usize> {
        let mut found = Vec::new();
        for &cb in callbacks {
            if let Some(f) = memo.starts.get(&cb) {
                found.extend(f.iter().copied());
                continue;
            }
            let mut from_cb = Vec::new();
            let mut seen: HashSet<u64> = HashSet::new();
            let mut queue: Vec<(u64, u32)> = vec![(cb, 0)];
            let mut qi = 0;
            while qi < queue.len() && seen.len() < SEARCH_NODES {
                let (obj, depth) = queue[qi];
                qi += 1;
                if obj == 0 || !seen.insert(obj) {
                    continue;
                }
                if let Some(ws) = waiting_on.get(&obj) {
                    from_cb.extend(ws.iter().copied());
                }
                if depth >= SEARCH_DEPTH {
                    continue;
                }
                if !memo.nodes.contains_key(&obj) {
                    let node = self.look_into(objr, l, obj, index);
                    if memo.nodes.len() < 1 << 20 {
                        memo.nodes.insert(obj, node);
                    } else {
                        break;
                    }
                }
                let (direct, next) = &memo.nodes[&obj];
                from_cb.extend(direct.iter().copied());
                for n in next {
                    if queue.len() < SEARCH_NODES * 4 {
                        queue.push((*n, depth + 1));
                    }
                }
            }
            found.extend(from_cb.iter().copied());
            memo.starts.insert(cb, from_cb);
        }
        found
    }

    /// What one object of the search leads to: tasks it names directly (a
    /// wake-up callback's task, a TaskGroup's parent) and the objects it refers to.
    fn look_into(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        obj: u64,
        index: &HashMap<u64, usize>,
    ) -> (Vec<usize>, Vec<u64>) {
        let mem = objr.mem;
        let mut found = Vec::new();
        let mut next: Vec<u64> = Vec::new();
        let Ok(tn) = objr.type_name(obj) else {
            return (found, next);
        };
        match tn.as_str() {
            "TaskWakeupMethWrapper" | "builtin_function_or_method" => {
                if let Ok(t) = mem.read_u64(obj.wrapping_add(l.wakeup_task)) {
                    if let Some(&p) = index.get(&t) {
                        found.push(p);
                    }
                }
            }
            "method" => next.extend(mem.read_u64(obj.wrapping_add(l.method_self)).ok()),
            "function" => {
                if let Ok(cl) = mem.read_u64(obj.wrapping_add(l.func_closure)) {
                    if cl != 0 {
                        for cell in objr.tuple_items(cl, SEARCH_ITEMS).unwrap_or_default().0 {
                            next.extend(
                                mem.read_u64(cell.wrapping_add(objr.layout.object.cell_ref))
                                    .ok(),
                            );
                        }
                    }
                }
            }
            "functools.partial" => {
                next.extend(mem.read_u64(obj.wrapping_add(l.partial_fn)).ok());
                if let Ok(args) = mem.read_u64(obj.wrapping_add(l.partial_args)) {
                    next.extend(objr.tuple_items(args, SEARCH_ITEMS).unwrap_or_default().0);
                }
            }
            "collections.deque" => next.extend(deque_items(objr, l, obj, SEARCH_ITEMS)),
            "list" => next.extend(objr.list_items(obj, SEARCH_ITEMS).unwrap_or_default().0),
            "tuple" => next.extend(objr.tuple_items(obj, SEARCH_ITEMS).unwrap_or_default().0),
            // Plain values lead nowhere.
            "int" | "bool" | "float" | "str" | "bytes" | "NoneType" | "dict" | "set"
            | "frozenset" | "type" | "module" | "code" | "cell" => {}
            // A task is an end (its own awaiters are other edges); a
            // future leads on through its callbacks (a gather of gathers).
            _ if self.kind(objr, obj, l) != Kind::Other => {
                if let Some(cbs) = self.future_callbacks(objr, l, obj) {
                    next.extend(cbs);
                }
            }
            _ => {
                // An instance: a TaskGroup names its parent task; other
                // objects (a queue, an iterator) lead on by their attributes.
                let attrs = instance_attrs(
                    objr,
                    obj,
                    &[
                        "_parent_task",
                        "_on_completed_fut",
                        "_done",
                        "_getters",
                        "_waiters",
                        "outer",
                    ],
                );
                for (name, v) in attrs {
                    if name == "_parent_task" {
                        if let Some(&p) = index.get(&v) {
                            found.push(p);
                        }
                    } else {
                        next.push(v);
                    }
                }
            }
        }
        (found, next)
    }

    /// The done-callbacks of a (non-task) future.
    pub(super) fn future_callbacks(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        f: u64,
    ) -> Option<Vec<u64>> {
        match self.kind(objr, f, l) {
            Kind::CFuture => {
                let mut out = Vec::new();
                let cb0 = objr.mem.read_u64(f.wrapping_add(l.fut_callback0)).ok()?;
                if cb0 != 0 {
                    out.push(cb0);
                }
                let list = objr.mem.read_u64(f.wrapping_add(l.fut_callbacks)).ok()?;
                if list != 0 {
                    out.extend(callback_list(objr, list));
                }
                Some(out)
            }
            Kind::PyFuture => {
                let list = objr.instance_attr(f, "_callbacks").ok()??;
                Some(callback_list(objr, list))
            }
            _ => None,
        }
    }

    pub(super) fn awaiting(
        &mut self,
        objr: &ObjReader,
        l: &AsyncioLayout,
        t: &RawTask,
        first_locals: &[u64],
        sleeps: &mut HashMap<u64, Option<Timers>>,
    ) -> Awaiting {
        let w = t.waiter;
        let type_name = objr.type_name(w).ok();
        let mut a = Awaiting {
            kind: "future".into(),
            task: None,
            type_name: type_name.clone(),
            object: Some(w),
            seconds: None,
        };
        let kind = self.kind(objr, w, l);
        if matches!(kind, Kind::CTask | Kind::PyTask) {
            a.kind = "task".into();
            a.task = Some(w);
            a.object = None;
            return a;
        }
        if type_name.as_deref() == Some("_GatheringFuture") {
            a.kind = "gather".into();
            return a;
        }
        // A synchronisation primitive whose waiters hold the future: the
        // `self` of one of the innermost frames (a Python future's own
        // `__await__` frame may come first).
        for &innermost_self in first_locals.iter().take(3) {
            if innermost_self != 0 && self.kind(objr, innermost_self, l) == Kind::Other {
                if let Ok(ty) = objr.type_of(innermost_self) {
                    let mro = self.mro(objr, ty, l);
                    let prim = mro.iter().find_map(|n| {
                        Some(match n.as_str() {
                            "Queue" | "LifoQueue" | "PriorityQueue" => "queue",
                            "Lock" => "lock",
                            "Event" => "event",
                            "Semaphore" | "BoundedSemaphore" => "semaphore",
                            "Condition" => "condition",
                            "Barrier" => "barrier",
                            _ => return None,
                        })
                    });
                    if let Some(prim) = prim {
                        let holds = ["_waiters", "_getters", "_putters"].iter().any(|n| {
                            objr.instance_attr(innermost_self, n)
                                .ok()
                                .flatten()
                                .is_some_and(|d| deque_items(objr, l, d, 1 << 16).contains(&w))
                        });
                        if holds {
                            a.kind = prim.into();
                            a.type_name = mro.first().cloned();
                            a.object = Some(innermost_self);
                            return a;
                        }
                    }
                }
            }
        }
        // A sleep: a timer of the loop resolves the future.
        let loop_ = t.loop_;
        let timers = sleeps
            .entry(loop_)
            .or_insert_with(|| self.scan_loop(objr, l, loop_, false).map(|s| s.timers));
        if let Some((when, sleep)) = timers.as_ref().and_then(|m| m.get(&w)) {
            if *sleep {
                a.kind = "sleep".into();
            }
            a.seconds = Some(((when - self.loop_now()) * 1000.0).round() / 1000.0);
        }
        a
    }
}
