# -*- coding: utf-8 -*-
"""A thread parked in a call that spans three lines. Runs on 2.7 and 3.6+.

READY gives, for the two innermost frames of the "positioned" thread, the
line and, on 3.11+, the end line, column and end column that the
interpreter's own co_positions() reports for the frame's instruction
(null before 3.11, which has no columns).
"""
import sys
import threading
import time

import fixture_util as fu

PARKED = fu.Parked()


def leaf():
    PARKED.set()
    while True:
        time.sleep(1000)  # MARK:leaf


def caller():
    return leaf(  # MARK:call
        )


def position(frame):
    code = frame.f_code
    out = {"function": code.co_name, "line": frame.f_lineno,
           "end_line": None, "column": None, "end_column": None}
    if hasattr(code, "co_positions"):
        p = list(code.co_positions())[frame.f_lasti // 2]
        out.update({"line": p[0], "end_line": p[1], "column": p[2], "end_column": p[3]})
    return out


def main():
    fu.install_ping()
    marks = fu.markers(__file__)
    t = threading.Thread(target=caller, name="positioned")
    t.daemon = True
    t.start()
    fu.wait_until([PARKED])
    deadline = time.time() + 10
    while sys._current_frames()[t.ident].f_lineno != marks["leaf"]:
        if time.time() > deadline:
            sys.stderr.write("fixture: the thread did not park\n")
            sys.exit(3)
        time.sleep(0.01)
    frame = sys._current_frames()[t.ident]
    fu.ready({"frames": [position(frame), position(frame.f_back)], "file": __file__})
    while not fu.expired():
        time.sleep(0.5)
    fu.exit_now()


if __name__ == "__main__":
    main()
