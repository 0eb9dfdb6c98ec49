# -*- coding: utf-8 -*-
"""A thread "matmul" multiplying 2000x2000 float64 matrices with numpy in a
loop: nearly all its time is in OpenBLAS's hand-written GEMM kernels, which
have no unwind information. OpenBLAS runs with 2 threads, so one worker
thread that Python does not know exists (for --native-all).

READY (once a first product is done) carries the matmul thread's native id
and the line of the multiplication. Needs numpy; Python 3 only.
"""
import os
import sys
import threading

# Before numpy loads OpenBLAS: one worker thread besides the caller.
os.environ["OPENBLAS_NUM_THREADS"] = "2"
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

MARK = fu.markers(os.path.abspath(__file__))
first = threading.Event()


def matmul(parked):
    a = np.ones((2000, 2000))
    b = np.ones((2000, 2000))
    c = a @ b
    parked.set()
    first.set()
    while True: c = a @ b  # MARK:matmul  (one line: the current line is exact)


def main():
    fu.install_ping()
    parked = fu.Parked()
    t = threading.Thread(target=matmul, name="matmul", args=(parked,))
    t.daemon = True
    t.start()
    fu.wait_until([first], timeout=60.0)
    fu.ready(
        {
            "native_id": fu.NATIVE_IDS.get(t.ident),
            "line": MARK["matmul"],
            "file": os.path.abspath(__file__),
            "numpy": np.__version__,
        }
    )
    while not fu.expired():
        fu.time.sleep(0.2)
    fu.exit_now()


main()
