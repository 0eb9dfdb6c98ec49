# -*- coding: utf-8 -*-
# One of several services that `record --all` records together: it spins in
# a function of its own, hot_<NAME> (argv[1]: alpha, beta, gamma or delta),
# so that each process's profile can be told from the others'; or (naps)
# sleeps 0.3 ms at a time, thousands of waits each far shorter than a
# sampling period. Prints
# "READY" once it spins; ends by itself after LIFETIME seconds (argv[2]
# when given: a test whose services outlive its shell). Standalone
# (no fixture_util): one test runs it inside a chroot. Runs on 2.7 and 3.6+.
import sys
import time

LIFETIME = float(sys.argv[2]) if len(sys.argv) > 2 else 120.0
END = time.time() + LIFETIME


def spin():
    x = 0
    for i in range(20000):
        x = (x * 31 + i) % 1000003
    return x


def hot_alpha():
    while time.time() < END:
        spin()


def hot_beta():
    while time.time() < END:
        spin()


def hot_gamma():
    while time.time() < END:
        spin()


def hot_delta():
    while time.time() < END:
        spin()


def hot_naps():
    while time.time() < END:
        time.sleep(0.0003)


def main():
    body = globals()["hot_" + sys.argv[1]]
    spin()
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    body()


main()
