# -*- coding: utf-8 -*-
"""Threads blocked in known ways, for the wait tests (2.7 and 3.6+).

    waits.py blocked PORT DIR   one thread per wait: recv from the test's
                                loopback server at PORT, select on a pipe, a
                                Lock held by another thread, time.sleep(3600),
                                os.waitpid on a child, a read from a FIFO in
                                DIR that nobody writes, recv on one end of a
                                unix socketpair. READY says what each
                                waits for (tids, fds, addresses, ports, paths).
    waits.py gil                a thread that wants the GIL while the main
                                thread holds it in C (libc's sleep called
                                through ctypes.PyDLL, which keeps the GIL).
    waits.py offcpu             a worker that waits 70% of each 100 ms on a
                                socket and 30% on a Lock, forever.
    waits.py resumed            threads in the calls a stop makes the kernel
                                resume through restart_syscall: a relative
                                nanosleep and clock_nanosleep (libc through
                                ctypes), poll with a timeout, and (3.2+) a
                                Lock acquire with a timeout (a timed futex).
    waits.py manyfds N          a service watching many sockets: a listening
                                loopback socket and N connections to it
                                (both ends in this process); one thread in
                                epoll.poll on the listening socket, the N
                                accepted sockets and a pipe, one in
                                select.select and one in poll.poll on the
                                same fds. READY gives the tids and each set.
    waits.py vfork DIR          (3.8+) a thread in os.posix_spawn whose vfork
                                child blocks opening a FIFO in DIR that nobody
                                opens for writing: the parent thread sits in
                                D state in the kernel's vfork wait.
"""
import ctypes
import ctypes.util
import fcntl
import os
import select
import signal
import socket
import sys
import threading
import time

import fixture_util as fu

parked = {}


def start_parked(threads):
    """Start each (name, target, args) as a daemon thread named name, wait
    until every parked thread is about to block, and give their native ids
    by name."""
    for name, target, args in threads:
        t = threading.Thread(target=target, args=args, name=name)
        t.daemon = True
        t.start()
    fu.wait_until([p.event for p in parked.values()])
    return dict(
        (th.name, fu.NATIVE_IDS.get(th.ident)) for th in threading.enumerate() if th.name in parked
    )


def park(name):
    p = fu.Parked()
    parked[name] = p
    return p


def do_recv(sock, p):
    p.set()
    sock.recv(16)


def do_unix_recv(sock, p):
    p.set()
    sock.recv(16)


def do_select(r, p):
    p.set()
    select.select([r], [], [])


def hold(lock, p):
    lock.acquire()
    p.set()
    time.sleep(3600)


def do_lock(lock, p):
    p.set()
    lock.acquire()


def do_sleep(p):
    p.set()
    time.sleep(3600)


def do_waitpid(child, p):
    p.set()
    os.waitpid(child, 0)


def do_fifo_read(fd, p):
    p.set()
    os.read(fd, 1)


def blocked(port, directory):
    child = os.fork()
    if child == 0:
        while True:
            time.sleep(3600)
    client = socket.create_connection(("127.0.0.1", port))
    r, w = os.pipe()
    unix_a, unix_b = socket.socketpair()
    lock = threading.Lock()
    fifo = os.path.join(directory, "nobody-writes.fifo")
    os.mkfifo(fifo)
    fifo_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    # A writer that never writes keeps the read blocking (no end-of-file).
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    flags = fcntl.fcntl(fifo_fd, fcntl.F_GETFL)
    fcntl.fcntl(fifo_fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)

    holder_parked = park("holder")
    threads = [
        ("recv", do_recv, (client, park("recv"))),
        ("select", do_select, (r, park("select"))),
        ("unix", do_unix_recv, (unix_a, park("unix"))),
        ("holder", hold, (lock, holder_parked)),
        ("sleep", do_sleep, (park("sleep"),)),
        ("waitpid", do_waitpid, (child, park("waitpid"))),
        ("fifo", do_fifo_read, (fifo_fd, park("fifo"))),
    ]
    # The lock waiter only once the holder has the lock.
    start_parked(threads)
    by_name = start_parked([("lock", do_lock, (lock, park("lock")))])
    fu.install_ping()
    fu.ready(
        {
            "tids": by_name,
            "client_local": "%s:%d" % client.getsockname(),
            "server": "127.0.0.1:%d" % port,
            "pipe_read": r,
            "pipe_write": w,
            "pipe_inode": os.fstat(r).st_ino,
            "lock": "0x%x" % id(lock),
            "unix_fd": unix_a.fileno(),
            "unix_peer_fd": unix_b.fileno(),
            "child": child,
            "fifo": fifo,
            "fifo_fd": fifo_fd,
            "fifo_writer": writer,
        }
    )
    while not fu.expired():
        time.sleep(0.2)
    os.kill(child, 9)
    fu.exit_now()


def spin(p):
    p.set()
    n = 0
    while True:
        n += 1


def gil():
    p = park("spinner")
    t = threading.Thread(target=spin, args=(p,), name="spinner")
    t.daemon = True
    t.start()
    fu.wait_until([p.event])
    libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6")
    fu.ready(
        {
            "tids": {"spinner": fu.NATIVE_IDS.get(t.ident), "main": fu.native_id()},
        }
    )
    # Holds the GIL while asleep in C: the spinner waits for it.
    libc.sleep(int(fu.LIFETIME_SECONDS))
    fu.exit_now()


SOCKET_SHARE = 0.07
LOCK_SHARE = 0.03


# Seconds the worker has spent in each wait, as it measured them: what the
# test compares the sampled shares with (on a loaded machine the waits
# stretch, and the nominal 70/30 is not what happened).
SPENT = {"socket": 0.0, "lock": 0.0}


def worker(sock, lock, p):
    p.set()
    while True:
        t0 = time.time()
        sock.recv(1)  # ~70 ms
        t1 = time.time()
        lock.acquire()  # ~30 ms
        t2 = time.time()
        SPENT["socket"] += t1 - t0
        SPENT["lock"] += t2 - t1


def _report_spent(signum, stack):
    sys.stdout.write("SPENT %.6f %.6f\n" % (SPENT["socket"], SPENT["lock"]))
    sys.stdout.flush()


def pacer(sock, lock):
    while True:
        time.sleep(SOCKET_SHARE)
        sock.sendall(b"x")
        time.sleep(LOCK_SHARE)
        lock.release()
        # On a loaded machine the worker may take a while to take the lock
        # back: the next cycle starts once it has (else a second release
        # would find the lock free and fail).
        while not lock.locked():
            time.sleep(0.0005)


def offcpu():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    client = socket.create_connection(srv.getsockname())
    server_side, _ = srv.accept()
    lock = threading.Lock()
    lock.acquire()
    p = park("worker")
    t = threading.Thread(target=worker, args=(client, lock, p), name="worker")
    t.daemon = True
    t.start()
    fu.wait_until([p.event])
    pt = threading.Thread(target=pacer, args=(server_side, lock), name="pacer")
    pt.daemon = True
    pt.start()
    fu.install_ping()
    signal.signal(signal.SIGUSR2, _report_spent)
    fu.ready({"server": "127.0.0.1:%d" % srv.getsockname()[1]})
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def do_nanosleep(p):
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    p.set()
    libc.nanosleep(ctypes.byref(Timespec(3600, 0)), None)


def do_clock_nanosleep(p):
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    p.set()
    # CLOCK_MONOTONIC, relative (flags 0).
    libc.clock_nanosleep(1, 0, ctypes.byref(Timespec(3600, 0)), None)


def do_poll(r, p):
    poller = select.poll()
    poller.register(r, select.POLLIN)
    p.set()
    poller.poll(3600 * 1000)


def do_timed_lock(lock, p):
    p.set()
    lock.acquire(True, 3600)


def resumed():
    r, w = os.pipe()
    lock = threading.Lock()
    lock.acquire()
    threads = [
        ("nanosleep", do_nanosleep, (park("nanosleep"),)),
        ("clock_nanosleep", do_clock_nanosleep, (park("clock_nanosleep"),)),
        ("poll", do_poll, (r, park("poll"))),
    ]
    if sys.version_info >= (3, 2):
        threads.append(("futex", do_timed_lock, (lock, park("futex"))))
    tids = start_parked(threads)
    fu.install_ping()
    fu.ready({"tids": tids})
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


def do_epoll(ep, p):
    p.set()
    ep.poll()


def do_select_many(fds, p):
    p.set()
    select.select(fds, [], [])


def do_poll_many(fds, p):
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    p.set()
    poller.poll()


def manyfds(n):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(n)
    clients = [socket.create_connection(srv.getsockname()) for _ in range(n)]
    accepted = [srv.accept()[0] for _ in range(n)]
    r, w = os.pipe()
    fds = [srv.fileno()] + [s.fileno() for s in accepted] + [r]
    ep = select.epoll()
    for fd in fds:
        ep.register(fd, select.EPOLLIN)
    tids = start_parked(
        [
            ("epoll", do_epoll, (ep, park("epoll"))),
            ("select", do_select_many, (fds, park("select"))),
            ("poll", do_poll_many, (fds, park("poll"))),
        ]
    )
    fu.ready(
        {
            "tids": tids,
            "listen": "127.0.0.1:%d" % srv.getsockname()[1],
            "epoll_fd": ep.fileno(),
            "fds": fds,
            "pipe_read": r,
            "peers": ["%s:%d" % c.getsockname() for c in clients],
        }
    )
    fu.install_ping()
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


def spawn(fifo, go, p):
    p.set()
    go.wait()
    # glibc's posix_spawn clones with CLONE_VFORK: the parent waits in the
    # kernel until the child execs, and the child first opens the FIFO.
    os.posix_spawn(
        "/bin/true",
        ["true"],
        dict(os.environ),
        file_actions=[(os.POSIX_SPAWN_OPEN, 0, fifo, os.O_RDONLY, 0)],
    )


def vfork(directory):
    fifo = os.path.join(directory, "never-opened.fifo")
    os.mkfifo(fifo)
    go = threading.Event()
    p = park("spawner")
    t = threading.Thread(target=spawn, args=(fifo, go, p), name="spawner")
    t.daemon = True
    t.start()
    fu.wait_until([p.event])
    fu.ready({"tids": {"spawner": fu.NATIVE_IDS.get(t.ident)}, "fifo": fifo})
    go.set()
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "blocked":
        blocked(int(sys.argv[2]), sys.argv[3])
    elif mode == "gil":
        gil()
    elif mode == "resumed":
        resumed()
    elif mode == "manyfds":
        manyfds(int(sys.argv[2]))
    elif mode == "vfork":
        vfork(sys.argv[2])
    else:
        offcpu()
