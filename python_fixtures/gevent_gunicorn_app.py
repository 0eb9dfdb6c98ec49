"""The WSGI app gevent_gunicorn.py serves under gunicorn's gevent workers.

Routes:
  /upstream  sends a line to the fixture's upstream (FIXTURE_UPSTREAM_PORT)
             and waits for an answer that never comes  (handle_upstream)
  /sleep     time.sleep(1000), gevent's under the worker's monkey-patching
             (handle_sleep)
Each handler appends "KIND PID" to FIXTURE_LOG just before it waits.
"""
import os
import socket
import time

UPSTREAM = ("127.0.0.1", int(os.environ.get("FIXTURE_UPSTREAM_PORT", "0")))
LOG = os.environ.get("FIXTURE_LOG", os.devnull)


def note(kind):
    with open(LOG, "a") as f:
        f.write("%s %d\n" % (kind, os.getpid()))


def handle_upstream():
    conn = socket.create_connection(UPSTREAM)
    conn.sendall(b"request\n")
    note("upstream")
    return conn.recv(100)  # MARK:upstream


def handle_sleep():
    note("sleep")
    time.sleep(1000)  # MARK:sleep
    return b"late"


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/upstream":
        body = handle_upstream()
    elif path == "/sleep":
        body = handle_sleep()
    else:
        body = b"ok"
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]
