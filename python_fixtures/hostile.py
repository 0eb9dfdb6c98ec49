# -*- coding: utf-8 -*-
"""Targets that misbehave, for pyinspect's fault and hostile-target tests.

Python 3.6+. argv[1] picks the mode; every mode prints one READY line and
stays until killed (fixture_util's lifetime bounds it).

  signals        counts every delivery of SIGRTMIN exactly (CPython's C
                 handler writes one byte per delivery to the wakeup fd; a
                 reader thread counts them); SIGUSR1 prints "COUNT n".
                 Two threads spin in Python meanwhile.
  spoof PID      a spinning thread writes PID into its own
                 PyThreadState.native_thread_id (3.11+, where the field is).
  exec DELAY PROG...  on SIGUSR2, a worker thread exec()s PROG after DELAY
                 seconds, while the main thread and another spin.
  truncate PATH  maps a copy of an ELF file at PATH (named like libpython)
                 and keeps truncating and rewriting it.
  vfork LIB SECS a thread calls hold_vfork(SECS) from LIB (the caller waits
                 in D state for SECS); another spins.
  names          a function, its file and its thread named with NUL, BEL,
                 ESC, C1, a lone surrogate (3.8+); the thread spins in it.
  churn          threads start and exit all the time.
  spin           the main thread spins.
"""
import ctypes
import mmap
import os
import signal
import sys
import threading
import time

import fixture_util as fu


def spin_forever():
    n = 0
    while True:
        n += 1


def start(target, *args):
    t = threading.Thread(target=target, args=args)
    t.daemon = True
    t.start()
    return t


def mode_signals():
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    count = [0]
    lock = threading.Lock()

    def reader():
        while True:
            data = os.read(rfd, 65536)
            with lock:
                count[0] += data.count(bytes([signal.SIGRTMIN]))

    signal.signal(signal.SIGRTMIN, lambda s, f: None)
    signal.set_wakeup_fd(wfd)

    def report(s, f):
        time.sleep(0.2)  # let the reader drain the pipe
        with lock:
            n = count[0]
        sys.stdout.write("COUNT %d\n" % n)
        sys.stdout.flush()

    signal.signal(signal.SIGUSR1, report)
    start(reader)
    start(spin_forever)
    start(spin_forever)
    fu.ready({})
    while not fu.expired():
        sum(range(1000))
    fu.exit_now()


def tid_words(tstate, tid):
    # The indices of the words equal to `tid` in the first few hundred bytes
    # of a thread state.
    words = (ctypes.c_ulong * 64).from_address(tstate)
    return words, set(i for i in range(64) if words[i] == tid)


def this_tstate():
    get = ctypes.pythonapi.PyThreadState_Get
    get.restype = ctypes.c_void_p
    return get()


def mode_spoof(victim):
    done = threading.Event()
    where = {}
    # The field holding a thread's kernel id: at the one index where both
    # the main thread's state and the spoofer's hold their own ids (another
    # word of one of them can equal its id by chance: a CI run met one).
    _, main_hits = tid_words(this_tstate(), threading.get_native_id())

    def spoofer():
        tid = threading.get_native_id()
        words, hits = tid_words(this_tstate(), tid)
        hits &= main_hits
        if len(hits) != 1:
            where["error"] = "native_thread_id not found uniquely: %r" % sorted(hits)
        else:
            words[hits.pop()] = victim
            where["tid"] = tid
        done.set()
        spin_forever()

    start(spoofer)
    done.wait(10)
    if "error" in where:
        raise RuntimeError(where["error"])
    fu.ready({"spoofer": where["tid"], "victim": victim})
    spin_forever()


def mode_exec(delay, argv, from_main=False):
    """On SIGUSR2, after `delay` seconds, exec `argv` from a worker thread
    (the kernel then moves it to the leader's tid), or from the main thread
    itself when `from_main` (the leader stays, with new memory)."""
    trigger = threading.Event()

    def worker():
        trigger.wait()
        time.sleep(delay)
        os.execv(argv[0], argv)

    signal.signal(signal.SIGUSR2, lambda s, f: trigger.set())
    start(spin_forever)
    if from_main:
        start(spin_forever)
        fu.ready({})
        # Woken every 10 ms: a signal the kernel hands to another thread
        # (the main one may be stopped by the sampler at that moment) runs
        # its handler only when the main thread runs bytecode.
        while not trigger.wait(0.01):
            pass
        time.sleep(delay)
        os.execv(argv[0], argv)
    start(worker)
    fu.ready({})
    spin_forever()


def mode_truncate(path):
    with open(sys.executable, "rb") as f:
        content = f.read(4 << 20)
    with open(path, "wb") as f:
        f.write(content)
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, len(content), prot=mmap.PROT_READ)
    fu.ready({"size": len(content)})
    n = 0
    while not fu.expired():
        n += 1
        os.ftruncate(fd, (n * 7919) % 4096)
        os.pwrite(fd, content[: len(content) // 2], 0)
        os.ftruncate(fd, len(content) // 3)
        os.pwrite(fd, content, 0)
    del m
    fu.exit_now()


def mode_vfork(lib, secs):
    holder = ctypes.CDLL(lib)
    ready = threading.Event()
    where = {}

    def vforker():
        where["tid"] = threading.get_native_id()
        ready.set()
        while True:
            holder.hold_vfork(ctypes.c_int(secs))

    start(vforker)
    start(spin_forever)
    ready.wait(10)
    fu.ready({"vforker": where["tid"]})
    while not fu.expired():
        time.sleep(0.05)
    fu.exit_now()


ODD = "odd\x00nul\x07bel\x1b[31mesc\x9bcsi\udcff"


def mode_names():
    src = "def %s():\n    n = 0\n    while True: n += 1\n" % "f"
    code = compile(src, "odd.py", "exec")
    code = code.replace(co_filename=ODD + ".py")
    ns = {}
    exec(code, ns)
    f = ns["f"]
    names = {"co_name": ODD, "co_filename": ODD + ".py"}
    if sys.version_info >= (3, 11):
        names["co_qualname"] = ODD
    f.__code__ = f.__code__.replace(**names)
    t = threading.Thread(target=f, name=ODD)
    t.daemon = True
    t.start()
    fu.ready({})
    while not fu.expired():
        time.sleep(0.05)
    fu.exit_now()


def mode_churn():
    def short():
        sum(range(100))

    fu.ready({})
    while not fu.expired():
        ts = [threading.Thread(target=short) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def main():
    fu.install_ping()
    mode = sys.argv[1]
    if mode == "signals":
        mode_signals()
    elif mode == "spoof":
        mode_spoof(int(sys.argv[2]))
    elif mode == "exec":
        mode_exec(float(sys.argv[2]), sys.argv[3:])
    elif mode == "exec-main":
        mode_exec(float(sys.argv[2]), sys.argv[3:], from_main=True)
    elif mode == "truncate":
        mode_truncate(sys.argv[2])
    elif mode == "vfork":
        mode_vfork(sys.argv[2], int(sys.argv[3]))
    elif mode == "names":
        mode_names()
    elif mode == "churn":
        mode_churn()
    elif mode == "spin":
        fu.ready({})
        spin_forever()


if __name__ == "__main__":
    main()
