# -*- coding: utf-8 -*-
"""Sub-interpreters on threads, for `dump --native` (tests/native_subinterp.rs).

    python subinterp_native.py

Threads (3.11+; `_xxsubinterpreters` up to 3.12, `_interpreters` from 3.13):
  nested      runs a sub-interpreter whose code sleeps: the thread's C stack
              holds the main interpreter's eval loop and, inside it, the
              sub-interpreter's
  sequential  runs one sub-interpreter to completion, then another that
              sleeps (the first one's thread state is gone)
  several     runs code in sub-interpreter A, then in B, then in A again,
              which sleeps: the thread has a thread state in each
  deeper      runs a sub-interpreter that itself runs a second one that
              sleeps (3.12+, where a sub-interpreter may create another)

READY carries each thread's native id.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

try:
    import _interpreters as interpreters  # 3.13+
except ImportError:
    import _xxsubinterpreters as interpreters  # 3.11, 3.12

MOD = interpreters.__name__
# Each sleeping sub-interpreter writes a byte to this pipe first: READY
# comes once every one of them has (a handshake, not a delay).
READ_FD, WRITE_FD = os.pipe()
SLEEP = (
    u"import os, time\n"
    u"def sub_sleep():\n"
    u"    os.write(%d, b'.')\n"
    u"    time.sleep(1000.0)\n"
    u"sub_sleep()\n" % WRITE_FD
)
DEEPER = (
    u"import %s as i\n"
    u"def sub_outer():\n"
    u"    i.run_string(i.create(), %r)\n"
    u"sub_outer()\n" % (MOD, SLEEP)
)
started = {}


def record(name):
    started[name] = fu.native_id()


def nested():
    record("nested")
    interpreters.run_string(interpreters.create(), SLEEP)


def sequential():
    record("sequential")
    first = interpreters.create()
    interpreters.run_string(first, u"x = sum(range(1000))\n")
    interpreters.destroy(first)
    interpreters.run_string(interpreters.create(), SLEEP)


def several():
    record("several")
    a = interpreters.create()
    b = interpreters.create()
    interpreters.run_string(a, u"x = 1\n")
    interpreters.run_string(b, u"y = 2\n")
    interpreters.run_string(a, SLEEP)


def deeper():
    record("deeper")
    interpreters.run_string(interpreters.create(), DEEPER)


def main():
    fu.install_ping()
    targets = [nested, sequential, several]
    if sys.version_info >= (3, 12):
        targets.append(deeper)
    for f in targets:
        t = threading.Thread(target=f, name=f.__name__)
        t.daemon = True
        t.start()
    got = 0
    while got < len(targets):
        got += len(os.read(READ_FD, 16))
    # From os.write() into time.sleep(): a few bytecodes.
    fu.time.sleep(0.1)
    fu.ready({"threads": started})
    while not fu.expired():
        fu.time.sleep(0.2)
    fu.exit_now()


main()
