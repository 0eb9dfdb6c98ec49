# -*- coding: utf-8 -*-
"""py-spy's longsleep case: the main thread asleep in one function called
from the module. Runs on Python 2.7 and 3.6+. READY carries the lines of
the two frames a sample of it should show.
"""
import os
import time

import fixture_util as fu

MARK = fu.markers(os.path.abspath(__file__))


def longsleep():
    fu.ready({"module_line": MARK["call"], "sleep_line": MARK["sleep"]})
    time.sleep(fu.LIFETIME_SECONDS)  # MARK:sleep


if __name__ == "__main__":
    fu.install_ping()
    longsleep()  # MARK:call
