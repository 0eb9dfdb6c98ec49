# -*- coding: utf-8 -*-
"""Threads that `threading` does not name, each given a kernel name.

Runs on Python 2.7 and 3.6+. READY lists each thread's kernel tid and the
name a reader should show, with its source:

  c-idle      started by _thread.start_new_thread straight into time.sleep:
              registered with the interpreter, no Python frame at all
  py-unnamed  started by _thread.start_new_thread into a Python function
  named       a threading.Thread called "named" whose kernel name differs:
              the threading name wins
"""
import os
import sys
import threading
import time

import fixture_util as fu

LONG = 1000.0
# Syscalls a thread sleeping in time.sleep or Event.wait sits in (x86-64):
# select, nanosleep, futex, clock_nanosleep, pselect6.
SLEEPING = ("23", "35", "202", "230", "270")


def tasks():
    return set(int(t) for t in os.listdir("/proc/self/task"))


def set_comm(tid, name):
    with open("/proc/self/task/%d/comm" % tid, "w") as f:
        f.write(name)


def parked_in_syscall(tid):
    try:
        with open("/proc/self/task/%d/syscall" % tid) as f:
            return f.read().split()[0] in SLEEPING
    except (IOError, OSError, IndexError):
        return False


def new_thread(start):
    """Start a thread with `start`; its kernel tid once it sleeps."""
    before = tasks()
    start()
    deadline = time.time() + 20
    while time.time() < deadline:
        fresh = [t for t in tasks() - before if parked_in_syscall(t)]
        if fresh:
            return fresh[0]
        time.sleep(0.01)
    sys.stderr.write("fixture: the thread did not park\n")
    os._exit(3)


def unnamed_python():
    while True:
        time.sleep(LONG)


def named_run():
    while True:
        time.sleep(LONG)


def main():
    fu.install_ping()
    c_idle = new_thread(lambda: fu.thread_module.start_new_thread(time.sleep, (LONG,)))
    set_comm(c_idle, "c-idle")
    py_unnamed = new_thread(lambda: fu.thread_module.start_new_thread(unnamed_python, ()))
    set_comm(py_unnamed, "py-unnamed")
    t = threading.Thread(target=named_run, name="named")
    t.daemon = True
    named = new_thread(t.start)
    set_comm(named, "os-other")
    # Each thread reads its name once it runs; a parked one has no reason to change it.
    fu.ready(
        {
            "threads": [
                {"tid": c_idle, "name": "c-idle", "source": "os"},
                {"tid": py_unnamed, "name": "py-unnamed", "source": "os"},
                {"tid": named, "name": "named", "source": "threading"},
                {"tid": fu.native_id(), "name": "MainThread", "source": "threading"},
            ]
        }
    )
    while not fu.expired():
        time.sleep(0.5)
    fu.exit_now()


if __name__ == "__main__":
    main()
