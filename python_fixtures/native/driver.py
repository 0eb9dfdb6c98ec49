"""Calls the native fixture library (libfixture.so, built by the tests) from
named Python threads, for the native unwinding and merging tests.

    python driver.py /path/to/libfixture.so

Threads: "blocker" (fixture_block: read() on a pipe), "spinner"
(fixture_spin), "sleeper" (fixture_sleep), "callback" (fixture_call ->
Python callback -> fixture_block: native -> Python -> native). Prints
`READY {"pid": PID, thread name: native thread id...}` once they all run (the
tests' handshake), then waits to be killed. Works on Python 2.7 and 3.x.
"""
import ctypes
import json
import os
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
lib.fixture_block.argtypes = [ctypes.c_int]
lib.fixture_block.restype = ctypes.c_long
lib.fixture_sleep.argtypes = [ctypes.c_long]
lib.fixture_spin.argtypes = [ctypes.c_uint64]
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long)
lib.fixture_call.argtypes = [CALLBACK, ctypes.c_long]

read_fd, write_fd = os.pipe()
tids = {}
started = threading.Semaphore(0)


def native_id():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    # Before 3.8: gettid through libc.
    return ctypes.CDLL(None).syscall(186)


def announce():
    tids[threading.current_thread().name] = native_id()
    started.release()


def blocker():
    announce()
    lib.fixture_block(read_fd)


def spinner():
    announce()
    lib.fixture_spin(0)


def sleeper():
    announce()
    lib.fixture_sleep(1000000)


def in_callback(fd):
    return lib.fixture_block(fd)


def callback():
    announce()
    lib.fixture_call(CALLBACK(in_callback), read_fd)


targets = [("blocker", blocker), ("spinner", spinner), ("sleeper", sleeper), ("callback", callback)]
for name, target in targets:
    t = threading.Thread(target=target, name=name)
    t.daemon = True
    t.start()
for _ in targets:
    started.acquire()
tids["pid"] = os.getpid()
sys.stdout.write("READY " + json.dumps(tids) + "\n")
sys.stdout.flush()
while True:
    time.sleep(3600)
