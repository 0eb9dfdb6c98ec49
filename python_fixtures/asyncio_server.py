"""A Starlette app under uvicorn, on loopback, under a bounded load loop.

Routes:
  /sleep       stuck in `await asyncio.sleep(1000)`          (stuck_sleep)
  /downstream  stuck awaiting a downstream that never answers (stuck_downstream)
  /model       awaits a sub-task that burns CPU for a while  (handle_request → call_model → tokenize)

The load loop (a thread) sends STUCK requests of each stuck kind, then
/model requests until LOAD_SECONDS or LOAD_COUNT; READY comes once every
stuck request is inside its handler. Needs uvicorn and starlette
(.ci/asyncio-deps installs them into pyenv 3.12, .ci/sid-asyncio-deps into
sid's interpreters).
"""
import asyncio
import os
import socket
import sys
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import fixture_util as fu

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)
STUCK = 3
LOAD_SECONDS = 60.0
LOAD_COUNT = 100000
inside = {"sleep": 0, "downstream": 0}
ready = threading.Event()


def check_ready():
    if inside["sleep"] == STUCK and inside["downstream"] == STUCK:
        ready.set()


async def stuck_sleep(request):
    inside["sleep"] += 1
    check_ready()
    await asyncio.sleep(1000)  # MARK:sleep
    return PlainTextResponse("late")


async def stuck_downstream(request):
    reader, writer = await asyncio.open_connection("127.0.0.1", DOWNSTREAM_PORT)
    inside["downstream"] += 1
    check_ready()
    data = await reader.read(100)  # MARK:downstream
    return PlainTextResponse(data)


def tokenize(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


async def call_model():
    end = time.monotonic() + 0.02
    while time.monotonic() < end:
        tokenize(2000)
    return "ok"


async def handle_request(request):
    result = await asyncio.create_task(call_model())  # MARK:model
    return PlainTextResponse(result)


app = Starlette(routes=[
    Route("/sleep", stuck_sleep),
    Route("/downstream", stuck_downstream),
    Route("/model", handle_request),
])


def downstream_server():
    """Accepts and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def serve():
        while True:
            c, _ = s.accept()
            held.append(c)

    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]


def request(port, path, timeout):
    c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    c.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
    return c


def load(port):
    held = []
    for path in ["/sleep"] * STUCK + ["/downstream"] * STUCK:
        held.append(request(port, path, 5))
    if not ready.wait(20):
        sys.stderr.write("stuck requests never arrived\n")
        os._exit(3)
    fu.ready({"port": port, "stuck": STUCK, "thread_id": MAIN_IDENT})
    start, n = time.time(), 0
    while time.time() - start < LOAD_SECONDS and n < LOAD_COUNT:
        try:
            c = request(port, "/model", 5)
            while c.recv(4096):
                pass
            c.close()
        except OSError:
            time.sleep(0.01)
        n += 1
    os._exit(0)


DOWNSTREAM_PORT = downstream_server()
MAIN_IDENT = fu.ident()


def main():
    fu.install_ping()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # Connections wait in the backlog until uvicorn accepts them.
    sock.listen(128)
    config = uvicorn.Config(app, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=load, args=(port,), daemon=True).start()
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
