# -*- coding: utf-8 -*-
"""Starts two Python children parked in known functions (one through
subprocess, one through multiprocessing) and one non-Python child
(`sleep 100`), then READY with their pids.

Runs unchanged on Python 2.7 and 3.6+.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import time

import fixture_util as fu

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)


def orphaned(parent):
    return os.getppid() != parent or fu.expired()


def child_park(parent):
    while not orphaned(parent):
        time.sleep(0.5)  # MARK:child_park
    fu.exit_now()


def subprocess_child(parent):
    sys.stdout.write(json.dumps({"pid": os.getpid(), "frame": fu.frame(child_park, MARK["child_park"])}) + "\n")
    sys.stdout.flush()
    child_park(parent)


def mp_child_park(parent):
    while not orphaned(parent):
        time.sleep(0.5)  # MARK:mp_child_park
    fu.exit_now()


def mp_child(parent, conn):
    conn.send(json.dumps({"pid": os.getpid(), "frame": fu.frame(mp_child_park, MARK["mp_child_park"])}))
    conn.close()
    mp_child_park(parent)


def parent_wait(children):
    while not fu.expired():
        time.sleep(0.5)  # MARK:parent_wait
    for child in children:
        child.kill()
    fu.exit_now()


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        subprocess_child(int(sys.argv[2]))
        return
    fu.install_ping()
    me = os.getpid()
    first = subprocess.Popen([sys.executable, HERE, "child", str(me)], stdout=subprocess.PIPE)
    # Forked as on every version up to 3.13: 3.14 made forkserver the
    # default, which adds two Python helper processes and makes the
    # worker a grandchild.
    mp = multiprocessing.get_context("fork") if hasattr(multiprocessing, "get_context") else multiprocessing
    receiver, sender = mp.Pipe(duplex=False)
    second = mp.Process(target=mp_child, args=(me, sender), name="mp-child")
    second.daemon = True
    second.start()
    other = subprocess.Popen(["sleep", "100"])
    children = [json.loads(first.stdout.readline().decode("utf-8"))]
    if not receiver.poll(20):
        sys.stderr.write("fixture: the multiprocessing child did not report\n")
        os._exit(3)
    children.append(json.loads(receiver.recv()))
    time.sleep(0.2)  # from reporting into time.sleep()
    fu.ready(
        {
            "children": children,
            "non_python": {"pid": other.pid, "executable": "sleep"},
            "main_frame": fu.frame(parent_wait, MARK["parent_wait"]),
        }
    )
    parent_wait([first, other])


if __name__ == "__main__":
    main()
