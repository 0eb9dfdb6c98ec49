//! Greenlets (gevent, eventlet): every live greenlet of a thread, with its
//! stack, read from greenlet's own objects in the target.
//!
//! A greenlet is a `PyGreenlet` whose `pimpl` points at greenlet's C++
//! state (see [`crate::cpython_layouts::greenlet`]). They are found among
//! the objects the garbage collector tracks, by type: the `greenlet` type
//! object from `greenlet._greenlet`'s dict, and any type deriving from it.
//! A suspended greenlet's stack is its saved top frame and the frames it
//! links to: on 3.12+ greenlet links a suspended greenlet's frames past
//! those on the C stack (`expose_frames`), and its first frame has no
//! previous one, so the chain is the greenlet's own. The running greenlet's
//! stack is its thread's. A thread's greenlets are those whose main
//! greenlet is the thread's: a suspended main greenlet's saved exception
//! state chain ends in its thread state (`&tstate->exc_state`).

mod gc_walk;

use crate::cpython_layouts::asyncio::AsyncioLayout;
use crate::cpython_layouts::greenlet::{
    gevent_layout, greenlet_layout, greenlet_python, GeventLayout, GreenletLayout, GreenletPython,
};
use crate::cpython_layouts::{EntryMarker, Layout};
use crate::memory::{Memory, MemoryExt};
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::python::waits;
use crate::stack::{
    Frame, FrameKind, Greenlet, ObjectWait, ThreadStack, ThreadStatus, ThreadTasks,
};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The most greenlets read in one process.
pub(crate) const MAX_GREENLETS: usize = 1_000_000;
/// The most frames read from one suspended greenlet.
const MAX_FRAMES: usize = 4096;
/// How many of a suspended greenlet's innermost frames are looked at for
/// what it waits on.
const WAIT_FRAMES: usize = 3;
/// How many suspended greenlets' waits are fetched together: their pages
/// stay well within the page cache's bound.
const WAIT_BATCH: usize = 1024;
/// How many of a frame's local slots are fetched with it.
const LOCALS_FETCHED: u64 = 16;
/// The longest base-class chain followed to tell a greenlet type.
const MAX_BASES: usize = 64;
/// The most timers of eventlet's hub looked at for GreenThreads not
/// started yet.
const MAX_PENDING_TIMERS: u64 = 10_000;

/// Reads greenlets; keeps what could not be read, for the warnings, and
/// (sampling) the greenlets found, for [`GreenletRead::found_for`].
#[derive(Default)]
pub(crate) struct GreenletReader {
    pub(crate) notes: Vec<String>,
    /// Per interpreter: the greenlets found (id, type), whether the walk
    /// was whole, and when it was made.
    found: HashMap<u64, Found>,
    /// Per interpreter: what its modules say (`None`: no greenlet), and when read.
    facts: HashMap<u64, (Option<Facts>, Instant)>,
    /// Sampling: each greenlet's name (by id and type), as long as the
    /// greenlets found are kept.
    names: HashMap<(u64, u64), Option<String>>,
}

/// The greenlets a walk of the collector's lists found: (id, type) each;
/// whether the walk was whole; when it was made.
struct Found {
    list: Vec<(u64, u64)>,
    whole: bool,
    at: Instant,
}

/// What one read of the greenlets asks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GreenletRead {
    /// Most greenlets shown per thread (the others are counted).
    pub(crate) limit: usize,
    /// Reuse the greenlets found by a walk of the collector's lists this
    /// recent (sampling: the walk costs a read of every tracked object);
    /// `None`: walk now (dump).
    pub(crate) found_for: Option<Duration>,
    /// Read what each suspended greenlet waits on.
    pub(crate) waits: bool,
}

/// When socket `fd` of the target last carried data, as the kernel says,
/// on the monotonic clock (the caller's: it sees the kernel's side).
pub(crate) type SocketQuiet<'a> = &'a mut dyn FnMut(i32) -> Option<f64>;

/// What one interpreter's modules say of its greenlets.
#[derive(Clone)]
struct Facts {
    /// greenlet's type.
    gtype: u64,
    gl: &'static GreenletLayout,
    py: &'static GreenletPython,
    gevent: Gevent,
    /// Where the collector's lists are counted from (the interpreter, or
    /// the runtime on 3.7 and 3.8).
    gc_base: u64,
}

/// What one interpreter's greenlets are read with, beside greenlet's tables.
#[derive(Clone)]
struct Gevent {
    /// gevent's `Hub` type.
    hub_type: Option<u64>,
    /// eventlet's `GreenThread`: their parent is eventlet's hub greenlet.
    green_thread: Option<u64>,
    /// gevent's `Greenlet` type, and greenlet's object size (where
    /// gevent's fields start).
    greenlet_type: Option<u64>,
    greenlet_base_size: u64,
    /// gevent's table, when its release is in them.
    layout: Option<&'static GeventLayout>,
    /// The types a greenlet waits on, and the layout their slots are read with.
    wait_types: waits::WaitTypes,
    slots: Option<&'static AsyncioLayout>,
}

/// One greenlet as read, before it is placed under its thread.
struct Raw {
    id: u64,
    ty: u64,
    main: bool,
    state: &'static str,
    parent: Option<u64>,
    main_greenlet: u64,
    top_frame: u64,
    run: u64,
}

/// A greenlet placed under its thread: as read, its state, whether it is
/// a hub.
type Placed = (Raw, &'static str, bool);

impl GreenletReader {
    fn note(&mut self, s: String) {
        if !self.notes.contains(&s) {
            self.notes.push(s);
        }
    }

    /// Add every live greenlet to the tasks of the thread it runs on
    /// (`out`, by snapshot index), as `how` asks; `quiet` tells when a
    /// socket waited on last carried data (None: not known).
    pub(crate) fn read(
        &mut self,
        reader: &mut Reader,
        cache: &PageCache,
        snaps: &[ThreadSnapshot],
        how: GreenletRead,
        mut quiet: Option<SocketQuiet>,
        out: &mut HashMap<usize, ThreadTasks>,
    ) {
        let mem: &dyn Memory = cache;
        let pl = reader.process.layout.clone();
        let mut interps: Vec<u64> = snaps.iter().map(|s| s.interp).collect();
        interps.sort_unstable();
        interps.dedup();
        let fresh = |at: &Instant| how.found_for.is_some_and(|age| at.elapsed() < age);
        for interp in interps {
            let objr = ObjReader::new(mem, &pl);
            // What the interpreter's modules say, looked up by a scan of
            // sys.modules: kept while the greenlets found are.
            let facts = match self.facts.get(&interp) {
                Some((f, at)) if fresh(at) => f.clone(),
                _ => {
                    let f = self.interp_facts(reader, &objr, interp);
                    if how.found_for.is_some() {
                        self.facts.insert(interp, (f.clone(), Instant::now()));
                    }
                    f
                }
            };
            // Only a process that imported greenlet is looked at further.
            let Some(facts) = facts else {
                continue;
            };
            let (gl, py) = (facts.gl, facts.py);
            let found = match self.found.get(&interp) {
                // Those freed since are told by their type word: a freed
                // object's memory keeps another type, or none.
                Some(f) if fresh(&f.at) => (
                    f.list
                        .iter()
                        .copied()
                        .filter(|(id, ty)| {
                            mem.read_u64(id.wrapping_add(pl.object.ob_type))
                                .is_ok_and(|t| t == *ty)
                        })
                        .collect(),
                    f.whole,
                ),
                _ => {
                    let f = find_greenlets(mem, &pl, py, facts.gc_base, facts.gtype);
                    self.names.clear();
                    if how.found_for.is_some() {
                        let found = Found {
                            list: f.0.clone(),
                            whole: f.1,
                            at: Instant::now(),
                        };
                        self.found.insert(interp, found);
                    }
                    f
                }
            };
            if !found.1 {
                self.note(
                    "the collector's object lists changed or were cut while read: \
                     some greenlets may be missing"
                        .to_string(),
                );
            }
            let mut raws: Vec<Raw> = Vec::with_capacity(found.0.len());
            for batch in found.0.chunks(WAIT_BATCH) {
                prefetch_raws(cache, gl, batch);
                raws.extend(
                    batch
                        .iter()
                        .filter_map(|&(id, ty)| read_raw(mem, gl, id, ty)),
                );
            }
            inherit_mains(&mut raws);
            self.place(
                reader,
                cache,
                &objr,
                gl,
                py,
                snaps,
                interp,
                &facts.gevent,
                raws,
                how,
                &mut quiet,
                out,
            );
        }
    }

    /// What interpreter `interp`'s modules say of its greenlets: `None`
    /// when it has not imported greenlet, or its release is not in the
    /// tables (then said in a note).
    fn interp_facts(&mut self, reader: &Reader, objr: &ObjReader, interp: u64) -> Option<Facts> {
        let (mem, pl) = (objr.mem, objr.layout);
        let (major, minor) = (reader.process.version.major, reader.process.version.minor);
        let modules = mem
            .read_u64(interp.wrapping_add(pl.interp.modules))
            .ok()
            .filter(|m| *m != 0)?;
        let module_attr = |module: &str, name: &str| -> Option<u64> {
            let m = objr.dict_get(modules, module).ok().flatten()?;
            let d = mem.read_u64(m.wrapping_add(pl.object.module_dict)).ok()?;
            objr.dict_get(d, name).ok().flatten()
        };
        let gtype = module_attr("greenlet._greenlet", "greenlet")?;
        let release = module_attr("greenlet", "__version__")
            .or_else(|| module_attr("greenlet._greenlet", "__version__"))
            .and_then(|v| objr.string(v, 32).ok())
            .map(|(s, _)| s);
        let Some(release) = release else {
            self.note(
                "greenlet is loaded but its version (greenlet.__version__) cannot be read: \
                 its greenlets are not shown"
                    .to_string(),
            );
            return None;
        };
        let (Some(gl), Some(py)) = (
            greenlet_layout(&release, major, minor),
            greenlet_python(major, minor),
        ) else {
            self.note(format!(
                "greenlet {release} on Python {major}.{minor} is not in pyinspect's greenlet \
                 tables: its greenlets are not shown"
            ));
            return None;
        };
        let gevent_release = module_attr("gevent", "__version__")
            .and_then(|v| objr.string(v, 32).ok())
            .map(|(s, _)| s);
        let layout = gevent_release.as_deref().and_then(gevent_layout);
        if let (Some(r), None) = (&gevent_release, layout) {
            self.note(format!(
                "gevent {r} is not in pyinspect's gevent tables: its greenlets are shown \
                 without generated names (Greenlet-N) or timers' deadlines"
            ));
        }
        let gevent = Gevent {
            hub_type: module_attr("gevent.hub", "Hub"),
            green_thread: module_attr("eventlet.greenthread", "GreenThread"),
            greenlet_type: module_attr("gevent.greenlet", "Greenlet"),
            greenlet_base_size: mem
                .read_u64(gtype.wrapping_add(pl.object.tp_basicsize))
                .unwrap_or(0),
            layout,
            wait_types: waits::WaitTypes::find(&module_attr),
            slots: crate::cpython_layouts::asyncio::for_version(major, minor),
        };
        let gc_base = if py.gc_in_runtime {
            let head = pl.runtime.interpreters_head?;
            reader.process.interp_head_ptr.wrapping_sub(head)
        } else {
            interp
        };
        Some(Facts {
            gtype,
            gl,
            py,
            gevent,
            gc_base,
        })
    }

    /// Put each greenlet under its thread.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        reader: &mut Reader,
        cache: &PageCache,
        objr: &ObjReader,
        gl: &GreenletLayout,
        py: &GreenletPython,
        snaps: &[ThreadSnapshot],
        interp: u64,
        gevent: &Gevent,
        raws: Vec<Raw>,
        how: GreenletRead,
        quiet: &mut Option<SocketQuiet>,
        out: &mut HashMap<usize, ThreadTasks>,
    ) {
        let mem: &dyn Memory = cache;
        let limit = how.limit;
        let pl = objr.layout;
        let threads: Vec<usize> = (0..snaps.len())
            .filter(|i| snaps[*i].interp == interp)
            .collect();
        let exc_ends: HashMap<u64, usize> = threads
            .iter()
            .map(|&i| (snaps[i].tstate.wrapping_add(py.tstate_exc_state), i))
            .collect();
        // Each main greenlet: its thread, and the greenlet running there.
        let mut mains: Vec<u64> = raws.iter().map(|r| r.main_greenlet).collect();
        mains.sort_unstable();
        mains.dedup();
        let mut thread_of: HashMap<u64, usize> = HashMap::new();
        let mut running: HashSet<u64> = HashSet::new();
        let mut unplaced = Vec::new();
        for &m in &mains {
            let Some(pimpl) = mem
                .read_u64(m.wrapping_add(gl.pimpl))
                .ok()
                .filter(|p| *p != 0)
            else {
                continue;
            };
            let ts = mem
                .read_u64(pimpl.wrapping_add(gl.main_thread_state))
                .unwrap_or(0);
            if ts == 0 {
                // Its thread is gone: its greenlets run nowhere.
                continue;
            }
            if let Ok(cur) = mem.read_u64(ts.wrapping_add(gl.thread_state_current)) {
                if cur != 0 {
                    running.insert(cur);
                }
            }
            let mut e = mem.read_u64(pimpl.wrapping_add(gl.exc_info)).unwrap_or(0);
            let mut hops = 0;
            while e != 0 && hops < 256 {
                if let Some(&i) = exc_ends.get(&e) {
                    thread_of.insert(m, i);
                    break;
                }
                e = mem
                    .read_u64(e.wrapping_add(py.err_stackitem_previous))
                    .unwrap_or(0);
                hops += 1;
            }
            if !thread_of.contains_key(&m) {
                unplaced.push(m);
            }
        }
        // A main greenlet that runs saved no state: it is on the one thread
        // no other main greenlet claims, when there is exactly one.
        let claimed: HashSet<usize> = thread_of.values().copied().collect();
        let free: Vec<usize> = threads
            .iter()
            .copied()
            .filter(|i| !claimed.contains(i))
            .collect();
        match (unplaced.as_slice(), free.as_slice()) {
            ([], _) => {}
            ([m], [i]) => {
                thread_of.insert(*m, *i);
            }
            _ => self.note(format!(
                "the threads of {} greenlet groups could not be told apart: their greenlets are \
                 not shown",
                unplaced.len()
            )),
        }
        let total = raws.len();
        // eventlet's hub is a plain greenlet: the parent of its GreenThreads.
        let eventlet_hubs: HashSet<u64> = match gevent.green_thread {
            Some(gt) => {
                let mut of: HashMap<u64, bool> = HashMap::new();
                raws.iter()
                    .filter(|r| {
                        *of.entry(r.ty)
                            .or_insert_with(|| derives_from(mem, py, r.ty, gt))
                    })
                    .filter_map(|r| r.parent)
                    .collect()
            }
            None => HashSet::new(),
        };
        let mut is_hub: HashMap<u64, bool> = HashMap::new();
        let mut by_thread: HashMap<usize, Vec<Placed>> = HashMap::new();
        for r in raws {
            let Some(&i) = thread_of.get(&r.main_greenlet) else {
                continue;
            };
            let state = if running.contains(&r.id) {
                "running"
            } else {
                r.state
            };
            let hub = gevent.hub_type.is_some_and(|h| {
                *is_hub
                    .entry(r.ty)
                    .or_insert_with(|| derives_from(mem, py, r.ty, h))
            }) || eventlet_hubs.contains(&r.id);
            by_thread.entry(i).or_default().push((r, state, hub));
        }
        let placed: usize = by_thread.values().map(|g| g.len()).sum();
        if placed < total {
            self.note(format!(
                "{} of {total} greenlets are on no thread pyinspect could tell (their thread \
                 ended, or its main greenlet could not be read): they are not shown",
                total - placed
            ));
        }
        // The running one, then the main greenlet and the hub, then the
        // suspended ones, those not started, and the dead.
        let rank = |(r, state, hub): &(Raw, &str, bool)| match *state {
            "running" => 0,
            _ if r.main || *hub => 1,
            "suspended" => 2,
            "not started" => 3,
            _ => 4,
        };
        let mut waits = match (gevent.slots, gevent.wait_types.any() && how.waits) {
            (Some(al), true) => Some(waits::WaitReader::new(
                objr,
                al,
                gevent.layout,
                &gevent.wait_types,
            )),
            _ => None,
        };
        let mut is_gevent: HashMap<u64, bool> = HashMap::new();
        let mut is_green_thread: HashMap<u64, bool> = HashMap::new();
        // Each type's name, read once (a sample reads every greenlet).
        let mut type_names: HashMap<u64, String> = HashMap::new();
        // Sampling: names are kept as long as the greenlets found are.
        let keep_names = how.found_for.is_some();
        let names = &mut self.names;
        for (i, mut gs) in by_thread {
            gs.sort_by_key(rank);
            // Reading waits (dump): the suspended greenlets waiting longest
            // first, before the cut, where when a wait began is told (a
            // timer's deadline less its length, a socket's last data as
            // the kernel says: `quiet`); the others after them, as found.
            // Each one's wait is read from its innermost frames' locals
            // alone (those shown are read whole below).
            let suspended = gs.iter().position(|g| rank(g) == 2).map(|from| {
                let to = gs
                    .iter()
                    .rposition(|g| rank(g) == 2)
                    .map_or(from, |t| t + 1);
                from..to
            });
            if let (Some(w), Some(range)) = (waits.as_mut(), suspended) {
                let from = range.start;
                let mut keyed: Vec<(Option<f64>, Placed)> = Vec::with_capacity(range.len());
                let mut drained = gs.drain(range);
                loop {
                    let batch: Vec<Placed> = drained.by_ref().take(WAIT_BATCH).collect();
                    if batch.is_empty() {
                        break;
                    }
                    let chains = prefetch_waits(reader, cache, pl, py, &batch);
                    for (g, addrs) in batch.into_iter().zip(chains) {
                        let wait = wait_in(reader, mem, w, g.0.id, &addrs, None);
                        let began = wait.as_ref().and_then(|w| {
                            w.began()
                                .or_else(|| quiet.as_mut().and_then(|q| q(w.fd.as_ref()?.fd)))
                        });
                        keyed.push((began, g));
                    }
                }
                drop(drained);
                keyed.sort_by(|a, b| match (a.0, b.0) {
                    (Some(x), Some(y)) => x.total_cmp(&y),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                });
                gs.splice(from..from, keyed.into_iter().map(|(_, g)| g));
            }
            let left_out = gs.len().saturating_sub(limit) as u64;
            gs.truncate(limit);
            // eventlet's hub's `BaseHub.run` frames, noted as the hub is
            // read (it comes before the greenlets not started, by rank),
            // and, read from its timers the first time a GreenThread not
            // started needs a name, the functions they were spawned with.
            let mut hub_runs: Vec<u64> = Vec::new();
            let mut pending: Option<HashMap<u64, u64>> = None;
            // Only the greenlets shown are read further.
            let shown = gs
                .into_iter()
                .map(|(r, state, hub)| {
                    let mut wait = None;
                    // Its frames, innermost first, and their addresses (0:
                    // not known).
                    let (frames, truncated, addrs) = if state == "running" {
                        let f: Vec<Frame> = snaps[i]
                            .stack
                            .frames
                            .iter()
                            .filter(|f| f.kind == FrameKind::Python)
                            .cloned()
                            .collect();
                        let addrs = f.iter().map(|f| f.mark.map_or(0, |m| m.addr)).collect();
                        (f, None, addrs)
                    } else if r.top_frame != 0 {
                        let (frames, truncated, addrs) =
                            saved_frames(reader, mem, pl, py, r.top_frame);
                        wait = waits
                            .as_mut()
                            .and_then(|w| wait_in(reader, mem, w, r.id, &addrs, Some(&frames)));
                        (frames, truncated, addrs)
                    } else {
                        (Vec::new(), None, Vec::new())
                    };
                    if eventlet_hubs.contains(&r.id) && hub_runs.is_empty() {
                        hub_runs = frames
                            .iter()
                            .zip(&addrs)
                            .rev()
                            .filter(|(f, a)| {
                                matches!(&*f.function, "BaseHub.run" | "run") && **a != 0
                            })
                            .map(|(_, a)| *a)
                            .take(MAX_BASES)
                            .collect();
                    }
                    let name = if r.main {
                        Some("main".to_string())
                    } else {
                        let of_gevent = gevent.greenlet_type.is_some_and(|t| {
                            *is_gevent
                                .entry(r.ty)
                                .or_insert_with(|| derives_from(mem, py, r.ty, t))
                        });
                        let of_eventlet = gevent.green_thread.is_some_and(|t| {
                            *is_green_thread
                                .entry(r.ty)
                                .or_insert_with(|| derives_from(mem, py, r.ty, t))
                        });
                        match names.get(&(r.id, r.ty)) {
                            Some(n) => n.clone(),
                            None => {
                                let spawned = of_eventlet
                                    .then(|| {
                                        spawned_function(reader, objr, py, r.id, &frames, &addrs)
                                            .or_else(|| {
                                                let f = *pending
                                                    .get_or_insert_with(|| {
                                                        eventlet_pending(
                                                            reader, objr, py, &hub_runs,
                                                        )
                                                    })
                                                    .get(&r.id)?;
                                                callable_name(objr, py, f)
                                            })
                                    })
                                    .flatten();
                                let n = spawned.or_else(|| {
                                    greenlet_name(objr, py, gevent, of_gevent, r.id, r.run)
                                });
                                if keep_names {
                                    names.insert((r.id, r.ty), n.clone());
                                }
                                n
                            }
                        }
                    };
                    Greenlet {
                        id: r.id,
                        name,
                        type_name: type_names
                            .entry(r.ty)
                            .or_insert_with(|| {
                                objr.type_name(r.id).unwrap_or_else(|_| "?".to_string())
                            })
                            .clone(),
                        state,
                        parent: r.parent,
                        hub,
                        main: r.main,
                        frames,
                        truncated,
                        wait,
                    }
                })
                .collect();
            let tt = out.entry(i).or_default();
            tt.greenlets = shown;
            tt.greenlets_left_out = left_out;
        }
    }
}

/// `record`/`top --async-mode all`: a stack of its own for each suspended
/// greenlet of thread `t` (its saved frames, as a thread named
/// `greenlet NAME`), as asyncio's waiting tasks get; not the hub's, whose
/// stack is its loop. The running greenlet's stack is the thread's own.
/// The thread's greenlets are taken from it.
pub(crate) fn waiting_stacks(t: &mut ThreadStack) -> Vec<ThreadStack> {
    let Some(greenlets) = t
        .asyncio
        .as_mut()
        .map(|tt| std::mem::take(&mut tt.greenlets))
    else {
        return Vec::new();
    };
    // What each stack shares with the thread, cloned once per greenlet:
    // not the thread's tasks nor its frames.
    let template = {
        let (tasks, frames) = (t.asyncio.take(), std::mem::take(&mut t.frames));
        let mut c = t.clone();
        (t.asyncio, t.frames) = (tasks, frames);
        // Not the thread's call, which a greenlet is not in.
        c.wait = None;
        c.status = ThreadStatus::Idle;
        c.holds_gil = false;
        c.native_entry = None;
        c
    };
    greenlets
        .into_iter()
        .filter(|g| g.state == "suspended" && !g.hub && !g.frames.is_empty())
        .map(|g| {
            let mut s = template.clone();
            // Its own ident (the greenlet's id): outputs keyed by thread do
            // not take it for the thread.
            s.thread_id = g.id;
            s.name = Some(match &g.name {
                Some(n) => format!("greenlet {n}"),
                None => format!("greenlet 0x{:x}", g.id),
            });
            s.truncated = g.truncated;
            s.frames = g.frames;
            s
        })
        .collect()
}

/// A greenlet not started yet has no main greenlet: it will run on its
/// parent's thread (the nearest ancestor's that has one).
fn inherit_mains(raws: &mut [Raw]) {
    let known: HashMap<u64, (u64, Option<u64>)> = raws
        .iter()
        .map(|r| (r.id, (r.main_greenlet, r.parent)))
        .collect();
    for r in raws.iter_mut().filter(|r| r.main_greenlet == 0) {
        let mut p = r.parent;
        for _ in 0..MAX_BASES {
            let Some((m, up)) = p.and_then(|p| known.get(&p)) else {
                break;
            };
            if *m != 0 {
                r.main_greenlet = *m;
                break;
            }
            p = *up;
        }
    }
}

/// Every object of the interpreter's collector lists whose type is
/// greenlet's or derives from it; and whether the lists were read whole.
fn find_greenlets(
    mem: &dyn Memory,
    pl: &Layout,
    py: &GreenletPython,
    interp: u64,
    gtype: u64,
) -> (Vec<(u64, u64)>, bool) {
    let mut types: HashMap<u64, bool> = HashMap::new();
    let mut found = Vec::new();
    // An object met twice (lists caught while the collector moved it from
    // one to another, in a thread stopped mid-collection) is kept once.
    let mut seen = HashSet::new();
    let whole = gc_walk::tracked_objects(
        mem,
        py,
        pl.object.ob_type,
        interp,
        gc_walk::MAX_GC_OBJECTS,
        &mut |obj, ty| {
            let g = *types
                .entry(ty)
                .or_insert_with(|| derives_from(mem, py, ty, gtype));
            if g && found.len() < MAX_GREENLETS && seen.insert(obj) {
                found.push((obj, ty));
            }
        },
    );
    (found, whole)
}

/// Whether type `ty` is `base` or derives from it (along `tp_base`).
fn derives_from(mem: &dyn Memory, py: &GreenletPython, mut ty: u64, base: u64) -> bool {
    for _ in 0..MAX_BASES {
        if ty == base {
            return true;
        }
        if ty == 0 {
            return false;
        }
        ty = mem.read_u64(ty.wrapping_add(py.tp_base)).unwrap_or(0);
    }
    false
}

/// Fetch, in two batched reads, what [`read_raw`] reads of the greenlets
/// `batch`: each one's `pimpl`, then the fields of the C++ object it
/// points to. Met one page at a time, 10,000 greenlets cost some 20,000
/// reads of the target's memory.
fn prefetch_raws(cache: &PageCache, gl: &GreenletLayout, batch: &[(u64, u64)]) {
    cache.prefetch(batch.iter().map(|(id, _)| (id.wrapping_add(gl.pimpl), 8)));
    let fields = [
        gl.stack_start,
        gl.stack_stop,
        gl.top_frame,
        gl.user_main_greenlet,
        gl.user_parent,
        gl.user_run_callable,
    ];
    let (Some(first), Some(last)) = (fields.iter().min(), fields.iter().max()) else {
        return;
    };
    let span = (last - first + 8) as usize;
    cache.prefetch(
        batch
            .iter()
            .filter_map(|(id, _)| cache.read_u64(id.wrapping_add(gl.pimpl)).ok())
            .filter(|p| *p != 0)
            .map(|p| (p.wrapping_add(*first), span)),
    );
}

fn read_raw(mem: &dyn Memory, gl: &GreenletLayout, id: u64, ty: u64) -> Option<Raw> {
    let pimpl = mem
        .read_u64(id.wrapping_add(gl.pimpl))
        .ok()
        .filter(|p| *p != 0)?;
    let word = |off: u64| mem.read_u64(pimpl.wrapping_add(off)).ok();
    let stack_start = word(gl.stack_start)?;
    let stack_stop = word(gl.stack_stop)?;
    let top_frame = word(gl.top_frame)?;
    let main = stack_stop == u64::MAX;
    let state = if stack_stop == 0 {
        "not started"
    } else if stack_start == 0 {
        "dead"
    } else if top_frame == 0 {
        "running"
    } else {
        "suspended"
    };
    let (main_greenlet, parent, run) = if main {
        (id, None, 0)
    } else {
        (
            word(gl.user_main_greenlet)?,
            word(gl.user_parent).filter(|p| *p != 0),
            word(gl.user_run_callable).unwrap_or(0),
        )
    };
    Some(Raw {
        id,
        ty,
        main,
        // A greenlet that looks as if it ran, but is not its thread's
        // current one, is told apart when placed.
        state: if state == "running" {
            "suspended"
        } else {
            state
        },
        parent,
        main_greenlet,
        top_frame,
        run,
    })
}

/// What suspended greenlet `id` waits on: the first of its innermost
/// frames (at `addrs`, innermost first) whose locals tell (eventlet waits
/// in its hub's own `switch`, below the waiter); `frames`, where decoded,
/// name the function (else it is left empty).
fn wait_in(
    reader: &mut Reader,
    mem: &dyn Memory,
    w: &mut waits::WaitReader,
    id: u64,
    addrs: &[u64],
    frames: Option<&[Frame]>,
) -> Option<ObjectWait> {
    addrs
        .iter()
        .take(WAIT_FRAMES)
        .enumerate()
        .find_map(|(i, addr)| {
            let locals = reader.frame_locals_at(mem, *addr);
            let function = frames.and_then(|f| f.get(i)).map_or("", |f| &*f.function);
            w.wait_of(id, function, &locals)
        })
}

/// Fetch, in a few batched reads, what reading the waits of the
/// suspended greenlets `batch` reads: their frame objects (3.11+), then
/// their innermost frames a level at a time, then the objects those frames'
/// locals hold. Met one page at a time, 10,000 greenlets' waits cost
/// several reads of the target's memory each. The addresses of each one's
/// innermost frames (at most [`WAIT_FRAMES`]; none where it has no saved
/// frame).
fn prefetch_waits(
    reader: &mut Reader,
    cache: &PageCache,
    pl: &Layout,
    py: &GreenletPython,
    batch: &[Placed],
) -> Vec<Vec<u64>> {
    let tops = batch.iter().map(|g| g.0.top_frame).filter(|t| *t != 0);
    let mut level: Vec<u64> = match py.frameobject_f_frame {
        Some(off) => {
            cache.prefetch(tops.clone().map(|t| (t.wrapping_add(off), 8)));
            tops.filter_map(|t| cache.read_u64(t.wrapping_add(off)).ok())
                .filter(|f| *f != 0)
                .collect()
        }
        None => tops.collect(),
    };
    // A frame and its first local slots; shim frames (3.12+) are passed
    // over, so a level more than the frames looked at.
    let f = &pl.frame;
    let span = f.size.max(f.localsplus + 8 * LOCALS_FETCHED) as usize;
    for _ in 0..WAIT_FRAMES + 1 {
        if level.is_empty() {
            break;
        }
        cache.prefetch(level.iter().map(|a| (*a, span)));
        level = level
            .iter()
            .filter_map(|a| cache.read_u64(a.wrapping_add(f.previous)).ok())
            .filter(|p| *p != 0)
            .collect();
    }
    let chains: Vec<Vec<u64>> = batch
        .iter()
        .map(|g| match g.0.top_frame {
            0 => Vec::new(),
            top => saved_frame_addrs(cache, pl, py, top, WAIT_FRAMES).0,
        })
        .collect();
    // Each object's header, and the words before it (a managed `__dict__`
    // or its values, 3.11+).
    let objects: Vec<u64> = chains
        .iter()
        .flatten()
        .flat_map(|a| reader.frame_local_objects(cache, *a))
        .collect();
    let before = 4 * 8;
    let head = pl.object.ob_type + 16;
    cache.prefetch(
        objects
            .iter()
            .map(|o| (o.saturating_sub(before), (before + head) as usize)),
    );
    chains
}

/// The addresses of a suspended greenlet's saved frames, innermost first,
/// at most `max` (greenlet's shim frames left out); and why the chain was
/// cut short, where it was.
fn saved_frame_addrs(
    mem: &dyn Memory,
    pl: &Layout,
    py: &GreenletPython,
    top: u64,
    max: usize,
) -> (Vec<u64>, Option<String>) {
    let mut addrs = Vec::new();
    let mut f = match py.frameobject_f_frame {
        Some(off) => mem.read_u64(top.wrapping_add(off)).unwrap_or(0),
        None => top,
    };
    let mut seen = HashSet::new();
    while f != 0 {
        if addrs.len() >= max {
            return (addrs, Some(format!("more than {max} frames")));
        }
        if !seen.insert(f) {
            return (addrs, Some("the frame chain loops".to_string()));
        }
        let shim = match pl.frame.entry {
            EntryMarker::OwnerShim { owner, shim_from } => mem
                .read_u8(f.wrapping_add(owner))
                .is_ok_and(|o| o >= shim_from),
            _ => false,
        };
        if !shim {
            addrs.push(f);
        }
        f = match mem.read_u64(f.wrapping_add(pl.frame.previous)) {
            Ok(p) => p,
            Err(_) => return (addrs, Some("a frame could not be read".to_string())),
        };
    }
    (addrs, None)
}

/// A suspended greenlet's saved frames, innermost first; with their
/// addresses.
fn saved_frames(
    reader: &mut Reader,
    mem: &dyn Memory,
    pl: &Layout,
    py: &GreenletPython,
    top: u64,
) -> (Vec<Frame>, Option<String>, Vec<u64>) {
    let (mut addrs, mut truncated) = saved_frame_addrs(mem, pl, py, top, MAX_FRAMES);
    let mut frames = Vec::with_capacity(addrs.len());
    for (i, addr) in addrs.iter().enumerate() {
        match reader.frame_at(mem, *addr) {
            Some((frame, _)) => frames.push(frame),
            None => {
                addrs.truncate(i);
                truncated = Some("a frame could not be read".to_string());
                break;
            }
        }
    }
    (frames, truncated, addrs)
}

/// gevent's name for a greenlet: `name` when one was given, else
/// `Greenlet-N` when gevent made its `minimal_ident` (it names a greenlet
/// so once asked), else the function it runs (gevent's `_run`, or
/// greenlet's own `run`).
fn greenlet_name(
    objr: &ObjReader,
    py: &GreenletPython,
    gevent: &Gevent,
    of_gevent: bool,
    id: u64,
    run: u64,
) -> Option<String> {
    if let Ok(Some(n)) = objr.instance_attr(id, "name") {
        if let Ok((s, _)) = objr.string(n, 256) {
            return Some(s);
        }
    }
    if let (Some(g), true) = (gevent.layout, of_gevent && gevent.greenlet_base_size > 0) {
        let at = id
            .wrapping_add(gevent.greenlet_base_size)
            .wrapping_add(g.greenlet_ident_from_base);
        let ident = objr.mem.read_u64(at).ok().filter(|p| *p != 0);
        if let Some(n) = ident
            .filter(|i| objr.type_name(*i).is_ok_and(|t| t == "int"))
            .and_then(|i| objr.int_u64(i).ok())
        {
            return Some(format!("Greenlet-{n}"));
        }
    }
    if let Ok(Some(r)) = objr.instance_attr(id, "_run") {
        if let Some(s) = callable_name(objr, py, r) {
            return Some(s);
        }
    }
    (run != 0).then(|| callable_name(objr, py, run)).flatten()
}

/// The function eventlet `GreenThread` `id` was spawned with: the
/// `function` local of the frame of the method it runs,
/// `GreenThread.main(self, function, args, kwargs)`, whose `self` is the
/// GreenThread (the outermost such frame). `None` when it is not found
/// (not started yet: eventlet keeps the function only in its hub's timer)
/// or not a function or method.
fn spawned_function(
    reader: &mut Reader,
    objr: &ObjReader,
    py: &GreenletPython,
    id: u64,
    frames: &[Frame],
    addrs: &[u64],
) -> Option<String> {
    frames
        .iter()
        .zip(addrs)
        .rev()
        // The code's qualified name (3.11+), or its name.
        .filter(|(f, a)| matches!(&*f.function, "GreenThread.main" | "main") && **a != 0)
        .take(MAX_BASES)
        .find_map(|(_, addr)| {
            let locals = reader.frame_locals_at(objr.mem, *addr);
            let me = locals.iter().any(|l| l.name == "self" && l.obj == id);
            let function = locals.iter().find(|l| l.name == "function")?;
            me.then(|| callable_name(objr, py, function.obj)).flatten()
        })
}

/// The GreenThreads of eventlet's hub spawned and not started yet, with
/// the function each was spawned with. eventlet keeps it only in the hub's
/// timers: `spawn` schedules `GreenThread.switch(function, args, kwargs)`,
/// a `Timer` whose `tpl` is `(callback, args, kwargs)`, kept as
/// `(deadline, timer)` in the hub's `next_timers` until its loop moves it
/// to `timers`. The hub is the `self` of the outermost of its greenlet's
/// `BaseHub.run` frames (`runs`: their addresses, outermost first).
fn eventlet_pending(
    reader: &mut Reader,
    objr: &ObjReader,
    py: &GreenletPython,
    runs: &[u64],
) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    let hub = runs.iter().find_map(|addr| {
        let locals = reader.frame_locals_at(objr.mem, *addr);
        locals.iter().find(|l| l.name == "self").map(|l| l.obj)
    });
    let Some(hub) = hub else {
        return out;
    };
    for list in ["next_timers", "timers"] {
        let Some(list) = objr.instance_attr(hub, list).ok().flatten() else {
            continue;
        };
        let Ok((entries, _)) = objr.list_items(list, MAX_PENDING_TIMERS) else {
            continue;
        };
        for e in entries {
            let timer = objr
                .tuple_items(e, 2)
                .ok()
                .and_then(|(t, _)| t.get(1).copied());
            let tpl = timer.and_then(|t| objr.instance_attr(t, "tpl").ok().flatten());
            let Some((tpl, _)) = tpl.and_then(|t| objr.tuple_items(t, 3).ok()) else {
                continue;
            };
            let (Some(&callback), Some(&args)) = (tpl.first(), tpl.get(1)) else {
                continue;
            };
            // The callback is the GreenThread's `switch`, bound: greenlet's
            // C method (or a Python override of it).
            let me_at = match objr.type_name(callback).ok().as_deref() {
                Some("builtin_function_or_method") => py.cfunction_self,
                Some("method") => py.method_self,
                _ => continue,
            };
            let Ok(me) = objr.mem.read_u64(callback.wrapping_add(me_at)) else {
                continue;
            };
            let function = objr
                .tuple_items(args, 1)
                .ok()
                .and_then(|(a, _)| a.first().copied());
            if let Some(f) = function {
                out.insert(me, f);
            }
        }
    }
    out
}

/// A function's or bound method's qualified name.
fn callable_name(objr: &ObjReader, py: &GreenletPython, mut obj: u64) -> Option<String> {
    for _ in 0..4 {
        match objr.type_name(obj).ok()?.as_str() {
            "function" => {
                let q = objr.mem.read_u64(obj.wrapping_add(py.func_qualname)).ok()?;
                return objr.string(q, 256).ok().map(|(s, _)| s);
            }
            "method" => obj = objr.mem.read_u64(obj.wrapping_add(py.method_func)).ok()?,
            _ => return None,
        }
    }
    None
}
