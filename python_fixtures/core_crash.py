# -*- coding: utf-8 -*-
"""Dies of SIGSEGV at address 0x10 inside a C library, called from Python.

    python core_crash.py LIBCRASH_SO

Runs unchanged on Python 2.7 and 3.6+. A second thread parks in a sleep so
that the crashed thread is not the only one (the core lists it first).
The tests run it under gdb, which takes a core at the fault, or with a core
size limit under the kernel's core_pattern.
"""
import ctypes
import sys
import threading
import time


def sleeper():
    while True:
        time.sleep(1000)


def forward(lib):
    return lib.crash_read(ctypes.c_void_p(0x10))  # MARK:crash


def main():
    lib = ctypes.CDLL(sys.argv[1])
    t = threading.Thread(target=sleeper, name="sleeper")
    t.daemon = True
    t.start()
    time.sleep(0.2)
    forward(lib)


main()
