# -*- coding: utf-8 -*-
"""Stalls of known culprit and length, for `pyinspect watch`.

After READY, waits for SIGUSR2 (the watcher is attached by then), then runs
each stall once, with quiet gaps between them, and prints one line
`STALLS <json>`: for each stall its trigger, culprit (function, file, line)
and its length as measured here, then exits. A heartbeat thread keeps the
process's stacks changing except during the deadlock, which freezes it.

Stalls (in this order):
  loop_blocked   a coroutine that calls time.sleep inside the loop (3.7+)
  loop_blocked   a coroutine that spins in pure Python (3.7+)
  gil_held       a catastrophically backtracking re.match (holds the GIL)
  thread_stuck   a recv on a socket whose peer answers late
  process_frozen two threads deadlocked on two locks, until a rescuer
                 releases one of them

Runs on Python 2.7 and 3.6+ (the asyncio stalls on 3.7+).
"""
import collections
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_util  # noqa: E402

STALL = float(os.environ.get("WATCH_STALL", "0.4"))
GAP = float(os.environ.get("WATCH_GAP", "0.5"))
HERE = os.path.abspath(__file__)
MARKS = fixture_util.markers(HERE)
done = threading.Event()
parked = threading.Event()
resume = threading.Event()
stalls = []
# When the heartbeat ran (the latest few thousand times): it waits for the
# GIL while the regex holds it, so its first beat after the regex began is
# when the GIL was let go.
beats = collections.deque(maxlen=4096)


def record(trigger, func, mark, start, end, marks=None, **extra):
    info = fixture_util.code_info(func)
    info.update(
        trigger=trigger,
        line=(marks or MARKS)[mark],
        start=start,
        duration=end - start,
    )
    info.update(extra)
    stalls.append(info)


def heartbeat():
    while not done.is_set():
        if parked.is_set():
            resume.wait()
        time.sleep(0.002)
        beats.append(time.time())
        time.sleep(0.002)
        beats.append(time.time())


# The regex: (a+)+b against a run of a's without a b backtracks 2^n times.
PATTERN = re.compile(r"(a+)+b")


def calibrate():
    """A subject that takes about STALL seconds to fail to match."""
    n = 16
    while True:
        subject = "a" * n + "c"
        t = time.time()
        PATTERN.match(subject)
        took = time.time() - t
        if took > 0.05:
            break
        n += 1
    # A quarter more than the stall: a loaded machine makes the estimate vary.
    while took < 1.25 * STALL:
        n += 1
        took *= 2
    return "a" * n + "c"


def regex_worker(subject):
    # One line: a GIL switch between reading the clock and the call would
    # count the wait for the GIL as part of the hold.
    start = time.time(); PATTERN.match(subject)  # noqa: E702  # MARK:regex
    end = time.time()
    # The clock read after the call waits for the GIL again (the heartbeat
    # takes it first) and, on a loaded machine, for a CPU: the hold ended
    # no later than the heartbeat's first beat after it began.
    after = [b for b in list(beats) if b > start]
    record("gil_held", regex_worker, "regex", start, min([end] + after))


ANSWERED = []


def stuck_client(sock):
    start = time.time()
    sock.recv(1)  # MARK:recv
    # Ends when the peer answers: the client's own clock read after the
    # recv waits for a CPU and the GIL on a loaded machine.
    record("thread_stuck", stuck_client, "recv", start, ANSWERED[0])


def late_peer(sock):
    time.sleep(STALL)
    ANSWERED.append(time.time())
    sock.sendall(b"x")


def run_thread_stalls(subject):
    # GIL held in C.
    t = threading.Thread(target=regex_worker, args=(subject,), name="regex")
    t.start()
    t.join()
    time.sleep(GAP)

    # A socket that answers late.
    a, b = socket.socketpair()
    c = threading.Thread(target=stuck_client, args=(a,), name="client")
    p = threading.Thread(target=late_peer, args=(b,), name="peer")
    c.start()
    p.start()
    c.join()
    p.join()
    a.close()
    b.close()
    time.sleep(GAP)

    # A deadlock, broken by a rescuer.
    parked.set()
    time.sleep(0.05)
    l1 = threading.Lock()
    l2 = threading.Lock()
    b_holds = threading.Event()
    times = {}

    def first():
        l1.acquire()
        b_holds.wait()
        times["a"] = time.time()
        l2.acquire()  # MARK:deadlock_a
        times["a_end"] = time.time()
        l2.release()
        l1.release()

    def second():
        # No pause between the two: a sleep here (a select before 3.11)
        # stretched past the threshold on a loaded machine, and the
        # process was still from when `first` blocked, then moved.
        l2.acquire()
        b_holds.set()
        times["b"] = time.time()
        l1.acquire()  # MARK:deadlock_b
        l1.release()

    def rescuer():
        time.sleep(STALL + 0.05)
        times["rescue"] = time.time()
        l2.release()

    ta = threading.Thread(target=first, name="first")
    tb = threading.Thread(target=second, name="second")
    tr = threading.Thread(target=rescuer, name="rescuer")
    ta.start()
    tb.start()
    tr.start()
    ta.join()
    tb.join()
    tr.join()
    parked.clear()
    resume.set()
    record(
        "process_frozen",
        first,
        "deadlock_a",
        # Frozen once both are blocked: the later of the two.
        max(times["a"], times["b"]),
        times["rescue"],
        other={"function": fixture_util.code_info(second)["function"],
               "line": MARKS["deadlock_b"]},
    )


go = []


def on_go(signum, frame):
    go.append(True)


asyncio_stalls = None


def main():
    global asyncio_stalls
    if sys.version_info >= (3, 7):
        # Imported before READY: an import holds the GIL for a while.
        import asyncio_stalls
    subject = calibrate()
    threading.Thread(target=heartbeat, name="heartbeat").start()
    signal.signal(signal.SIGUSR2, on_go)
    fixture_util.ready({"stall": STALL})
    while not go:
        time.sleep(0.01)
        if fixture_util.expired():
            fixture_util.exit_now()
    time.sleep(GAP)
    if asyncio_stalls is not None:
        asyncio_stalls.run(record, STALL, GAP, MARKS)
    run_thread_stalls(subject)
    time.sleep(GAP)
    done.set()
    resume.set()
    sys.stdout.write("STALLS " + json.dumps(stalls) + "\n")
    sys.stdout.flush()
    fixture_util.exit_now()


if __name__ == "__main__":
    main()
