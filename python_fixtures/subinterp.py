# -*- coding: utf-8 -*-
"""A sub-interpreter runs a loop on its own thread while the main interpreter's
threads keep running known functions; then READY. Python 3.12 and newer.

3.12 offers `_xxsubinterpreters`, 3.13 `_interpreters` (both with create()
and run_string()), 3.14+ the public `concurrent.interpreters` (create(),
then Interpreter.exec()). The sub-interpreter's code reports its thread ids
back through a pipe, since nothing else is shared.
"""
import os
import sys
import threading
import time

import fixture_util as fu

import inspect

try:
    from concurrent import interpreters  # 3.14+

    PUBLIC = True
except ImportError:
    PUBLIC = False
    try:
        import _interpreters as interpreters  # 3.13
    except ImportError:
        import _xxsubinterpreters as interpreters  # 3.12

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)

SUB_CODE = u"""
import os
import time
import _thread


def sub_loop(fd):
    os.write(fd, ("%d %d\\n" % (_thread.get_ident(), _thread.get_native_id())).encode())
    while True:
        time.sleep(1000.0)  # MARK:sub


sub_loop(WRITE_FD)  # MARK:sub_call
"""


# The file name the sub-interpreter's code runs under.
SUB_FILE = "<script>" if PUBLIC else "<string>"


def sub_mark(name):
    for number, text in enumerate(SUB_CODE.splitlines(), 1):
        if text.endswith("# MARK:" + name):
            return number
    raise ValueError(name)


def run_sub(interp, code):
    if PUBLIC:
        interp.exec(code)  # MARK:run_sub_public
    else:
        interpreters.run_string(interp, code)  # MARK:run_sub


def runner_frames():
    """The sub-runner's innermost frames in the main interpreter."""
    if not PUBLIC:
        return [fu.frame(run_sub, MARK["run_sub"])]
    # Interpreter.exec() calls into _interpreters: find that line in its source.
    lines, first = inspect.getsourcelines(interpreters.Interpreter.exec)
    call = [i for i, t in enumerate(lines) if "_interpreters.exec(" in t][0]
    return [
        fu.frame(interpreters.Interpreter.exec, first + call),
        fu.frame(run_sub, MARK["run_sub_public"]),
    ]


def main_side(parked):
    parked.set()
    while True:
        time.sleep(1000.0)  # MARK:main_side


def main_wait():
    while not fu.expired():
        time.sleep(0.5)  # MARK:main
    fu.exit_now()


def main():
    fu.install_ping()
    side_parked = fu.Parked()
    side = threading.Thread(target=main_side, args=(side_parked,), name="main-side")
    side.daemon = True
    side.start()

    interp = interpreters.create()
    interp_id = interp.id if PUBLIC else int(interp)
    read_fd, write_fd = os.pipe()
    code = SUB_CODE.replace("WRITE_FD", str(write_fd))
    runner = threading.Thread(target=run_sub, args=(interp, code), name="sub-runner")
    runner.daemon = True
    runner.start()
    fu.wait_until([side_parked])
    sub_ident, sub_native = [int(x) for x in os.read(read_fd, 100).split()]
    time.sleep(0.2)  # from os.write() into time.sleep()
    fu.ready(
        {
            "sub_interpreter": interp_id,
            "sub_thread": {
                "ident": sub_ident,
                "native_id": sub_native,
                "frames": [
                    {"function": "sub_loop", "file": SUB_FILE, "line": sub_mark("sub")},
                    {"function": "<module>", "file": SUB_FILE, "line": sub_mark("sub_call")},
                ],
            },
            "main_threads": [
                {
                    "name": "main-side",
                    "ident": side.ident,
                    "native_id": fu.NATIVE_IDS.get(side.ident),
                    "frame": fu.frame(main_side, MARK["main_side"]),
                },
                {
                    "name": "sub-runner",
                    "ident": runner.ident,
                    "native_id": sub_native,
                    "frame": runner_frames()[0],
                    "frames": runner_frames(),
                },
                {
                    "name": "MainThread",
                    "ident": threading.current_thread().ident,
                    "native_id": fu.native_id(),
                    "frame": fu.frame(main_wait, MARK["main"]),
                },
            ],
        }
    )
    main_wait()


if __name__ == "__main__":
    main()
