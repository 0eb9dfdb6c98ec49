# -*- coding: utf-8 -*-
"""A thread parked in C++ with long demangled names, for tests/native_names.rs.

    python names.py LIBDIR

LIBDIR holds libnames.so (names_fixture.cpp, built by the test with its
symbols and DWARF). Thread `cxx` calls names_block through ctypes, which
goes down a kernel wrapper, a std::function and a lambda into a function in
an anonymous namespace that parks in read() on a pipe nothing writes to.
READY once that function has written to the ready pipe, i.e. is one call
away from read(); carries the thread's native id. Runs on 2.7 and 3.6+.
"""
import ctypes
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

lib = ctypes.CDLL(os.path.join(sys.argv[1], "libnames.so"))
lib.names_block.argtypes = [ctypes.c_int, ctypes.c_int]
lib.names_block.restype = ctypes.c_long

park_r, _park_w = os.pipe()
ready_r, ready_w = os.pipe()
tids = {}


def park():
    tids["cxx"] = fu.native_id()
    lib.names_block(park_r, ready_w)  # MARK:call


t = threading.Thread(target=park, name="cxx")
t.daemon = True
t.start()
if os.read(ready_r, 1) != b"r":
    sys.stderr.write("fixture: names_block did not start\n")
    os._exit(3)
fu.ready({"tid": tids["cxx"]})
while not fu.expired():
    fu.time.sleep(0.5)
fu.exit_now()
