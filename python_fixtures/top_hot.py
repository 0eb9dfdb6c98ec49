# Fixture for `pyinspect top`: one thread busy in hot_loop, one asleep.
# Runs under Python 2.7 and 3.x. Prints READY once both threads run, then
# runs until killed (or for the number of seconds given as argv[1]).
import sys
import threading
import time

import fixture_util as fu


def hot_loop():
    x = 0
    while True:
        for i in range(1000):
            x += i * i
        x %= 1000003


def sleeper():
    while True:
        time.sleep(0.5)


def main():
    busy = threading.Thread(target=hot_loop, name="busy")
    idle = threading.Thread(target=sleeper, name="sleepy")
    for t in (busy, idle):
        t.daemon = True
        t.start()
    fu.ready({})
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9
    time.sleep(limit)


if __name__ == "__main__":
    main()
