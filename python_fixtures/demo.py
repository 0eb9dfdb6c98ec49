# -*- coding: utf-8 -*-
"""A small realistic program for the README's first command and for record.

Runs for argv[1] seconds (default 10) and exits. The main thread spends about
three quarters of its CPU time in `crunch` and the rest in `tidy`; a fetcher
thread mostly waits for I/O (a socket that answers slowly), and a logger
thread mostly sleeps. Runs unchanged on Python 2.7 and 3.6+.
"""
import socket
import sys
import threading
import time


def crunch(seconds):
    """CPU-heavy: sum of squares, in pure Python."""
    deadline = time.time() + seconds
    total = 0
    while time.time() < deadline:
        for i in range(2000):
            total += i * i
    return total


def tidy(seconds):
    """Lighter CPU work: build and sort small lists."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        sorted([(i * 7919) % 1000 for i in range(500)])


def work(until):
    while time.time() < until:
        crunch(0.075)
        tidy(0.025)


def slow_server(server):
    conn, _ = server.accept()
    while True:
        data = conn.recv(64)
        if not data:
            return
        time.sleep(0.2)  # a slow peer
        conn.sendall(data)


def fetch(port, until):
    client = socket.create_connection(("127.0.0.1", port))
    while time.time() < until:
        client.sendall(b"ping")
        client.recv(64)  # waits for the slow peer
    client.close()


def log_progress(until):
    while time.time() < until:
        time.sleep(0.5)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    until = time.time() + seconds
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    threads = [
        threading.Thread(target=slow_server, args=(server,), name="server"),
        threading.Thread(target=fetch, args=(server.getsockname()[1], until), name="fetcher"),
        threading.Thread(target=log_progress, args=(until,), name="logger"),
    ]
    for thread in threads:
        thread.daemon = True
        thread.start()
    work(until)


if __name__ == "__main__":
    main()
