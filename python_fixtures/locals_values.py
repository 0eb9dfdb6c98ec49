# -*- coding: utf-8 -*-
"""Locals that stress --locals rendering. Runs on Python 2.7 and 3.6+.

One thread parks in `values()` with numpy scalars (when numpy is
installed), nested and long containers, a long string, recursive
containers and a fake object whose type pointer is unreadable. READY
carries the expected renderings (computed here, by Python itself).
"""
import ctypes
import gc
import sys
import threading
import time

import fixture_util as fu

try:
    import numpy as np
except ImportError:
    np = None

PARKED = fu.Parked()
# The fake object must never be looked at by the collector.
gc.disable()

# PyObject_HEAD of the fake: a huge refcount (never freed) and an
# unreadable ob_type. Debug builds have two more pointers in front.
HEAD_WORDS = 4 if hasattr(sys, "gettotalrefcount") else 2
FAKE = (ctypes.c_uint64 * 8)()
FAKE[HEAD_WORDS - 2] = 1 << 40
FAKE[HEAD_WORDS - 1] = 0x10
FAKE_ADDR = ctypes.addressof(FAKE)


def numpy_scalars():
    if np is None:
        return {}
    return {
        "np_bool": np.bool_(True),
        "np_int8": np.int8(-2),
        "np_uint8": np.uint8(200),
        "np_int16": np.int16(-300),
        "np_uint16": np.uint16(60000),
        "np_int32": np.int32(-70000),
        "np_uint32": np.uint32(4000000000),
        "np_int64": np.int64(-(2 ** 40)),
        "np_uint64": np.uint64(2 ** 63 + 5),
        "np_float32": np.float32(0.1),
        "np_float64": np.float64(0.25),
    }


def values(scalars):
    np_bool = scalars.get("np_bool")
    np_int8 = scalars.get("np_int8")
    np_uint8 = scalars.get("np_uint8")
    np_int16 = scalars.get("np_int16")
    np_uint16 = scalars.get("np_uint16")
    np_int32 = scalars.get("np_int32")
    np_uint32 = scalars.get("np_uint32")
    np_int64 = scalars.get("np_int64")
    np_uint64 = scalars.get("np_uint64")
    np_float32 = scalars.get("np_float32")
    np_float64 = scalars.get("np_float64")
    nested = [1, 2, 3, [1, 2, [1]]]
    deep = {"a": [1, (2, {"b": [3]})]}
    short = [1, 2]
    big_dict = dict((i, i) for i in range(50))
    long_list = list(range(100))
    big_tuple = tuple(range(50))
    long_strs = ["abcdefghij"] * 20
    long_str = "x" * 500
    rec_list = [1]
    rec_list.append(rec_list)
    rec_dict = {}
    rec_dict["self"] = rec_dict
    invalid = ctypes.cast(FAKE_ADDR, ctypes.py_object).value
    PARKED.set()
    while True:
        time.sleep(1000)  # MARK:park


def main():
    fu.install_ping()
    scalars = numpy_scalars()
    t = threading.Thread(target=lambda: values(scalars), name="values")
    t.daemon = True
    t.start()
    fu.wait_until([PARKED])
    expected = {
        "nested": "[1, 2, 3, [1, 2, [1]]]",
        "deep": "{'a': [1, (2, {'b': [3]})]}",
        "short": "[1, 2]",
        "rec_list": "[1, [...]]",
        "rec_dict": "{'self': {...}}",
        "invalid": "<invalid object at 0x%x>" % FAKE_ADDR,
    }
    fu.ready(
        {
            "expected": expected,
            "numpy": dict((k, str(v)) for k, v in scalars.items()),
            "big_dict": 50,
            "long_list": 100,
            "big_tuple": 50,
            "long_strs": 20,
            "long_str": 500,
        }
    )
    while not fu.expired():
        time.sleep(0.5)
    fu.exit_now()


if __name__ == "__main__":
    main()
