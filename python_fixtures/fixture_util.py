# -*- coding: utf-8 -*-
"""Helpers shared by the fixtures that pyinspect's integration tests inspect.

Runs unchanged on Python 2.7 and 3.6+. A fixture parks its threads, then prints
one line `READY <json>` that tells the test what it should find, and stays
alive until it is killed (or gives up by itself, so that nothing leaks).
"""
import io
import json
import os
import signal
import sys
import threading
import time

# A fixture that nobody kills still goes away by itself.
LIFETIME_SECONDS = 120.0
START = time.time()


def markers(path):
    """Map each `# MARK:<name>` in the file at `path` to its line number.

    Lines come from the source itself so that editing a fixture never leaves a
    stale expectation behind.
    """
    found = {}
    with io.open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            pos = text.find(u"# MARK:")
            if pos >= 0:
                name = text[pos + len(u"# MARK:"):].split()[0]
                if name in found:
                    raise ValueError("marker %s twice in %s" % (name, path))
                found[name] = number
    return found


def _gettid_syscall():
    # Before 3.8 there is no threading.get_native_id(); ask the kernel directly
    # (x86_64 Linux only) so that the tests can still check the OS thread id.
    try:
        import ctypes
        import platform

        if platform.machine() != "x86_64" or not sys.platform.startswith("linux"):
            return None
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
        return lambda: int(syscall(186))  # SYS_gettid
    except Exception:
        return None


_native_id = getattr(threading, "get_native_id", None) or _gettid_syscall()


def native_id():
    """The calling thread's kernel thread id, or None where it cannot be known."""
    if _native_id is None:
        return None
    return _native_id()


try:
    import _thread as thread_module
except ImportError:  # Python 2
    import thread as thread_module


def ident():
    """The calling thread's Python ident, without registering it in threading."""
    return thread_module.get_ident()


# Each parked thread's kernel id, by Python ident. Only a thread itself can ask
# for its native id before 3.8, so each records its own as it parks.
NATIVE_IDS = {}


class Parked(object):
    """An event that a thread sets once it is about to park."""

    def __init__(self):
        self.event = threading.Event()

    def set(self):
        NATIVE_IDS[ident()] = native_id()
        self.event.set()

    def wait(self, timeout):
        return self.event.wait(timeout)


def code_info(func):
    """Names and file of a function as a stack reader should report them."""
    code = func.__code__
    return {
        # What a reader shows: the qualified name on 3.11+ (co_qualname), the
        # plain name before.
        "function": getattr(code, "co_qualname", code.co_name),
        "name": code.co_name,
        "file": code.co_filename,
    }


def frame(func, line):
    info = code_info(func)
    info["line"] = line
    return info


def version_info():
    import platform

    return {
        "version": platform.python_version(),
        "version_info": list(sys.version_info[:3]),
        "executable": os.path.realpath(sys.executable),
        "pid": os.getpid(),
    }


# Set by a test that cannot read the fixture's stdout (a program that
# `pyinspect record -- ...` launches, or that a shell script starts): READY
# also goes into the file it names (tests/common's ReadyFile).
READY_FILE_ENV = "PYINSPECT_READY_FILE"


def ready(payload):
    """Print the single READY line that the test waits for (and write it to
    the ready file, where the test asked for one)."""
    body = version_info()
    body.update(payload)
    line = "READY " + json.dumps(body, sort_keys=True) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    path = os.environ.get(READY_FILE_ENV)
    if path:
        # Whole or absent: written aside, then renamed into place.
        with open(path + ".tmp", "w") as f:
            f.write(line)
        os.rename(path + ".tmp", path)


def _pong(signum, stack):
    # Proves to a test that the process still runs Python code after a dump.
    sys.stdout.write("PONG\n")
    sys.stdout.flush()


def install_ping():
    signal.signal(signal.SIGUSR1, _pong)


def expired():
    return time.time() - START > LIFETIME_SECONDS


def exit_now():
    sys.stdout.flush()
    os._exit(0)


def wait_until(events, timeout=20.0):
    deadline = time.time() + timeout
    for event in events:
        left = deadline - time.time()
        if left <= 0 or not event.wait(left):
            sys.stderr.write("fixture: a thread did not park in time\n")
            os._exit(3)
