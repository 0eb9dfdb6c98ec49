"""gevent service fixture: two kinds of request, always in flight, each
timed by the fixture itself.

Usage: gevent_service.py

Workers (gevent greenlets), each looping: a request, then think() (a short
gevent.sleep outside any handler).
  upstream-N  handle_upstream: sends a byte to the fixture's own upstream
              server and waits for its answer (the upstream answers after
              UPSTREAM_DELAY seconds): time spent suspended on a socket
  compute-N   handle_compute: burns the CPU for a few milliseconds, then
              sleeps a little: time spent running, and suspended on a timer

READY once every worker has served a request. On SIGUSR2 the fixture
prints `SPENT {"handle_upstream": S, "handle_compute": S, "seconds": S}`:
the greenlet-seconds spent inside each handler (summed over the workers,
a request counted by the part of it inside the period) since the previous
SIGUSR2 (or READY), and the period's length; then starts a new period.
"""
import json
import signal
import socket as stdsocket
import sys
import time

import gevent
import gevent.socket

import fixture_util as fu

UPSTREAM_DELAY = 0.03
UPSTREAMS = 3
COMPUTES = 2
HANDLERS = ("handle_upstream", "handle_compute")

# Seconds inside each handler in the current period, and the start of each
# request now in flight (by worker), so a period counts only its own part.
SPENT = dict.fromkeys(HANDLERS, 0.0)
IN_FLIGHT = {}
PERIOD = [time.monotonic()]
SERVED = set()


def serve_upstream(conn):
    while True:
        if not conn.recv(1):
            return
        gevent.sleep(UPSTREAM_DELAY)
        conn.sendall(b"y")


def upstream_server(listener):
    while True:
        conn, _ = listener.accept()
        gevent.spawn(serve_upstream, conn)


def handle_upstream(conn):
    conn.sendall(b"x")
    conn.recv(1)


def burn(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def handle_compute():
    burn(0.004)
    gevent.sleep(0.002)


def think():
    gevent.sleep(0.005)


def worker(name, handler, args):
    while True:
        start = time.monotonic()
        IN_FLIGHT[name] = (handler.__name__, start)
        handler(*args)
        end = time.monotonic()
        del IN_FLIGHT[name]
        SPENT[handler.__name__] += end - max(start, PERIOD[0])
        SERVED.add(name)
        think()


def report():
    now = time.monotonic()
    out = dict(SPENT)
    for handler, start in IN_FLIGHT.values():
        out[handler] += now - max(start, PERIOD[0])
    out["seconds"] = now - PERIOD[0]
    for h in HANDLERS:
        SPENT[h] = 0.0
    PERIOD[0] = now
    sys.stdout.write("SPENT " + json.dumps(out) + "\n")
    sys.stdout.flush()


def connect(address):
    # Connected with the blocking stdlib socket: gevent's connect would
    # resolve the address in its thread pool (a second thread).
    plain = stdsocket.create_connection(address)
    return gevent.socket.socket(fileno=plain.detach())


def main():
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    gevent.spawn(upstream_server, listener)
    workers = []
    for i in range(UPSTREAMS):
        conn = connect(listener.getsockname())
        name = "upstream-%d" % i
        g = gevent.spawn(worker, name, handle_upstream, (conn,))
        g.name = name
        workers.append(g)
    for i in range(COMPUTES):
        name = "compute-%d" % i
        g = gevent.spawn(worker, name, handle_compute, ())
        g.name = name
        workers.append(g)
    while len(SERVED) < len(workers):
        gevent.sleep(0.01)
    gevent.signal_handler(signal.SIGUSR2, report)
    PERIOD[0] = time.monotonic()
    for h in HANDLERS:
        SPENT[h] = 0.0
    fu.ready({"workers": [g.name for g in workers]})
    while not fu.expired():
        gevent.sleep(0.5)
    fu.exit_now()


main()
