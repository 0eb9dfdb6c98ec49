# Fixture for `record --subprocesses`: a parent waiting on a multiprocessing
# pool whose workers run worker_task busily for about argv[1] seconds
# (default 2).
import multiprocessing
import sys
import time


def worker_task(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        n += 1
    return n


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    pool = multiprocessing.Pool(2)
    pool.map(worker_task, [seconds, seconds])
    pool.close()
    pool.join()


if __name__ == "__main__":
    main()
