# -*- coding: utf-8 -*-
"""Serving an ASGI app (Starlette) under uvicorn for the service fixtures
(asyncio_service.py, heap_leaky_service.py): Python 3 only, apart from
fixture_util, which the 2.7 fixtures import too. Needs uvicorn
(.ci/asyncio-deps)."""
import asyncio
import socket

import fixture_util
import uvicorn


def serve(app, ready=None, debug=False):
    """Serve `app` on a free port of 127.0.0.1 from an asyncio loop of
    this thread until killed; print READY with the port (and the `ready`
    dict's items) once the server listens. With `debug`, the loop runs in
    asyncio's debug mode with `slow_callback_duration = 0.1`, so asyncio
    logs every callback that blocks it longer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", loop="asyncio", http="h11", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if debug:
        loop.set_debug(True)
        loop.slow_callback_duration = 0.1

    async def run():
        task = loop.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        fixture_util.ready(dict(ready or {}, port=port))
        await task

    loop.run_until_complete(run())
