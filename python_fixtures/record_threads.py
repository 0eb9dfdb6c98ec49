# Fixture for `record` thread filtering: one busy main thread (busy_main),
# one thread sleeping in the kernel (sleeping_worker), and one busy thread
# (busy_worker). Runs argv[1] seconds (default 3), then exits with
# argv[2] (default 0). With --ready (anywhere in argv), prints
# `READY {"pid": PID}` once its threads run: the tests' handshake.
import json
import os
import sys
import threading
import time


def sleeping_worker(stop):
    while not stop.is_set():
        time.sleep(0.05)


def busy_worker(stop):
    n = 0
    while not stop.is_set():
        n += 1


def busy_main(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1


def main():
    args = [a for a in sys.argv[1:] if a != "--ready"]
    seconds = float(args[0]) if len(args) > 0 else 3.0
    code = int(args[1]) if len(args) > 1 else 0
    stop = threading.Event()
    ts = [threading.Thread(target=sleeping_worker, args=(stop,)),
          threading.Thread(target=busy_worker, args=(stop,))]
    for t in ts:
        t.start()
    if "--ready" in sys.argv[1:]:
        sys.stdout.write("READY " + json.dumps({"pid": os.getpid()}) + "\n")
        sys.stdout.flush()
    busy_main(seconds)
    stop.set()
    for t in ts:
        t.join()
    sys.exit(code)


if __name__ == "__main__":
    main()
