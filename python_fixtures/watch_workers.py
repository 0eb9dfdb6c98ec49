# -*- coding: utf-8 -*-
"""A uvicorn master with two worker processes (`--workers 2`), for
`pyinspect watch -s`: a stall in one worker's handler must name that worker.

GET /pid answers the worker's pid; GET /block?ms=N blocks that worker's
event loop N ms in the handler and answers its pid too. READY (with the
port, the master's pid and both workers' pids) once both workers have
answered. Needs uvicorn and Starlette (.ci/asyncio-deps).
"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_util  # noqa: E402

from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

MARKS = fixture_util.markers(os.path.abspath(__file__))


async def block(request):
    ms = int(request.query_params["ms"])
    time.sleep(ms / 1000.0)  # MARK:block
    return PlainTextResponse("%d\n" % os.getpid())


async def pid(request):
    return PlainTextResponse("%d\n" % os.getpid())


app = Starlette(routes=[Route("/block", block), Route("/pid", pid)])


def get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return int(data.split(b"\r\n\r\n", 1)[1])


def announce(port):
    """READY once both workers answer (a connection goes to whichever
    worker accepts it first: asked until both have)."""
    workers = set()
    deadline = time.time() + 60
    while len(workers) < 2 and time.time() < deadline:
        try:
            workers.add(get(port, "/pid"))
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    if len(workers) < 2:
        sys.stderr.write("fixture: the workers did not answer\n")
        os._exit(3)
    fixture_util.ready(
        {
            "port": port,
            "master": os.getpid(),
            "workers": sorted(workers),
            "block": fixture_util.frame(block, MARKS["block"]),
        }
    )
    while not fixture_util.expired():
        time.sleep(0.5)
    for w in workers:
        try:
            os.kill(w, 9)
        except OSError:
            pass
    fixture_util.exit_now()


def main():
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    threading.Thread(target=announce, args=(port,), daemon=True).start()
    uvicorn.run(
        "watch_workers:app",
        app_dir=os.path.dirname(os.path.abspath(__file__)),
        host="127.0.0.1",
        port=port,
        workers=2,
        loop="asyncio",
        http="h11",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
