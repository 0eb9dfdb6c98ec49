# -*- coding: utf-8 -*-
# Python calling into C and C calling back into Python, on a CPU all the
# time, for the eBPF engine's --native test: the main thread compresses
# with zlib (Python -> zlib's module -> libz), a thread "sorter" sorts with
# a key function (Python -> sorted's C code -> the key, Python again).
# READY once both have run. Runs on 2.7 and 3.6+.
import threading
import zlib

from fixture_util import expired, ready

DATA = bytes(bytearray(range(256))) * 4000
went = threading.Event()


def key(x):
    return -x


def compress():
    zlib.compress(DATA, 9)


def sort():
    sorted(range(3000), key=key)


def sorter():
    sort()
    went.set()
    while not expired():
        sort()


def main():
    t = threading.Thread(target=sorter, name="sorter")
    t.daemon = True
    t.start()
    compress()
    went.wait(60)
    ready({})
    while not expired():
        compress()


if __name__ == "__main__":
    main()
