# Busy fixture for `record` tests: the main thread spends about 75% of its
# time in hot_function and 25% in cold_function, measures the true share
# itself and prints it at exit ("true_share 0.7512"). Optional argv[1]:
# seconds to run (default 3); argv[2]: number of extra busy threads.
import sys
import threading
import time

clock = getattr(time, "perf_counter", time.time)


def spin(seconds):
    end = clock() + seconds
    n = 0
    while clock() < end:
        n += 1
    return n


def hot_function(seconds):
    return spin(seconds)


def cold_function(seconds):
    return spin(seconds)


def worker_loop(stop):
    while not stop.is_set():
        spin(0.01)


def main():
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    stop = threading.Event()
    threads = [threading.Thread(target=worker_loop, args=(stop,)) for _ in range(workers)]
    for t in threads:
        t.start()
    hot = cold = 0.0
    start = clock()
    while clock() - start < duration:
        t0 = clock()
        hot_function(0.0075)
        t1 = clock()
        cold_function(0.0025)
        t2 = clock()
        hot += t1 - t0
        cold += t2 - t1
    stop.set()
    for t in threads:
        t.join()
    sys.stdout.write("true_share %.4f\n" % (hot / (hot + cold)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
