# Fixture for `record` thread filtering: one busy main thread (busy_main),
# one thread sleeping in the kernel (sleeping_worker), and one busy thread
# (busy_worker). Runs argv[1] seconds (default 3), then exits with
# argv[2] (default 0).
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
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    stop = threading.Event()
    ts = [threading.Thread(target=sleeping_worker, args=(stop,)),
          threading.Thread(target=busy_worker, args=(stop,))]
    for t in ts:
        t.start()
    busy_main(seconds)
    stop.set()
    for t in ts:
        t.join()
    sys.exit(code)


if __name__ == "__main__":
    main()
