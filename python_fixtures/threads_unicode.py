# -*- coding: utf-8 -*-
"""Non-ASCII function and class names (Python 3 only: 2.7 forbids them).

Imported by threads.py on Python 3; the thread named "wörker-中" runs here.
"""
import time


class Ünïcode:
    def méthode(self, parked):
        parked.set()
        while True:
            time.sleep(1000.0)  # MARK:unicode_park


def fünction_中(parked):
    Ünïcode().méthode(parked)  # MARK:unicode_call


def entry():
    return fünction_中
