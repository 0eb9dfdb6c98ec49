//! What a suspended greenlet (gevent, eventlet) or a waiting Trio task
//! waits on.
//!
//! A greenlet that waits has switched to its hub from inside gevent or
//! eventlet, and a Trio task has yielded to its run loop: its innermost
//! Python frames are the library's own (`sleep`, a socket's `recv`, an
//! `RLock`'s `acquire`, Trio's `wait_readable`) or, where gevent's code is
//! compiled (`Event.wait`, `Queue.get`, `Semaphore.acquire`,
//! `Greenlet.join`), the caller's. The object it waits on is among those
//! frames' locals: the one whose type derives from a type a greenlet or task
//! waits on, found in the target's modules (`_socket.socket`, gevent's libev
//! `timer`, eventlet's `Timer`, the libraries' events, queues, locks and
//! greenlets). A gevent or Trio socket is a Python object whose `_sock`
//! holds the `_socket.socket`; a socket's file object reaches it through
//! one more `_sock`. Types decide, not names: a local named anything
//! refers to what its object's type says.

use crate::cpython_layouts::asyncio::AsyncioLayout;
use crate::cpython_layouts::greenlet::GeventLayout;
use crate::memory::MemoryExt;
use crate::python::objects::ObjReader;
use crate::python::reader::LocalRef;
use crate::stack::ObjectWait;
use crate::wait::FdDesc;
use std::collections::HashMap;

/// The longest chain of `_sock` attributes followed to a socket.
const MAX_SOCK_HOPS: usize = 2;
/// The most entries of a type's `__mro__` looked at.
const MAX_BASES: u64 = 64;
/// Most entries of an eventlet hub's timer lists looked through.
const MAX_TIMERS: u64 = 100_000;

/// The length of a sleep, from the locals of the frame that called it
/// (gevent's and Trio's `sleep` take it as `seconds`).
pub(crate) fn seconds_local(objr: &ObjReader, locals: &[LocalRef]) -> Option<f64> {
    let l = locals.iter().find(|l| l.name == "seconds")?;
    duration(objr, l.obj)
}

/// A number of seconds a wait can last: finite, not negative.
fn duration(objr: &ObjReader, obj: u64) -> Option<f64> {
    objr.number(obj).filter(|v| v.is_finite() && *v >= 0.0)
}

/// The types a greenlet or Trio task waits on, as found in the target's
/// modules (each absent where its module is not loaded).
#[derive(Default, Clone)]
pub(crate) struct WaitTypes {
    socket: Option<u64>,
    timer: Option<u64>,
    /// eventlet's `Timer` (`eventlet.sleep`, timeouts): a Python object
    /// whose deadline is in its hub's heap.
    eventlet_timer: Option<u64>,
    /// (type, kind) for the objects waited on without a file or a clock.
    objects: Vec<(u64, &'static str)>,
}

impl WaitTypes {
    /// `attr(module, name)` reads a module's attribute in the target.
    pub(crate) fn find(attr: &dyn Fn(&str, &str) -> Option<u64>) -> WaitTypes {
        let mut objects = Vec::new();
        for (module, name, kind) in [
            ("gevent._abstract_linkable", "AbstractLinkable", "event"),
            ("gevent.queue", "Queue", "queue"),
            ("gevent.queue", "Channel", "queue"),
            ("gevent.lock", "RLock", "lock"),
            ("gevent.greenlet", "Greenlet", "greenlet"),
            ("eventlet.event", "Event", "event"),
            ("eventlet.semaphore", "Semaphore", "event"),
            ("eventlet.queue", "LightQueue", "queue"),
            ("eventlet.greenthread", "GreenThread", "greenlet"),
            ("trio._sync", "Event", "event"),
            ("trio._sync", "Condition", "event"),
            ("trio._sync", "Semaphore", "event"),
            ("trio._sync", "Lock", "lock"),
            ("trio._sync", "StrictFIFOLock", "lock"),
            ("trio._sync", "CapacityLimiter", "lock"),
            ("trio._channel", "MemoryReceiveChannel", "queue"),
            ("trio._channel", "MemorySendChannel", "queue"),
        ] {
            if let Some(t) = attr(module, name) {
                objects.push((t, kind));
            }
        }
        WaitTypes {
            socket: attr("_socket", "socket"),
            timer: attr("gevent.libev.corecext", "timer"),
            eventlet_timer: attr("eventlet.hubs.timer", "Timer"),
            objects,
        }
    }

    pub(crate) fn any(&self) -> bool {
        self.socket.is_some()
            || self.timer.is_some()
            || self.eventlet_timer.is_some()
            || !self.objects.is_empty()
    }
}

/// Reads the waits of the greenlets and Trio tasks shown; caches what each
/// type is a kind of.
pub(crate) struct WaitReader<'a> {
    objr: &'a ObjReader<'a>,
    al: &'a AsyncioLayout,
    /// gevent's table (its timers' deadlines), when its release is in them.
    gevent: Option<&'a GeventLayout>,
    types: &'a WaitTypes,
    /// For each type met: what it is a kind of (None: nothing waited on).
    kinds: HashMap<u64, Option<Kind>>,
    /// For each type met: where its `_sock` slot is, if it has one.
    sock_slots: HashMap<u64, Option<u64>>,
    /// For each object met (one read: the objects hold still): its
    /// `_sock`, if it has one. Every greenlet's frames refer to the same
    /// hub and loop.
    socks: HashMap<u64, Option<u64>>,
    /// eventlet: each timer list of a hub met, as timer → deadline.
    timer_lists: HashMap<u64, HashMap<u64, f64>>,
    /// eventlet: the hubs met (objects with timer lists), with those lists
    /// (`next_timers`, `timers`), so that the next greenlet's wait finds
    /// its timer without reading the hub's `__dict__` again.
    hubs: Vec<(u64, [Option<u64>; 2])>,
}

/// The most objects whose `_sock` a [`WaitReader`] keeps.
const MAX_SOCKS: usize = 100_000;
/// The most eventlet timer lists a [`WaitReader`] keeps (a process has a
/// hub a thread, two lists each).
const MAX_TIMER_LISTS: usize = 64;

#[derive(Clone, Copy)]
enum Kind {
    Socket,
    Timer,
    EventletTimer,
    Object(&'static str),
}

impl<'a> WaitReader<'a> {
    pub(crate) fn new(
        objr: &'a ObjReader<'a>,
        al: &'a AsyncioLayout,
        gevent: Option<&'a GeventLayout>,
        types: &'a WaitTypes,
    ) -> WaitReader<'a> {
        WaitReader {
            objr,
            al,
            gevent,
            types,
            kinds: HashMap::new(),
            sock_slots: HashMap::new(),
            socks: HashMap::new(),
            timer_lists: HashMap::new(),
            hubs: Vec::new(),
        }
    }

    /// What type `ty` is a kind of: the first of its `__mro__` (itself,
    /// then its bases in Python's order) that is a type waited on.
    fn kind(&mut self, ty: u64) -> Option<Kind> {
        if let Some(k) = self.kinds.get(&ty) {
            return *k;
        }
        let types = self.types;
        let of = |t: u64| -> Option<Kind> {
            if Some(t) == types.socket {
                Some(Kind::Socket)
            } else if Some(t) == types.timer {
                Some(Kind::Timer)
            } else if Some(t) == types.eventlet_timer {
                Some(Kind::EventletTimer)
            } else {
                types
                    .objects
                    .iter()
                    .find(|(o, _)| *o == t)
                    .map(|(_, kind)| Kind::Object(kind))
            }
        };
        let mro = self
            .objr
            .mem
            .read_u64(ty.wrapping_add(self.al.type_mro))
            .ok()
            .and_then(|m| self.objr.tuple_items(m, MAX_BASES).ok())
            .map(|(items, _)| items)
            .unwrap_or_default();
        let k = of(ty).or_else(|| mro.into_iter().find_map(of));
        self.kinds.insert(ty, k);
        k
    }

    /// A gevent socket's (or a socket file's) `_sock`, from its slot or
    /// its `__dict__`.
    fn inner_sock(&mut self, obj: u64) -> Option<u64> {
        if let Some(s) = self.socks.get(&obj) {
            return *s;
        }
        let ty = self.objr.type_of(obj).ok()?;
        let (objr, al) = (self.objr, self.al);
        let slot = *self
            .sock_slots
            .entry(ty)
            .or_insert_with(|| crate::python::objects::slot_offset(objr, al, ty, "_sock"));
        let inner = match slot {
            Some(off) => objr
                .mem
                .read_u64(obj.wrapping_add(off))
                .ok()
                .filter(|p| *p != 0),
            None => objr.instance_attr(obj, "_sock").ok().flatten(),
        };
        if self.socks.len() < MAX_SOCKS {
            self.socks.insert(obj, inner);
        }
        inner
    }

    /// What greenlet `me`, whose innermost frame's locals are `locals`
    /// (of function `function`), waits on: a socket or a timer first, else
    /// the one other object waited on (none when several are; `me` itself,
    /// which gevent's code keeps at hand, is not one).
    pub(crate) fn wait_of(
        &mut self,
        me: u64,
        function: &str,
        locals: &[LocalRef],
    ) -> Option<ObjectWait> {
        let mut objects: Vec<ObjectWait> = Vec::new();
        for l in locals {
            // A local a closure shares is a cell: what it holds counts.
            let mut obj = l.obj;
            if l.kind == "cell" {
                let head = self.objr.layout.object.ob_type + 8;
                match self.objr.mem.read_u64(obj.wrapping_add(head)) {
                    Ok(inner) if inner != 0 => obj = inner,
                    _ => continue,
                }
            }
            if obj == me {
                continue;
            }
            let mut local = l.name.clone();
            for hop in 0..=MAX_SOCK_HOPS {
                let Ok(ty) = self.objr.type_of(obj) else {
                    break;
                };
                match self.kind(ty) {
                    Some(Kind::Socket) => return Some(self.socket(function, &local, obj)),
                    Some(Kind::Timer) => {
                        if let Some(mut w) = self.timer(function, &local, obj, ty) {
                            // gevent's `sleep(seconds)` holds its timer.
                            w.duration = seconds_local(self.objr, locals);
                            return Some(w);
                        }
                        break;
                    }
                    Some(Kind::EventletTimer) => {
                        let mut w = self.wait("timer", function, &local, obj);
                        w.deadline = self.eventlet_deadline(obj, locals);
                        w.duration = self
                            .objr
                            .instance_attr(obj, "seconds")
                            .ok()
                            .flatten()
                            .and_then(|v| duration(self.objr, v));
                        return Some(w);
                    }
                    Some(Kind::Object(kind)) => {
                        if !objects.iter().any(|w| w.object == obj) {
                            objects.push(self.wait(kind, function, &local, obj));
                        }
                        break;
                    }
                    None => {}
                }
                if hop == MAX_SOCK_HOPS {
                    break;
                }
                match self.inner_sock(obj) {
                    Some(inner) => {
                        obj = inner;
                        local.push_str("._sock");
                    }
                    None => break,
                }
            }
        }
        // Several objects a greenlet could wait on: which one is not told.
        (objects.len() == 1).then(|| objects.pop()).flatten()
    }

    fn wait(&self, kind: &'static str, function: &str, local: &str, obj: u64) -> ObjectWait {
        ObjectWait {
            kind,
            type_name: self.objr.type_name(obj).unwrap_or_else(|_| "?".to_string()),
            object: obj,
            local: local.to_string(),
            function: function.to_string(),
            fd: None,
            deadline: None,
            seconds_left: None,
            duration: None,
            waited_s: None,
        }
    }

    /// A `_socket.socket`: its fd (`PySocketSockObject.sock_fd`, the int
    /// after the object header), described later by the caller.
    fn socket(&self, function: &str, local: &str, obj: u64) -> ObjectWait {
        let mut w = self.wait("socket", function, local, obj);
        let head = self.objr.layout.object.ob_type + 8;
        if let Ok(fd) = self.objr.mem.read_u32(obj.wrapping_add(head)) {
            let fd = fd as i32;
            if fd >= 0 {
                w.fd = Some(FdDesc {
                    fd,
                    ..Default::default()
                });
            }
        }
        w
    }

    /// An eventlet timer's deadline: the hub keeps it beside the timer, as
    /// `(deadline, timer)` in its heap (`timers`) or in the timers added
    /// since the loop last ran (`next_timers`), on its clock (the monotonic
    /// one). The hub is the local among `locals` that has those lists.
    /// Each list is read once a read (a dump reads every sleeping
    /// GreenThread's wait: one hub's lists for all of them).
    fn eventlet_deadline(&mut self, timer: u64, locals: &[LocalRef]) -> Option<f64> {
        let objr = self.objr;
        // A hub met before: its lists are known.
        let known = |hubs: &[(u64, [Option<u64>; 2])], obj: u64| {
            hubs.iter().find(|(h, _)| *h == obj).map(|(_, ls)| *ls)
        };
        for l in locals {
            for list in known(&self.hubs, l.obj).into_iter().flatten().flatten() {
                if let Some(at) = self.timer_lists.get(&list).and_then(|d| d.get(&timer)) {
                    return Some(*at);
                }
            }
        }
        for l in locals {
            if known(&self.hubs, l.obj).is_some() {
                continue;
            }
            let lists = ["next_timers", "timers"]
                .map(|name| objr.instance_attr(l.obj, name).ok().flatten());
            if lists.iter().all(Option::is_none) {
                continue;
            }
            if self.hubs.len() < MAX_TIMER_LISTS {
                self.hubs.push((l.obj, lists));
            }
            for list in lists.into_iter().flatten() {
                if !self.timer_lists.contains_key(&list) {
                    let items = objr
                        .list_items(list, MAX_TIMERS)
                        .map(|(items, _)| items)
                        .unwrap_or_default();
                    let deadlines: HashMap<u64, f64> = items
                        .into_iter()
                        .filter_map(|item| match objr.tuple_items(item, 2).ok()?.0[..] {
                            [at, t] => Some((t, objr.float(at).filter(|v| v.is_finite())?)),
                            _ => None,
                        })
                        .collect();
                    // Past the bound, a list is read for this timer alone.
                    if self.timer_lists.len() >= MAX_TIMER_LISTS {
                        match deadlines.get(&timer) {
                            Some(at) => return Some(*at),
                            None => continue,
                        }
                    }
                    self.timer_lists.insert(list, deadlines);
                }
                if let Some(at) = self.timer_lists.get(&list).and_then(|d| d.get(&timer)) {
                    return Some(*at);
                }
            }
        }
        None
    }

    /// A libev timer: its deadline, where gevent's table places it.
    fn timer(&self, function: &str, local: &str, obj: u64, ty: u64) -> Option<ObjectWait> {
        let mut w = self.wait("timer", function, local, obj);
        if let Some(g) = self.gevent {
            let size = self
                .objr
                .mem
                .read_u64(ty.wrapping_add(self.objr.layout.object.tp_basicsize))
                .ok()?;
            if size > g.timer_at_from_end && size < 1 << 16 {
                let at = self
                    .objr
                    .mem
                    .read_u64(obj.wrapping_add(size - g.timer_at_from_end))
                    .ok()
                    .map(f64::from_bits)
                    .filter(|v| v.is_finite() && *v > 0.0);
                w.deadline = at;
            }
        }
        Some(w)
    }
}
