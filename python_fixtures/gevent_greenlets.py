"""Greenlet fixture: named greenlets parked in known places, then READY.

Usage: gevent_greenlets.py [--many N | --raw | --eventlet]

With --eventlet, eventlet instead of gevent: sleeper, event-waiter,
reader, getter and finished as below, and one spawned with
eventlet.spawn_after(1000, waiting_unnamed), not started; the main
greenlet parked in park(), and eventlet's hub (a plain greenlet, the
GreenThreads' parent) running its loop. eventlet's GreenThreads carry no
names: READY's view names each one after the function it was spawned
with (its qualified name, as recorded at the spawn), the one not started
too (eventlet keeps its function only in its hub's timer).

With --raw, greenlet alone (no gevent): three plain greenlets (raw_run,
raw_deep's two levels, one not started) and the main greenlet, which stays
running, parked in time.sleep in park_raw().

Greenlets (gevent's, unless said):
  sleeper        named; gevent.sleep(1000) two calls deep
  event-waiter   named; waits on a gevent.event.Event that is never set
  reader         named; recv() on a socket whose peer never writes
  tcp-reader     named; recv() on a TCP connection to the fixture's own listener
  joiner         named; joins the sleeper
  getter         named; get() on an empty gevent.queue.Queue
  locker         named; blocks on a gevent.lock.RLock the main greenlet holds
  (unnamed)      spawned with identified, which sleeps; its minimal_ident
                 asked, so gevent names it Greenlet-N
  (unnamed)      spawned with waiting_unnamed, which sleeps: shown by its function
  not-started    a Greenlet created but never started
  finished       a Greenlet that ran to its end (dead)
  raw            a plain greenlet.greenlet that switched back to its parent
  many-N         with --many: N greenlets sleeping, the last spawned
                 first (each begins its long sleep STAGGER after the next)
The main greenlet parks in park() (gevent.sleep), and the hub runs its loop.

READY carries the fixture's own view of every greenlet, read in-process
(gc.get_objects() filtered to greenlets, gr_frame walked), taken when every
greenlet but main and the hub is parked: `greenlets`, a list of
{id, type, name, state, parent, frames: [{function, line}] innermost first,
wait}; `main` and `hub` (their ids) and `park` (where main parks: function,
line). `wait`, where the fixture knows what a greenlet waits on:
{kind: "socket", fd, local, remote, quiet_since} (addresses of a TCP
socket, and when it was connected: it has carried no data since), {kind:
"timer", at, began} (the deadline, and when its sleep began, on
time.monotonic()'s clock), or {kind, object} (the id of the Event, Queue,
RLock or Greenlet waited on).
"""
import gc
import socket as stdsocket
import sys
import time

import greenlet

EVENTLET = "--eventlet" in sys.argv
if EVENTLET:
    import eventlet
    import eventlet.event
    import eventlet.green.socket
    import eventlet.queue

    GREEN = eventlet
elif "--raw" not in sys.argv:
    import gevent
    import gevent.event
    import gevent.lock
    import gevent.queue
    import gevent.socket

    GREEN = gevent

import fixture_util as fu

HERE = __file__
MARK = fu.markers(HERE)


def deeper_sleep():
    began()
    GREEN.sleep(1000)  # MARK:sleep


def sleeper():
    deeper_sleep()  # MARK:sleeper


def event_waiter(event):
    event.wait()  # MARK:event


def reader(sock):
    sock.recv(1)  # MARK:recv


def waiting_unnamed():
    began()
    gevent.sleep(1000)  # MARK:unnamed


def identified():
    began()
    gevent.sleep(1000)


def joiner(g):
    g.join()


def getter(q):
    q.get()


def locker(lock):
    with lock:
        pass


def many(i, n):
    # The last spawned begins its long sleep first: waiting longest is
    # not the order of spawning, nor of the collector's lists.
    gevent.sleep(STAGGER * (n - 1 - i))
    began()
    gevent.sleep(1000)


def finishes():
    return 1


def raw_run():
    greenlet.getcurrent().parent.switch()  # MARK:raw


def raw_deep():
    raw_run()  # MARK:raw_deep


def code_name(code):
    return getattr(code, "co_qualname", code.co_name)


# With --many: the seconds between one greenlet's start of its long sleep
# and the previous one's.
STAGGER = 0.002
# When each greenlet began its long sleep, on time.monotonic()'s clock, by id.
BEGAN = {}


def began():
    BEGAN[id(greenlet.getcurrent())] = time.monotonic()


# Greenlets whose name the fixture asked gevent for (Greenlet-N).
NAMED_BY_GEVENT = set()
# What each greenlet waits on, by id, where the fixture knows.
WAITS = {}
# eventlet: the name each GreenThread is expected under, by id.
SPAWNED = {}


def spawn(func, *args):
    """eventlet.spawn, the function's qualified name recorded."""
    g = eventlet.spawn(func, *args)
    SPAWNED[id(g)] = code_name(func.__code__)
    return g


def name_of(g, main):
    if g is main:
        return "main"
    if id(g) in NAMED_BY_GEVENT:
        return g.name
    if id(g) in SPAWNED and not g.dead:
        return SPAWNED[id(g)]
    d = getattr(g, "__dict__", None) or {}
    if isinstance(d.get("name"), str):
        return d["name"]
    run = d.get("_run")
    if run is None and type(g) is greenlet.greenlet:
        run = getattr(g, "run", None)
    if run is not None and hasattr(run, "__code__"):
        return code_name(run.__code__)
    return None


def state_of(g):
    if g.dead:
        return "dead"
    if g is greenlet.getcurrent():
        return "running"
    if not g:
        return "not started"
    return "suspended"


def frames_of(g):
    out = []
    f = g.gr_frame
    while f is not None:
        out.append({"function": code_name(f.f_code), "line": f.f_lineno})
        f = f.f_back
    return out


def own_view(main):
    view = []
    for g in gc.get_objects():
        if not isinstance(g, greenlet.greenlet):
            continue
        view.append(
            {
                "id": id(g),
                "type": type(g).__name__,
                "name": name_of(g, main),
                "state": state_of(g),
                "parent": id(g.parent) if g.parent is not None else None,
                "frames": frames_of(g),
                "wait": wait_of(g),
            }
        )
    return view


def wait_of(g):
    w = WAITS.get(id(g))
    f = g.gr_frame
    # The sleep frame: gevent's is innermost, eventlet's is below its hub's
    # switch.
    for _ in range(2):
        if w is not None or f is None:
            break
        local = f.f_locals
        # A gevent.sleep: its timer, a local of the sleep frame.
        t = local.get("t")
        if t is not None and type(t).__name__ == "timer":
            w = {"kind": "timer", "at": t.at, "began": BEGAN.get(id(g))}
        # An eventlet.sleep: its timer, whose deadline is in the hub's heap.
        t, hub = local.get("timer"), local.get("hub")
        if t is not None and hub is not None:
            for at, timer in list(hub.timers) + list(hub.next_timers):
                if timer is t:
                    w = {"kind": "timer", "at": at, "began": BEGAN.get(id(g))}
        f = f.f_back
    return w


def park():
    GREEN.sleep(fu.LIFETIME_SECONDS)  # MARK:park


def park_raw():
    time.sleep(fu.LIFETIME_SECONDS)  # MARK:park_raw


def main_raw():
    main_g = greenlet.getcurrent()
    keep = []
    for run in (raw_run, raw_deep):
        g = greenlet.greenlet(run)
        g.switch()
        keep.append(g)
    keep.append(greenlet.greenlet(raw_run))
    gc.collect()
    fu.ready(
        {
            "greenlets": own_view(main_g),
            "main": id(main_g),
            "hub": None,
            "park": {"function": "park_raw", "line": MARK["park_raw"]},
        }
    )
    park_raw()
    fu.exit_now()


def main():
    n = int(sys.argv[sys.argv.index("--many") + 1]) if "--many" in sys.argv else 0
    main_g = greenlet.getcurrent()
    hub = gevent.get_hub()
    keep = []
    g = gevent.spawn(sleeper)
    g.name = "sleeper"
    keep.append(g)
    event = gevent.event.Event()
    g = gevent.spawn(event_waiter, event)
    g.name = "event-waiter"
    keep.append(g)
    a, b = gevent.socket.socketpair()
    g = gevent.spawn(reader, a)
    g.name = "reader"
    keep.append(g)
    WAITS[id(g)] = {"kind": "socket", "fd": a.fileno()}
    keep.append(gevent.spawn(waiting_unnamed))
    g = gevent.Greenlet(finishes)
    g.name = "not-started"
    keep.append(g)
    g = gevent.spawn(finishes)
    g.name = "finished"
    keep.append(g)
    # Connected with the blocking stdlib socket: gevent's connect would
    # resolve the address in its thread pool, a second thread of greenlets.
    listener = stdsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    plain = stdsocket.create_connection(listener.getsockname())
    served, _ = listener.accept()
    quiet_since = time.monotonic()
    conn = gevent.socket.socket(fileno=plain.detach())
    g = gevent.spawn(reader, conn)
    g.name = "tcp-reader"
    keep.append(g)
    addr = "%s:%d"
    WAITS[id(g)] = {
        "kind": "socket",
        "fd": conn.fileno(),
        "local": addr % conn.getsockname(),
        "remote": addr % conn.getpeername(),
        "quiet_since": quiet_since,
    }
    g = gevent.spawn(joiner, keep[0])
    g.name = "joiner"
    keep.append(g)
    WAITS[id(g)] = {"kind": "greenlet", "object": id(keep[0])}
    queue = gevent.queue.Queue()
    g = gevent.spawn(getter, queue)
    g.name = "getter"
    keep.append(g)
    WAITS[id(g)] = {"kind": "queue", "object": id(queue)}
    lock = gevent.lock.RLock()
    lock.acquire()
    g = gevent.spawn(locker, lock)
    g.name = "locker"
    keep.append(g)
    WAITS[id(g)] = {"kind": "lock", "object": id(lock)}
    g = gevent.spawn(identified)
    g.minimal_ident
    NAMED_BY_GEVENT.add(id(g))
    keep.append(g)
    keep.extend([listener, served, b])
    for i in range(n):
        g = gevent.spawn(many, i, n)
        g.name = "many-%d" % i
        keep.append(g)
    # Let every spawned greenlet run up to where it parks.
    gevent.sleep(0.2 + STAGGER * n)
    keep[5].join()
    WAITS[id(keep[1])] = {"kind": "event", "object": id(event)}
    raw = greenlet.greenlet(raw_run)
    raw.switch()
    keep.append(raw)
    gc.collect()
    view = own_view(main_g)
    fu.ready(
        {
            "greenlets": view,
            "main": id(main_g),
            "hub": id(hub),
            "park": {"function": "park", "line": MARK["park"]},
        }
    )
    park()
    fu.exit_now()


def main_eventlet():
    main_g = greenlet.getcurrent()
    hub = eventlet.hubs.get_hub()
    keep = [spawn(sleeper)]
    event = eventlet.event.Event()
    g = spawn(event_waiter, event)
    WAITS[id(g)] = {"kind": "event", "object": id(event)}
    keep.append(g)
    a, b = eventlet.green.socket.socketpair()
    g = spawn(reader, a)
    WAITS[id(g)] = {"kind": "socket", "fd": a.fileno()}
    keep.append(g)
    queue = eventlet.queue.LightQueue()
    g = spawn(getter, queue)
    WAITS[id(g)] = {"kind": "queue", "object": id(queue)}
    keep.append(g)
    keep.append(spawn(finishes))
    g = eventlet.spawn_after(1000, waiting_unnamed)
    SPAWNED[id(g)] = code_name(waiting_unnamed.__code__)
    keep.append(g)
    keep.append(b)
    eventlet.sleep(0.2)
    gc.collect()
    fu.ready(
        {
            "greenlets": own_view(main_g),
            "main": id(main_g),
            "hub": id(hub.greenlet),
            "park": {"function": "park", "line": MARK["park"]},
        }
    )
    park()
    fu.exit_now()


if EVENTLET:
    main_eventlet()
elif "--raw" in sys.argv:
    main_raw()
else:
    main()
