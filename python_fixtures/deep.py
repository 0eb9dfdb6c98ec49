# -*- coding: utf-8 -*-
"""Recurses N levels deep (argv[1], default 900) on the main thread, parks, READY.

Runs unchanged on Python 2.7 and 3.6+.
"""
import os
import sys
import time

import fixture_util as fu

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)


def dive(depth, total):
    if depth > 1:
        return dive(depth - 1, total)  # MARK:call
    fu.ready(
        {
            "depth": total,
            "innermost": fu.frame(dive, MARK["park"]),
            "recursive_call": fu.frame(dive, MARK["call"]),
            "outer": [fu.frame(main, MARK["main_call"]), frame_of_module()],
        }
    )
    while not fu.expired():
        time.sleep(0.5)  # MARK:park
    fu.exit_now()


def frame_of_module():
    # co_filename is the path as given on the command line (relative before 3.9).
    return {
        "function": "<module>",
        "name": "<module>",
        "file": main.__code__.co_filename,
        "line": MARK["module_call"],
    }


def main():
    fu.install_ping()
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 900
    sys.setrecursionlimit(depth + 100)
    dive(depth, depth)  # MARK:main_call


if __name__ == "__main__":
    main()  # MARK:module_call
