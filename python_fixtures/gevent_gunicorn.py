"""A real gunicorn service with gevent workers, serving slow requests.

Usage: gevent_gunicorn.py

Starts an upstream server (a thread here that reads each request and never
answers), then gunicorn (`-k gevent -w 2`, in this process group) serving
gevent_gunicorn_app.py, then sends STUCK requests to each of /upstream and
/sleep and keeps their connections open. READY once every request is in
its handler (the app logs each just before it waits): `master` (gunicorn's
pid), `in_flight` ({"upstream": {PID: N}, "sleep": {PID: N}}: the requests
each worker took), `upstream` (the upstream's address, what an /upstream
handler's socket is connected to), `marks` (the handlers' wait lines).
Needs gunicorn (.ci/gevent-deps installs it into pyenv 3.9 and 3.12).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import fixture_util as fu

HERE = os.path.dirname(os.path.abspath(__file__))
STUCK = 3
WORKERS = 2


def upstream_server(listener, held):
    while True:
        conn, _ = listener.accept()
        held.append(conn)


def die_with_parent():
    # gunicorn goes when this process goes, however it goes.
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []
    threading.Thread(target=upstream_server, args=(listener, held), daemon=True).start()
    log = tempfile.NamedTemporaryFile(prefix="pyinspect-gunicorn-", delete=False)
    log.close()
    port = free_port()
    env = dict(os.environ)
    env["FIXTURE_UPSTREAM_PORT"] = str(listener.getsockname()[1])
    env["FIXTURE_LOG"] = log.name
    master = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn",
            "-k", "gevent", "-w", str(WORKERS),
            "-b", "127.0.0.1:%d" % port,
            "--graceful-timeout", "1",
            "--chdir", HERE,
            "gevent_gunicorn_app:app",
        ],
        env=env,
        preexec_fn=die_with_parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Served once gunicorn accepts.
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or master.poll() is not None:
                sys.stderr.write("fixture: gunicorn did not start\n")
                os._exit(3)
            time.sleep(0.1)
    clients = []
    for path in ["/upstream"] * STUCK + ["/sleep"] * STUCK:
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        clients.append(c)
    in_flight = {"upstream": {}, "sleep": {}}
    while True:
        with open(log.name) as f:
            lines = f.read().split()
        if len(lines) >= 4 * STUCK:
            break
        if time.time() > deadline:
            sys.stderr.write("fixture: requests did not reach their handlers\n")
            os._exit(3)
        time.sleep(0.05)
    for kind, pid in zip(lines[::2], lines[1::2]):
        in_flight[kind][pid] = in_flight[kind].get(pid, 0) + 1
    os.unlink(log.name)
    marks = fu.markers(os.path.join(HERE, "gevent_gunicorn_app.py"))
    fu.ready(
        {
            "master": master.pid,
            "in_flight": in_flight,
            "upstream": "127.0.0.1:%d" % listener.getsockname()[1],
            "marks": marks,
        }
    )
    while not fu.expired():
        time.sleep(0.5)
    master.terminate()
    fu.exit_now()


main()
